"""Run an exported (or trial) model folder on raw texts: label + probability, or a greedy continuation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from finesweep.spaces import SweepFileError, Task
from finesweep.trainer.data.chat import conversation_from_columns, own_template, render_prompt
from finesweep.trainer.models import auto_config, text_pair_columns
from finesweep.trainer.serving.loader import load_exported

MAX_NEW_TOKENS = 32


def predict(model_dir: Path, texts: list[str], pairs: list[str] | None = None) -> list[dict]:
    """classification -> [{"label", "score"}]; causal_lm -> [{"generated"}] (greedy, new text only). `pairs`: a
    classifier of text pairs' second texts, one per text.

    A bitsandbytes-quantized folder loads the same way (its quantization_config is in config.json), and an
    onnx-int8 folder through ONNX Runtime.
    """
    from transformers import AutoTokenizer

    check_model_folder(model_dir)
    task = folder_task(model_dir)
    check_pairs(model_dir, task, len(texts), pairs)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = _load(model_dir, task)
    if task == Task.classification:
        return _classify(model, tokenizer, texts, pairs)
    return [_generate(model, tokenizer, text) for text in texts]


def check_model_folder(folder: Path) -> None:
    """A folder that is not a saved model would reach transformers as a hub id, and fail with an error about
    repository names."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        found = "nothing is there" if not folder.exists() else "it has no config.json"
        raise SweepFileError(
            f"EXPORT_DIR {folder}: not a saved model folder ({found}). Give a folder an export wrote, e.g. "
            "runs/<sweep>/export/model or runs/<sweep>/export/model-int8 (`finesweep status SWEEP` names the sweep).")


def shown_inputs(texts: list[str], pairs: list[str] | None) -> list[str]:
    """Each input as the console shows it beside its answer: the text, or the text + its pair."""
    return [f"{text!r} + {pair!r}" for text, pair in zip(texts, pairs)] if pairs else [repr(text) for text in texts]


def check_pairs(model_dir: Path, task: Task, texts: int, pairs: list[str] | None) -> None:
    """A classifier of text pairs gets one second text per text, and any other model none (SweepFileError: the
    command line's mistake)."""
    columns = text_pair_columns(auto_config(model_dir)) if task == Task.classification else None
    if columns is not None and (pairs is None or len(pairs) != texts):
        given = "none" if pairs is None else len(pairs)
        raise SweepFileError(
            f"{model_dir}: this model classifies text pairs (trained on columns '{columns[0]}' and '{columns[1]}'), "
            f"so each of the {texts} texts needs its second text, but --pair gave {given}. Fix: add one --pair "
            "TEXT per text, in the same order, e.g. finesweep predict DIR 'first text' --pair 'second text'.")
    if columns is None and pairs:
        raise SweepFileError(
            f"{model_dir}: this model reads one text a row (it was not trained on data.text_pair_column), but "
            f"--pair gave {len(pairs)} second texts. Fix: leave out --pair.")


def folder_task(model_dir: Path) -> Task:
    """The task a saved folder was trained for, read from its config's architecture name."""
    architectures = auto_config(model_dir).architectures or []
    if any(name.endswith("ForSequenceClassification") for name in architectures):
        return Task.classification
    return Task.causal_lm


def _load(model_dir: Path, task: Task) -> Any:
    model = load_exported(model_dir, task)
    model.eval()
    if model.config.pad_token_id is None:
        # Heads such as GPT-2's classifier find each row's last token through the pad id; without it a batch fails.
        model.config.pad_token_id = model.config.eos_token_id
    return model


def _classify(model: Any, tokenizer: Any, texts: list[str], pairs: list[str] | None) -> list[dict]:
    import torch

    inputs = tokenizer(texts, pairs, padding=True, truncation=True, return_tensors="pt").to(model.device)
    with torch.no_grad():
        probs = model(**inputs).logits.float().softmax(dim=-1)
    scores, ids = probs.max(dim=-1)
    names = model.config.id2label
    return [{"label": names[int(i)], "score": float(s)} for i, s in zip(ids, scores)]


def _generate(model: Any, tokenizer: Any, text: str) -> dict:
    """One text at a time: no left/right padding questions, and the prompt is cut off exactly. The text is the
    user's turn, written in the format the folder's model was fine-tuned on: its tokenizer's chat template, or
    plain text (see trainer/data/chat.py)."""
    import torch

    template = own_template(tokenizer)
    prompt = render_prompt(conversation_from_columns(text, "", None)[:-1], tokenizer, template)
    inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=template is None).to(model.device)
    with torch.no_grad():
        output = model.generate(
            **inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
    new_tokens = output[0, inputs["input_ids"].shape[1]:]
    return {"generated": tokenizer.decode(new_tokens, skip_special_tokens=True)}
