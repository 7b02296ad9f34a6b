"""onnx-int8 for a causal LM: a tiny Llama (tied head, grouped-query attention, like SmolLM2) exported by
transformers' exporter with its key/value cache, its linear layers quantized to int8 blocks by ONNX Runtime, then
run the way its users run it (an onnxruntime InferenceSession and the folder's tokenizer, the model card's own
greedy loop) and by finesweep's evaluation, generation and timing."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from finesweep.spaces import Quantization, Task
from tests.exports import causal_lm_collate, causal_lm_split


@pytest.fixture(scope="module")
def onnx_llama(tiny_llama, tmp_path_factory) -> Path:
    from finesweep.trainer.serving.quantize import quantize

    return quantize(tiny_llama, Quantization.onnx_int8, tmp_path_factory.mktemp("onnx") / "model-onnx-int8",
                    Task.causal_lm)


@pytest.fixture(scope="module")
def full_llama(tiny_llama):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    tokenizer.pad_token = tokenizer.eos_token
    return AutoModelForCausalLM.from_pretrained(tiny_llama).eval(), tokenizer


def test_the_folder_holds_an_int8_graph_with_its_cache(onnx_llama, full_llama):
    import onnx
    import onnxruntime
    import torch

    names = {p.name for p in onnx_llama.iterdir()}
    assert {"model.onnx", "model.onnx.data", "export.json", "config.json", "generation_config.json",
            "tokenizer.json"} <= names and not list(onnx_llama.glob("*.safetensors"))
    graph = onnx.load(str(onnx_llama / "model.onnx"), load_external_data=False).graph
    model, _ = full_llama
    linear = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    # Every linear layer, the head tied to the embeddings included, multiplies int8 blocks; no float MatMul reads a
    # weight any more (the attention's own products remain).
    assert sum(node.op_type == "MatMulNBits" for node in graph.node) == len(linear)
    session_inputs = onnxruntime.InferenceSession(str(onnx_llama / "model.onnx")).get_inputs()
    inputs = {i.name: i.shape for i in session_inputs}
    layers = model.config.num_hidden_layers
    assert {"input_ids", "attention_mask", "position_ids"} <= set(inputs)
    cache = [shape for name, shape in inputs.items() if name.startswith("input.") and name.endswith(("keys", "values"))]
    assert len(cache) == 2 * layers and len(inputs) == 3 + len(cache)  # keys, values per layer; nothing else
    # Batch and length are dynamic; the cache's heads and head size are the model's, fixed in the graph.
    heads, head_size = model.config.num_key_value_heads, model.config.hidden_size // model.config.num_attention_heads
    assert all(isinstance(s[0], str) and s[1:] == [heads, s[2], head_size] and isinstance(s[2], str) for s in cache)
    assert all(isinstance(axis, str) for axis in inputs["input_ids"] + inputs["attention_mask"])


def test_logits_of_padded_rows_match_the_full_model(onnx_llama, full_llama):
    import torch

    from finesweep.trainer.serving.loader import load_exported
    from finesweep.trainer.serving.onnx_decoder import OnnxCausalLM

    model, tokenizer = full_llama
    batch = causal_lm_collate(tokenizer)([{k: r[k] for k in ("input_ids", "attention_mask", "labels")}
                                          for r in causal_lm_split(tokenizer, 6)])
    assert (batch["attention_mask"] == 0).any()  # rows of different lengths: padding is exercised
    onnx_model = load_exported(onnx_llama, Task.causal_lm)
    assert isinstance(onnx_model, OnnxCausalLM)
    quantized = onnx_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    with torch.no_grad():
        full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    real = batch["attention_mask"].bool()
    assert quantized.shape == full.shape
    spread = float(full[real].std())
    assert float((quantized[real] - full[real]).abs().max()) < 0.1 * spread  # int8 rounding, not another model
    assert (quantized[real].argmax(-1) == full[real].argmax(-1)).float().mean() >= 0.9


def test_greedy_generation_matches_transformers_generate(onnx_llama, full_llama):
    """Left-padded prompts of different lengths, end-of-sequence held off for a while: the same tokens as
    transformers' own greedy `generate` on the full model."""
    import torch

    from finesweep.trainer.serving.generate import _left_padded, prompts_and_references
    from finesweep.trainer.serving.onnx_decoder import OnnxCausalLM

    model, tokenizer = full_llama
    prompts = [p.prompt_ids for p in prompts_and_references(causal_lm_split(tokenizer, 4), 4)]
    assert len({len(p) for p in prompts}) > 1
    input_ids, attention_mask = _left_padded(prompts, tokenizer.eos_token_id)
    settings = dict(max_new_tokens=12, min_new_tokens=4, pad_token_id=tokenizer.eos_token_id,
                    eos_token_id=tokenizer.eos_token_id)
    with torch.no_grad():
        expected = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False, **settings)
    got = OnnxCausalLM(onnx_llama).generate(input_ids=input_ids, attention_mask=attention_mask, **settings)
    assert got.shape == expected.shape
    assert torch.equal(got[:, :input_ids.shape[1]], input_ids)
    new_expected, new_got = expected[:, input_ids.shape[1]:], got[:, input_ids.shape[1]:]
    assert (new_got == new_expected).float().mean() >= 0.9, (new_got, new_expected)


def test_the_model_cards_onnx_snippet_runs(onnx_llama, full_llama):
    """The card's code, as a user runs it (onnxruntime, the tokenizer, no finesweep, no torch): the same greedy
    answer as transformers' generate on the full model."""
    import torch

    from finesweep.search.outputs.card_loading import onnx_decoder_usage

    code = re.search(r"```python\n(.*?)```", "\n".join(onnx_decoder_usage(str(onnx_llama))), re.S).group(1)
    code = code.replace("range(64)", "range(8)")  # a tiny model need not talk long
    scope: dict = {}
    exec(code, scope)  # noqa: S102 - our own card's text, on our own test folder
    model, tokenizer = full_llama
    prompt = tokenizer("Hello!", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                  max_new_tokens=8, pad_token_id=tokenizer.eos_token_id)[0, prompt.shape[1]:]
    expected = [t for t in expected.tolist() if t != tokenizer.eos_token_id]
    assert scope["answer"] == expected[:len(scope["answer"])] and len(scope["answer"]) >= min(len(expected), 6)


def test_evaluation_timing_and_generation_scores_run_on_the_folder(onnx_llama, full_llama, tiny_llama):
    from finesweep.trainer.serving.evaluate import evaluate, serving_speed
    from finesweep.trainer.serving.generate import decode_speed, score_generation
    from finesweep.trainer.models import load_checkpoint
    from finesweep.trainer.serving.loader import load_exported

    _, tokenizer = full_llama
    split, collate = causal_lm_split(tokenizer, 12), causal_lm_collate(tokenizer)
    onnx_model = load_exported(onnx_llama, Task.causal_lm)
    quantized = evaluate(onnx_model, split, collate, Task.causal_lm)
    full = evaluate(load_checkpoint(str(tiny_llama), Task.causal_lm), split, collate, Task.causal_lm)
    assert quantized["perplexity"] == pytest.approx(full["perplexity"], rel=0.01)
    assert serving_speed(onnx_model, split, collate)["latency_ms_batch1"] > 0
    assert decode_speed(onnx_model, split)["ms_per_generated_token"] > 0
    scores, examples = score_generation(onnx_model, tokenizer, split, limit=4, max_new_tokens=4)
    assert len(examples) == 4 and set(scores) == {"exact_match", "token_f1", "rouge_l"}
    assert np.isfinite(list(scores.values())).all()


def test_a_gpt2s_conv1d_layers_are_quantized_too(tiny_causal_lm, tmp_path):
    """GPT-2's Conv1D layers export as Gemm, which the int8 quantizer does not take: they are split into MatMul +
    Add first, so every layer is int8 and the logits are still the model's."""
    import onnx
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.pytorch_utils import Conv1D

    from finesweep.trainer.serving.onnx_decoder import OnnxCausalLM
    from finesweep.trainer.serving.quantize import quantize

    folder = quantize(tiny_causal_lm, Quantization.onnx_int8, tmp_path / "gpt2-onnx", Task.causal_lm)
    ops = [node.op_type for node in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.node]
    model = AutoModelForCausalLM.from_pretrained(tiny_causal_lm).eval()
    layers = [m for m in model.modules() if isinstance(m, (Conv1D, torch.nn.Linear))]
    assert ops.count("MatMulNBits") == len(layers) and "Gemm" not in ops
    ids = torch.tensor([[5, 17, 42, 8, 99, 3]])
    with torch.no_grad():
        full = model(input_ids=ids).logits
    quantized = OnnxCausalLM(folder)(input_ids=ids).logits
    assert float((quantized - full).abs().max()) < 0.1 * float(full.std())
