"""GGUF out, on the real SmolLM2-135M-Instruct (its GGUF file dequantized once into the machine cache, exported
back): llama.cpp's converter and quantizer make gguf-q8_0 and gguf-q4_k_m, measured in llama.cpp beside full
precision (perplexity, answers, milliseconds a token) and ranked by the deploy pick; llama-cpp-python loads the file
and chats; the file's tokenizer gives the same ids as transformers' for the test prompts, its chat template renders
the test conversations token for token as transformers' does, and the Modelfile's template writes them as the GGUF's
own template; through the CLI, a sweep of the GGUF candidate exported back to GGUF keeps the sweep's token ids. Marked gguf: they need the gguf extra (`bash scripts/setup.sh --gguf`; a 6-minute build), which the
default suite does not install. The default suite checks the error without it (tests/search/test_gguf_sweep.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from finesweep.spaces import ModelCandidate, SweepConfig
from tests import tiny
from tests.trainer.serving.test_ollama import modelfile_directives, ollama_prompt
from tests.trainer.test_gguf import _smollm2_gguf

pytestmark = pytest.mark.gguf
VARIANTS = ("gguf-q8_0", "gguf-q4_k_m")


def _conversations() -> list[list[dict[str, str]]]:
    return [row["messages"] for row in tiny.conversation_rows(12, seed=3)]


def _split(tokenizer, conversations):
    """Rows as trainer.data makes them: the conversation in the template, the last reply (and its end) trained."""
    from datasets import Dataset

    ids, labels = [], []
    for messages in conversations:
        prompt = tokenizer.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
        whole = tokenizer.apply_chat_template(messages, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        row = tokenizer(whole, add_special_tokens=False)["input_ids"]
        ids.append(row)
        labels.append([-100] * len(prompt_ids) + row[len(prompt_ids):])
    return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids], "labels": labels})


@pytest.fixture(scope="module")
def smollm2_export(tmp_path_factory):
    from finesweep.search.outputs.export import export_best
    from finesweep.spaces.files import machine_cache
    from finesweep.trainer.gguf import dequantized_candidate
    from finesweep.trainer.models import load_tokenizer
    from tests.exports import causal_lm_collate

    source = _smollm2_gguf()
    candidate = dequantized_candidate(ModelCandidate(name="smol", path=str(source.parent), gguf_file=source.name),
                                      machine_cache())
    tokenizer = load_tokenizer(candidate)
    conversations = _conversations()
    config = SweepConfig.model_validate({
        "name": "smol-gguf", "data": {"path": "x.jsonl", "task": "causal_lm"},
        "models": [{"name": "smol", "path": candidate.path}],
        "export": {"quantization": list(VARIANTS), "generation_samples": 4, "register_model": False}})
    out = tmp_path_factory.mktemp("export")
    best = {"trial_id": "t0", "step": 1, "metric": "eval_loss", "value": 1.0, "params": {}, "model": "smol"}
    result = export_best(config=config, checkpoint_dir=Path(candidate.path), tokenizer_source=Path(candidate.path),
                         test_split=_split(tokenizer, conversations), collate=causal_lm_collate(tokenizer), best=best,
                         out_dir=out)
    return result, tokenizer, conversations


def test_each_gguf_variant_is_measured_in_llama_cpp_beside_full_precision(smollm2_export):
    result, _, _ = smollm2_export
    assert not result.not_made, result.not_made
    metrics = json.loads((result.folder / "metrics.json").read_text())
    full = metrics["full"]
    for variant in VARIANTS:
        values = metrics[variant]
        for key in ("perplexity", "ms_per_generated_token", "latency_ms_batch1", "gen_rouge_l", "size_bytes"):
            assert key in values, (variant, sorted(values))
        assert values["size_bytes"] < full["size_bytes"] / 3  # 8 bits or fewer a weight against float32's 32
    # q8_0 keeps full precision's perplexity; 4 bits costs some, but not the model.
    assert metrics["gguf-q8_0"]["perplexity"] == pytest.approx(full["perplexity"], rel=0.03)
    assert metrics["gguf-q4_k_m"]["perplexity"] < 1.5 * full["perplexity"]
    assert metrics["gguf-q4_k_m"]["size_bytes"] < metrics["gguf-q8_0"]["size_bytes"]
    deploy = json.loads((result.folder / "deploy.json").read_text())
    timed = {variant for variant, values in metrics.items() if values.get(deploy["ranked_by"])}
    assert set(VARIANTS) <= timed, "the deploy pick ranks the GGUF files with the rest"
    card = (result.folder / "README.md").read_text()
    assert "ollama create gguf-q4_k_m -f Modelfile" in card and "llama-server -m model-gguf-q8_0/model.gguf" in card


def test_llama_cpp_python_loads_the_file_and_chats(smollm2_export):
    from llama_cpp import Llama

    result, _, _ = smollm2_export
    llm = Llama(str(result.variant_folder("gguf-q4_k_m") / "model.gguf"), n_ctx=512, verbose=False)
    reply = llm.create_chat_completion([{"role": "user", "content": "Name a colour."}], max_tokens=16, temperature=0)
    assert reply["choices"][0]["message"]["content"].strip()
    assert reply["usage"]["completion_tokens"] >= 1


def _gguf_template(folder: Path):
    """The GGUF's own chat template, rendered as llama-cpp-python renders it (its Jinja2 formatter)."""
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    llm = Llama(str(folder / "model.gguf"), n_ctx=512, verbose=False, vocab_only=True)
    metadata = llm.metadata
    eos, bos = (llm.detokenize([int(metadata[f"tokenizer.ggml.{name}_token_id"])], special=True).decode()
                for name in ("eos", "bos"))
    return llm, Jinja2ChatFormatter(metadata["tokenizer.chat_template"], eos_token=eos, bos_token=bos)


def test_the_files_tokenizer_and_chat_template_give_transformers_ids(smollm2_export):
    result, tokenizer, conversations = smollm2_export
    llm, formatter = _gguf_template(result.variant_folder("gguf-q8_0"))
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token") == "true"
    for messages in conversations:
        expected = tokenizer(tokenizer.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True),
                             add_special_tokens=False)["input_ids"]
        prompt = formatter(messages=messages[:-1]).prompt
        assert llm.tokenize(prompt.encode(), add_bos=add_bos, special=True) == expected
        reply = messages[-1]["content"]
        assert llm.tokenize(reply.encode(), add_bos=False, special=True) == \
            tokenizer(reply, add_special_tokens=False)["input_ids"]


def test_the_modelfile_writes_the_conversations_as_the_ggufs_own_template(smollm2_export):
    result, _, conversations = smollm2_export
    folder = result.variant_folder("gguf-q4_k_m")
    _, formatter = _gguf_template(folder)
    directives = modelfile_directives((folder / "Modelfile").read_text())
    assert directives["stop"] == "<|im_end|>"
    for messages in conversations + [[{"role": "user", "content": "hello"}]]:
        assert ollama_prompt(directives, messages[:-1] or messages) == formatter(messages=messages[:-1] or messages).prompt


def test_a_gguf_candidate_swept_and_exported_back_to_gguf_keeps_the_sweeps_tokens(tmp_path):
    """The round trip through the CLI: SmolLM2's GGUF file as the candidate (the machine's dequantized copy), one
    short trial, the winner exported as gguf-q8_0 and measured; the exported file's own tokenizer turns each test
    prompt's text back into exactly the ids the sweep tokenized it to."""
    from llama_cpp import Llama
    from transformers import AutoTokenizer

    from finesweep.trainer.data import load_tokenized
    from finesweep.trainer.serving.generate import last_response_span
    from tests.sweeps import causal_lm_sweep, finesweep

    source = _smollm2_gguf()
    tiny.write_jsonl(tmp_path / "chats.jsonl", tiny.conversation_rows(120))
    model = f"{{name: smol, path: {source.parent}, gguf_file: {source.name}}}"
    sweep = causal_lm_sweep("smol-round-trip", 1, "chats.jsonl", model, quantization="[gguf-q8_0]")
    (tmp_path / "sweep.yaml").write_text(sweep.replace("num_trials: 2", "num_trials: 1"))
    result = finesweep("run", "sweep.yaml", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    export = tmp_path / "runs" / "smol-round-trip" / "export"
    metrics = json.loads((export / "metrics.json").read_text())
    assert {"perplexity", "ms_per_generated_token"} <= set(metrics["gguf-q8_0"])

    (tokenized,) = (tmp_path / "runs" / "smol-round-trip" / "cache" / "tokenized").iterdir()
    test = load_tokenized(tokenized)["test"]
    tokenizer = AutoTokenizer.from_pretrained(export / "model")
    llm = Llama(str(export / "model-gguf-q8_0" / "model.gguf"), n_ctx=512, verbose=False, vocab_only=True)
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token") == "true"
    assert len(test) >= 5
    for row in test:
        prompt = row["input_ids"][:last_response_span(row["labels"])[0]]
        text = tokenizer.decode(prompt, skip_special_tokens=False)
        assert llm.tokenize(text.encode(), add_bos=add_bos, special=True) == prompt
