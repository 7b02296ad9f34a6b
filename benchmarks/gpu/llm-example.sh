#!/usr/bin/env bash
# The LLM example on a CUDA machine, in bf16, with GPU use sampled every half second during the whole command.
# Usage, from the project root of an install with CUDA torch (docs/gpus-and-clusters.md):
#   bash benchmarks/gpu/llm-example.sh [OUT_DIR]      # -> OUT_DIR/{llm.log,gpu-use.csv,gpu-use.txt,metrics.json,deploy.json}
#   METHODS=qlora CHECKPOINTING=on bash benchmarks/gpu/llm-example.sh OUT   # only QLoRA, gradient checkpointing on
#   QUANTIZATION=int8 ...   # the export's variants (the file's: int8, onnx-int8; a causal LM's ONNX graph: minutes)
# The example file as its comments say to run it on a GPU: precision bf16, max_seq_len 192 (the data's p99), with
# a short search budget (BUDGET_MINUTES, 1.5) and 4 generation samples so the whole command takes about 6 minutes.
set -euo pipefail
out=${1:-benchmarks/gpu/out}
methods=${METHODS:-full, lora, qlora}
checkpointing=${CHECKPOINTING:-auto}
quantization=${QUANTIZATION:-int8, onnx-int8}
mkdir -p "$out"
sampler=""
trap 'rm -f sweeps/smollm2-gpu.yaml; [ -z "$sampler" ] || kill $sampler 2>/dev/null || true' EXIT
sed -e 's/^  precision: \[fp32, bf16\].*/  precision: [bf16]/' -e 's/^  max_seq_len: 96.*/  max_seq_len: 192/' \
    -e "s/^  time_budget_minutes: 7.*/  time_budget_minutes: ${BUDGET_MINUTES:-1.5}/" \
    -e 's/^  generation_samples: 16.*/  generation_samples: 4/' \
    -e "s/^  method: \[full, lora\].*/  method: [$methods]/" \
    -e "s/^  quantization: \[int8, onnx-int8\].*/  quantization: [$quantization]/" \
    -e "s/^resources:/resources:\n  gradient_checkpointing: $checkpointing/" \
    sweeps/smollm2-chat.yaml > sweeps/smollm2-gpu.yaml
grep -n "precision:\|max_seq_len:\|method:\|time_budget\|generation_samples\|gradient_checkpointing\|quantization:" \
  sweeps/smollm2-gpu.yaml
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -lms 500 > "$out/gpu-use.csv" &
sampler=$!
${LLM_TIMEOUT:+timeout $LLM_TIMEOUT} python3 -m finesweep.search.cli run sweeps/smollm2-gpu.yaml > "$out/llm.log" 2>&1 \
  || echo "finesweep exited $?"
kill $sampler
cp runs/smollm2-chat/export/metrics.json runs/smollm2-chat/export/deploy.json runs/smollm2-chat/summary.json "$out/" \
  2>/dev/null || echo "no export files"
python3 benchmarks/gpu/gpu_use.py "$out/gpu-use.csv" | tee "$out/gpu-use.txt"
