"""The probe's speeds steer the space: what trains far slower here than the alternatives leaves it."""

from __future__ import annotations

from types import SimpleNamespace

from rich.console import Console as RichConsole

from finesweep.search.measure import steer_by_speed
from finesweep.search.outputs.console import Console
from finesweep.search.probe.batch_search import CONFIRM_TIMED_STEPS
from finesweep.search.probe.steer import dominated_precisions, fastest_first, slow_values, without
from finesweep.search.probe.table import ProbeResult, attempt_speed
from finesweep.spaces import SweepConfig


def _probe(model: str, precision: str, method: str, samples_per_second: float) -> ProbeResult:
    attempts = [{"batch": 8, "peak_bytes": 1, "seconds_per_step": 8 / samples_per_second, "mode": "train"}]
    return ProbeResult(model=model, precision=precision, method=method, seq_len=64, device="cpu", budget_bytes=1,
                       max_micro_batch=8, attempts=attempts, micro_batch=8, best_micro_batch=8)


def _table(speeds: dict[tuple[str, str, str], float]) -> dict[str, ProbeResult]:
    return {"|".join(key): _probe(*key, speed) for key, speed in speeds.items()}


def test_bf16_seven_times_slower_for_every_model_leaves_the_space():
    # As measured on an AVX2 CPU without bf16 instructions: minilm-l6 5.8 vs 0.8, minilm-l3 11.2 vs 1.5.
    probes = _table({("l6", "fp32", "full"): 5.8, ("l6", "bf16", "full"): 0.8,
                     ("l3", "fp32", "full"): 11.2, ("l3", "bf16", "full"): 1.5})
    removals = slow_values(probes, 1 / 3)
    assert [(r.dimension, r.value) for r in removals] == [("precision", "bf16")]
    assert "l6 0.14x" in removals[0].reason and "l3 0.13x" in removals[0].reason


def test_bf16_faster_where_the_cpu_has_it_stays():
    # The AVX-512 bf16 machine: bf16 1.6x faster. The same rule, another measurement, the opposite outcome.
    probes = _table({("l6", "fp32", "full"): 21.6, ("l6", "bf16", "full"): 34.4})
    assert ("precision", "bf16") not in {(r.dimension, r.value) for r in slow_values(probes, 1 / 3)}
    assert slow_values(probes, 0.5) == [], "fp32 at 0.63x the fastest is within a half"


def test_a_reduced_precision_slower_than_fp32_for_every_model_leaves_the_space_however_close():
    # An AVX-512 CPU without bf16 instructions: bf16 0.4x fp32, above min_relative_speed's third.
    probes = _table({("l6", "fp32", "full"): 15.1, ("l6", "bf16", "full"): 6.1,
                     ("l3", "fp32", "full"): 28.0, ("l3", "bf16", "full"): 11.0})
    assert slow_values(probes, 1 / 3) == []
    removals = dominated_precisions(probes)
    assert [(r.dimension, r.value) for r in removals] == [("precision", "bf16")]
    assert "l6 full 0.40x" in removals[0].reason and "l3 full 0.39x" in removals[0].reason
    faster_for_one = _table({("l6", "fp32", "full"): 15.1, ("l6", "bf16", "full"): 6.1,
                             ("l3", "fp32", "full"): 10.0, ("l3", "bf16", "full"): 11.0})
    assert dominated_precisions(faster_for_one) == [], "faster for one model: it stays"
    no_fp32_fit = {**_table({("l6", "bf16", "full"): 6.1}), "l6|fp32|full": ProbeResult(
        model="l6", precision="fp32", method="full", seq_len=64, device="cpu", budget_bytes=1, max_micro_batch=0)}
    assert dominated_precisions(no_fp32_fit) == [], "where only bf16 fits, it stays"
    assert dominated_precisions(_table({("l6", "bf16", "full"): 6.1})) == [], "no fp32 measured: nothing to compare"


def test_the_precisions_kept_come_fastest_first_on_the_model_listed_first():
    # The AVX-512 bf16 machine: bf16 1.6x fp32 on the first model; the order follows the measurement, not the file.
    probes = _table({("l6", "fp32", "full"): 21.6, ("l6", "bf16", "full"): 34.4, ("l6", "bf16", "lora"): 30.0,
                     ("l3", "fp32", "full"): 50.0, ("l3", "bf16", "full"): 40.0})
    assert fastest_first(["fp32", "bf16"], "l6", probes) == ["bf16", "fp32"]
    assert fastest_first(["fp32", "bf16"], "l3", probes) == ["fp32", "bf16"]
    assert fastest_first(["fp32", "bf16"], "unprobed", probes) == ["fp32", "bf16"], "nothing measured: the file's order"


def test_the_sweep_searches_the_kept_precisions_fastest_first_and_warns_of_each_removed():
    config = SweepConfig.model_validate({"name": "s", "data": {"path": "d.csv"}, "space": {"precision": ["fp32", "bf16"]},
                                         "models": [{"name": "l6", "path": "m"}, {"name": "l3", "path": "m"}]})
    warned: list[str] = []
    console = SimpleNamespace(warn=warned.append)
    faster = _table({("l6", "fp32", "full"): 21.6, ("l6", "bf16", "full"): 34.4, ("l3", "fp32", "full"): 43.0,
                     ("l3", "bf16", "full"): 70.0})
    assert steer_by_speed(config, ["fp32", "bf16"], faster, console)[1] == ["bf16", "fp32"] and warned == []
    slower = _table({("l6", "fp32", "full"): 5.8, ("l6", "bf16", "full"): 0.8, ("l3", "fp32", "full"): 11.2,
                     ("l3", "bf16", "full"): 1.5})
    assert steer_by_speed(config, ["fp32", "bf16"], slower, console)[1] == ["fp32"]
    assert [line.split(":")[0] for line in warned] == ["precision bf16 removed from the space"]


def _unmeasured(model: str, precision: str, method: str) -> ProbeResult:
    return ProbeResult(model=model, precision=precision, method=method, seq_len=64, device="cpu", budget_bytes=1,
                       max_micro_batch=0, not_measured=True)


def test_a_precision_measured_for_some_methods_stays_and_fp32s_answers_stand_in_for_the_rest():
    """The LLM example under --time-limit 10m measured bf16 LoRA faster than fp32's and ran out before bf16's full
    fine-tune: bf16 stays, its full fine-tune trains with fp32's micro-batch and is planned at fp32's speed, which
    never judges bf16 (it would tie fp32 there)."""
    config = SweepConfig.model_validate({"name": "s", "data": {"path": "d.csv"}, "models": [{"name": "lm", "path": "m"}],
                                         "space": {"precision": ["fp32", "bf16"], "method": ["lora", "full"]}})
    said: list[str] = []
    console = SimpleNamespace(warn=lambda text: said.append(f"warn {text}"), step=lambda text: said.append(text))
    probes = {**_table({("lm", "fp32", "lora"): 0.7, ("lm", "fp32", "full"): 0.5, ("lm", "bf16", "lora"): 0.9}),
              "lm|bf16|full": _unmeasured("lm", "bf16", "full")}
    steered, precisions, answers = steer_by_speed(config, ["fp32", "bf16"], probes, console)
    stand_in, full = answers["lm|bf16|full"], answers["lm|fp32|full"]
    assert precisions == ["bf16", "fp32"], "bf16 LoRA, the fastest measured, first"
    assert (stand_in.precision, stand_in.measured_as, stand_in.not_measured) == ("bf16", "fp32", False)
    assert (stand_in.micro_batch, stand_in.samples_per_second) == (full.micro_batch, full.samples_per_second)
    assert answers["lm|bf16|lora"] is probes["lm|bf16|lora"] and steered.space == config.space
    assert said == ["probe: bf16 full on lm was not measured within the probe's share of search.time_limit; its "
                    "trials take fp32's micro-batch 8 and are planned at fp32's speed (bf16 was measured for other "
                    "combinations, so it stays)"]
    screen = Console(RichConsole(record=True, width=300))
    screen.probe_table(answers)  # a resume prints the answers it started with: the stand-in says whose they are
    assert "8 (fp32's: not measured, time limit)" in screen.out.export_text()
    # bf16 LoRA slower than fp32's: bf16 is judged by what was measured and leaves, its stand-in's tie counts nothing.
    said.clear()
    slower = {**probes, **_table({("lm", "bf16", "lora"): 0.6})}
    _, precisions, _ = steer_by_speed(config, ["fp32", "bf16"], slower, console)
    assert precisions == ["fp32"] and said[1].startswith("warn precision bf16 removed from the space: it trains slower")
    # Measured for no combination: nothing stands in, bf16 leaves the space.
    said.clear()
    nowhere = {**probes, "lm|bf16|lora": _unmeasured("lm", "bf16", "lora")}
    _, precisions, answers = steer_by_speed(config, ["fp32", "bf16"], nowhere, console)
    assert precisions == ["fp32"] and answers == nowhere
    assert len(said) == 1 and said[0].startswith("warn precision bf16 removed from the space: not measured")


def test_a_value_slow_for_one_model_only_stays_and_zero_keeps_everything():
    probes = _table({("a", "fp32", "full"): 10, ("a", "bf16", "full"): 1, ("b", "fp32", "full"): 10,
                     ("b", "bf16", "full"): 9, ("a", "fp32", "lora"): 2, ("b", "fp32", "lora"): 2.5})
    assert [(r.dimension, r.value) for r in slow_values(probes, 1 / 3)] == [("method", "lora")]
    assert slow_values(probes, 0) == []


def test_an_initial_point_on_a_removed_value_moves_to_the_fastest_kept_one():
    config = SweepConfig.model_validate({
        "name": "s", "data": {"path": "d.csv"}, "models": [{"name": "l6", "path": "m"}],
        "space": {"precision": ["fp32", "bf16"], "method": ["full", "lora"]},
        "search": {"initial_points": [{"precision": "bf16", "method": "full", "learning_rate": 5e-5},
                                      {"precision": "fp32"}]}})
    probes = _table({("l6", "fp32", "full"): 5.8, ("l6", "bf16", "full"): 0.8,
                     ("l6", "fp32", "lora"): 4.0, ("l6", "bf16", "lora"): 0.7})
    steered, precisions, warnings = without(config, ["fp32", "bf16"], slow_values(probes, 1 / 3), probes)
    assert precisions == ["fp32"] and [m.value for m in steered.space.method] == ["full", "lora"]
    assert steered.search.initial_points == [{"precision": "fp32", "method": "full", "learning_rate": 5e-5},
                                             {"precision": "fp32"}]
    assert warnings == ["search.initial_points[0]: precision bf16 left the space (too slow here); this point is "
                        "tried with fp32 instead"]


class _TimedWorker:
    """A probe process whose steps take `seconds_per_sample` x batch (bf16 seven times fp32's here); memory fits.
    `first_step_spike`: the first attempt of that precision timed this many times slower (one step after a load)."""

    def __init__(self, seconds_per_sample: dict[str, float], first_step_spike: dict[str, float] | None = None):
        self.seconds_per_sample, self.spikes = seconds_per_sample, dict(first_step_spike or {})
        self.asked: list[tuple[str, int, str]] = []
        self.timed_steps: list[int] = []  # each attempt's timed steps

    def attempt(self, request, timeout=None):
        from finesweep.trainer.probe_step import ProbeAttempt

        self.asked.append((request.precision, request.batch, request.mode))
        self.timed_steps.append(request.timed_steps)
        seconds = self.seconds_per_sample[request.precision] * request.batch * self.spikes.pop(request.precision, 1.0)
        return ProbeAttempt(request.batch, 2**20 * request.batch, seconds, steps=1 + request.timed_steps,
                            mode=request.mode)

    def start(self):
        pass

    def replace(self):
        pass

    def close(self):
        pass


def test_a_combination_far_slower_than_one_already_measured_stops_after_its_first_attempt(tmp_path):
    from finesweep.search.probe.device import Device
    from finesweep.search.probe.table import _CachedProber
    from finesweep.trainer.probe_step import ProbeRequest

    worker = _TimedWorker({"fp32": 0.2, "bf16": 1.4})
    prober = _CachedProber(worker, Device("cpu", "test", 2**34), 2**33, 32, "fastest", tmp_path / "probe.json", 1 / 3)
    base = ProbeRequest(candidate={"name": "l6", "path": "m"}, task="classification", num_labels=3, precision="fp32",
                        method="full", seq_len=64, batch=32)
    fp32 = prober.measure(base, False)
    asked_for_fp32 = len(worker.asked)
    bf16 = prober.measure(ProbeRequest(**{**base.__dict__, "precision": "bf16"}), False)
    assert fp32.max_micro_batch == 32 and fp32.too_slow is None and asked_for_fp32 > 3
    assert worker.asked[asked_for_fp32:] == [("bf16", 4, "train")] * 2, "one attempt, timed again, then stopped"
    assert worker.timed_steps[asked_for_fp32:] == [1, CONFIRM_TIMED_STEPS]
    assert bf16.too_slow.startswith("0.71 samples/s at micro-batch 4, against 5.00 for l6|fp32|full")
    assert bf16.micro_batch == 4 and bf16.eval_batch_size == 4 and abs(bf16.samples_per_second - 0.714) < 0.01
    assert [(r.dimension, r.value) for r in slow_values({"a": fp32, "b": bf16}, 1 / 3)] == [("precision", "bf16")]


def test_a_reduced_precision_slower_than_fp32_stops_after_its_first_attempt_and_a_faster_one_is_probed_whole(tmp_path):
    """bf16 at 0.4x fp32 (an AVX-512 CPU without bf16 instructions) is above min_relative_speed's third, but slower
    than fp32: one attempt, and the space drops it. Where bf16 is faster (AVX-512 bf16) it is probed in full."""
    from finesweep.search.probe.device import Device
    from finesweep.search.probe.table import _CachedProber
    from finesweep.trainer.probe_step import ProbeRequest

    base = ProbeRequest(candidate={"name": "l6", "path": "m"}, task="classification", num_labels=3, precision="fp32",
                        method="full", seq_len=64, batch=32)
    for bf16_seconds, stopped in ((0.5, True), (0.12, False)):
        worker = _TimedWorker({"fp32": 0.2, "bf16": bf16_seconds})
        prober = _CachedProber(worker, Device("cpu", "test", 2**34), 2**33, 32, "fastest",
                               tmp_path / f"probe-{bf16_seconds}.json", 1 / 3)
        fp32 = prober.measure(base, False)
        asked_for_fp32 = len(worker.asked)
        bf16 = prober.measure(ProbeRequest(**{**base.__dict__, "precision": "bf16"}), False)
        assert (worker.asked[asked_for_fp32:] == [("bf16", 4, "train")] * 2) is stopped
        assert (bf16.too_slow == "2.00 samples/s at micro-batch 4, slower than fp32's 5.00") is stopped
        assert bool(dominated_precisions({"a": fp32, "b": bf16})) is stopped


def test_a_first_step_that_spiked_is_timed_again_and_a_faster_precision_stays_in_the_space(tmp_path):
    """The probe of a plain file on an AVX-512 bf16 CPU: bf16's first step after its model's load took 3x its steady
    time, slower than fp32's, and bf16 (1.6x faster) left the space. Timed again, it is probed whole and the plan
    reads its faster timing; a combination slow at both timings still stops there."""
    from finesweep.search.probe.device import Device
    from finesweep.search.probe.table import _CachedProber
    from finesweep.trainer.probe_step import ProbeRequest

    base = ProbeRequest(candidate={"name": "l6", "path": "m"}, task="classification", num_labels=3, precision="fp32",
                        method="full", seq_len=64, batch=32)
    worker = _TimedWorker({"fp32": 0.2, "bf16": 0.125}, first_step_spike={"bf16": 3.0})
    prober = _CachedProber(worker, Device("cpu", "test", 2**34), 2**33, 32, "fastest", tmp_path / "probe.json", 1 / 3)
    fp32 = prober.measure(base, False)
    asked_for_fp32 = len(worker.asked)
    bf16 = prober.measure(ProbeRequest(**{**base.__dict__, "precision": "bf16"}), False)
    assert bf16.too_slow is None and bf16.max_micro_batch == 32, bf16.too_slow
    assert worker.asked[asked_for_fp32:asked_for_fp32 + 2] == [("bf16", 4, "train")] * 2
    assert len(worker.asked) - asked_for_fp32 > 3, "probed whole after the second timing"
    assert abs(attempt_speed(bf16.attempt_at(4)) - 8.0) < 0.01, "the faster timing"
    assert dominated_precisions({"a": fp32, "b": bf16}) == []

    slow = _TimedWorker({"fp32": 0.2, "bf16": 0.5}, first_step_spike={"bf16": 3.0})
    prober = _CachedProber(slow, Device("cpu", "test", 2**34), 2**33, 32, "fastest", tmp_path / "slow.json", 1 / 3)
    prober.measure(base, False)
    asked_for_fp32 = len(slow.asked)
    stopped = prober.measure(ProbeRequest(**{**base.__dict__, "precision": "bf16"}), False)
    assert slow.asked[asked_for_fp32:] == [("bf16", 4, "train")] * 2
    assert stopped.too_slow == "2.00 samples/s at micro-batch 4, slower than fp32's 5.00", "the second timing's words"


def test_a_cached_verdict_of_one_timed_step_is_measured_again_and_a_confirmed_one_is_reused(tmp_path, monkeypatch):
    """A machine cache written before verdicts were confirmed holds bf16 "too slow" on one timed step: every later
    sweep on the machine would have dropped it. Such an answer is probed again; one timed twice is kept."""
    import json

    from finesweep.search.probe import table
    from finesweep.search.probe.device import Device
    from finesweep.search.probe.table import _CachedProber
    from finesweep.trainer.probe_step import ProbeRequest

    # An idle machine: an answer measured while other work (the rest of the suite) kept the cores busy is measured
    # again once they are quieter, whatever its verdict.
    monkeypatch.setattr(table, "busy_cores", lambda: 0.0)

    base = ProbeRequest(candidate={"name": "l6", "path": "m"}, task="classification", num_labels=3, precision="fp32",
                        method="full", seq_len=64, batch=32)
    bf16_request = ProbeRequest(**{**base.__dict__, "precision": "bf16"})
    cache = tmp_path / "probe.json"

    def prober(worker):
        return _CachedProber(worker, Device("cpu", "test", 2**34), 2**33, 32, "fastest", cache, 1 / 3)

    first = prober(_TimedWorker({"fp32": 0.2, "bf16": 0.5}))
    first.measure(base, False)
    first.measure(bf16_request, False)
    answers = json.loads(cache.read_text())
    (bf16_key,) = [key for key, entry in answers.items() if entry["precision"] == "bf16"]
    assert answers[bf16_key]["too_slow"], "confirmed: cached"
    again = _TimedWorker({"fp32": 0.2, "bf16": 0.125})
    prober(again).measure(bf16_request, False)
    assert again.asked == [], "a verdict timed twice is reused"

    answers[bf16_key]["attempts"] = answers[bf16_key]["attempts"][:1]  # as an earlier release cached it
    cache.write_text(json.dumps(answers))
    remeasured = _TimedWorker({"fp32": 0.2, "bf16": 0.125})
    kept = prober(remeasured).measure(bf16_request, False)
    assert remeasured.asked[0] == ("bf16", 4, "train") and kept.too_slow is None and kept.max_micro_batch == 32
