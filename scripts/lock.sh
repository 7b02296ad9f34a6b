#!/usr/bin/env bash
# Refresh requirements-lock.txt: the exact versions (with their files' hashes) that scripts/setup.sh installs, resolved
# by pip-tools from pyproject.toml's ranges and the test extra, for Python 3.11 on a CPU machine. torch is left out
# of the lock (setup.sh installs the build that fits the machine: the CPU one by default), but what torch needs is
# in it. Run it after changing a dependency in pyproject.toml, then run the tests and commit both files.
#   bash scripts/lock.sh             keep the locked versions that still fit the ranges; add what is new
#   bash scripts/lock.sh --upgrade   the newest releases the ranges allow (scripts/check-latest.sh tries them first)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TOOLS=${FINESWEEP_LOCK_TOOLS:-.venv-lock}   # pip-tools lives in its own environment, never in .venv
PIP_TOOLS_SPEC="pip-tools==7.6.2"

[ -x "$TOOLS/bin/pip-compile" ] || { "$PYTHON" -m venv "$TOOLS" && "$TOOLS/bin/python" -m pip install --quiet \
    --disable-pip-version-check "$PIP_TOOLS_SPEC"; }
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
# Resolve against the CPU build of torch, as setup.sh installs it, so no CUDA-only dependency enters the lock.
echo "torch==${FINESWEEP_LOCK_TORCH:-2.13.0}" > "$constraints"
"$TOOLS/bin/pip-compile" pyproject.toml --extra test --generate-hashes --strip-extras \
    --unsafe-package torch --no-emit-index-url --no-emit-find-links --constraint "$constraints" \
    --output-file requirements-lock.txt --quiet "$@" 2>&1 | sed -e '/is ignored: it is neither a file nor a directory/d' -e '/may be rejected by pip install/d'
# The header names the command that made it, not this machine's temporary file.
sed -i "s#--constraint=[^ ]*#--constraint=<torch==${FINESWEEP_LOCK_TORCH:-2.13.0}>#" requirements-lock.txt
echo "requirements-lock.txt: $(grep -c '^[a-zA-Z0-9]' requirements-lock.txt) packages pinned (torch installed apart)"
