"""A sweep whose candidate is a GGUF file, through the real CLI: dequantized once into the cache, trained (not
refused as a quantized model), exported, named on the model card; resumable after its cache is cleared; and
stopped before anything runs when the gguf package is missing. Its data is a messages JSONL rendered with a chat
template file, so the same sweep shows conversations end to end: the loss on the replies, the exported tokenizer
carrying the template, and `finesweep predict` prompting with it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from finesweep.trainer.row_scores import RowScores
from tests import tiny
from tests.sweeps import REPO, causal_lm_sweep, finesweep, python_path, store

GGUF_SWEEP = causal_lm_sweep("tiny-gguf", 3, "chats.jsonl", f"{{name: llama, path: model, gguf_file: {tiny.TINY_GGUF_NAME}}}",
                             chat_template="turns.jinja", quantization="[int8, onnx-int8]")
# Plain-text markers: the tiny tokenizer has no special tokens for turns, and a template file needs none.
TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant] {% endif %}")


def _gguf_folder(folder: Path, gguf_file: Path) -> Path:
    """A user's project with a GGUF candidate; its machine cache (FINESWEEP_CACHE, _machine) is its own."""
    (folder / "model").mkdir(parents=True)
    shutil.copy(gguf_file, folder / "model" / gguf_file.name)
    tiny.write_jsonl(folder / "chats.jsonl", tiny.conversation_rows(160))
    (folder / "turns.jinja").write_text(TEMPLATE)
    (folder / "sweep.yaml").write_text(GGUF_SWEEP)
    return folder


# The optional torchao extra (scripts/setup.sh installs it there): importable, it is what peft, transformers and
# bitsandbytes probe for, and what printed its kernels' warnings on a causal-LM sweep's console.
TORCHAO = REPO / ".venv" / "extras" / "torchao"


def _machine(folder: Path) -> dict[str, str]:
    extra = {"PYTHONPATH": python_path(TORCHAO)} if (TORCHAO / "torchao").is_dir() else {}
    return {"FINESWEEP_CACHE": str(folder / "machine-cache"), **extra}


def _copies(folder: Path) -> list[Path]:
    """The dequantized copies in the project's machine cache."""
    return sorted((folder / "machine-cache" / "gguf").glob("*"))


@pytest.fixture(scope="module")
def gguf_sweep(tiny_llama_gguf, tmp_path_factory):
    folder = _gguf_folder(tmp_path_factory.mktemp("gguf-sweep"), tiny_llama_gguf)
    result = finesweep("run", "sweep.yaml", cwd=folder, env=_machine(folder))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "conversations as its chat template" in result.stdout
    (folder / "console.txt").write_text(result.stdout + result.stderr)
    return folder, folder / "runs" / "tiny-gguf"


def test_the_console_holds_finesweeps_lines_and_no_other_librarys_warnings(gguf_sweep):
    """transformers' exporter says it is experimental, torch.onnx reports its progress, torchao and bitsandbytes
    report the optional kernels they could not load: the log file's business, not the user's terminal."""
    folder, sweep_dir = gguf_sweep
    console = (folder / "console.txt").read_text()
    assert "Deploy:" in console  # the export ran and printed its own lines
    for notice in ("[torch.onnx]", "is experimental", "dynamic_shapes", "FutureWarning"):
        assert notice not in console, notice
    others = [line for line in console.splitlines()
              if re.search(r"Warning\b|warnings\.warn|^(WARNING|INFO) (?!finesweep)|kernels-community|torchao", line)]
    assert not others, "\n".join(others)
    assert "Warning" in (sweep_dir / "finesweep.log").read_text(), "the libraries' warnings are kept in the log"


def test_the_gguf_candidate_trains_and_exports(gguf_sweep):
    from transformers import AutoModelForCausalLM

    _, sweep_dir = gguf_sweep
    client, state = store(sweep_dir)
    trials = client.search_runs([state["experiment_id"]], filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")
    ends = [r.data.tags["finesweep.end_state"] for r in trials]
    assert len(ends) == 2 and all(e == "completed" or e.startswith("stopped_early") for e in ends), ends
    metrics = json.loads((sweep_dir / "export" / "metrics.json").read_text())
    assert set(metrics) == {"full", "int8", "onnx-int8"} and metrics["full"]["perplexity"] > 1
    # The ONNX Runtime variant keeps the perplexity and is timed at greedy decoding like the others.
    assert metrics["onnx-int8"]["perplexity"] == pytest.approx(metrics["full"]["perplexity"], rel=0.02)
    assert all(values["ms_per_generated_token"] > 0 for values in metrics.values())
    deploy = json.loads((sweep_dir / "export" / "deploy.json").read_text())
    assert deploy["variant"] in metrics
    exported = AutoModelForCausalLM.from_pretrained(sweep_dir / "export" / "model")
    assert exported.config.model_type == "llama" and "quantization_config" not in exported.config.to_dict()
    # Every checkpoint Tune kept holds its evaluation's per-conversation losses: the guard pairs two leaders by them.
    kept = [folder for folder in (sweep_dir / "tune").rglob("checkpoint_*") if folder.is_dir()]
    rows = [RowScores.load(folder) for folder in kept]
    validation = len(_tokenized(sweep_dir)["validation"])
    assert kept and all(r is not None and len(r.loss) == validation and not r.correct for r in rows)
    assert all(1.0 < sum(r.loss) / validation < 20.0 for r in rows), "a tiny llama's mean loss per conversation"


def test_the_candidate_was_dequantized_once_into_the_machine_cache_and_the_state_records_it(gguf_sweep):
    folder, sweep_dir = gguf_sweep
    entries = _copies(folder)
    assert len(entries) == 1 and (entries[0] / "model.safetensors").is_file()
    origin = json.loads((entries[0] / "gguf-origin.json").read_text())
    assert origin["gguf_file"].endswith(f"model/{tiny.TINY_GGUF_NAME}") and len(origin["sha256"]) == 64
    candidate = json.loads((sweep_dir / "sweep-state.json").read_text())["config"]["models"][0]
    assert candidate["path"] == str(entries[0]) and candidate["gguf_file"] is None
    assert candidate["gguf_origin"] == origin["gguf_file"]


def test_the_model_card_names_the_gguf_origin(gguf_sweep):
    _, sweep_dir = gguf_sweep
    card = (sweep_dir / "export" / "README.md").read_text()
    origin_line = next(line for line in card.splitlines() if line.startswith("- Base model:"))
    assert "GGUF file `" in origin_line and origin_line.count(tiny.TINY_GGUF_NAME) == 1
    assert "dequantized" in origin_line, origin_line


@pytest.mark.slow  # half a minute: the resume re-dequantizes and re-exports
def test_resume_after_the_cache_was_cleared_makes_the_folder_again(gguf_sweep):
    folder, sweep_dir = gguf_sweep
    shutil.rmtree(folder / "machine-cache")
    shutil.rmtree(sweep_dir / "export")  # made again from the best checkpoint, on the rebuilt folder's tokenizer
    result = finesweep("resume", str(sweep_dir), cwd=folder, env=_machine(folder))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Dequantizing GGUF candidate llama" in result.stdout
    entries = _copies(folder)
    assert len(entries) == 1 and (entries[0] / "gguf-origin.json").is_file()
    assert (sweep_dir / "export" / "model" / "model.safetensors").is_file()


def test_the_data_command_reads_the_gguf_files_tokenizer_and_the_copys_gives_the_same_tokens(tiny_llama_gguf, tmp_path):
    """`finesweep data` needs the tokenizer alone: read from the GGUF file's metadata, nothing dequantized. Once the
    machine has the copy, another sweep's data is tokenized with the copy's tokenizer into the same tokens and the
    same loss masks."""
    from finesweep.trainer import gguf

    folder = _gguf_folder(tmp_path, tiny_llama_gguf)
    result = finesweep("data", "sweep.yaml", cwd=folder, env=_machine(folder))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "llama tokens: p50" in result.stdout and "Dequantizing" not in result.stdout
    assert not _copies(folder)
    gguf.dequantized_folder(folder / "model" / tiny.TINY_GGUF_NAME, folder / "machine-cache")
    (folder / "other.yaml").write_text(GGUF_SWEEP.replace("name: tiny-gguf", "name: another-sweep"))
    again = finesweep("data", "other.yaml", cwd=folder, env=_machine(folder))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    file_tokens, copy_tokens = [_tokenized(folder / "runs" / name) for name in ("tiny-gguf", "another-sweep")]
    for split in ("train", "validation", "test"):
        assert file_tokens[split]["input_ids"] == copy_tokens[split]["input_ids"]
        assert file_tokens[split]["labels"] == copy_tokens[split]["labels"]  # the same replies trained


def _tokenized(sweep_dir: Path):
    from finesweep.trainer.data import load_tokenized

    (entry,) = (sweep_dir / "cache" / "tokenized").iterdir()
    return load_tokenized(entry)


def test_a_second_sweep_on_the_same_gguf_file_reuses_the_machines_copy(gguf_sweep):
    folder, _ = gguf_sweep
    (folder / "other.yaml").write_text(GGUF_SWEEP.replace("name: tiny-gguf", "name: another-sweep"))
    again = finesweep("probe", "other.yaml", cwd=folder, env=_machine(folder))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    out = " ".join(again.stdout.split())
    assert "Dequantizing" not in out and "GGUF candidate llama: reusing its dequantized copy" in out
    assert len(_copies(folder)) == 1


def test_the_replies_alone_are_trained_in_the_templates_format(gguf_sweep):
    from transformers import AutoTokenizer

    from finesweep.trainer import data

    folder, sweep_dir = gguf_sweep
    tokenizer = AutoTokenizer.from_pretrained(_copies(folder)[0])
    row = data.load_tokenized(next((sweep_dir / "cache" / "tokenized").iterdir()))["train"][0]
    text = tokenizer.decode(row["input_ids"])
    trained = tokenizer.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != -100])
    assert text.startswith("[system] You name colours.\n[user] name the colour ")
    # The generation prompt ends in a space, which BPE merges into the reply's first word: that token is trained.
    replies = [line.split("]", 1)[1] for line in text.splitlines() if line.startswith("[assistant] ")]
    assert replies and trained == "".join(reply + "\n" for reply in replies)


def test_the_export_carries_the_template_and_predict_prompts_with_it(gguf_sweep):
    from transformers import AutoTokenizer

    from finesweep.trainer.data.chat import own_template

    folder, sweep_dir = gguf_sweep
    for variant in ("model", "model-int8", "model-onnx-int8"):
        assert own_template(AutoTokenizer.from_pretrained(sweep_dir / "export" / variant)) == TEMPLATE
    for variant in ("model", "model-onnx-int8"):  # the ONNX folder answers through ONNX Runtime
        predicted = finesweep("predict", str(sweep_dir / "export" / variant), "name the colour red number 7",
                              cwd=folder)
        assert predicted.returncode == 0, predicted.stderr[-2000:]
        assert "'name the colour red number 7' -> {\"generated\":" in predicted.stdout


BLOCK_GGUF = """
import sys
sys.modules["gguf"] = None  # `import gguf` now fails, as where the package is not installed
sys.argv = ["finesweep", "run", "sweep.yaml"]
from finesweep.search.cli import main
main()
"""


def test_without_the_gguf_package_the_sweep_stops_before_anything_runs(tiny_llama_gguf, tmp_path):
    folder = _gguf_folder(tmp_path, tiny_llama_gguf)
    result = subprocess.run([sys.executable, "-c", BLOCK_GGUF], cwd=folder, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "error: models[0].gguf_file: reading a GGUF file needs the gguf package (gguf>=0.10)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (folder / "runs").exists(), "nothing ran: no sweep folder, no cache, no tracking store"


def test_a_data_error_with_a_gguf_candidate_is_said_before_anything_is_dequantized(tiny_llama_gguf, tmp_path):
    folder = _gguf_folder(tmp_path, tiny_llama_gguf)
    with (folder / "chats.jsonl").open("a", encoding="utf-8") as file:
        file.write('{"messages": [{"role": "user", "content": "cut mid-line\n')
    for command in ("data", "run"):
        result = finesweep(command, "sweep.yaml", cwd=folder, env=_machine(folder))
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout[-2000:] + result.stderr[-2000:]
        assert "chats.jsonl" in result.stderr and "Dequantizing" not in result.stdout
    assert not _copies(folder)


def test_a_max_seq_len_that_leaves_no_reply_is_a_clear_error_with_the_length_that_keeps_them(tiny_llama_gguf, tmp_path):
    """max_seq_len 8: the template's system turn alone fills it, so no conversation keeps a reply token; said in
    seconds, before the GGUF file is dequantized."""
    folder = _gguf_folder(tmp_path, tiny_llama_gguf)
    (folder / "sweep.yaml").write_text(GGUF_SWEEP.replace("task: causal_lm", "task: causal_lm\n  max_seq_len: 8"))
    for command in ("run", "data"):  # said before the GGUF file is dequantized (the tokenizer is read from it)
        result = finesweep(command, "sweep.yaml", cwd=folder, env=_machine(folder))
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout[-2000:] + result.stderr[-2000:]
        assert not _copies(folder) and "Dequantizing" not in result.stdout
    message = " ".join(result.stderr.split())
    assert "data.max_seq_len 8 leaves no reply token in" in message and "(model 'llama')" in message
    keep = int(message.split("raise data.max_seq_len to at least ")[1].split(" ")[0])
    assert keep > 8
    (folder / "sweep.yaml").write_text(GGUF_SWEEP.replace("task: causal_lm", f"task: causal_lm\n  max_seq_len: {keep}"))
    kept = finesweep("data", "sweep.yaml", cwd=folder, env=_machine(folder))
    assert kept.returncode == 0, kept.stdout[-2000:] + kept.stderr[-2000:]


def test_a_gguf_export_without_llama_cpp_stops_before_anything_runs(tiny_llama_gguf, tmp_path):
    """gguf-q4_k_m asked where llama.cpp's tools are not installed (the converter's folder is empty here; CI has no
    llama-cpp-python either): exit 2 with the command that installs them, before any data or model is touched."""
    folder = _gguf_folder(tmp_path, tiny_llama_gguf)
    sweep = folder / "sweep.yaml"
    sweep.write_text(sweep.read_text().replace("quantization: [int8, onnx-int8]", "quantization: [gguf-q4_k_m]"))
    (tmp_path / "no-llama-cpp").mkdir()
    result = finesweep("run", "sweep.yaml", cwd=folder,
                       env={**_machine(folder), "FINESWEEP_LLAMA_CPP": str(tmp_path / "no-llama-cpp")})
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "export.quantization: gguf-q4_k_m needs a library that is not installed here" in result.stderr
    assert "bash scripts/setup.sh --gguf" in result.stderr and "Traceback" not in result.stderr
    assert not (folder / "runs").exists() and not _copies(folder)
