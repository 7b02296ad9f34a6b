"""The deploy pick: the fastest variant at batch 1 among those within export.max_metric_drop of full precision."""

from __future__ import annotations

import pytest

from finesweep.search.selection.deploy import deploy_choice, with_speedups
from finesweep.spaces import Task


def measured(**variants: tuple[float, float, float]) -> dict[str, dict[str, float]]:
    """variant -> (primary metric, ms/sample at batch 1, ms/sample at batch 32)."""
    return {v: {"accuracy": m, "latency_ms_batch1": b1, "ms_per_sample_batch32": b32} for v, (m, b1, b32) in variants.items()}


def test_the_fastest_variant_within_the_tolerance_wins_and_its_speedups_are_full_over_it():
    metrics = with_speedups(measured(full=(0.80, 6.0, 2.0), int8=(0.80, 12.0, 4.0), **{"onnx-int8": (0.795, 1.5, 1.0)}))
    choice = deploy_choice(metrics, Task.classification, 0.01)
    assert choice["variant"] == "onnx-int8"
    assert choice["speedup_batch1"] == pytest.approx(4.0) and choice["speedup_batch32"] == pytest.approx(2.0)
    assert metrics["int8"]["speedup_batch1"] == pytest.approx(0.5) and "speedup_batch1" not in metrics["full"]
    assert "4.00x at batch 1, 2.00x at batch 32 against full precision" in choice["reason"]
    assert choice["ranked_by"] == "latency_ms_batch1" and "speedup_decode" not in choice


def test_a_faster_variant_that_loses_too_much_is_passed_over_and_named():
    metrics = measured(full=(0.80, 6.0, 2.0), nf4=(0.75, 5.0, 2.0), **{"onnx-int8": (0.792, 3.0, 1.5)})
    metrics["fast-but-wrong"] = {"accuracy": 0.70, "latency_ms_batch1": 0.5, "ms_per_sample_batch32": 0.2}
    choice = deploy_choice(metrics, Task.classification, 0.01)
    assert choice["variant"] == "onnx-int8"
    assert "nf4, fast-but-wrong lost more than export.max_metric_drop 0.01" in choice["reason"]


def test_a_drop_of_exactly_the_tolerance_is_within_it():
    """The quickstart: 0.7885 against 0.7785 (20 of 2,000 test rows) is a drop of 0.01, not of 0.010000000000000009."""
    from finesweep.search.outputs.export import drop_warnings

    metrics = measured(full=(0.7885, 6.0, 2.0), **{"onnx-int8": (0.7785, 1.0, 1.0)})
    assert deploy_choice(metrics, Task.classification, 0.01)["variant"] == "onnx-int8"
    assert drop_warnings(metrics, Task.classification, 0.01) == []
    assert deploy_choice(metrics, Task.classification, 0.0099)["variant"] == "full"


def test_full_precision_when_nothing_quantized_is_faster():
    metrics = measured(full=(0.80, 6.0, 2.0), int8=(0.80, 12.0, 4.0), nf4=(0.80, 7.0, 3.0))
    choice = deploy_choice(metrics, Task.classification, 0.01)
    assert choice["variant"] == "full" and choice["speedup_batch1"] == pytest.approx(1.0)
    assert choice["reason"].startswith("no quantized variant is faster at batch 1")


def test_a_causal_lm_is_ranked_by_its_greedy_decoding_not_its_forward_pass():
    metrics = with_speedups({
        "full": {"perplexity": 10.0, "latency_ms_batch1": 50.0, "ms_per_generated_token": 80.0},
        "int8": {"perplexity": 10.02, "latency_ms_batch1": 30.0, "ms_per_generated_token": 120.0},
        "nf4": {"perplexity": 10.04, "latency_ms_batch1": 60.0, "ms_per_generated_token": 40.0}})
    choice = deploy_choice(metrics, Task.causal_lm, 0.01)
    assert choice["variant"] == "nf4" and choice["ranked_by"] == "ms_per_generated_token"
    assert choice["speedup_decode"] == pytest.approx(2.0) and metrics["int8"]["speedup_decode"] == pytest.approx(80 / 120)
    assert "fastest at greedy decoding, batch 1" in choice["reason"]
    # An export without decode timings (none for some variant) falls back to the forward pass at batch 1.
    del metrics["nf4"]["ms_per_generated_token"]
    assert deploy_choice(metrics, Task.causal_lm, 0.01)["variant"] == "int8"


def test_perplexity_is_judged_by_its_relative_rise():
    metrics = {"full": {"perplexity": 10.0, "latency_ms_batch1": 50.0},
               "int8": {"perplexity": 10.5, "latency_ms_batch1": 20.0},  # 5% worse: out at 1%, in at 10%
               "nf4": {"perplexity": 10.05, "latency_ms_batch1": 40.0}}  # 0.5% worse
    assert deploy_choice(metrics, Task.causal_lm, 0.01)["variant"] == "nf4"
    assert deploy_choice(metrics, Task.causal_lm, 0.10)["variant"] == "int8"


def test_an_export_without_timings_deploys_full_precision():
    metrics = {"full": {"accuracy": 0.8}, "int8": {"accuracy": 0.8}}
    assert deploy_choice(metrics, Task.classification, 0.01)["variant"] == "full"


def test_cpu_timings_get_their_own_speedups_and_deploy_pick():
    """On a GPU machine the export times every variant on the CPU too: int8 wins on the GPU, onnx-int8 on the CPU."""
    from finesweep.search.selection.deploy import deploy_choices

    metrics = measured(full=(0.80, 2.0, 0.5), int8=(0.80, 1.0, 0.4), **{"onnx-int8": (0.80, 3.0, 1.0)})
    cpu = {"full": (12.0, 4.0), "int8": (20.0, 8.0), "onnx-int8": (3.0, 2.0)}
    for variant, (b1, b32) in cpu.items():
        metrics[variant].update(cpu_latency_ms_batch1=b1, cpu_ms_per_sample_batch32=b32)
    metrics = with_speedups(metrics)
    assert metrics["onnx-int8"]["cpu_speedup_batch1"] == pytest.approx(4.0)
    assert metrics["int8"]["speedup_batch1"] == pytest.approx(2.0)
    choice = deploy_choices(metrics, Task.classification, 0.01)
    assert choice["variant"] == "int8" and choice["speedup_batch1"] == pytest.approx(2.0)
    on_cpu = choice["on_cpu"]
    assert on_cpu["variant"] == "onnx-int8" and on_cpu["ranked_by"] == "cpu_latency_ms_batch1"
    assert on_cpu["speedup_batch1"] == pytest.approx(4.0) and on_cpu["speedup_batch32"] == pytest.approx(2.0)
    assert "fastest on the CPU at batch 1" in on_cpu["reason"] and "4.00x on the CPU at batch 1" in on_cpu["reason"]
    assert "on_cpu" not in deploy_choices(measured(full=(0.8, 2.0, 0.5)), Task.classification, 0.01)
