"""What a causal LM generates for the test prompts, scored against the test references.

Loss and perplexity say how likely the references are; they do not say whether greedy decoding writes them. This
module does: the prompts and references come from the tokenized test split, the model answers greedily, and each
answer is scored with exact match, token F1 (both as in the SQuAD evaluation) and ROUGE-L. The scoring functions are
pure Python (no torch), so they are cheap to test and to reuse.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from finesweep.trainer.serving.evaluate import IGNORE_INDEX, median_seconds, model_device

if TYPE_CHECKING:
    import torch

SCORES = ("exact_match", "token_f1", "rouge_l")
# Room for the answer beyond the longest reference, and a ceiling, so a model that never says eos stays cheap.
NEW_TOKENS_MARGIN = 16
MAX_NEW_TOKENS = 128
BATCH_SIZE = 16

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


# --- scoring (pure) -----------------------------------------------------------------------------------------


def normalize(text: str) -> str:
    """SQuAD's answer normalization: lowercase, no punctuation, no articles, single spaces."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize(prediction) == normalize(reference))


def token_f1(prediction: str, reference: str) -> float:
    """F1 of the bags of normalized tokens (SQuAD): order does not matter, repeats count as often as they occur."""
    predicted, expected = normalize(prediction).split(), normalize(reference).split()
    if not predicted or not expected:
        return float(predicted == expected)  # both empty: a correct empty answer
    overlap = sum((Counter(predicted) & Counter(expected)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted), overlap / len(expected)
    return 2 * precision * recall / (precision + recall)


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure (beta = 1): the longest common subsequence of normalized tokens, so order matters but gaps
    do not."""
    predicted, expected = normalize(prediction).split(), normalize(reference).split()
    if not predicted or not expected:
        return float(predicted == expected)
    common = lcs_length(predicted, expected)
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence, one row of the dynamic-programming table at a time."""
    previous = [0] * (len(b) + 1)
    for token in a:
        current = [0]
        for j, other in enumerate(b):
            current.append(previous[j] + 1 if token == other else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def score_texts(predictions: list[str], references: list[str]) -> dict[str, float]:
    """Means of exact_match, token_f1 and rouge_l over aligned lists of answers and references."""
    if len(predictions) != len(references) or not references:
        raise ValueError(f"need as many predictions as references (at least one), but got {len(predictions)} "
                         f"and {len(references)}")
    functions = {"exact_match": exact_match, "token_f1": token_f1, "rouge_l": rouge_l}
    return {name: sum(f(p, r) for p, r in zip(predictions, references)) / len(references)
            for name, f in functions.items()}


# --- prompts and references from the tokenized test split ---------------------------------------------------


@dataclass(frozen=True)
class PromptAndReference:
    prompt_ids: list[int]
    reference_ids: list[int]


def last_response_span(labels: list[int]) -> tuple[int, int] | None:
    """(start, end) of the last contiguous run of trained labels (not IGNORE_INDEX): the final response of a row,
    the last assistant turn of a chat; None when nothing in the row is trained."""
    end = None
    for i in range(len(labels) - 1, -1, -1):
        if labels[i] != IGNORE_INDEX and end is None:
            end = i + 1
        elif labels[i] == IGNORE_INDEX and end is not None:
            return i + 1, end
    return (0, end) if end is not None else None


def split_row(input_ids: list[int], labels: list[int]) -> PromptAndReference | None:
    """The prompt (everything before the last response, earlier turns included) and that response; None for a row
    with no response or nothing before it (there is nothing to generate from)."""
    span = last_response_span(list(labels))
    if span is None or span[0] == 0:
        return None
    start, end = span
    return PromptAndReference(list(input_ids[:start]), list(labels[start:end]))


def prompts_and_references(rows: Iterable[dict[str, Any]], limit: int) -> list[PromptAndReference]:
    """The first `limit` usable rows, in split order (the same prompts for every exported variant)."""
    found: list[PromptAndReference] = []
    for row in rows:
        if len(found) >= limit:
            break
        if (pair := split_row(row["input_ids"], row["labels"])) is not None:
            found.append(pair)
    return found


# --- generating ---------------------------------------------------------------------------------------------


def generate_answers(model: Any, tokenizer: Any, prompt_ids: list[list[int]], max_new_tokens: int,
                     batch_size: int = BATCH_SIZE) -> list[str]:
    """Greedy answers to the prompts (token ids), new tokens only, decoded without special tokens and stripped.

    Prompts are padded on the left, so every row's answer starts where its prompt ends; generation stops at the
    model's end-of-sequence token.
    """
    import torch

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    generation = getattr(model, "generation_config", None)
    eos_id = getattr(generation, "eos_token_id", None) or tokenizer.eos_token_id
    device = model_device(model)  # a bitsandbytes model stays where it was loaded (CUDA on a GPU)
    model.eval()
    answers: list[str] = []
    with torch.inference_mode():
        for start in range(0, len(prompt_ids), batch_size):
            input_ids, attention_mask = _left_padded(prompt_ids[start:start + batch_size], pad_id)
            output = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                    do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
                                    pad_token_id=pad_id, eos_token_id=eos_id)
            new_tokens = output[:, input_ids.shape[1]:]
            answers += [tokenizer.decode(row, skip_special_tokens=True).strip() for row in new_tokens.tolist()]
    return answers


# Greedy decoding speed: this many new tokens after the first test prompt, timed as evaluate.median_seconds times
# (up to DECODE_REPEATS runs after an untimed one, within its time budget). Every variant writes exactly this many
# (end-of-sequence is held off), so their times compare.
DECODE_TOKENS = 32
DECODE_REPEATS = 3


def decode_speed(model: Any, split: Iterable[dict[str, Any]], new_tokens: int = DECODE_TOKENS) -> dict[str, float]:
    """Milliseconds per generated token of greedy decoding at batch 1 from the split's first prompt, as a chat
    server runs it (prefill included, spread over the tokens); {} when the split has no usable prompt."""
    import torch

    pairs = prompts_and_references(split, 1)
    if not pairs:
        return {}
    device = model_device(model)
    prompt = torch.tensor([pairs[0].prompt_ids], dtype=torch.long, device=device)
    generation = getattr(model, "generation_config", None)
    pad_id = getattr(generation, "pad_token_id", None)
    if pad_id is None:  # a batch of one pads nothing; generate only wants an id, which eos gives (one of a list)
        eos = getattr(generation, "eos_token_id", None)
        pad_id = eos[0] if isinstance(eos, list) else eos
    model.eval()

    def decode() -> None:
        with torch.inference_mode():
            model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False, num_beams=1,
                           max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=pad_id)

    return {"ms_per_generated_token": 1000 * median_seconds(decode, device, DECODE_REPEATS) / new_tokens}


def _left_padded(rows: list[list[int]], pad_id: int) -> tuple["torch.Tensor", "torch.Tensor"]:
    import torch

    width = max(len(row) for row in rows)
    ids = [[pad_id] * (width - len(row)) + row for row in rows]
    mask = [[0] * (width - len(row)) + [1] * len(row) for row in rows]
    return torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.long)


def default_max_new_tokens(pairs: list[PromptAndReference]) -> int:
    """The longest reference plus a margin, capped: enough to write any reference, not much more."""
    return min(max(len(p.reference_ids) for p in pairs) + NEW_TOKENS_MARGIN, MAX_NEW_TOKENS)


def _fit_context(prompt: list[int], max_new_tokens: int, context: int | None) -> list[int]:
    """The prompt's last tokens, as many as leave room for the answer in a model with learned positions (GPT-2's
    128 or 1024): a test row may already fill max_seq_len."""
    if context is None or len(prompt) + max_new_tokens <= context:
        return prompt
    return prompt[-max(context - max_new_tokens, 1):]


def _context_length(model: Any) -> int | None:
    config = getattr(model, "config", None)
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def score_generation(model: Any, tokenizer: Any, split: Iterable[dict[str, Any]], limit: int,
                     max_new_tokens: int | None = None,
                     batch_size: int = BATCH_SIZE) -> tuple[dict[str, float], list[dict[str, str]]]:
    """Greedy answers to the first `limit` test prompts, scored: the mean of each score in SCORES, and one
    {prompt, reference, generated} per prompt (texts without special tokens). No usable rows: ({}, [])."""
    pairs = prompts_and_references(split, limit)
    if not pairs:
        return {}, []
    max_new_tokens = max_new_tokens or default_max_new_tokens(pairs)
    context = _context_length(model)
    prompts = [_fit_context(p.prompt_ids, max_new_tokens, context) for p in pairs]
    generated = generate_answers(model, tokenizer, prompts, max_new_tokens, batch_size)
    references = [tokenizer.decode(p.reference_ids, skip_special_tokens=True).strip() for p in pairs]
    examples = [{"prompt": tokenizer.decode(p.prompt_ids, skip_special_tokens=True).strip(), "reference": ref,
                 "generated": text} for p, ref, text in zip(pairs, references, generated)]
    return score_texts(generated, references), examples
