#!/usr/bin/env bash
# A GPU check of 15 minutes, on a machine assembled from pack.sh's pieces (site packages in /tmp/site), in two
# steps that each fit one command (10 minutes at most):
#   STEPS=llm    the LLM example with QLoRA and gradient checkpointing in bf16, alone, to the end of its export
#                (LLM_SECONDS, 480: the plan predicts data and probe about 60 s, the 2-minute search 121 s and the
#                export 256 s; a limit of 290 s cuts the export after its int8 is saved)
#   STEPS=tests  the gpu-marked tests, and beside them CHECK_TESTS (node ids that failed on a GPU before; empty:
#                none) and, where SUITE_WORKERS > 0 (0 by default), the default suite
#   STEPS="llm tests" (the default) both in one command, where CHECK_SECONDS allows.
# Writes OUT/<step>.tgz (machine.txt, gpu.txt, llm.log, gpu-use.*, the export's metrics.json and deploy.json,
# summary.json, finesweep.log; gpu-tests.log, check-tests.log, suite.log): one file a step (a machine that returns
# at most 8 files). Usage on the GPU machine:  OUT=... STEPS=llm bash benchmarks/gpu/check.sh   (ends within CHECK_SECONDS,
# 540 by default; the LLM example has BUDGET_MINUTES 2 of search and QUANTIZATION int8)
# In 15 minutes of a machine (start and 5 pieces 55 s; the LLM step 480 s; the tests step 250 s, the
# exploit crash test alone 238 s): after the pieces, `source /tmp/parts/assemble.sh && STEPS=llm bash ...`, then at
# once `source /tmp/parts/assemble.sh && STEPS=tests bash ...` (the machine goes back 30 s after a call).
# Packing: `bash benchmarks/gpu/pack.sh` (the gpu-payload tool's pack.sh, plus .venv/extras' torchao as _extras/ and
# the lock's transformers). Its list must leave out llama-cpp-python (built here by setup.sh --gguf: pip finds no
# wheel to carry, and one missing requirement empties the whole payload).
set -uo pipefail
steps=${STEPS:-llm tests}
out=${OUT:?set OUT}/w
mkdir -p "$out"
wants() { [[ " $steps " == *" $1 "* ]]; }
t0=$(date +%s); limit=${CHECK_SECONDS:-540}
elapsed() { echo $(( $(date +%s) - t0 )); }
# pytest-timeout's per-test limit where it is installed (a GPU image has it; the project's .venv does not).
per_test() { python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout $1"; }
# torchao and the earlier transformers travel inside the payload (_extras/), where setup.sh puts them beside the venv.
[ -d /tmp/site/_extras ] && mkdir -p .venv/extras && cp -r /tmp/site/_extras/. .venv/extras/
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/machine.txt"
python3 -c "import torch, transformers, peft, accelerate, bitsandbytes as b, ray, mlflow, optuna; print('torch', \
torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'accelerate', \
accelerate.__version__, 'bitsandbytes', b.__version__, 'ray', ray.__version__, 'mlflow', mlflow.__version__, \
'optuna', optuna.__version__)" 2>&1 | tail -1 | tee -a "$out/machine.txt"
lscpu | grep -o 'avx512[a-z_0-9]*' | sort -u | tr '\n' ' ' >> "$out/machine.txt"; nproc >> "$out/machine.txt"
# All three at once learn too little: the QLoRA trial, sharing 16 cores with 6 suite workers and the gpu tests,
# never evaluates, and the torchao test runs out of time. So: the LLM example alone (its export's
# bitsandbytes int8 only: the ONNX graph of a causal LM takes minutes), then the gpu tests and, beside them,
# CHECK_TESTS (tests that failed on a GPU before) and the default suite (only with SUITE_WORKERS > 0).
llm_step() {
  METHODS=qlora CHECKPOINTING=on QUANTIZATION=${QUANTIZATION:-int8} BUDGET_MINUTES=${BUDGET_MINUTES:-2} \
    LLM_TIMEOUT=${LLM_SECONDS:-480} bash benchmarks/gpu/llm-example.sh "$out" > "$out/llm-script.log" 2>&1
  echo "llm done at +$(elapsed)s"; cat "$out/llm-script.log"
  grep -v "^\s*File\|^\s*\^" "$out/llm.log" | tail -40
  cp runs/smollm2-chat/finesweep.log "$out/" 2>/dev/null
}
# SIGINT, not TERM: pytest interrupted that way still prints the failures it has seen (the machine's time limit cuts it).
tests_step() {
  local suite="" checks="" tests crash_test
  if [ "${SUITE_WORKERS:-0}" -gt 0 ]; then
    timeout -s INT -k 20 $(( limit - 30 - $(elapsed) )) python3 -m pytest -n "$SUITE_WORKERS" -v --tb=short \
      $(per_test 300) --durations=25 > "$out/suite.log" 2>&1 &
    suite=$!
  fi
  crash_test=test_the_winner_trains_on_from_its_checkpoint_within_the_budget_and_a_crash_keeps_what_it_trained
  tests=${CHECK_TESTS-tests/search/tuning/test_exploit.py::$crash_test}
  if [ -n "$tests" ]; then  # beside the gpu tests: 16 cores hold both
    timeout -s INT -k 20 $(( limit - 20 - $(elapsed) )) python3 -m pytest -rA -v --tb=long $(per_test 300) $tests \
      > "$out/check-tests.log" 2>&1 &
    checks=$!
  fi
  timeout -s INT -k 20 $(( limit - 20 - $(elapsed) )) python3 -m pytest -m gpu -rA -v --tb=short $(per_test 200) \
    --durations=5 > "$out/gpu-tests.log" 2>&1
  echo "gpu tests rc=$? at +$(elapsed)s"; grep -E "PASS|FAIL|ERROR|^E |passed|failed" "$out/gpu-tests.log" | head -30
  if [ -n "$checks" ]; then
    wait $checks; echo "check tests rc=$? at +$(elapsed)s"
    grep -E "PASS|FAIL|ERROR|^E |passed|failed" "$out/check-tests.log" | head -60
  fi
  if [ -n "$suite" ]; then
    wait $suite; echo "suite rc=$? at +$(elapsed)s"; grep -E "FAILED|ERROR|passed|failed" "$out/suite.log" | tail -25
  fi
}
wants llm && llm_step
wants tests && tests_step
tar -czf "$OUT/${steps// /-}.tgz" -C "$OUT" w && rm -rf "$out"
