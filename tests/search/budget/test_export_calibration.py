"""The export's estimate corrected by this machine's own exports (search/budget/export_calibration.py): what an export
teaches, what the next plan does with it, and what the key tells apart."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from finesweep.search.budget import export_calibration as calibration
from finesweep.search.budget.plan import SearchPlan, unplanned
from finesweep.spaces import SweepConfig
from tests.search.budget.planning import plan_search

DEVICE = ["cpu", "AMD EPYC [avx2]", 24 * 2**30]


RULES = {"full": 10.0, "baseline": 0.0, "int8": 8.0, "onnx-int8": 10.0}  # export_time's estimate per step


def _plan(ratios: dict[str, float], key: str = "k") -> SearchPlan:
    """A plan whose steps are the rules' times the ratios it applied, as search_plan makes them."""
    config = SweepConfig.model_validate({"name": "t", "data": {"path": "d.csv"},
                                         "models": [{"name": "m", "path": "m"}]})
    return replace(unplanned(config, 1), export_calibration={"key": key, "ratios": ratios} if key else {},
                   export_steps={step: seconds * ratios.get(step, 1.0) for step, seconds in RULES.items()})


def test_each_step_teaches_its_seconds_over_the_rules_prediction(tmp_path):
    """The plan's onnx-int8 step was already doubled by an earlier ratio: the rules said 10 s, so 30 s teaches 3.0,
    not 1.5; a step that failed, one too short to time and one the plan did not predict teach nothing."""
    cache = tmp_path / "calibration.json"
    learned = calibration.learn(_plan({"onnx-int8": 2.0}), {"full": 5.0, "baseline": 0.1, "int8": 3.0,
                                                            "onnx-int8": 30.0, "gguf-q8_0": 9.0},
                                not_made={"int8": "RuntimeError: no kernel"}, cache=cache)
    assert learned == {"full": 0.5, "onnx-int8": 3.0}
    # One export lowers a step by a third of its ratio's distance from the rules (two of three exports unknown);
    # one that raises it counts whole.
    assert calibration.ratios("k", cache) == {"full": pytest.approx(0.833), "onnx-int8": 3.0}
    # The next exports of the same candidates add what they measured and keep the rest; the largest ratio of the
    # last three prices a step (an export's time varies from run to run: the plan errs on the early side).
    calibration.learn(_plan({"full": 0.5, "onnx-int8": 3.0}), {"full": 6.0}, {}, cache=cache)
    assert calibration.ratios("k", cache) == {"full": pytest.approx(0.6 + 0.4 / 3, abs=1e-3), "onnx-int8": 3.0}
    for seconds in (4.0, 3.0):
        calibration.learn(_plan(calibration.ratios("k", cache)), {"full": seconds}, {}, cache=cache)
    assert calibration.ratios("k", cache) == {"full": 0.6, "onnx-int8": 3.0}
    calibration.learn(_plan(calibration.ratios("k", cache)), {"full": 3.0}, {}, cache=cache)
    assert calibration.ratios("k", cache) == {"full": 0.4, "onnx-int8": 3.0}, "0.6 is four exports old"
    assert calibration.ratios("another machine", cache) == {}


def test_one_exports_ratio_stays_within_bounds(tmp_path):
    cache = tmp_path / "calibration.json"
    assert calibration.learn(_plan({}), {"full": 400.0, "onnx-int8": 2.5}, {}, cache=cache) == {
        "full": calibration.RATIO_BOUNDS[1], "onnx-int8": calibration.RATIO_BOUNDS[0]}


def test_nothing_is_learned_without_a_plan_or_its_key(tmp_path):
    cache = tmp_path / "calibration.json"
    assert calibration.learn(None, {"full": 5.0}, {}, cache=cache) == {}
    assert calibration.learn(_plan({}, key=""), {"full": 5.0}, {}, cache=cache) == {}
    assert not cache.exists()


def _config(model_dir) -> SweepConfig:
    return SweepConfig.model_validate({"name": "t", "data": {"path": "d.csv"},
                                       "models": [{"name": "m", "path": str(model_dir)}]})


def test_the_key_tells_models_devices_and_threads_apart_but_not_a_models_name(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    key = calibration.calibration_key(_config(model), DEVICE, 2)
    assert key == calibration.calibration_key(_config(model), DEVICE, 2)
    renamed = _config(model).model_copy(update={"models": [_config(model).models[0].model_copy(update={"name": "x"})]})
    assert calibration.calibration_key(renamed, DEVICE, 2) == key
    assert calibration.calibration_key(_config(model), DEVICE, 4) != key
    assert calibration.calibration_key(_config(model), ["cpu", "Intel Xeon [avx2]", DEVICE[2]], 2) != key
    (model / "config.json").write_text(json.dumps({"saved": "again"}))  # another model at the same path
    assert calibration.calibration_key(_config(model), DEVICE, 2) != key


def test_the_plan_multiplies_the_measured_steps_and_says_so():
    from tests.search.budget.test_plan import _config as plan_config
    from tests.search.budget.test_plan import _plan as make_plan
    from tests.search.budget.test_plan import probe


    probes = {"big": probe("big", "fp32", 24.0), "small": probe("small", "fp32", 48.0)}
    rules = make_plan(plan_config(), probes)
    corrected = plan_search(plan_config(), probes, validation_rows=80, test_rows=40, seq_len=64,
                                     concurrency=2, export_calibration={"key": "k", "ratios": {"int8": 0.5,
                                                                                               "onnx-int8": 3.0}})
    assert corrected.export_steps == pytest.approx({**rules.export_steps, "int8": rules.export_steps["int8"] / 2})
    assert corrected.export_calibration == {"key": "k", "ratios": {"int8": 0.5}}, "only the plan's own steps"
    assert corrected.to_dict()["export_calibration"] == corrected.export_calibration
    assert [line for line in corrected.notes if line.startswith("export estimate corrected")] == [
        "export estimate corrected by this machine's last export of these candidates (int8 x0.50: its seconds over "
        "the rules' prediction; search/budget/export_calibration.py)"]
    assert not any("export estimate corrected" in line for line in rules.notes)


def test_a_cache_that_cannot_be_written_costs_the_calibration_not_the_sweep(tmp_path):
    (tmp_path / "export").write_text("a file where the cache's folder would be")
    assert calibration.learn(_plan({}), {"full": 5.0}, {}, cache=tmp_path / "export" / "calibration.json") == {}
