"""The memory probe: the search logic against scripted gauges, and the real thing on a tiny model in a real probe process."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict

import pytest
import yaml

from finesweep.search.probe import answers, cores, table as probe_module
from finesweep.search.probe.device import Device, resolve_device
from finesweep.search.probe.batch_search import (SAFETY_MARGIN, SEED_BATCHES, ProbeError, TimeBox, fastest_batch,
                                                 find_eval_batch, find_max_micro_batch, predict_max_batch,
                                                 throughput_candidates)
from finesweep.search.probe.steer import stand_ins, unmeasured_precisions
from finesweep.search.probe.table import ProbeResult, probe_all
from finesweep.search.probe.worker import ProbeWorker
from finesweep.spaces import ModelCandidate, SweepConfig
from finesweep.trainer.probe_step import ProbeAttempt, ProbeRequest

MB = 2**20


class ScriptedWorker:
    """Peak memory as a function of the batch; counts attempts and replacements, like a probe process would."""

    def __init__(self, peak, budget: int = 0, cuda: bool = False, seconds=lambda b: 0.01 * b + 0.05):
        self.peak, self.budget, self.cuda, self.seconds = peak, budget, cuda, seconds
        self.batches: list[int] = []
        self.requests: list[ProbeRequest] = []
        self.replaced = 0

    def attempt(self, request: ProbeRequest, timeout: float | None = None) -> ProbeAttempt:
        self.batches.append(request.batch)
        self.requests.append(request)
        if timeout is not None and 2 * self.seconds(request.batch) > timeout:  # the real worker kills it there
            return ProbeAttempt(request.batch, 0, 0.0, timed_out=True)
        peak = self.peak(request.batch) // (3 if request.mode == "eval" else 1)
        if self.cuda and peak > self.budget:  # a real CUDA OOM: no meaningful peak, nothing timed
            return ProbeAttempt(request.batch, 0, 0.0, out_of_memory=True, steps=2, mode=request.mode)
        return ProbeAttempt(request.batch, peak, self.seconds(request.batch), steps=2, mode=request.mode)

    def start(self) -> None:
        pass

    def replace(self) -> None:
        self.replaced += 1

    def close(self) -> None:
        pass


def linear(b: int) -> int:
    return 100 * MB + MB * b


def quadratic(b: int) -> int:  # attention-like growth: the line fitted on small batches underestimates
    return 100 * MB + MB * b + (MB // 40) * b * b


def lumpy(b: int) -> int:  # allocator steps: peaks jump at some sizes, so lines through two points mislead
    return 100 * MB + MB * b + (8 * MB if b % 16 > 8 else 0)


def request(batch: int = 64, mode: str = "train") -> ProbeRequest:
    return ProbeRequest(candidate={"name": "m", "path": "/x"}, task="classification", num_labels=2,
                        precision="fp32", method="full", seq_len=16, batch=batch, mode=mode)


def truth(peak, budget: int, cap: int) -> int:
    return max([b for b in range(1, cap + 1) if peak(b) * (1 + SAFETY_MARGIN) <= budget], default=0)


@pytest.mark.parametrize("peak", [linear, quadratic, lumpy], ids=["linear", "quadratic", "lumpy"])
@pytest.mark.parametrize("budget_mb,cap", [(1000, 64), (300, 64), (150, 64), (300, 200), (120, 7), (111, 64), (112, 3), (5000, 1)])
def test_search_finds_the_exact_largest_fitting_batch_in_few_attempts(peak, budget_mb, cap):
    budget = budget_mb * MB
    worker = ScriptedWorker(peak)
    search = find_max_micro_batch(worker, request(), cap, budget)
    assert search.last_fit == truth(peak, budget, cap)
    assert len(search.attempts) <= len(SEED_BATCHES) + 2 * math.ceil(math.log2(cap + 1))
    if peak is linear:  # the memory model is exact: seeds, its guess, and the confirmation of the first failure
        assert len(search.attempts) <= len(SEED_BATCHES) + 2
    failed = [b for b in worker.batches if peak(b) * (1 + SAFETY_MARGIN) > budget]
    assert worker.replaced == len(failed)  # every failure replaces the process, and nothing else does


def test_when_the_model_says_the_cap_fits_the_cap_is_tried_next_and_ends_the_search():
    worker = ScriptedWorker(linear)
    search = find_max_micro_batch(worker, request(), 64, 1000 * MB)
    assert worker.batches == [*SEED_BATCHES, 64] and search.last_fit == 64


def test_two_failures_whose_line_puts_one_sample_over_the_budget_end_the_search_without_trying_it():
    """A model whose weights, gradients and optimizer state alone exceed the budget: batch 4 fails, batch 2 fails,
    and their line says batch 1 would too (the failures test's 1.7 GiB encoder in 1 GiB took a third attempt)."""
    worker = ScriptedWorker(linear)
    search = find_max_micro_batch(worker, request(), 64, 105 * MB)
    assert (search.last_fit, worker.batches) == (0, [4, 2])
    assert truth(linear, 105 * MB, 64) == 0
    near = ScriptedWorker(linear)  # batch 1 fits by a hair: the line says so, and it is tried
    assert find_max_micro_batch(near, request(), 64, int(101.5 * MB * (1 + SAFETY_MARGIN))).last_fit == 1
    assert near.batches == [4, 2, 1]
    cuda = ScriptedWorker(linear, budget=50 * MB, cuda=True)  # out-of-memory without peaks: no line, batch 1 tried
    assert find_max_micro_batch(cuda, request(), 64, 55 * MB).last_fit == 0 and cuda.batches == [4, 2, 1]


def test_an_attempt_that_would_end_past_the_deadline_is_not_started():
    """The next attempt's steps are timed at the last one's seconds per sample: 2 steps of 0.09 s at batch 4 say
    batch 16 takes 0.72 s, past a deadline 0.3 s away; with time enough the search runs to its exact answer."""
    worker = ScriptedWorker(linear)
    search = find_max_micro_batch(worker, request(), 64, 1000 * MB, box=TimeBox(time.monotonic() + 0.3))
    assert (worker.batches, search.last_fit, search.cut_short) == ([4], 4, True)
    roomy = find_max_micro_batch(ScriptedWorker(linear), request(), 64, 1000 * MB,
                                 box=TimeBox(time.monotonic() + 60))
    assert (roomy.last_fit, roomy.cut_short) == (64, False)
    slow = ScriptedWorker(linear, seconds=lambda b: 10.0)  # a reduced precision's first step, 20 s to the deadline's 1
    search = find_max_micro_batch(slow, request(), 64, 1000 * MB, box=TimeBox(time.monotonic() + 1, bounded=True))
    assert (slow.batches, search.timed_out, search.last_fit) == ([4], True, 0), "stopped, not waited for"
    search = find_max_micro_batch(slow, request(), 64, 1000 * MB, box=TimeBox(time.monotonic() + 1))
    assert (search.timed_out, search.last_fit, search.cut_short) == (False, 4, True), "unbounded: measured anyway"
    failing = ScriptedWorker(linear)  # nothing fits yet: the deadline does not stop the search for a first fit
    assert find_max_micro_batch(failing, request(), 64, 110 * MB, box=TimeBox(time.monotonic())).last_fit == 0
    assert failing.batches == [4, 2], "batch 2 tried past the deadline; then the two failures end it"


def test_below_the_smallest_effective_batch_a_cut_short_search_tries_it_where_a_part_pays_for_it():
    """MiniLM on one core trained 7 samples/s at micro-batch 4 and 11-14 at 16, and the example's trials, cut short
    at 4, trained 4 x 2 at about half speed with evaluations at batch 4. Below the floor (the space's smallest
    effective batch) the search tries the floor itself where that attempt costs no more than a part and ends inside
    the share; never where it costs more (an LLM's step at 8 rows: 20 s against a 14-s part)."""
    now = time.monotonic()
    worker = ScriptedWorker(linear)  # 2 steps of 0.09 s at batch 4: batch 8 predicted 0.36 s, batch 16 0.72 s
    search = find_max_micro_batch(worker, request(), 64, 1000 * MB, box=TimeBox(now + 0.3, 0.5, now + 60, floor=8))
    assert (worker.batches, search.last_fit, search.cut_short) == ([4, 8], 8, True)
    dear = ScriptedWorker(linear)
    search = find_max_micro_batch(dear, request(), 64, 1000 * MB, box=TimeBox(now + 0.3, 0.3, now + 60, floor=8))
    assert (dear.batches, search.last_fit) == ([4], 4), "the floor's attempt (0.36 s) costs more than a part (0.3 s)"
    late = ScriptedWorker(linear)
    find_max_micro_batch(late, request(), 64, 1000 * MB, box=TimeBox(now + 0.3, 0.5, now + 0.3, floor=8))
    assert late.batches == [4], "never past the share's end"


def test_a_turns_part_is_drawn_when_its_first_attempt_is_due_not_before_the_probe_process_started():
    """The probe process's imports took 5 s of a 9-s part, so the first combination was cut short at micro-batch 4;
    the part is drawn once the process is up (and once per turn: the recompute plan shares it)."""
    turn = probe_module.Turn(time.monotonic() + 4.0, turns_left=2, bounded=False, floor=8)
    time.sleep(0.4)  # the process starting
    box = turn.box()
    assert 1.7 < box.part_seconds <= 1.8 and box.share_end == turn.share_end and turn.box() is box


def test_cuda_style_failures_without_a_peak_still_converge_exactly():
    budget = 180 * MB
    limit = int(budget / (1 + SAFETY_MARGIN))  # the scripted device fails with OOM right above the margin
    worker = ScriptedWorker(quadratic, budget=limit, cuda=True)
    search = find_max_micro_batch(worker, request(), 128, budget)
    assert search.last_fit == truth(quadratic, budget, 128)
    assert any(a.out_of_memory for a in search.attempts)


def test_the_memory_model_interpolates_across_the_bracket():
    attempts = [ProbeAttempt(4, 104 * MB, 0.1), ProbeAttempt(16, 116 * MB, 0.2), ProbeAttempt(60, 160 * MB, 0.5)]
    assert predict_max_batch(attempts, 150 * MB) == 50  # between the last fit (16) and the first failure (60)
    assert predict_max_batch(attempts[:1], 150 * MB) is None  # one point makes no line
    flat = [ProbeAttempt(4, 104 * MB, 0.1), ProbeAttempt(16, 104 * MB, 0.1)]
    assert predict_max_batch(flat, 150 * MB) is None  # no per-sample growth: no prediction, bisect instead


def test_a_probe_that_breaks_for_another_reason_than_memory_is_an_error():
    class Broken(ScriptedWorker):
        def attempt(self, req, timeout=None):
            return ProbeAttempt(req.batch, 0, 0.0, error="ValueError: bad model")

    with pytest.raises(ProbeError, match="bad model"):
        find_max_micro_batch(Broken(linear), request(), 8, 10**9)


def test_throughput_candidates_are_untried_powers_of_two_below_the_max():
    assert throughput_candidates(57, {4, 16, 57, 58}) == [32]
    assert throughput_candidates(150, {4, 16}) == [128, 64]
    assert throughput_candidates(1, set()) == [1] and throughput_candidates(0, set()) == []


def test_fastest_batch_prefers_speed_but_only_beyond_the_noise_and_only_divisor_friendly_sizes():
    limit = 1000 * MB

    def at(batch: int, samples_per_second: float, peak: int = MB) -> ProbeAttempt:
        return ProbeAttempt(batch, peak, batch / samples_per_second)

    # 48 (neither a power of two nor the max) and 58 (over the limit) never count, however fast.
    attempts = [at(16, 10.0), at(32, 20.0), at(57, 25.0), at(48, 99.0), at(58, 99.0, peak=2 * limit)]
    assert fastest_batch(attempts, limit, 57) == 57
    assert fastest_batch([at(16, 10.0), at(32, 20.0), at(57, 15.0)], limit, 57) == 32
    assert fastest_batch([at(32, 20.0), at(57, 19.8)], limit, 57) == 57  # 1% slower: noise, the larger wins
    assert fastest_batch([], limit, 57) == 57


def test_eval_batch_is_confirmed_at_twice_the_train_max_or_falls_back_to_it():
    worker = ScriptedWorker(linear)
    assert find_eval_batch(worker, request(), 40, 300 * MB)[0] == 80  # eval peaks at a third: 2x fits
    assert worker.batches == [80] and worker.replaced == 0
    heavy = ScriptedWorker(lambda b: 3 * linear(b))  # eval as heavy as training: 2x the max does not fit
    batch, attempt = find_eval_batch(heavy, request(), 40, 160 * MB)
    assert (batch, attempt.mode, heavy.replaced) == (40, "eval", 1)
    assert find_eval_batch(worker, request(), 0, 300 * MB) == (0, None)


def test_result_policy_chooses_fastest_or_largest_and_counts_probe_steps():
    result = ProbeResult(model="m", precision="fp32", method="full", seq_len=16, device="cpu", budget_bytes=MB,
                         max_micro_batch=57, best_micro_batch=32,
                         attempts=[asdict(ProbeAttempt(32, MB, 1.0, steps=2)), asdict(ProbeAttempt(57, MB, 2.0, steps=2)),
                                   asdict(ProbeAttempt(114, MB, 0.5, steps=1, mode="eval"))])
    assert result.choose("fastest").micro_batch == 32 and result.choose("largest").micro_batch == 57
    assert result.choose("fastest").samples_per_second == 32.0
    assert result.probe_steps == 5


CONFIG = """
name: s
data: {path: data.csv}
models: [{name: m, path: model}]
space: {effective_batch_size: [16, 64]}
resources: {memory_budget: 300MiB, micro_batch: %s}
"""


def test_probe_all_caches_by_what_the_answer_depends_on(tmp_path, monkeypatch):
    workers: list[ScriptedWorker] = []

    def new_worker(device, threads):  # 32 is the fastest: 32 samples/s against 64/3 at the max
        workers.append(ScriptedWorker(linear, seconds=lambda b: 1.0 if b == 32 else 3.0))
        return workers[-1]

    monkeypatch.setattr(probe_module, "ProbeWorker", new_worker)
    monkeypatch.setattr(probe_module, "busy_cores", lambda: 0.0)  # a quiet machine: the cache is trusted
    device = Device("cpu", "test-cpu", 8 * 2**30)
    cache = tmp_path / "probe.json"

    def run(policy: str, dev: Device = device, **space) -> ProbeResult:
        config = yaml.safe_load(CONFIG % policy)
        config = SweepConfig.model_validate({**config, "space": {**config["space"], **space}})
        return probe_all(config, dev, ["fp32"], 32, 2, cache)["m|fp32|full"]

    fastest = run("fastest")
    assert (fastest.max_micro_batch, fastest.micro_batch, fastest.eval_batch_size) == (64, 32, 128)
    assert run("largest").micro_batch == 64 and len(workers[0].batches) == len(fastest.attempts)
    assert len(workers) == 2 and workers[1].batches == []  # the second sweep read the cache
    run("fastest", Device("cpu", "test-cpu", 16 * 2**30))  # same name, other memory: probed again
    monkeypatch.setattr(answers, "version", lambda name: "9.9")
    run("fastest")  # other torch/transformers versions: probed again
    run("fastest", freeze_embeddings=False)  # the word embeddings train: more memory, slower steps, probed again
    assert [len(w.batches) > 0 for w in workers] == [True, False, True, True, True]
    assert [w.requests[0].freeze_embeddings for w in workers[3:]] == [True, False], "probed as the trials train"


def _scripted_probe_processes(monkeypatch) -> list[ScriptedWorker]:
    """probe_all's probe processes replaced by scripted ones (1 s a step) on a quiet machine, kept for the test."""
    workers: list[ScriptedWorker] = []

    def new_worker(device, threads):
        workers.append(ScriptedWorker(linear, seconds=lambda b: 1.0))
        return workers[-1]

    monkeypatch.setattr(probe_module, "ProbeWorker", new_worker)
    monkeypatch.setattr(probe_module, "busy_cores", lambda: 0.0)
    return workers


def test_a_later_sweep_on_this_machine_reuses_the_probe_unless_the_model_files_or_threads_changed(tmp_path, monkeypatch):
    """The machine's cache is shared by every sweep; each sweep folder keeps a record of the answers it used."""
    workers = _scripted_probe_processes(monkeypatch)
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    machine = tmp_path / "machine" / "probe.json"

    def sweep(name: str, cpus: int = 1) -> ProbeResult:
        config = SweepConfig.model_validate({**yaml.safe_load(CONFIG % "fastest"), "models": [
            {"name": "m", "path": str(model)}], "resources": {"memory_budget": "300MiB", "cpus_per_trial": cpus}})
        record = tmp_path / name / "probe.json"
        result = probe_all(config, Device("cpu", "test-cpu", 8 * 2**30), ["fp32"], 32, 2, machine, record)["m|fp32|full"]
        assert list(json.loads(record.read_text()).values())[0]["max_micro_batch"] == result.max_micro_batch
        return result

    assert not sweep("first").reused
    assert sweep("second").reused and workers[-1].batches == [], "another sweep read the machine's cache"
    assert not sweep("two-threads", cpus=2).reused, "speeds timed with one thread say nothing of two"
    (model / "model.safetensors").write_bytes(b"other weights")
    assert not sweep("saved-again").reused, "a model saved again at the same path is another model"
    assert len(json.loads(machine.read_text())) == 3


def test_two_heads_on_one_checkpoint_are_probed_once_and_another_checkpoint_is_probed_again(tmp_path, monkeypatch):
    """The example's two MiniLM heads (mean and [CLS]) train the same encoder: one probe answers for both, said as
    such (not as an earlier sweep's); the same checkpoint made shallower is another model."""
    workers = _scripted_probe_processes(monkeypatch)
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    config = SweepConfig.model_validate({**yaml.safe_load(CONFIG % "fastest"), "models": [
        {"name": "mean", "path": str(model), "pooling": "mean"}, {"name": "cls", "path": str(model)},
        {"name": "shallow", "path": str(model), "config_overrides": {"num_hidden_layers": 1}}],
        "resources": {"memory_budget": "300MiB"}})
    results = probe_all(config, Device("cpu", "test-cpu", 8 * 2**30), ["fp32"], 32, 2, tmp_path / "probe.json")
    mean, cls, shallow = results["mean|fp32|full"], results["cls|fp32|full"], results["shallow|fp32|full"]
    assert (cls.model, cls.same_as, cls.reused) == ("cls", "mean", False)
    assert (cls.max_micro_batch, cls.micro_batch, cls.attempts) == (mean.max_micro_batch, mean.micro_batch,
                                                                     mean.attempts)
    assert mean.same_as is None and shallow.same_as is None and shallow.attempts
    assert sum(len(w.batches) for w in workers) == len(mean.attempts) + len(shallow.attempts), "cls probed nothing"


def test_a_time_limits_probe_share_ends_each_search_at_its_last_fit_and_leaves_a_late_precision_unmeasured(
        tmp_path, monkeypatch):
    """The LLM example's LoRA probe alone took 6.8 minutes of a 10-minute limit: under search.time_limit each
    combination gets its part of the probe's share. fp32 (the others are judged by it) is measured whatever the
    time; its search stops at the seed that fit, trying no larger micro-batch, recompute plan or evaluation batch,
    but its evaluation speed is timed at that batch (it prices the export); bf16's turn, once the time is spent, is
    not measured (steer removes it); a cut-short answer is not cached for a later sweep that has the time to measure
    it all."""
    workers = _scripted_probe_processes(monkeypatch)
    config = SweepConfig.model_validate({**yaml.safe_load(CONFIG % "fastest"),
                                         "resources": {"memory_budget": "300MiB", "gradient_checkpointing": "auto"}})
    machine = tmp_path / "machine.json"
    results = probe_all(config, Device("cpu", "test-cpu", 8 * 2**30), ["fp32", "bf16"], 32, 2, machine,
                        tmp_path / "record.json", seconds=0.0)
    fp32, bf16 = results["m|fp32|full"], results["m|bf16|full"]
    assert (fp32.max_micro_batch, fp32.cut_short, fp32.eval_batch_size, fp32.gradient_checkpointing) == (4, True, 4, False)
    assert workers[0].batches == [4, 4] and fp32.samples_per_second == 4.0
    assert [(a["batch"], a["mode"]) for a in fp32.attempts] == [(4, "train"), (4, "eval")]
    assert bf16.not_measured and bf16.max_micro_batch == 0 and not bf16.attempts
    assert not machine.exists() and json.loads((tmp_path / "record.json").read_text()), "recorded, not cached"
    removed = unmeasured_precisions(results)
    assert [(r.dimension, r.value) for r in removed] == [("precision", "bf16")] and "time_limit" in removed[0].reason
    late = probe_all(config, Device("cpu", "test-cpu", 8 * 2**30), ["fp32", "bf16"], 32, 2, machine, seconds=1.0)
    bf16 = late["m|bf16|full"]  # its turn came in time, but its first attempt (2 s) outlasted its part (1 s)
    assert bf16.not_measured and [a["timed_out"] for a in bf16.attempts] == [True] and not machine.exists()
    assert late["m|fp32|full"].max_micro_batch == 4, "fp32's first attempt is never stopped"
    roomy = probe_all(config, Device("cpu", "test-cpu", 8 * 2**30), ["fp32", "bf16"], 32, 2, machine, seconds=600)
    assert not any(r.cut_short or r.not_measured for r in roomy.values()) and roomy["m|fp32|full"].max_micro_batch > 4


def test_a_short_share_measures_every_precision_for_the_first_method_and_lets_fp32_stand_in_for_the_rest(
        tmp_path, monkeypatch):
    """The LLM example's first run under --time-limit 10m spent the probe's share on fp32's full and LoRA turns, and
    bf16 left the space (2 configurations of fp32's slow evaluations compared). The turns go method by method, so
    bf16 is measured for the first method before the second method's fp32 turn, and stands in for the rest."""
    workers = _scripted_probe_processes(monkeypatch)
    # The share ends once the first method's bf16 turn has been probed.
    monkeypatch.setattr(probe_module, "past", lambda end: any(
        (r.method, r.precision) == ("full", "bf16") for w in workers for r in w.requests))
    config = SweepConfig.model_validate({**yaml.safe_load(CONFIG % "fastest"), "data": {
        "path": "chat.jsonl", "task": "causal_lm"}, "space": {"effective_batch_size": [8], "method": ["full", "lora"]}})
    results = probe_all(config, Device("cpu", "test-cpu", 8 * 2**30), ["fp32", "bf16"], 32, 0, tmp_path / "m.json",
                        seconds=60.0)
    turns = list(dict.fromkeys((r.method, r.precision) for w in workers for r in w.requests))
    assert turns == [("full", "fp32"), ("full", "bf16"), ("lora", "fp32")]
    assert [key for key, r in results.items() if r.not_measured] == ["m|bf16|lora"]
    answers_, notes = stand_ins(results)
    assert answers_["m|bf16|lora"].measured_as == "fp32" and not unmeasured_precisions(answers_), notes


def test_a_causal_lms_decoding_is_timed_once_a_model_in_its_first_combination(tmp_path, monkeypatch):
    """Each timing cost about 2 s of the LLM example's 60-s probe share, and the export decodes the full-precision
    model whatever the trials trained: fp32 full times it; fp32 LoRA and bf16 do not."""
    workers = _scripted_probe_processes(monkeypatch)
    config = SweepConfig.model_validate({**yaml.safe_load(CONFIG % "fastest"), "data": {
        "path": "chat.jsonl", "task": "causal_lm"}, "space": {"effective_batch_size": [8], "method": ["full", "lora"]}})
    results = probe_all(config, Device("cpu", "test-cpu", 8 * 2**30), ["fp32", "bf16"], 32, 0, tmp_path / "m.json")
    decoded = {key: [a["mode"] for a in r.attempts].count("decode") for key, r in results.items()}
    assert decoded == {"m|fp32|full": 1, "m|fp32|lora": 0, "m|bf16|full": 0, "m|bf16|lora": 0}
    assert results["m|fp32|full"].decode_seconds_per_token == 1.0 and len(workers) == 1


def test_speeds_measured_under_load_are_warned_about_and_measured_again_once_the_machine_is_quieter(
        tmp_path, monkeypatch, caplog):
    workers: list[ScriptedWorker] = []

    def new_worker(device, threads):
        workers.append(ScriptedWorker(linear, seconds=lambda b: 1.0))
        return workers[-1]

    monkeypatch.setattr(probe_module, "ProbeWorker", new_worker)
    for module in (probe_module, cores):  # a machine of 2 CPUs
        monkeypatch.setattr(module, "allowed_cpus", lambda: {0, 1})
    # Other work holds 1.9 of the 2 cores at the first sweep and the second; the third and fourth find them free.
    loads = iter([1.9, 1.9, 0.1])
    monkeypatch.setattr(probe_module, "busy_cores", lambda: next(loads))
    config = SweepConfig.model_validate(yaml.safe_load(CONFIG % "fastest"))
    cache = tmp_path / "probe.json"
    for _ in range(4):
        probe_all(config, Device("cpu", "test-cpu", 8 * 2**30), ["fp32"], 32, 2, cache)
    assert [len(w.batches) > 0 for w in workers] == [True, False, True, False]
    warned = [r.message for r in caplog.records if "busy with other work" in r.getMessage()]
    assert len(warned) == 1
    assert [entry["busy_cores"] for entry in json.loads(cache.read_text()).values()] == [0.1]


def test_busy_cores_is_the_busy_share_of_cpu_time_times_the_cores():
    from finesweep.search.probe.cores import busy_cores, contended

    # cores, then user nice system idle iowait: 50 + 50 busy jiffies and 50 idle over the window, on 2 cores
    stats = iter([[2, 100, 0, 50, 800, 50], [2, 150, 0, 100, 840, 60]])
    busy = busy_cores(window=0, read_stat=lambda: next(stats))
    assert busy == pytest.approx(1.33, abs=0.01)
    assert contended(busy, threads=2, cores=2) and not contended(busy, threads=1, cores=4)
    assert busy_cores(window=0, read_stat=lambda: None) is None and not contended(None, threads=8, cores=1)


def _parameters(folder) -> int:
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(folder, num_labels=3).num_parameters()


def test_real_probe_process_measures_peak_memory_and_finds_the_exact_budget_limit(tiny_classifier):
    """Real steps in a real spawned process: the answer's peak fits the budget and the next batch's does not."""
    worker = ProbeWorker(resolve_device(), threads=1)
    base = ProbeRequest(candidate=ModelCandidate(name="t", path=str(tiny_classifier)).model_dump(),
                        task="classification", num_labels=3, precision="fp32", method="full", seq_len=128, batch=1)
    try:
        stopped = worker.attempt(base, timeout=0.0)  # the process is still starting: killed, nothing measured
        assert stopped.timed_out and stopped.peak_bytes == 0
        small = worker.attempt(base)  # a fresh process
        large = worker.attempt(ProbeRequest(**{**asdict(base), "batch": 256}))
        evaluation = worker.attempt(ProbeRequest(**{**asdict(base), "batch": 256, "mode": "eval"}))
        assert small.error is None and large.error is None and evaluation.error is None
        assert large.peak_bytes > small.peak_bytes > 0 and small.seconds_per_step > 0 and small.steps == 2
        assert evaluation.peak_bytes < large.peak_bytes  # no_grad keeps no activations for a backward pass
        # Every attempt counts the loaded model's weights, which the export's estimate grows with.
        assert small.parameters == evaluation.parameters == _parameters(tiny_classifier) > 0
        # The fresh process loaded the model for its first attempt (a trial's start pays that); later ones reuse it.
        assert small.load_seconds > 0 and large.load_seconds == evaluation.load_seconds == 0.0
        again = worker.attempt(base)  # after a far larger attempt in the same process: the same peak (pinned malloc)
        assert again.peak_bytes == pytest.approx(small.peak_bytes, rel=0.02)
        # A budget between the two peaks makes the answer lie strictly between 1 and 256.
        budget = int((small.peak_bytes + large.peak_bytes) / 2 * (1 + SAFETY_MARGIN))
        search = find_max_micro_batch(worker, base, 256, budget)
    finally:
        worker.close()
    best = search.last_fit
    assert 1 < best < 256
    by_batch = {a.batch: a for a in search.attempts}
    assert by_batch[best].peak_bytes * (1 + SAFETY_MARGIN) <= budget
    assert by_batch[best + 1].peak_bytes * (1 + SAFETY_MARGIN) > budget  # exact: the next batch was measured, and fails
    assert len(search.attempts) <= len(SEED_BATCHES) + 2 * math.ceil(math.log2(256))


def test_a_probe_process_begun_before_the_data_serves_the_probe_and_is_killed_if_never_needed(tiny_classifier):
    """measure_inputs begins the probe's process before the data (its imports on the other core): the probe's
    first attempt runs in that very process; one never needed (every answer cached) is killed, not waited for."""
    base = ProbeRequest(candidate=ModelCandidate(name="t", path=str(tiny_classifier)).model_dump(),
                        task="classification", num_labels=3, precision="fp32", method="full", seq_len=16, batch=2)
    worker = ProbeWorker(resolve_device(), threads=1)
    try:
        worker.begin()
        begun = worker._process
        assert worker.attempt(base).error is None and worker._process is begun
    finally:
        worker.close()
    assert begun.exitcode == 0, "a used process is ended by its request to stop"
    unused = ProbeWorker(resolve_device(), threads=1)
    unused.begin()
    process = unused._process
    unused.close()
    assert process.exitcode == -9 and unused._process is None


@pytest.mark.gpu
def test_cuda_probe_catches_real_out_of_memory_and_finds_the_budget_limit(tiny_classifier):
    """On a GPU: the real CUDA gauge, a budget that forces failures, and a real OutOfMemoryError caught as a result."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    device = resolve_device()
    assert device.kind == "cuda"
    worker = ProbeWorker(device, threads=1)
    base = ProbeRequest(candidate=ModelCandidate(name="t", path=str(tiny_classifier)).model_dump(),
                        task="classification", num_labels=3, precision="fp32", method="full", seq_len=128, batch=1)  # its positions
    try:
        small = worker.attempt(base)
        # Far beyond any GPU's memory already at the embeddings (16M x 128 positions x 64 wide: 512 GB of fp32):
        # at 1M rows an H200 held those, and SDPA's attention kernel refused the batch (over 65,535) with an error
        # of its own instead of running out of memory.
        huge = worker.attempt(ProbeRequest(**{**asdict(base), "batch": 1 << 24}))
        assert small.error is None and 0 < small.peak_bytes < device.total_memory
        assert huge.out_of_memory and huge.error is None  # a real torch.OutOfMemoryError, caught inside the process
        worker.replace()
        again = worker.attempt(base)  # a fresh process measures the same peak: nothing leaked from the OOM
        assert again.peak_bytes == pytest.approx(small.peak_bytes, rel=0.05)
        budget = int(small.peak_bytes * 3 * (1 + SAFETY_MARGIN))  # forces failures well below the GPU's memory
        search = find_max_micro_batch(worker, base, 4096, budget)
    finally:
        worker.close()
    best = search.last_fit
    by_batch = {a.batch: a for a in search.attempts}
    assert best >= 1 and by_batch[best].peak_bytes * (1 + SAFETY_MARGIN) <= budget
    assert by_batch[best + 1].peak_bytes * (1 + SAFETY_MARGIN) > budget or by_batch[best + 1].out_of_memory


def test_trials_running_at_once_share_the_cpu_budget():
    from finesweep.search.probe.device import Device
    from finesweep.search.probe.table import memory_budget
    from finesweep.spaces import SweepConfig

    def config(concurrent: int) -> SweepConfig:
        return SweepConfig.model_validate({"name": "s", "data": {"path": "d.csv"}, "models": [{"name": "m", "path": "x"}],
                                           "resources": {"memory_budget": "6GiB"}, "search": {"max_concurrent_trials": concurrent}})

    cpu = Device("cpu", "cpu", 24 * 2**30)
    assert memory_budget(config(1), cpu) == 6 * 2**30
    assert memory_budget(config(2), cpu) == 3 * 2**30


def test_the_cpus_identity_names_its_model_and_the_instruction_sets_that_set_its_speed():
    from finesweep.search.probe.device import cpu_identity

    def cpuinfo(flags: str) -> str:
        return f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse4_2 {flags} hypervisor\n\nprocessor\t: 1\n"

    avx512 = cpu_identity(cpuinfo("avx2 fma avx512f avx512_bf16 amx_tile"))
    assert avx512 == "Some CPU [amx_tile avx2 avx512_bf16 avx512f fma]"
    assert cpu_identity(cpuinfo("avx2 fma")) == "Some CPU [avx2 fma]" != avx512  # same model name, other speeds
    assert cpu_identity(cpuinfo("avx2 fma rdrand")) == cpu_identity(cpuinfo("fma avx2"))  # flags that do not matter


def test_a_causal_lms_probe_times_greedy_decoding_in_its_process(tiny_causal_lm):
    """The export's answers cost what one generated token costs, which the probe measures at batch 1 (mode decode)
    and the plan reads back (ProbeResult.decode_seconds_per_token)."""
    worker = ProbeWorker(resolve_device(), threads=1)
    base = ProbeRequest(candidate=ModelCandidate(name="t", path=str(tiny_causal_lm)).model_dump(), task="causal_lm",
                        num_labels=0, precision="fp32", method="full", seq_len=64, batch=1, mode="decode")
    try:
        decode = worker.attempt(base)
    finally:
        worker.close()
    assert decode.error is None and decode.seconds_per_step > 0 and decode.mode == "decode"
    result = ProbeResult(model="t", precision="fp32", method="full", seq_len=64, device="cpu", budget_bytes=1,
                         max_micro_batch=4, attempts=[{"batch": 4, "seconds_per_step": 1.0}, asdict(decode)])
    assert result.decode_seconds_per_token == decode.seconds_per_step
    assert result.attempt_at(1) is None, "a decode attempt at batch 1 is not a training step at micro-batch 1"
