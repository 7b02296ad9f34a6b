"""Tokenizing prepared splits per candidate tokenizer (cached), the rows-too-long rule, and the vocabulary check."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from finesweep.spaces.config import Task
from finesweep.spaces.files import write_json_atomic
from finesweep.trainer.data import chat
from finesweep.trainer.data.cleaning import TEXT_PAIR
from finesweep.trainer.data.readers import DataError

if TYPE_CHECKING:
    from datasets import DatasetDict

log = logging.getLogger(__name__)

# Bump when tokenizing changes, so old cache entries are never reused.
TOKENIZE_VERSION = "tokenize-v3"  # v3: conversations, rendered plain or with a chat template
SUMMARY_FILE = "tokenize_report.json"
TOO_LONG = "_too_long"


def tokenizer_identity(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        # A call with truncation/padding rewrites these in the backend; they are per-call settings, not identity.
        state.pop("truncation", None), state.pop("padding", None)
        vocab = json.dumps(state, sort_keys=True)
    else:
        vocab = json.dumps(tokenizer.get_vocab(), sort_keys=True)
    parts = [type(tokenizer).__name__, str(tokenizer.name_or_path), str(len(tokenizer)), str(tokenizer.eos_token),
             str(tokenizer.truncation_side), hashlib.sha256(vocab.encode()).hexdigest()]
    return "|".join(parts)


def _key(prepared_folder: Path, tokenizer: Any, task: Task, max_seq_len: int, too_long: str, template: str | None) -> str:
    parts = [TOKENIZE_VERSION, prepared_folder.name, tokenizer_identity(tokenizer), Task(task).value, str(max_seq_len),
             too_long, "plain" if template is None else hashlib.sha256(template.encode()).hexdigest()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def _lengths(tokenizer: Any, texts: list[str], pairs: list[str] | None = None,
             add_special_tokens: bool = True) -> list[int]:
    ids = tokenizer(texts, pairs, truncation=False, add_special_tokens=add_special_tokens)["input_ids"]
    return [len(row) for row in ids]


def check_marks_pairs(tokenizer: Any) -> None:
    """DataError where the tokenizer joins a text pair with nothing between the texts: the model could not tell
    where the second text starts. BERT's [SEP], RoBERTa's </s> and Llama's BOS mark it; models.load_tokenizer gives a
    decoder's fast tokenizer a separator, so only a tokenizer without a fast backend or any separator is left."""
    if tokenizer.num_special_tokens_to_add(pair=True) > tokenizer.num_special_tokens_to_add(pair=False):
        return
    raise DataError(
        f"tokenizer {tokenizer.name_or_path}: data.text_pair_column is set, but this tokenizer puts a text pair "
        "together with no token between the two texts, so the model could not tell where the second begins. Fix: "
        "use a model whose tokenizer has a tokenizer.json (finesweep then separates the texts with its end-of-"
        "sequence token) or one that separates pairs itself (BERT, RoBERTa, MiniLM), or join the two columns "
        "into one yourself with a separator the model can read (e.g. 'premise: ... hypothesis: ...') and unset "
        "data.text_pair_column.")


def _classification_fn(tokenizer: Any, max_seq_len: int):
    def encode(batch: dict[str, list]) -> dict[str, list]:
        # Text pairs go in as the tokenizer's pair (its separator; truncation shortens the longer text first), with
        # the segment ids of a model that has them (BERT's token_type_ids): which text a token is from.
        texts = (batch["text"], batch[TEXT_PAIR]) if TEXT_PAIR in batch else (batch["text"],)
        if len(texts) > 1:
            check_marks_pairs(tokenizer)
        out = tokenizer(*texts, truncation=True, max_length=max_seq_len)
        kept = ["input_ids", "attention_mask"] + (["token_type_ids"] if len(texts) > 1 and "token_type_ids" in out
                                                  else [])
        return {**{name: out[name] for name in kept}, "labels": batch["label"],
                TOO_LONG: [n > max_seq_len for n in _lengths(tokenizer, *texts)]}

    return encode


def _causal_fn(tokenizer: Any, max_seq_len: int, template: str | None):
    if tokenizer.eos_token is None:
        raise DataError(
            f"tokenizer {tokenizer.name_or_path}: no end-of-sequence token; causal_lm needs one to end each response. "
            "Use a causal LM tokenizer that defines eos_token (its tokenizer_config.json), or task: classification."
        )
    # A chat template writes its own special tokens (a BOS among them where the model wants one); plain text gets
    # the ones the tokenizer adds.
    special = template is None

    def encode(batch: dict[str, list]) -> dict[str, list]:
        rendered = [chat.render(chat.from_cell(cell), tokenizer, template) for cell in batch[chat.MESSAGES]]
        texts = [text for text, _ in rendered]
        out = tokenizer(texts, truncation=True, max_length=max_seq_len, return_offsets_mapping=True,
                        add_special_tokens=special)
        labels = [assistant_labels(ids, offsets, spans)
                  for ids, offsets, (_, spans) in zip(out["input_ids"], out["offset_mapping"], rendered)]
        return {"input_ids": out["input_ids"], "attention_mask": out["attention_mask"], "labels": labels,
                TOO_LONG: [n > max_seq_len for n in _lengths(tokenizer, texts, add_special_tokens=special)]}

    return encode


def assistant_labels(ids: list[int], offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    """Each token's id where it overlaps an assistant turn, -100 elsewhere: the loss is on the replies only. Overlap,
    not "begins inside": where a template's generation prompt ends in a space, byte-level BPE merges that space
    into the reply's first word, and that token must still be learned. A token the tokenizer added (offsets
    (0, 0)) belongs to no turn."""
    def trained(begin: int, end: int) -> bool:
        return end > begin and any(begin < stop and end > start for start, stop in spans)

    return [token if trained(begin, end) else -100 for token, (begin, end) in zip(ids, offsets)]


def _keep(part, predicate, fingerprint: str):
    return part.filter(predicate, keep_in_memory=True, new_fingerprint=fingerprint)


def _tokenize_split(part, fn, task: Task, too_long: str, key: str) -> tuple[Any, dict[str, int]]:
    """One split tokenized, and how many rows were too long / dropped for having no response token left."""
    # keep_in_memory: never write cache files into the prepared folder; the fingerprint is our own key,
    # so datasets does not try to hash the tokenizer.
    mapped = part.map(fn, batched=True, remove_columns=part.column_names, keep_in_memory=True, new_fingerprint=key)
    counts = {"too_long": sum(mapped[TOO_LONG]), "no_response_token": 0}
    if too_long == "drop" and counts["too_long"]:
        mapped = _keep(mapped, lambda row: not row[TOO_LONG], f"{key}-short")
    if task == Task.causal_lm:
        kept = _keep(mapped, lambda row: any(x != -100 for x in row["labels"]), f"{key}-kept")
        counts["no_response_token"] = len(mapped) - len(kept)
        mapped = kept
    return mapped.remove_columns(TOO_LONG), counts


def _max_id(splits: "DatasetDict") -> int:
    return max((max(ids) for part in splits.values() for ids in part["input_ids"] if ids), default=-1)


def _build(prepared_folder: Path, tokenizer: Any, task: Task, max_seq_len: int, too_long: str, key: str, work: Path,
           template: str | None) -> None:
    from datasets import DatasetDict, load_from_disk

    splits = load_from_disk(str(prepared_folder))
    fn = (_classification_fn(tokenizer, max_seq_len) if task == Task.classification
          else _causal_fn(tokenizer, max_seq_len, template))
    out, counts = {}, {}
    for name, part in splits.items():
        out[name], counts[name] = _tokenize_split(part, fn, task, too_long, f"{key}-{name}")
        if counts[name]["no_response_token"]:
            log.warning("%s: %d rows dropped: max_seq_len %d leaves no response token", name,
                        counts[name]["no_response_token"], max_seq_len)
    tokenized = DatasetDict(out)
    tokenized.save_to_disk(str(work))
    summary = {"max_seq_len": max_seq_len, "too_long_action": too_long, "per_split": counts, "max_token_id": _max_id(tokenized),
               "chat_template": None if task == Task.classification else ("plain" if template is None else "template")}
    write_json_atomic(work / SUMMARY_FILE, summary)


def publish(work: Path, final: Path) -> None:
    """Move a finished folder into place in one step, so a crash never leaves half a cache entry."""
    try:
        os.replace(work, final)
    except OSError:  # another process published the same entry first: theirs is identical
        shutil.rmtree(work, ignore_errors=True)


def tokenize_summary(folder: Path) -> dict[str, Any]:
    """What tokenize() counted: rows too long per split, rows without a response token, the largest token id."""
    return json.loads((Path(folder) / SUMMARY_FILE).read_text(encoding="utf-8"))


def check_vocab(folder: Path, vocab_size: int, model_name: str) -> None:
    """A token id at or beyond the embedding matrix means the tokenizer belongs to another model."""
    max_id = tokenize_summary(folder)["max_token_id"]
    if max_id >= vocab_size:
        raise DataError(
            f"model '{model_name}': its tokenizer produces token id {max_id} on the data, but the model's embedding "
            f"matrix has only {vocab_size} rows (config vocab_size): the tokenizer does not belong to this model, and "
            "training would fail with an index error. Fix: give models[].path a folder whose tokenizer files match "
            "its weights (the same checkpoint), or resize the embeddings before the sweep."
        )


# A max_seq_len that cuts the reply off more than this share of a split's conversations is refused: the rows left
# would be a biased few (the shortest prompts), or none.
MOST_ROWS = 0.5
# What a conversation needs beyond its prompt to teach anything: the start of a reply.
REPLY_TOKENS = 32


def replies_cut(folder: Path, sizes: dict[str, int]) -> dict[str, int]:
    """Per split, the rows tokenize dropped for keeping no reply token (its summary in `folder`), where they are
    more than MOST_ROWS of a split (`sizes`: its rows before tokenizing); {} when every split kept most of them."""
    counts = tokenize_summary(folder)["per_split"]
    cut = {name: count["no_response_token"] for name, count in counts.items() if count["no_response_token"]}
    return cut if any(rows > MOST_ROWS * sizes.get(name, rows) for name, rows in cut.items()) else {}


def replies_cut_error(cut: dict[str, int], sizes: dict[str, int], max_seq_len: int, prompts: dict[str, float],
                      model_name: str) -> DataError:
    """What replies_cut found, said with the prompts' lengths (`prompts`: lengths.percentiles) and the max_seq_len
    that keeps the replies."""
    where = ", ".join(f"{rows} of {sizes.get(name, rows)} {name} rows" for name, rows in cut.items())
    keep = int(-(-(prompts["p99"] + REPLY_TOKENS) // 8) * 8)
    return DataError(
        f"data.max_seq_len {max_seq_len} leaves no reply token in {where} (model '{model_name}'): the prompt, with "
        f"any system prompt the chat template adds, fills the first {max_seq_len} tokens, so those rows have "
        f"nothing to learn. The prompts before the first reply take {prompts['p50']:.0f} tokens at the median and "
        f"{prompts['p99']:.0f} at the 99th percentile (longest {prompts['max']:.0f}). Fix: raise data.max_seq_len to "
        f"at least {keep} (the 99th percentile of the prompts and {REPLY_TOKENS} reply tokens), or unset it "
        "(finesweep then covers 99% of the conversations whole), or shorten the prompts (data.chat_template: none "
        "renders no system prompt).")


def tokenize(prepared, tokenizer: Any, task: Task, max_seq_len: int, cache_root: Path, *,
             too_long: str = "truncate", vocab_size: int | None = None, model_name: str | None = None,
             chat_template: str | None = None) -> Path:
    """Tokenized splits (no padding; too-long rows truncated or dropped) in cache_root/tokenized/<hash>; returns that folder.

    causal_lm conversations are rendered with `chat_template` (a Jinja template, from chat.resolve_template) or as
    plain text (None). With vocab_size (the model config's), a token id beyond the embedding matrix raises a
    DataError naming model_name.
    """
    key = _key(prepared.folder, tokenizer, task, max_seq_len, too_long, chat_template)
    final = Path(cache_root) / "tokenized" / key
    if not (final / SUMMARY_FILE).is_file():
        work = final.with_name(f"{key}.tmp-{os.getpid()}")
        shutil.rmtree(work, ignore_errors=True)
        _build(prepared.folder, tokenizer, Task(task), max_seq_len, too_long, key, work, chat_template)
        publish(work, final)
    if vocab_size is not None:
        check_vocab(final, vocab_size, model_name or str(tokenizer.name_or_path))
    return final


def load_tokenized(folder: Path) -> "DatasetDict":
    """The DatasetDict saved in `folder` (memory-mapped Arrow)."""
    from datasets import load_from_disk

    return load_from_disk(str(folder))


def collator(tokenizer: Any, task: Task):
    """Pads each batch to its longest row; causal_lm labels are padded with -100 so padding carries no loss."""
    from transformers import DataCollatorForSeq2Seq, DataCollatorWithPadding

    if tokenizer.pad_token is None:
        raise ValueError("the tokenizer has no pad token; load it with finesweep.trainer.models.load_tokenizer (pads with eos)")
    if Task(task) == Task.classification:
        return DataCollatorWithPadding(tokenizer)
    return DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
