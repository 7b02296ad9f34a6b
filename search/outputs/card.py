"""The export folder's README.md: where the model came from, how it was chosen, how well each variant does, how to
load it."""

from __future__ import annotations

from typing import Any

from finesweep.search.selection.baseline import export_name
from finesweep.search.selection.best import search_trial_name
from finesweep.search.selection.deploy import CPU_PREFIX, FULL
from finesweep.spaces import DataConfig, ModelCandidate, Quantization, SweepConfig, Task
from finesweep.trainer.data import chat_formats
from finesweep.trainer.models import AUTO_CLASS_NAMES, PIPELINE_TASKS
from finesweep.trainer.serving.gguf_export import MODELFILE
from finesweep.trainer.serving.ollama import GGUF_FILE
from finesweep.trainer.serving.quantize import BACKENDS, CUDA_CAPABILITY

ADAPTER = "adapter"
MEAN_POOLING_FILE = "mean_pooling.py"  # what transformers copies into the folders of trainer/mean_pooling.py's model
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
        _usage_section(metrics, task, mean_pooled=_mean_pooled(config, best)),
        _adapter_section(config, best, task) if has_adapter else "",
    ]
    return "\n".join(parts)


def _baseline_section(baseline: dict[str, Any]) -> str:
    """How the tuned model compares with the recipe its user would have run without the search, on the test split."""
    names = list(baseline["test"])
    header = ["", *[GENERATION_SCORES.get(name, name) for name in names]]
    rows = [["tuned (this export)", *[_fmt(baseline["winner_test"].get(n)) for n in names]],
            ["baseline recipe", *[_fmt(baseline["test"].get(n)) for n in names]]]
    if baseline.get("untuned_test"):
        rows.append([UNTUNED, *[_fmt(baseline["untuned_test"].get(n)) for n in names]])
    recipe = ", ".join(f"{k} {v}" for k, v in baseline["params"].items())
    lines = ["## Against the baseline\n", f"**{_capitalized(baseline['sentence'])}.**\n",
             f"The baseline is the recipe a user would run without finesweep ({recipe}), trained in the same sweep "
             f"as its first trial (`{search_trial_name(baseline['trial_id'])}`; best evaluation at step "
             f"{baseline['step']}), never stopped early, and measured on the same test split by the same code.\n",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header), *["| " + " | ".join(r) + " |" for r in rows], ""]
    return "\n".join(lines)


def _incomplete_notice(not_made: dict[str, str]) -> str:
    """Said before anything else: a reader looking for a variant the sweep file asked for learns that it is missing."""
    missing = "; ".join(f"`{variant}` ({reason})" for variant, reason in not_made.items())
    return (f"> **Incomplete export**: not made: {missing}. The variants below are complete; "
            "`finesweep export <sweep folder> --quantize <variant>` makes a missing one again.\n")


def _metadata(config: SweepConfig, best: dict, task: Task) -> str:
    """The card's YAML metadata block, as the hub's model cards have it (huggingface_hub reads it; MLflow's
    transformers flavor parses the card with it and warns when it is missing): library, pipeline task, the base
    model where it is a hub id."""
    candidate = _winner(config, best)
    lines = ["---", "library_name: transformers", f"pipeline_tag: {PIPELINE_TASKS[task]}", "tags: [finesweep]"]
    if candidate is not None and candidate.hub_id:
        lines.append(f"base_model: {candidate.hub_id}")
    return "\n".join([*lines, "---", ""])


def _origin_section(config: SweepConfig, best: dict, task: Task, chat_format: str | None) -> str:
    name = best.get("model", "?")
    candidate = _winner(config, best)
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
        f"- Sweep: `{config.name}`, seed {config.seed}, {config.search.num_trials} trials, "
        f"search metric `{config.search.metric}` ({config.search.mode})",
        "",
    ])


def _data_columns(data: DataConfig, task: Task, chat_format: str | None) -> str:
    """The columns the sweep read: a classifier's text and label; a causal LM's by the chat format the data report
    found (the files' formats where pre-split files differ, `train=..., test=...`)."""
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


def _winner(config: SweepConfig, best: dict) -> ModelCandidate | None:
    """The candidate the best checkpoint was trained from (None for a record that names none of them)."""
    return next((m for m in config.models if m.name == best.get("model")), None)


def _mean_pooled(config: SweepConfig, best: dict) -> bool:
    """Whether the winner is finesweep's mean-pooled classifier (its folders carry their modeling file)."""
    winner = _winner(config, best)
    return winner is not None and winner.pooling == "mean"


def _usage_section(metrics: dict[str, dict[str, float]], task: Task, mean_pooled: bool = False) -> str:
    auto = AUTO_CLASS_NAMES[task]
    lines = ["## How to load\n", "The PyTorch folders load with plain transformers (weights are safetensors):\n"]
    if mean_pooled:
        lines.append(f"The head reads the mean of the token states (the sweep file's `pooling: mean`), which no "
                     f"transformers class does: each PyTorch folder carries its code, `{MEAN_POOLING_FILE}` (a BERT "
                     "encoder and a linear layer on the masked mean; torch and transformers only; read it), which "
                     "transformers runs only when given `trust_remote_code=True` (without it the load stops).\n")
    remote = ", trust_remote_code=True" if mean_pooled else ""
    torch_variants = [v for v in metrics if v == FULL or _loads_in_transformers(Quantization(v))]
    for variant in torch_variants:
        if variant != FULL:
            package = BACKENDS[Quantization(variant)][0]
            lines.append(f"`{variant_folder(variant)}` is {package}-quantized ({variant}): also `pip install {package}`; "
                         "its quantization settings are in its config.json.\n")
    lines += [
        "```python",
        f"from transformers import AutoTokenizer, {auto}",
        "",
        *[f'model = {auto}.from_pretrained("{variant_folder(v)}"{_device_map(v)}{remote})  # {v}' for v in torch_variants],
        f'tokenizer = AutoTokenizer.from_pretrained("{variant_folder(FULL)}")',
        "# inputs where the model is: bitsandbytes places a quantized model on the GPU when there is one",
        'inputs = tokenizer(["an example"], return_tensors="pt").to(model.device)',
        "outputs = model(**inputs)",
        "```",
        "",
    ]
    if Quantization.onnx_int8.value in metrics:
        folder = variant_folder(Quantization.onnx_int8.value)
        lines += _onnx_decoder_usage(folder) if task == Task.causal_lm else _onnx_usage(folder)
    lines += _gguf_usage([v for v in metrics if v != FULL and Quantization(v).is_gguf])
    return "\n".join(lines)


def _loads_in_transformers(variant: Quantization) -> bool:
    return variant != Quantization.onnx_int8 and not variant.is_gguf


def _gguf_usage(variants: list[str]) -> list[str]:
    """llama.cpp's and Ollama's own ways to run the GGUF files (each folder's README.md says the same)."""
    if not variants:
        return []
    lines = [f"{', '.join(f'`{variant_folder(v)}`' for v in variants)}: one GGUF file each (`{GGUF_FILE}`) for "
             "llama.cpp, Ollama and LM Studio, with its chat template, stop token and tokenizer inside, measured "
             "above in llama.cpp (llama-cpp-python, greedy, the same threads):\n", "```bash"]
    for variant in variants:
        folder = variant_folder(variant)
        lines += [f"llama-cli -m {folder}/{GGUF_FILE} -cnv       # chat in the terminal",
                  f"llama-server -m {folder}/{GGUF_FILE}         # an OpenAI-style server on 127.0.0.1:8080",
                  f"cd {folder} && ollama create {variant} -f {MODELFILE} && ollama run {variant}"]
    return lines + ["```", ""]


def _device_map(variant: str) -> str:
    """torchao's GPU-only variants load onto the GPU only when asked."""
    return ', device_map="cuda"' if variant != FULL and Quantization(variant) in CUDA_CAPABILITY else ""


def _onnx_decoder_usage(folder: str) -> list[str]:
    """ONNX Runtime's own way for a causal LM: a session on the graph, greedy decoding over its key/value cache (every
    input of the graph but the tokens, fed back from the output named like it), the folder's tokenizer."""
    return [
        f"`{folder}` runs in ONNX Runtime, its linear layers in int8 with its key/value cache in the graph "
        "(`pip install onnxruntime transformers`; no torch needed). Greedy decoding:\n",
        "```python",
        "import numpy as np",
        "import onnxruntime",
        "from transformers import AutoTokenizer",
        "",
        f'session = onnxruntime.InferenceSession("{folder}/model.onnx")',
        f'tokenizer = AutoTokenizer.from_pretrained("{folder}")',
        "prompt = \"Hello!\"  # a chat model: tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)",
        'tokens = tokenizer(prompt, return_tensors="np")["input_ids"]',
        '# every input but the tokens is a key/value cache tensor, fed back from the output named like it',
        'cache = [i for i in session.get_inputs() if i.name not in ("input_ids", "attention_mask", "position_ids")]',
        'fed_by = {o.name.split(".", 2)[-1]: o.name for o in session.get_outputs()}  # "layers.0.keys": its output',
        'outputs = ["logits"] + [fed_by[i.name.split(".", 2)[-1]] for i in cache]',
        "# an empty cache per layer: [batch, heads, 0 positions, head size]",
        "feed = {i.name: np.zeros((1, int(i.shape[1]), 0, int(i.shape[3])), np.float32) for i in cache}",
        "length, answer = tokens.shape[1], []",
        "for _ in range(64):",
        "    feed.update(input_ids=tokens, attention_mask=np.ones((1, length), np.int64),",
        "                position_ids=np.arange(length - tokens.shape[1], length)[None])",
        "    logits, *past = session.run(outputs, feed)",
        "    feed.update(zip([i.name for i in cache], past))",
        "    token = int(logits[0, -1].argmax())",
        "    if token == tokenizer.eos_token_id:",
        "        break",
        "    answer.append(token)",
        "    tokens, length = np.array([[token]]), length + 1",
        "print(tokenizer.decode(answer))",
        "```",
        "",
    ]


def _onnx_usage(folder: str) -> list[str]:
    """ONNX Runtime's own way: a session on the graph, the folder's tokenizer, the labels from its config.json."""
    return [
        f"`{folder}` runs in ONNX Runtime with dynamic int8 quantization (`pip install onnxruntime transformers`; "
        "no torch needed):\n",
        "```python",
        "import onnxruntime",
        "from transformers import AutoConfig, AutoTokenizer",
        "",
        f'session = onnxruntime.InferenceSession("{folder}/model.onnx")',
        f'tokenizer = AutoTokenizer.from_pretrained("{folder}")',
        'inputs = tokenizer(["an example"], return_tensors="np")',
        'logits = session.run(["logits"], {i.name: inputs[i.name] for i in session.get_inputs()})[0]',
        f'labels = [AutoConfig.from_pretrained("{folder}").id2label[int(i)] for i in logits.argmax(-1)]',
        "```",
        "",
    ]


def _adapter_section(config: SweepConfig, best: dict, task: Task) -> str:
    """How to put the LoRA adapter alone on its base model (peft), for users who share one base across adapters."""
    auto = AUTO_CLASS_NAMES[task]
    candidate = _winner(config, best)
    base = (candidate.path or candidate.hub_id) if candidate else "<base model>"
    head = ', num_labels=len(labels), id2label=dict(enumerate(labels))' if task == Task.classification else ""
    return "\n".join([
        "## The LoRA adapter alone\n",
        f"`{ADAPTER}` holds the winning LoRA adapter (the classification head is inside it) and the tokenizer; "
        f"`model` is the same adapter merged into the base. The adapter applies to the base model `{base}`"
        + (f" with `config_overrides` {candidate.config_overrides}" if candidate and candidate.config_overrides else "")
        + " (`pip install peft`):\n",
        "```python",
        "from peft import PeftModel",
        *(_mean_pooled_base(base) if _mean_pooled(config, best) else [
            f"from transformers import {auto}",
            "",
            *(['labels = [...]  # as in model/config.json id2label'] if task == Task.classification else []),
            f'base = {auto}.from_pretrained("{base}"{head})']),
        f'model = PeftModel.from_pretrained(base, "{ADAPTER}")',
        "```",
        "",
    ])


def _mean_pooled_base(base: str) -> list[str]:
    """The base under the mean-pooled head, built by the code and configuration (labels, config_overrides) that the
    merged folder `model/` carries."""
    module = MEAN_POOLING_FILE.removesuffix(".py")
    return [
        "from transformers import AutoConfig",
        "from transformers.dynamic_module_utils import get_class_from_dynamic_module",
        "",
        'config = AutoConfig.from_pretrained("model", trust_remote_code=True)  # labels and settings of the head',
        f'head = get_class_from_dynamic_module("{module}.MeanPooledBertForSequenceClassification", "model")',
        f'base = head.from_pretrained("{base}", config=config)',
    ]


def variant_folder(variant: str) -> str:
    return "model" if variant == FULL else f"model-{variant}"


def _size(size_bytes: float) -> str:
    return f"{size_bytes / 1e6:.2f} MB" if size_bytes >= 1e5 else f"{size_bytes / 1e3:.1f} kB"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def _capitalized(text: str) -> str:
    return text[0].upper() + text[1:]
