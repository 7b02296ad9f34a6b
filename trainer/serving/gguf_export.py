"""A causal LM exported as one GGUF file for llama.cpp, Ollama and LM Studio, by llama.cpp's own tools: its converter
(`convert_hf_to_gguf.py` with the gguf package beside it, as the llama-cpp-python source distribution vendors them)
writes the full-precision folder as GGUF, and llama.cpp's quantizer (`llama_model_quantize`, through llama-cpp-python)
makes the k-quants. The folder holds the .gguf file, an Ollama Modelfile, a README with the commands that run it,
and the tokenizer and config the export measures it with (gguf_runtime.py runs it in llama.cpp).

Why the converter runs as a subprocess: it imports its own, newer gguf package (from the folder beside it), which must
not replace the pinned one that transformers reads GGUF candidates with in this process.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from finesweep.spaces import Quantization
from finesweep.trainer.models import copy_tokenizer
from finesweep.trainer.serving.ollama import GGUF_FILE, modelfile

log = logging.getLogger(__name__)

CONVERTER = "convert_hf_to_gguf.py"
# Where `scripts/setup.sh --gguf` unpacks the converter (under the environment's prefix, as the torchao extra is
# kept), unless FINESWEEP_LLAMA_CPP names a llama.cpp checkout (or the sdist's vendor/llama.cpp) holding it.
CONVERTER_ENV = "FINESWEEP_LLAMA_CPP"
CONVERTER_HOME = Path(sys.prefix) / "extras" / "llama.cpp"
INSTALL = ("bash scripts/setup.sh --gguf, which builds llama-cpp-python from source, about 6 minutes on 2 cores, and "
           "unpacks llama.cpp's converter from the same release")
# The converter writes these types itself; the k-quants are made from its f16 file by llama.cpp's quantizer (which
# refuses to quantize an already quantized file again).
CONVERTER_TYPES = {Quantization.gguf_q8_0: "q8_0"}
QUANTIZER_TYPES = {Quantization.gguf_q4_k_m: "LLAMA_FTYPE_MOSTLY_Q4_K_M"}
INTERMEDIATE_TYPE = "f16"
MODELFILE = "Modelfile"
CONFIG_FILES = ("config.json", "generation_config.json")


def converter_home() -> Path:
    return Path(os.environ.get(CONVERTER_ENV) or CONVERTER_HOME)


def missing_tools() -> str | None:
    """How to install what a GGUF export needs (llama-cpp-python and the converter), or None when both are here."""
    if importlib.util.find_spec("llama_cpp") is None:
        return INSTALL
    if not (converter_home() / CONVERTER).is_file():
        return f"{INSTALL}; or set {CONVERTER_ENV} to a llama.cpp folder holding {CONVERTER} (none in {converter_home()})"
    return None


def export_gguf(full_dir: Path, method: Quantization, out_dir: Path, threads: int | None = None) -> Path:
    """The full-precision causal LM in `full_dir` as `out_dir`/model.gguf of type `method`, with its Modelfile, a
    README, its tokenizer and configs; returns `out_dir`."""
    method = Quantization(method)
    full_dir, out_dir = Path(full_dir), Path(out_dir)
    refuse_custom_code(full_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / GGUF_FILE
    if method in CONVERTER_TYPES:
        convert(full_dir, target, CONVERTER_TYPES[method])
    else:
        with tempfile.TemporaryDirectory(prefix="finesweep-gguf-") as scratch:
            intermediate = Path(scratch) / f"model-{INTERMEDIATE_TYPE}.gguf"
            convert(full_dir, intermediate, INTERMEDIATE_TYPE)
            quantize_file(intermediate, target, QUANTIZER_TYPES[method], threads)
    copy_tokenizer(full_dir, out_dir)
    for name in CONFIG_FILES:
        if (full_dir / name).is_file():
            (out_dir / name).write_bytes((full_dir / name).read_bytes())
    tokenizer = _tokenizer(out_dir)
    (out_dir / MODELFILE).write_text(modelfile(tokenizer, stop_tokens(out_dir, tokenizer)), encoding="utf-8")
    (out_dir / "README.md").write_text(usage(method, out_dir.name), encoding="utf-8")
    log.info("%s: saved %s to %s", full_dir.name, method.value, target)
    return out_dir


def refuse_custom_code(full_dir: Path) -> None:
    """llama.cpp's converter loads tokenizers with trust_remote_code=True: a folder whose configs name code of its
    own (`auto_map`) would run it, whatever the sweep file said. Such models are not converted."""
    for name in ("config.json", "tokenizer_config.json"):
        path = full_dir / name
        if path.is_file() and "auto_map" in json.loads(path.read_text(encoding="utf-8")):
            raise RuntimeError(f"{path} names code of the model's own (auto_map), which llama.cpp's converter would "
                               "run (it trusts remote code); a GGUF export of such a model is not made")


def convert(full_dir: Path, target: Path, out_type: str) -> None:
    """llama.cpp's converter on `full_dir`, writing `target` of `out_type`; its output goes to the log, and a
    failure raises with its last lines."""
    command = [sys.executable, str(converter_home() / CONVERTER), str(full_dir), "--outfile", str(target),
               "--outtype", out_type]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    log.debug("%s:\n%s", CONVERTER, done.stderr[-4000:])
    if done.returncode != 0 or not target.is_file():
        last = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"llama.cpp's {CONVERTER} failed on {full_dir} (exit {done.returncode}): {last}")


def quantize_file(source: Path, target: Path, ftype_name: str, threads: int | None = None) -> None:
    """llama.cpp's quantizer (`llama-quantize`'s library call) from `source` to `target` of type `ftype_name`."""
    import llama_cpp
    import torch

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, ftype_name)
    params.nthread = threads or torch.get_num_threads()
    with llama_log_in(log):
        status = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    if status != 0 or not target.is_file():
        raise RuntimeError(f"llama.cpp's quantizer could not make {ftype_name} from {source} (status {status})")


@contextlib.contextmanager
def llama_log_in(logger: logging.Logger) -> Iterator[None]:
    """llama.cpp's log lines into `logger` at DEBUG while the block runs (the quantizer writes one per layer that
    falls back to another type: 180 for SmolLM2-135M), then back to llama-cpp-python's own handler."""
    import llama_cpp
    from llama_cpp import _logger

    def forward(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        logger.debug("llama.cpp: %s", text.decode("utf-8", "replace").rstrip())

    callback = llama_cpp.llama_log_callback(forward)  # kept referenced while llama.cpp may call it
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
    try:
        yield
    finally:
        llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))


def stop_tokens(folder: Path, tokenizer) -> list[str]:
    """The texts of the tokens generation stops at (generation_config's end-of-sequence ids, else the tokenizer's)."""
    from transformers import GenerationConfig

    ids = None
    if (folder / "generation_config.json").is_file():
        ids = GenerationConfig.from_pretrained(folder).eos_token_id
    ids = ids if ids is not None else tokenizer.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    return list(dict.fromkeys(tokenizer.convert_ids_to_tokens(token) for token in ids))


def _tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def usage(method: Quantization, folder: str) -> str:
    """The variant folder's README: the commands that run the file in llama.cpp and Ollama."""
    name = folder.removeprefix("model-")
    return "\n".join([
        f"# {folder}: the fine-tuned model as one GGUF file ({Quantization(method).value})", "",
        f"`{GGUF_FILE}` runs in llama.cpp and everything built on it. Its chat template, stop token and tokenizer "
        "are inside the file.", "",
        "```bash",
        f"llama-cli -m {GGUF_FILE} -cnv                  # chat in the terminal (llama.cpp)",
        f"llama-server -m {GGUF_FILE} --port 8080        # an OpenAI-style server on 127.0.0.1:8080",
        f"ollama create {name} -f {MODELFILE} && ollama run {name}   # Ollama, with this folder's Modelfile",
        "```", "",
        "From Python (`pip install llama-cpp-python`):", "",
        "```python",
        "from llama_cpp import Llama",
        "",
        f'llm = Llama("{GGUF_FILE}", verbose=False)',
        'print(llm.create_chat_completion([{"role": "user", "content": "Hello!"}])["choices"][0]["message"]["content"])',
        "```", "",
    ])
