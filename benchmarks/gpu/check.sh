#!/usr/bin/env bash
# One lease's GPU check, on a machine assembled by ../shared/tools/gpu-payload (site packages in /tmp/site): the
# gpu-marked tests, the default suite (4 workers, in the background, bounded), and the LLM example with QLoRA and
# gradient checkpointing in bf16. Writes OUT/all.tgz (machine.txt, gpu.txt, gpu-tests.log, suite.log, llm.log,
# gpu-use.*, the export's metrics.json and deploy.json, summary.json, finesweep.log): one file (a lease brings back
# at most 8).
# Usage on the GPU machine:  OUT=... bash benchmarks/gpu/check.sh   (ends within CHECK_SECONDS, 540 by default;
# SUITE_WORKERS, 4 by default, xdist workers for the default suite)
# Packing (session 17): pack.sh's list must leave out llama-cpp-python (built here by setup.sh --gguf: pip finds no
# wheel to carry, and one missing requirement empties the whole payload); .venv/extras' torchao and earlier
# transformers go in as _extras/ (copied into the site folder before it is tarred); the lock's transformers too
# where the image's is under 5.23.
set -uo pipefail
out=${OUT:?set OUT}/w
mkdir -p "$out"
t0=$(date +%s); limit=${CHECK_SECONDS:-540}
elapsed() { echo $(( $(date +%s) - t0 )); }
# torchao and the earlier transformers travel inside the payload (_extras/), where setup.sh puts them beside the venv.
[ -d /tmp/site/_extras ] && mkdir -p .venv/extras && cp -r /tmp/site/_extras/. .venv/extras/
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/machine.txt"
python3 -c "import torch, transformers, peft, accelerate, bitsandbytes as b, ray, mlflow, optuna; print('torch', \
torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'accelerate', \
accelerate.__version__, 'bitsandbytes', b.__version__, 'ray', ray.__version__, 'mlflow', mlflow.__version__, \
'optuna', optuna.__version__)" 2>&1 | tail -1 | tee -a "$out/machine.txt"
lscpu | grep -o 'avx512[a-z_0-9]*' | sort -u | tr '\n' ' ' >> "$out/machine.txt"; nproc >> "$out/machine.txt"
# SIGINT, not TERM: pytest interrupted that way still prints the failures it has seen (a lease's limit cuts it).
timeout -s INT -k 20 $(( limit - 80 - $(elapsed) )) python3 -m pytest -n ${SUITE_WORKERS:-4} -v --tb=short --timeout 300 --durations=25 \
  > "$out/suite.log" 2>&1 &
suite=$!
# The LLM example beside the gpu tests (an H200 has room for both): a lease is too short to run them one by one.
METHODS=qlora CHECKPOINTING=on LLM_TIMEOUT=$(( limit - 20 - $(elapsed) )) bash benchmarks/gpu/llm-example.sh "$out" \
  > "$out/llm-script.log" 2>&1 &
llm=$!
timeout -s INT -k 20 170 python3 -m pytest -m gpu -rA -v --tb=short --timeout 150 --durations=5 > "$out/gpu-tests.log" 2>&1
echo "gpu tests rc=$? at +$(elapsed)s"; grep -E "PASS|FAIL|ERROR|^E |passed|failed" "$out/gpu-tests.log" | head -30
wait $llm; echo "llm done at +$(elapsed)s"; cat "$out/llm-script.log"
grep -v "^\s*File\|^\s*\^" "$out/llm.log" | tail -40
cp runs/smollm2-chat/finesweep.log "$out/" 2>/dev/null
wait $suite; echo "suite rc=$? at +$(elapsed)s"
grep -E "FAILED|ERROR|passed|failed" "$out/suite.log" | tail -25
tar -czf "$OUT/all.tgz" -C "$OUT" w && rm -rf "$out"
