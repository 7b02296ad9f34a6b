#!/usr/bin/env bash
# The GPU payload as check.sh needs it: the gpu-payload tool's pack.sh (every package of .venv the image lacks,
# in pieces of CHUNK_MB) plus what that script leaves out: torchao from .venv/extras (as _extras/, which check.sh puts
# back beside the venv: the torchao gpu test reads it there) and the lock's transformers (an image's own may be older
# than pyproject's floor: 5.17 on the H200 image). Run from the project root after scripts/setup.sh:
#   GPU_PAYLOAD=DIR bash benchmarks/gpu/pack.sh [CHUNK_MB]   # -> .gpu/c1 .. .gpu/cN (about 5 pieces of 35-58 MB)
set -euo pipefail
payload=${GPU_PAYLOAD:?set GPU_PAYLOAD to the folder of the gpu-payload tool}
[ -f "$payload/pack.sh" ] || { echo "no $payload/pack.sh: set GPU_PAYLOAD to the gpu-payload tool's folder"; exit 2; }
transformers=$(grep -i '^transformers==' requirements-lock.txt | head -1)
[ -n "$transformers" ] || { echo "requirements-lock.txt pins no transformers"; exit 2; }
[ -d .venv/extras/torchao/torchao ] || { echo "no .venv/extras/torchao: run bash scripts/setup.sh first"; exit 2; }
edited=$(mktemp)
trap 'rm -f "$edited"' EXIT
# The tool's own script with three lines changed: its folder fixed (it reads image-packages.txt and assemble.sh beside it),
# the lock's transformers appended to what it installs, torchao copied in before the site folder is tarred.
sed -e "s#^here=.*#here=$(cd "$payload" && pwd)#" \
    -e "s#^\" > .gpu/requirements.txt\$#\" > .gpu/requirements.txt; echo $transformers >> .gpu/requirements.txt#" \
    -e 's#^s=.gpu/site$#s=.gpu/site; mkdir -p $s/_extras \&\& cp -r .venv/extras/torchao $s/_extras/#' \
    "$payload/pack.sh" > "$edited"
# Each addition must have found its line: a changed tool script fails here, not on the GPU machine.
for added in "^here=/" "echo $transformers >>" "cp -r .venv/extras/torchao"; do
  grep -q -- "$added" "$edited" || { echo "$payload/pack.sh changed: could not add '$added'"; exit 2; }
done
bash "$edited" "$@"
