"""The model card's "How to load" and "The LoRA adapter alone" sections: each variant's folder and the few lines of
its own library (transformers, ONNX Runtime, llama.cpp and Ollama, peft) that load and run it."""

from __future__ import annotations

from finesweep.search.selection.deploy import FULL
from finesweep.spaces import ModelCandidate, Quantization, SweepConfig, Task
from finesweep.trainer.models import AUTO_CLASS_NAMES
from finesweep.trainer.serving.gguf_export import MODELFILE
from finesweep.trainer.serving.ollama import GGUF_FILE
from finesweep.trainer.serving.quantize import BACKENDS, CUDA_CAPABILITY

ADAPTER = "adapter"
MEAN_POOLING_FILE = "mean_pooling.py"  # what transformers copies into the folders of trainer/mean_pooling.py's model


def winner_candidate(config: SweepConfig, best: dict) -> ModelCandidate | None:
    """The candidate the best checkpoint was trained from (None for a record that names none of them)."""
    return next((m for m in config.models if m.name == best.get("model")), None)


def mean_pooled(config: SweepConfig, best: dict) -> bool:
    """Whether the winner is finesweep's mean-pooled classifier (its folders carry their modeling file)."""
    winner = winner_candidate(config, best)
    return winner is not None and winner.pooling == "mean"


# What the snippets tokenize: one text, or (a classifier of text pairs) a text and its pair, as the model trained.
ONE_TEXT = '["an example"]'
TWO_TEXTS = '["a first text"], ["its second text"]'


def usage_section(metrics: dict[str, dict[str, float]], task: Task, mean_pooled: bool = False,
                  text_pair: bool = False) -> str:
    auto = AUTO_CLASS_NAMES[task]
    texts = TWO_TEXTS if text_pair else ONE_TEXT
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
        f'inputs = tokenizer({texts}, return_tensors="pt").to(model.device)',
        "outputs = model(**inputs)",
        "```",
        "",
    ]
    if Quantization.onnx_int8.value in metrics:
        folder = variant_folder(Quantization.onnx_int8.value)
        lines += onnx_decoder_usage(folder) if task == Task.causal_lm else onnx_usage(folder, texts)
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


def onnx_decoder_usage(folder: str) -> list[str]:
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


def onnx_usage(folder: str, texts: str = ONE_TEXT) -> list[str]:
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
        f'inputs = tokenizer({texts}, return_tensors="np")',
        'logits = session.run(["logits"], {i.name: inputs[i.name] for i in session.get_inputs()})[0]',
        f'labels = [AutoConfig.from_pretrained("{folder}").id2label[int(i)] for i in logits.argmax(-1)]',
        "```",
        "",
    ]


def adapter_section(config: SweepConfig, best: dict, task: Task) -> str:
    """How to put the LoRA adapter alone on its base model (peft), for users who share one base across adapters."""
    auto = AUTO_CLASS_NAMES[task]
    candidate = winner_candidate(config, best)
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
        *(_mean_pooled_base(base) if mean_pooled(config, best) else [
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
