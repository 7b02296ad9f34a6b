"""The export folder's README.md: where the model came from, how it was chosen, how well each variant does, how to
load it."""

from __future__ import annotations

from typing import Any

from finesweep.search.outputs.card_loading import (adapter_section, mean_pooled, usage_section, variant_folder,
                                                   winner_candidate)
from finesweep.search.selection.baseline import export_name
from finesweep.search.selection.best import search_trial_name
from finesweep.search.selection.deploy import CPU_PREFIX, FULL
from finesweep.spaces import DataConfig, SweepConfig, Task
from finesweep.trainer.data import chat_formats
from finesweep.trainer.models import PIPELINE_TASKS

CARD_EXAMPLES = 3
CARD_TEXT_CHARS = 160
GENERATION_SCORES = {"gen_exact_match": "exact match", "gen_token_f1": "token F1", "gen_rouge_l": "ROUGE-L"}
UNTUNED = "untuned base model"  # a causal LM's base model before any training, beside the variants' answers


def model_card(config: SweepConfig, best: dict, metrics: dict[str, dict[str, float]], warnings: list[str],
               has_adapter: bool = False, examples: list[dict[str, str]] | None = None,
               deploy: dict[str, Any] | None = None, not_made: dict[str, str] | None = None,
               baseline: dict[str, Any] | None = None, chat_format: str | None = None) -> str:
    """README.md of the export folder: where the model came from, how it was chosen, how well each variant does,
    which one to deploy.

    `examples` (causal_lm): the test prompts with their references and each variant's greedy answer; `deploy`: the
    choice search/selection/deploy.py made; `not_made`: the variants asked for that could not be made, and why;
    `baseline`: the winner against the baseline recipe (search/selection/baseline.compare); `chat_format` (causal_lm):
    how the data's rows held conversations, as the data report found it."""
    task = Task(config.data.task)
    parts = [
        _metadata(config, best, task),
        f"# {config.name}: fine-tuned {best.get('model', '?')}\n",
        "Exported by finesweep: the best evaluation of a hyperparameter and batch-size sweep, "
        "measured on the held-out test split, in full precision and quantized.\n",
        _incomplete_notice(not_made) if not_made else "",
        _origin_section(config, best, task, chat_format),
        _params_section(best),
        _baseline_section(baseline) if baseline else "",
        _metrics_section(metrics, task, warnings),
        _deploy_section(deploy) if deploy else "",
        _generation_section(metrics, examples, (baseline or {}).get("untuned_test")) if examples else "",
        usage_section(metrics, task, mean_pooled=mean_pooled(config, best),
                      text_pair=config.data.text_pair_column is not None),
        adapter_section(config, best, task) if has_adapter else "",
    ]
    return "\n".join(parts)


def _baseline_section(baseline: dict[str, Any]) -> str:
    """How the tuned model compares with the recipe its user would have run without the search: what the search
    found, what the rest of the budget bought, and the test split's scores with the training behind each."""
    names = list(baseline["test"])
    header = ["", *[GENERATION_SCORES.get(name, name) for name in names], "training samples", "seconds"]
    arms = baseline.get("arms") or {}
    equal = (baseline.get("equal_time") or {}).get("checkpoint")
    rows = [["tuned (this export)", *[_fmt(baseline["winner_test"].get(n)) for n in names], *_arm(arms.get("export"))],
            [f"baseline recipe ({'at equal time' if equal else 'its trial'})",
             *[_fmt(baseline["test"].get(n)) for n in names], *_arm(arms.get("baseline"))]]
    if baseline.get("untuned_test"):
        rows.append([UNTUNED, *[_fmt(baseline["untuned_test"].get(n)) for n in names], "0", ""])
    if baseline.get("floor"):
        rows.append(["most frequent class", *[_fmt(baseline["floor"].get(n)) for n in names], "", ""])
    recipe = ", ".join(f"{k} {v}" for k, v in baseline["params"].items())
    where = ("trained again from step 0 after the search for as many seconds as the export trained "
             "(search.baseline.budget: equal)" if equal else
             f"trained in the same sweep as its first trial (`{search_trial_name(baseline['trial_id'])}`; best "
             f"evaluation at step {baseline['step']}), never stopped early")
    lines = ["## Against the baseline\n", *[f"{sentence}\n" for sentence in baseline["sentences"]],
             f"The baseline is the recipe a user would run without finesweep ({recipe}), {where}, and measured on the "
             "same test split by the same code.\n",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header), *["| " + " | ".join(r) + " |" for r in rows], ""]
    return "\n".join(lines)


def _arm(arm: dict[str, Any] | None) -> list[str]:
    """An arm's training samples and seconds (selection/arms.py) as table cells."""
    if not arm:
        return ["", ""]
    return [f"{arm['samples']:,}", f"{arm['seconds']:.0f}"]


def _incomplete_notice(not_made: dict[str, str]) -> str:
    """Said before anything else: a reader looking for a variant the sweep file asked for learns that it is missing."""
    missing = "; ".join(f"`{variant}` ({reason})" for variant, reason in not_made.items())
    return (f"> **Incomplete export**: not made: {missing}. The variants below are complete; "
            "`finesweep export <sweep folder> --quantize <variant>` makes a missing one again.\n")


def _metadata(config: SweepConfig, best: dict, task: Task) -> str:
    """The card's YAML metadata block, as the hub's model cards have it (huggingface_hub reads it; MLflow's
    transformers flavor parses the card with it and warns when it is missing): library, pipeline task, the base
    model where it is a hub id."""
    candidate = winner_candidate(config, best)
    lines = ["---", "library_name: transformers", f"pipeline_tag: {PIPELINE_TASKS[task]}", "tags: [finesweep]"]
    if candidate is not None and candidate.hub_id:
        lines.append(f"base_model: {candidate.hub_id}")
    return "\n".join([*lines, "---", ""])


def _origin_section(config: SweepConfig, best: dict, task: Task, chat_format: str | None) -> str:
    name = best.get("model", "?")
    candidate = winner_candidate(config, best)
    source = "unknown"
    if candidate is not None:
        source = f"path `{candidate.path}`" if candidate.path else f"hub id `{candidate.hub_id}`"
        if candidate.gguf_file:
            source += f" (GGUF file `{candidate.gguf_file}`)"
        if candidate.gguf_origin:
            source = (f"GGUF file `{candidate.gguf_origin}`, dequantized to float32 (a safetensors copy in the sweep's "
                      f"cache, `{candidate.path}`) before fine-tuning")
    return "\n".join([
        "## Origin\n",
        f"- Base model: candidate `{name}`, {source}",
        f"- Task: {task.value}",
        f"- Data: `{config.data.path}` ({_data_columns(config.data, task, chat_format)})",
        f"- Sweep: `{config.name}`, seed {config.seed}, up to {config.search.num_trials} trials (search.num_trials; "
        "the plan's number is on the sweep's MLflow run, plan.json), "
        f"search metric `{config.search.metric}` ({config.search.mode})",
        "",
    ])


def _data_columns(data: DataConfig, task: Task, chat_format: str | None) -> str:
    """The columns the sweep read: a classifier's text and label; a causal LM's by the chat format the data report
    found (the files' formats where pre-split files differ, `train=..., test=...`)."""
    if task == Task.classification and data.text_pair_column is not None:
        return (f"columns: text pairs `{data.text_column}` and `{data.text_pair_column}`, label "
                f"`{data.label_column}`")
    if task == Task.classification:
        return f"columns: text `{data.text_column}`, label `{data.label_column}`"
    columns = {
        chat_formats.MESSAGES: f"`{data.messages_column}`",
        chat_formats.SHAREGPT: f"`{data.conversations_column}`",
        chat_formats.ALPACA: f"instruction `{data.instruction_column}`, input `{data.input_column}`, output "
                             f"`{data.output_column}`",
        chat_formats.PROMPT_RESPONSE: f"prompt `{data.prompt_column}`, response `{data.response_column}`",
    }
    if chat_format in columns:
        return f"chat format {chat_format}, columns: {columns[chat_format]}"
    return f"chat formats {chat_format}" if chat_format else "chat format not recorded"


def _params_section(best: dict) -> str:
    rows = [f"| `{key}` | {_fmt(value)} |" for key, value in sorted(best.get("params", {}).items())]
    return "\n".join([
        "## Winning hyperparameters\n",
        f"Best validation {best.get('metric', '?')} = {_fmt(best.get('value'))} at step {best.get('step', '?')} "
        f"of `{export_name(best) if 'trial_id' in best else '?'}`.\n",
        *([f"{best['exploitation']['sentence']} (search.exploit: the rest of the time budget to the search's "
           "winner).\n"] if best.get("exploitation") else []),
        *([f"{_capitalized(best['exploitation']['model_choice'])}.\n"]
          if (best.get("exploitation") or {}).get("model_choice") else []),
        "| hyperparameter | value |",
        "|---|---|",
        *rows,
        "",
    ])


def _metrics_section(metrics: dict[str, dict[str, float]], task: Task, warnings: list[str]) -> str:
    names = ["accuracy", "f1_macro", "loss"] if task == Task.classification else ["loss", "perplexity"]
    decode = task == Task.causal_lm
    timings = [("latency_ms_batch1", "speedup_batch1", "ms/sample, batch 1"),
               ("ms_per_sample_batch32", "speedup_batch32", "ms/sample, batch 32"),
               *([("ms_per_generated_token", "speedup_decode", "ms/generated token")] if decode else [])]
    on_cpu = any(key.startswith(CPU_PREFIX) for values in metrics.values() for key in values)
    timings += [(CPU_PREFIX + key, CPU_PREFIX + speedup, f"CPU {title}") for key, speedup, title in timings] if on_cpu else []
    header = ["variant", "folder", *names, "size on disk", "linear layers", *[title for _, _, title in timings]]
    lines = ["## Test metrics\n", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    full_linear = metrics.get(FULL, {}).get("linear_layers_bytes") or 0
    for variant, values in metrics.items():
        linear = values.get("linear_layers_bytes")
        smaller = f" ({full_linear / linear:.2f}x smaller)" if variant != FULL and linear else ""
        cells = [variant, f"`{variant_folder(variant)}`", *[_fmt(values.get(n)) for n in names],
                 _size(values.get("size_bytes", 0)), (_size(linear) + smaller) if linear is not None else "n/a",
                 *[_speed(values, key, speedup) for key, speedup, _ in timings]]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Speed: a forward pass as a server runs it, on the device the export ran on" +
                 (" and on its CPU (CPU columns)" if on_cpu else "") + ", median of "
                 "several timed passes after a warm-up" + ("; generated token: greedy decoding of 32 tokens at "
                 "batch 1 from the first test prompt" if decode else "") + "; (x) is the speed-up over full precision.\n")
    lines += [f"> Warning: {w}" for w in warnings]
    return "\n".join(lines) + ("\n" if warnings else "")


def _speed(values: dict[str, float], key: str, speedup: str) -> str:
    if values.get(key) is None:
        return ""
    return _fmt(values[key]) + (f" ({values[speedup]:.2f}x)" if values.get(speedup) else "")


def _deploy_section(deploy: dict[str, Any]) -> str:
    lines = ["## Deploy this\n", f"**`{variant_folder(deploy['variant'])}`** ({deploy['variant']}): {deploy['reason']}.\n"]
    if on_cpu := deploy.get("on_cpu"):
        lines.append(f"On a CPU: **`{variant_folder(on_cpu['variant'])}`** ({on_cpu['variant']}): {on_cpu['reason']}.\n")
    return "\n".join(lines)


def _generation_section(metrics: dict[str, dict[str, float]], examples: list[dict[str, str]],
                        untuned: dict[str, float] | None = None) -> str:
    """Scores of each variant's greedy answers, and the first few answers beside the reference: a perplexity says
    how likely the reference is, not what the model writes. `untuned`: the base model's scores before any training,
    where it answered the same prompts (its answers are then in `examples` too)."""
    scored = dict(metrics)
    if untuned and any(key in untuned for key in GENERATION_SCORES):
        scored[UNTUNED] = untuned
    lines = [
        "## What it generates\n",
        f"Greedy answers (no sampling, up to the end-of-sequence token) to the first {len(examples)} test prompts, "
        "scored against the test references after SQuAD normalization (lowercase, no punctuation, no articles): "
        "exact match, token F1 (overlap of the bags of words) and ROUGE-L (F-measure of the longest common "
        "subsequence of words). All answers are in `generations.json`.\n",
        "| variant | " + " | ".join(GENERATION_SCORES.values()) + " |",
        "|" + "---|" * (len(GENERATION_SCORES) + 1),
        *[f"| {v} | " + " | ".join(_fmt(scores.get(key)) for key in GENERATION_SCORES) + " |"
          for v, scores in scored.items()],
        "",
        "| prompt (its end) | reference | " + " | ".join(scored) + " |",
        "|" + "---|" * (len(scored) + 2),
    ]
    for row in examples[:CARD_EXAMPLES]:
        cells = [_cell(row["prompt"], keep_end=True), _cell(row["reference"]), *[_cell(row.get(v, "")) for v in scored]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(text: str, keep_end: bool = False) -> str:
    """`text` shortened to fit a table cell (a prompt keeps its end, where the question is) and made safe in one."""
    if len(text) > CARD_TEXT_CHARS:
        text = "…" + text[-CARD_TEXT_CHARS:] if keep_end else text[:CARD_TEXT_CHARS] + "…"
    text = text.replace("|", "\\|").replace("\r", "").replace("\n", "<br>")
    return text or "(empty)"


def _size(size_bytes: float) -> str:
    return f"{size_bytes / 1e6:.2f} MB" if size_bytes >= 1e5 else f"{size_bytes / 1e3:.1f} kB"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def _capitalized(text: str) -> str:
    return text[0].upper() + text[1:]
