"""The costs the plan cannot time on this machine before the search, measured on the machines named, in one place.

Everything else the plan knows it measures here and now: the probe times each combination's training, evaluation
and decoding, counts its weights and its load (search/probe/table.py); the export calibration multiplies the
export's estimate by what this machine's last export of the same candidates took against it (export_calibration.py).
Each constant below says what it measures, where, and what corrects it on this machine; a constant nothing corrects
is a fixed cost small against a budget of minutes. Every figure: 2 CPU cores unless it says otherwise.
"""

from __future__ import annotations

from finesweep.trainer.serving.evaluate import SPEED_SECONDS

# ---- Trials --------------------------------------------------------------------------------------------------------

# A trial's launch to its first step on a CPU: a Ray worker, transformers' import, a small encoder and the splits
# (AVX-512 and AVX2 machines). Corrected by the probe's load time: a model that loads slower than
# SMALL_MODEL_LOAD_SECONDS (the probe's load of MiniLM) adds the difference (a QLoRA trial on a GPU took about 30 s
# to its first step: CUDA's start, the 4-bit quantization).
TRIAL_START_SECONDS = 10.0
SMALL_MODEL_LOAD_SECONDS = 1.0
# A local Ray's start and Tune's set-up before the first trial (AVX-512 and AVX2). Not corrected.
RAY_START_SECONDS = 8.0
# Evaluation's speed over training's where the probe could not time an evaluation (an older machine cache): a
# forward pass, no backward. Replaced by the probe's measurement wherever it has one.
FORWARD_SPEEDUP = 3.0
# The trials' periods came out this much shorter than planned on the quickstart (AVX-512): a trial started first
# fills its room less this margin, so it ends with its last evaluation. Not corrected.
BUDGET_MARGIN = 0.05

# ---- The command around the phases, under search.time_limit ---------------------------------------------------------

# After the probe's last attempt, out of its share: a stopped attempt's process killed, the table printed, the space
# steered (the LLM example's probe phase ran 0.1 s past its share without it; AVX-512).
PROBE_SETTLE_SECONDS = 1.0
# The plots and the leaderboard after the trials, the tracking store's last writes and the summary: the search phase
# ran 6 s past its budget (AVX-512). Not corrected.
RECORDS_SECONDS = 7.0
# The process's exit, which a user's stopwatch counts and the command's clock cannot: Ray's shutdown (1.9 s) and the
# interpreter's teardown of the libraries loaded (3.5 s; AVX2). Not corrected.
EXIT_SECONDS = 6.0
# The export's estimate against its real time: within 5% on AVX-512 machines, 0.74x to 1.17x over five sweeps on an
# AVX2 one before its first calibration; the search leaves this share of the estimate spare, the worst measured
# under-estimate, so a machine's first export still ends within the limit.
EXPORT_ESTIMATE_MARGIN = 0.2

# ---- The export (export_time.py), each corrected by the export calibration after this machine's first export ------

# Per exported variant and per reference pass: loading and saving it, the model card and the registry's entry
# (the files in the page cache; AVX-512): 3.9 s for MiniLM's 0.09 GB of float32 weights, 4.4 s for SmolLM2-135M's
# 0.54 GB, the line through both. EXPORT_FIXED_SECONDS where the probe counted no weights (an older machine cache).
EXPORT_FIXED_SECONDS = 4.0
EXPORT_PASS_SECONDS = 3.8
EXPORT_SECONDS_PER_GB = 1.1
# Test-split inference of a variant against full precision: bitsandbytes' int8 1.8x on a CPU (4.2x int8 and 1.9x nf4
# on an H100); torchao's int8 about full precision's time on a CPU, its GPU variants taken as that; ONNX Runtime's
# int8 0.69x (MiniLM, batch 32, AVX-512); llama.cpp's GGUF files, one row at a time, 1.42x to 1.47x (SmolLM2-135M,
# AVX-512). A variant not listed: UNKNOWN_VARIANT_SLOWDOWN.
VARIANT_SLOWDOWN = {"none": 1.0, "int8": 2.0, "nf4": 2.0, "torchao-int8": 1.0, "torchao-int4": 1.0, "torchao-fp8": 1.0,
                    "onnx-int8": 0.7, "gguf-q8_0": 1.5, "gguf-q4_k_m": 1.5}
UNKNOWN_VARIANT_SLOWDOWN = 2.0
# Writing the ONNX graph (torch's exporter; for a causal LM, generate's capture with the key/value cache) and
# quantizing it: MiniLM (0.09 GB) 6 s (AVX-512) to 12 s (AVX2); SmolLM2-135M (0.54 GB, 30 layers) 180 s as a causal
# LM (AVX2), about 67 s as a classifier (AVX-512). By the weights the probe counted, at least the flat seconds.
ONNX_EXPORT_SECONDS = {"classification": 8.0, "causal_lm": 180.0}
ONNX_EXPORT_SECONDS_PER_GB = {"classification": 125.0, "causal_lm": 335.0}
# Making a GGUF file: llama.cpp's converter (a process of its own that imports torch and reads the weights) and, for
# a k-quant, its f16 file quantized again. SmolLM2-135M (0.54 GB; AVX-512): 7.8 s for q8_0 and for q4_k_m.
GGUF_MAKE_SECONDS = 4.0
GGUF_MAKE_SECONDS_PER_GB = 7.0
# A GGUF file's token against full precision's measured decoding (SmolLM2-135M, AVX-512: 13.1 ms for q8_0 and 11.9
# for q4_k_m against 43.8).
GGUF_DECODE_RATIO = 0.3
# A row at batch 1 (latency-bound) against a row of a batched pass: 1.26 measured on MiniLM, full precision.
BATCH1_COST = 1.5
# One generated token (batch 1, cached keys and values) against one token of a batched forward pass, where the probe
# did not time decoding (an older machine cache): 7 measured on SmolLM2-135M on one CPU, 37 on another; the probe's
# own timing replaces it.
DECODE_TOKEN_COST = 8.0
# A decode step of a batch of answers against one of a single row: the weights are read once a step and each more
# row adds its compute (SmolLM2-135M: 33 ms a step at 1 row, 56 at 4, 104 at 16).
GENERATION_ROW_COST = 0.15
# The speed passes of a variant timed on a CPU the probe never measured (a GPU machine times every variant on its
# CPU too): each of its shapes at most SPEED_SECONDS of timing after an untimed pass, taken as that bound.
CPU_TIMING_SECONDS = 3 * SPEED_SECONDS
# A CPU export scores with every core where the probe timed a trial's threads: speed grows with the ratio (2.05x from
# 1 to 2 threads, MiniLM) up to this many times (small matrices stop feeding more threads).
EXPORT_THREADS_CAP = 4.0
