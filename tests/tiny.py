"""Tiny real models and data for fast tests: tokenizers trained here, models built from a config."""

from __future__ import annotations

import atexit
import csv
import functools
import random
import shutil
import tempfile
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


SWEEP_INPUT_FILES = ("data.csv", "d.csv", "x.csv", "tr.csv", "va.csv", "te.csv")
SWEEP_INPUT_FOLDERS = ("model", "m")


def touch_sweep_inputs(folder: Path) -> None:
    """Empty stand-ins for the data files and model folders the config tests' sweep files name: the loader checks
    that every path exists before it checks anything else, and these tests are about the other checks."""
    for name in SWEEP_INPUT_FILES:
        (folder / name).touch()
    for name in SWEEP_INPUT_FOLDERS:
        (folder / name).mkdir(exist_ok=True)


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), quoting=csv.QUOTE_ALL)
        writer.writeheader()
        writer.writerows(rows)
    return path


def classification_folder(folder: Path, sweep: str | None = None, rows: int = 300, hidden_size: int = 32,
                          own_model: bool = False) -> Path:
    """A CLI test's working folder: the tiny classifier in model/, `rows` labelled sentences in data.csv, and the
    sweep file (when given) in sweep.yaml.

    model/ links to one classifier per hidden size for the whole test session (`own_model`: a folder of its own):
    the probe's machine cache knows a model by its resolved path and files, so only the session's first sweep of
    each probes it, and every later one reuses the answers, as a user's second sweep does (a tiny model's probe,
    its process's start included, costs a sweep test about 5 s)."""
    if own_model:
        build_tiny_classifier(folder / "model", hidden_size)
    else:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model").symlink_to(_session_classifier(hidden_size), target_is_directory=True)
    write_csv(folder / "data.csv", sentiment_rows(rows))
    if sweep is not None:
        (folder / "sweep.yaml").write_text(sweep)
    return folder


@functools.cache
def _session_classifier(hidden_size: int) -> Path:
    """The tiny classifier of this hidden size that every working folder of the session links to; removed when the
    session ends."""
    root = Path(tempfile.mkdtemp(prefix="finesweep-test-models-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return build_tiny_classifier(root / f"classifier-{hidden_size}", hidden_size)


def _corpus() -> list[str]:
    rows = sentiment_rows(300) + instruction_rows(300)
    return [" ".join(r.values()) for r in rows]


# bitsandbytes' 4-bit layers on a CPU with AVX-512 repack their weights in blocks of 64 input features: a layer
# narrower than that cannot be repacked (reshape to 0 blocks). QLoRA tests use an encoder this wide.
QLORA_HIDDEN = 64


def build_tiny_classifier(folder: Path, hidden_size: int = 32) -> Path:
    """A 2-layer BERT encoder (hidden 32 unless told) with a WordPiece tokenizer trained on the test corpus, saved to
    `folder`."""
    import torch
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
        vocab_size=tokenizer.vocab_size, hidden_size=hidden_size, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=2 * hidden_size, max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
    )
    # Seeded, so every session fine-tunes the same encoder: from some random starts the classifier trained on it
    # (tests/exports.py) never learns "neutral" in its few steps, and the quantization tests need one that tells
    # the classes apart.
    torch.manual_seed(1)
    BertModel(config).save_pretrained(folder)  # an encoder without a head, like a real pretrained one
    return folder


def _byte_level_bpe():
    """A byte-level BPE tokenizer (GPT-2's kind, 400 tokens) trained on the test corpus; `<|endoftext|>` is id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    return tok


def build_tiny_causal_lm(folder: Path) -> Path:
    """A 2-layer GPT-2 (hidden 32) with a byte-level BPE tokenizer trained on the test corpus; no pad token."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = _byte_level_bpe()
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    tokenizer.save_pretrained(folder)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=128,
                        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def build_tiny_llama(folder: Path) -> Path:
    """A 2-layer Llama (hidden 64, grouped-query attention, output head tied to the embeddings as in SmolLM2) with
    the byte-level BPE tokenizer, saved as safetensors; no pad token."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=_byte_level_bpe(), eos_token="<|endoftext|>",
                                        bos_token="<|endoftext|>")
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


# ChatML, the format of many instruct models (SmolLM2-Instruct and Qwen among them), written out for the tests.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tiny_chat_lm(folder: Path) -> Path:
    """The tiny GPT-2 as an instruct model: ChatML's <|im_start|> and <|im_end|> as special tokens, <|im_end|> as
    its end-of-sequence token, and the ChatML chat template in its tokenizer."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=_byte_level_bpe(), eos_token="<|endoftext|>",
                                        bos_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.save_pretrained(folder)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=128,
                        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def conversation_rows(n: int, seed: int = 0) -> list[dict]:
    """OpenAI-style conversations, a system turn and one or two user/assistant exchanges each, with the same
    learnable mapping as instruction_rows (the reply repeats the question's colour)."""
    rng = random.Random(seed)
    rows = []
    for row in instruction_rows(n, seed):
        messages = [{"role": "system", "content": "You name colours."},
                    {"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": row["response"]}]
        if rng.random() < 0.5:
            colour = row["response"].rsplit(" ", 1)[1]
            messages += [{"role": "user", "content": "again?"}, {"role": "assistant", "content": f"still {colour}"}]
        rows.append({"messages": messages})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    import json

    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


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


TINY_GGUF_NAME = "tiny-llama.Q8_0.gguf"


def build_tiny_llama_gguf(folder: Path) -> Path:
    """A 2-layer Llama (hidden 32, grouped-query attention, about 44K parameters) written as a GGUF file the way
    llama.cpp's converter writes one: its linear weights quantized to Q8_0, q/k rows in llama.cpp's order, the
    byte-level BPE tokenizer as `tokenizer.ggml.*` metadata. Returns the file (`folder/TINY_GGUF_NAME`); no other
    file in `folder`."""
    import gguf
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = _byte_level_bpe()
    tokens = [token for token, _ in sorted(tok.get_vocab().items(), key=lambda item: item[1])]
    config = LlamaConfig(vocab_size=len(tokens), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, rms_norm_eps=1e-6)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / TINY_GGUF_NAME
    writer = gguf.GGUFWriter(str(path), "llama")
    _gguf_llama_metadata(writer, config)
    _gguf_tokenizer_metadata(writer, tok, tokens)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    for hf_name, tensor in model.state_dict().items():
        base, suffix = hf_name.rsplit(".", 1)
        data = _llama_cpp_order(base, tensor.float().numpy(), config)
        if data.ndim == 2:  # every linear weight, the embeddings too: Q8_0 blocks of 32
            writer.add_tensor(names.get_name(base) + "." + suffix, gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(names.get_name(base) + "." + suffix, np.ascontiguousarray(data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _gguf_llama_metadata(writer, config) -> None:
    writer.add_name("tiny-llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(7)  # llama.cpp's LLAMA_FTYPE_MOSTLY_Q8_0


def _gguf_tokenizer_metadata(writer, tok, tokens: list[str]) -> None:
    import json

    merges = json.loads(tok.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if token == "<|endoftext|>" else 1 for token in tokens])  # 3: control
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(tok.token_to_id("<|endoftext|>"))
    writer.add_eos_token_id(tok.token_to_id("<|endoftext|>"))


def _llama_cpp_order(name: str, weights, config):
    """llama.cpp stores q and k rows interleaved per head (its convert_hf_to_gguf.py `permute`); transformers'
    GGUF loader undoes it on load, so a file written without it would load scrambled."""
    heads = {"self_attn.q_proj": config.num_attention_heads, "self_attn.k_proj": config.num_key_value_heads}
    n_head = next((n for key, n in heads.items() if name.endswith(key)), None)
    if n_head is None:
        return weights
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))
