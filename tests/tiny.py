"""Tiny real models and data for fast tests: tokenizers trained here, models built from a config."""

from __future__ import annotations

import csv
import random
from pathlib import Path

WORDS = {
    "positive": ["good", "great", "love", "happy", "excellent", "nice", "fun", "best"],
    "negative": ["bad", "awful", "hate", "sad", "terrible", "worst", "boring", "poor"],
    "neutral": ["the", "a", "movie", "day", "today", "went", "saw", "store"],
}
FILLER = ["i", "it", "was", "this", "that", "and", "so", "very", "my", "we"]


def sentiment_rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    """Learnable three-class rows: each text mixes filler with words of its class."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = rng.choice(sorted(WORDS))
        words = rng.sample(FILLER, 3) + rng.sample(WORDS[label], 2) + [f"w{i}"]
        rng.shuffle(words)
        rows.append({"text": " ".join(words), "label": label})
    return rows


def instruction_rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    """Prompt/response pairs with a learnable mapping (the response repeats the prompt's colour)."""
    rng = random.Random(seed)
    colours = ["red", "green", "blue", "yellow", "black", "white"]
    rows = []
    for i in range(n):
        colour = rng.choice(colours)
        rows.append({"prompt": f"name the colour {colour} number {i}", "response": f"the colour is {colour}"})
    return rows


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), quoting=csv.QUOTE_ALL)
        writer.writeheader()
        writer.writerows(rows)
    return path


def classification_folder(folder: Path, sweep: str | None = None, rows: int = 300) -> Path:
    """A CLI test's working folder: the tiny classifier in model/, `rows` labelled sentences in data.csv, and the
    sweep file (when given) in sweep.yaml."""
    build_tiny_classifier(folder / "model")
    write_csv(folder / "data.csv", sentiment_rows(rows))
    if sweep is not None:
        (folder / "sweep.yaml").write_text(sweep)
    return folder


def _corpus() -> list[str]:
    rows = sentiment_rows(300) + instruction_rows(300)
    return [" ".join(r.values()) for r in rows]


def build_tiny_classifier(folder: Path) -> Path:
    """A 2-layer BERT encoder (hidden 32) with a WordPiece tokenizer trained on the test corpus, saved to `folder`."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import BertConfig, BertModel, BertTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(_corpus(), trainers.WordPieceTrainer(vocab_size=400, special_tokens=special))
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    tokenizer = BertTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    tokenizer.save_pretrained(folder)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
    )
    BertModel(config).save_pretrained(folder)  # an encoder without a head, like a real pretrained one
    return folder


def build_tiny_causal_lm(folder: Path) -> Path:
    """A 2-layer GPT-2 (hidden 32) with a byte-level BPE tokenizer trained on the test corpus; no pad token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    tokenizer.save_pretrained(folder)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=128,
                        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def build_large_encoder(folder: Path, tokenizer_from: Path) -> Path:
    """A 6-layer BERT encoder with hidden size 1024 (about 76M parameters) sharing a tiny model's tokenizer:
    too large to train within a 1 GiB budget, even at a micro-batch of 1."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
    tokenizer.save_pretrained(folder)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=1024, num_hidden_layers=6, num_attention_heads=8,
                        intermediate_size=4096, max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id)
    BertModel(config).save_pretrained(folder)
    return folder
