"""The real CLI, end to end, on a tiny model built from a config: real Ray, real MLflow store, real Trainer."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from finesweep.search.budget import export_calibration
from finesweep.search.selection.baseline import origin
from finesweep.search.selection.equal_samples import History, paired
from tests import tiny
from tests.sweeps import EVALS_PER_TRIAL, NUM_TRIALS, SWEEP, finesweep, free_port, get_json, store, tune_results

def test_mlflow_holds_one_parent_and_a_nested_run_per_trial_with_every_evaluation(finished_sweep):
    _, sweep_dir, _ = finished_sweep
    client, state = store(sweep_dir)
    runs = client.search_runs([state["experiment_id"]])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == state["parent_run_id"]]
    assert len(parents) == 1 and parents[0].info.run_id == state["parent_run_id"]
    assert parents[0].info.status == "FINISHED"
    assert len(trials) == NUM_TRIALS
    for run in trials:
        history = client.get_metric_history(run.info.run_id, "eval_accuracy")
        steps = [m.step for m in history]
        assert steps == sorted(steps) and steps[0] == 5 and all(s % 5 == 0 for s in steps)
        assert {"learning_rate", "micro_batch", "gradient_accumulation", "effective_batch_size"} <= set(run.data.params)
        micro, accumulation = int(run.data.params["micro_batch"]), int(run.data.params["gradient_accumulation"])
        assert micro * accumulation == int(run.data.params["effective_batch_size"])
        assert run.info.status in {"FINISHED", "FAILED"} and "finesweep.end_state" in run.data.tags
        assert run.data.metrics["peak_memory_mib"] > 0 and run.data.metrics["train_tokens_per_second_so_far"] > 0


def test_the_parent_run_has_the_project_commit_the_plots_and_the_data_story(finished_sweep):
    folder, sweep_dir, _ = finished_sweep
    client, state = store(sweep_dir)
    parent = client.get_run(state["parent_run_id"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True).stdout.strip()
    assert parent.data.tags["mlflow.source.git.commit"] == head
    assert parent.data.tags["finesweep.version.transformers"] and parent.data.params["search.metric"] == "eval_loss"
    artifacts = {a.path for a in client.list_artifacts(state["parent_run_id"])}
    assert {"data_report.json", "probe.json", "sweep.json", "hardware.json", "plots", "export"} <= artifacts
    device = "cuda" if torch.cuda.is_available() else "cpu"  # a GPU machine trains on its GPU
    assert parent.data.tags["finesweep.device"].startswith(f"1 x {device}")
    plots = {a.path for a in client.list_artifacts(state["parent_run_id"], "plots")}
    assert {"plots/optimization_history.png", "plots/parallel_coordinate.png", "plots/param_importances.png",
            "plots/learning_curves.png"} <= plots


def test_asha_stopped_some_trial_early(finished_sweep):
    _, sweep_dir, _ = finished_sweep
    client, state = store(sweep_dir)
    trials = client.search_runs([state["experiment_id"]], filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")
    states = [r.data.tags["finesweep.end_state"] for r in trials]
    stopped = [s for s in states if s.startswith("stopped_early")]
    assert stopped, states
    for run in trials:
        evaluations = len(client.get_metric_history(run.info.run_id, "eval_accuracy"))
        if run.data.tags["finesweep.end_state"].startswith("stopped_early"):
            assert evaluations < EVALS_PER_TRIAL
        elif run.data.tags["finesweep.end_state"].startswith("plateaued"):  # its loss no better for 3 evaluations
            assert 4 <= evaluations < EVALS_PER_TRIAL
        elif run.data.tags["finesweep.end_state"] == "completed":
            assert evaluations == EVALS_PER_TRIAL


def test_trials_leave_no_checkpoint_in_rays_session_folder(finished_sweep):
    """Tune keeps its copies in the sweep folder. The Trainer's own, written in a scratch folder in each trial's
    working folder under Ray's session folder (cleared only at reboot), are gone: the stopped trials' too."""
    _, sweep_dir, _ = finished_sweep
    working = _trial_working_dirs(sweep_dir)
    assert len(working) == NUM_TRIALS, working
    assert not [str(p) for folder in working for p in folder.glob("finesweep-*")], "scratch folders (checkpoints) left"
    experiment = json.loads((sweep_dir / "sweep-state.json").read_text())["tune_experiment"]
    assert list((sweep_dir / "tune" / experiment).glob("trial-*/checkpoint_*")), "Tune's copies are kept"


def test_after_the_export_the_checkpoints_keep_their_weights_and_lose_their_optimizer_state(finished_sweep):
    """Nothing trains after the export: every checkpoint Tune kept keeps its weights and evaluations (the export
    command exports again from them: test_export_command_exports_a_finished_sweep_again) but not the Trainer's
    optimizer and scheduler state, and the console and the summary say how much that freed."""
    _, sweep_dir, result = finished_sweep
    checkpoints = list((sweep_dir / "tune").glob("*/*/checkpoint_*"))
    assert checkpoints
    assert all((c / "model.safetensors").is_file() and (c / "trainer_state.json").is_file() for c in checkpoints)
    assert not [str(p) for name in ("optimizer.pt", "scheduler.pt") for p in (sweep_dir / "tune").rglob(name)]
    freed = json.loads((sweep_dir / "summary.json").read_text())["optimizer_state_bytes_freed"]
    assert freed > 0 and "the checkpoints' optimizer state" in " ".join(result.stdout.split())


def test_registering_the_export_prints_no_card_warning_and_no_registry_chatter(finished_sweep):
    """MLflow parses the model card when it logs each variant: the card's metadata block leaves it nothing to warn.
    Its own lines for each registration ("Successfully registered model", "Created version") go to the log."""
    _, sweep_dir, result = finished_sweep
    assert "Registered models:/" in result.stdout
    assert "Repo card metadata block was not found" not in result.stdout + result.stderr
    assert "Created version" not in result.stdout + result.stderr
    assert "mlflow: Created version '1' of model 'tiny'" in (sweep_dir / "finesweep.log").read_text()


def test_the_mean_pooled_candidates_trials_train_and_keep_the_mean_pooled_head(finished_sweep):
    """tiny-b sets pooling: mean: its trials' checkpoints are finesweep's mean-pooled classifier, with its code."""
    _, sweep_dir, _ = finished_sweep
    experiment = json.loads((sweep_dir / "sweep-state.json").read_text())["tune_experiment"]
    kinds = {}
    for config_file in (sweep_dir / "tune" / experiment).glob("trial-*/checkpoint_*/**/config.json"):
        config = json.loads(config_file.read_text())
        kinds.setdefault(config["num_hidden_layers"], set()).add(config["model_type"])
        if config["model_type"] == "finesweep_mean_pooled_bert":
            assert (config_file.parent / "mean_pooling.py").is_file()
    assert kinds.get(1) == {"finesweep_mean_pooled_bert"} and kinds.get(2) == {"bert"}, kinds


def test_each_trial_trains_with_the_dropout_it_sampled_and_the_baseline_with_the_checkpoints(finished_sweep):
    _, sweep_dir, _ = finished_sweep
    experiment = json.loads((sweep_dir / "sweep-state.json").read_text())["tune_experiment"]
    sampled = []
    for trial in (sweep_dir / "tune" / experiment).glob("trial-*"):
        params = json.loads((trial / "params.json").read_text())
        wanted = params.get("dropout", 0.1)  # the baseline keeps the tiny checkpoint's own 0.1
        assert ("dropout" in params) != bool(params.get("baseline")), params
        sampled += [wanted] if "dropout" in params else []
        for config_file in trial.glob("checkpoint_*/**/config.json"):
            config = json.loads(config_file.read_text())
            # The tiny checkpoint leaves classifier_dropout unset (its head takes hidden_dropout_prob); a sampled rate
            # sets it.
            names = ("hidden_dropout_prob", "attention_probs_dropout_prob",
                     *(("classifier_dropout",) if "dropout" in params else ()))
            assert [config[name] for name in names] == pytest.approx([wanted] * len(names)), (config_file, wanted)
    assert sampled and all(0.0 <= rate <= 0.1 for rate in sampled) and min(sampled) < 0.1


def _trial_working_dirs(sweep_dir: Path) -> list[Path]:
    """The working folders Ray gave the sweep's trials, in its session folder (under /tmp/ray by default)."""
    from finesweep.search.tuning.ray_compat import default_temp_dir

    experiment = json.loads((sweep_dir / "sweep-state.json").read_text())["tune_experiment"]
    found = default_temp_dir().glob(f"session_*/artifacts/*/{experiment}/working_dirs/trial-*")
    return sorted({path.resolve() for path in found})  # session_latest is a link to the newest session's folder


def test_best_is_the_best_evaluation_of_all_trials(finished_sweep):
    _, sweep_dir, _ = finished_sweep
    client, state = store(sweep_dir)
    summary = json.loads((sweep_dir / "summary.json").read_text())
    every_eval = []
    for run in client.search_runs([state["experiment_id"]], filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'"):
        every_eval += [(m.value, m.step, run.info.run_id) for m in client.get_metric_history(run.info.run_id, "eval_loss")]
    value = min(every_eval)[0]
    best = summary["best"]
    assert best["value"] == pytest.approx(value)
    # Among equal values the earliest step whose checkpoint Tune kept wins (Tune may evict an earlier tie).
    assert (value, best["step"], best["mlflow_run_id"]) in every_eval
    parent = client.get_run(state["parent_run_id"])
    assert parent.data.tags["finesweep.best_run_id"] == best["mlflow_run_id"]


def test_the_baseline_trains_first_unstopped_and_every_output_says_how_the_winner_compares(finished_sweep):
    """search.baseline (auto): transformers' defaults for the first candidate train as trial 1, ASHA never stops
    it, its best checkpoint is measured on the test split, and the summary, parent run, card and console compare."""
    _, sweep_dir, result = finished_sweep
    summary = json.loads((sweep_dir / "summary.json").read_text())
    baseline = summary["baseline"]
    assert baseline["params"] == {"model": "tiny-a", "precision": "fp32", "method": "full", "effective_batch_size": 8,
                                  "learning_rate": 5e-5, "warmup_ratio": 0.0, "weight_decay": 0.0}
    client, state = store(sweep_dir)
    trials = [r for r in client.search_runs([state["experiment_id"]])
              if r.data.tags.get("mlflow.parentRunId") == state["parent_run_id"]]
    marked = [r for r in trials if r.data.params.get("baseline") == "True"]
    assert len(marked) == 1 and marked[0].data.tags["finesweep.trial_id"] == baseline["trial_id"]
    steps = [m.step for m in client.get_metric_history(marked[0].info.run_id, "eval_loss")]
    assert max(steps) == 5 * EVALS_PER_TRIAL, "ASHA never stops the baseline: it trains its whole length"
    assert any(r.data.tags.get("finesweep.end_state", "").startswith("stopped_early") for r in trials)
    assert baseline["baseline_won"] == (summary["best"]["trial_id"] == baseline["trial_id"])
    assert 0 <= baseline["test"]["accuracy"] <= 1 and baseline["winner_test"] == {
        k: summary["test_metrics"]["full"][k] for k in ("accuracy", "f1_macro", "loss")}
    expected = round(100 * (baseline["winner_test"]["accuracy"] - baseline["test"]["accuracy"]), 2)
    # The baseline trial trained a trial's share: its test difference is reported as such, never as a gain.
    assert baseline["metric"] == "accuracy" and baseline["difference"] == expected and baseline["gain"] is None
    parent = client.get_run(state["parent_run_id"]).data
    assert parent.metrics["baseline_test_accuracy"] == baseline["test"]["accuracy"]
    assert not [name for name in parent.metrics if "gain" in name], "no gain where nothing trained at equal time"
    assert not re.search(r"\b(better|worse|gains?)\b", baseline["sentence"], re.IGNORECASE), baseline["sentence"]
    same = (summary["best"]["trial_id"], summary["best"]["step"]) == (baseline["trial_id"], baseline["step"])
    assert baseline["footing"] == ("same_checkpoint" if same else "unequal")
    if same:
        assert baseline["difference_interval"] is None and "test_difference_accuracy_low" not in parent.metrics
    else:
        low, high = baseline["difference_interval"]
        assert low <= baseline["difference"] <= high and "95% interval" in baseline["sentence"]
        test_rows = re.search(r"splits: train \d+, validation \d+, test (\d+)", result.stdout)
        assert baseline["test_rows"] == int(test_rows.group(1)), "every row of the test split, once"
        assert parent.metrics["test_difference_accuracy"] == baseline["difference"]
        assert (parent.metrics["test_difference_accuracy_low"], parent.metrics["test_difference_accuracy_high"]) \
            == (low, high)
    assert parent.tags["finesweep.baseline_trial"] == baseline["trial_id"]
    assert parent.tags["finesweep.baseline_footing"] == baseline["footing"]
    # The samples and seconds behind each arm, in the summary and on the parent run, from Tune's own results.
    results = tune_results(sweep_dir)
    base_results = results[f"trial-{baseline['trial_id']}"]
    arms = baseline["arms"]
    assert arms["baseline"] == {"samples": baseline["step"] * 8,
                                "seconds": round(max(r["time_total_s"] for r in base_results if "eval_loss" in r), 1)}
    assert arms["export"]["samples"] == summary["best"]["step"] * summary["best"]["params"]["effective_batch_size"]
    for arm in ("export", "baseline"):
        assert parent.metrics[f"{arm}_training_samples"] == arms[arm]["samples"]
        assert parent.metrics[f"{arm}_training_seconds"] == arms[arm]["seconds"]
    card = (sweep_dir / "export" / "README.md").read_text()
    console = " ".join(result.stdout.split())
    assert "## Against the baseline" in card
    for sentence in baseline["sentences"]:
        assert sentence in card and " ".join(sentence.split()) in console
    assert "The floor: always answering the test split's most frequent class scores accuracy" in baseline["sentence"]
    # The winner's trial against the baseline's at equal training, from Tune's own results.
    evaluations = {trial.removeprefix("trial-"): [r for r in found if "eval_loss" in r] for trial, found in results.items()}
    pair = None if baseline["baseline_won"] else paired(
        [History(trial, "", tuple((r["step"] * r["config"]["effective_batch_size"], r["eval_loss"]) for r in found),
                 tuple(r["time_total_s"] for r in found)) for trial, found in evaluations.items()],
        origin({**summary["best"], "exploitation": summary["exploitation"]}), baseline["trial_id"], "min")
    recipe = baseline["recipe_effect"]
    assert (recipe and {k: recipe[k] for k in pair.as_dict()}) == (pair.as_dict() if pair else None)
    if pair:
        assert parent.metrics["recipe_effect_eval_loss_tuned"] == pair.tuned
        assert parent.metrics["recipe_effect_eval_loss_baseline"] == pair.baseline
    assert f"trial-{baseline['trial_id']} *" in console and "* the baseline: the recipe a user would run" in console


def test_the_summary_and_the_parent_run_time_each_phase_of_the_sweep(finished_sweep):
    _, sweep_dir, _ = finished_sweep
    summary = json.loads((sweep_dir / "summary.json").read_text())
    phases, wall = summary["phase_seconds"], summary["wall_seconds"]
    assert set(phases) == {"data", "probe", "search", "export"}
    assert all(seconds > 0 for seconds in phases.values()), phases
    # Laps and the total are each rounded to 0.1 s: their sum may pass the rounded total by that round-off only.
    assert sum(phases.values()) <= wall + 0.05 * (len(phases) + 1), (phases, wall)
    client, state = store(sweep_dir)
    metrics = client.get_run(state["parent_run_id"]).data.metrics
    assert {name: metrics[f"phase_{name}_seconds"] for name in phases} == phases
    assert metrics["sweep_wall_seconds"] == wall
    # What other work kept busy as the trials started (a local Ray's CPU trials): why trials may train less than planned
    assert 0 <= metrics["search_start_other_work_cores"] <= (os.cpu_count() or 1)
    # Every variant asked for was made: a script reads that from the summary, the parent run or the exit status 0.
    assert summary["export_complete"] is True and summary["export_not_made"] == {}
    assert client.get_run(state["parent_run_id"]).data.tags["finesweep.export_complete"] == "true"


def test_export_reloads_with_plain_transformers_and_predicts(finished_sweep):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    _, sweep_dir, _ = finished_sweep
    export = sweep_dir / "export"
    for name in ("README.md", "metrics.json", "sweep.json", "model/model.safetensors", "model-int8/model.safetensors"):
        assert (export / name).is_file(), name
    metrics = json.loads((export / "metrics.json").read_text())
    assert set(metrics) == {"full", "int8", "onnx-int8"} and 0 <= metrics["int8"]["accuracy"] <= 1
    assert all(m["latency_ms_batch1"] > 0 and m["ms_per_sample_batch32"] > 0 for m in metrics.values())
    card = (export / "README.md").read_text()
    assert "learning_rate" in card and "int8" in card and "onnxruntime.InferenceSession" in card
    for variant in ("model", "model-int8"):
        # tiny-b trains the mean-pooled head: a winner of it loads with the code its folder carries, as its card says
        remote = json.loads((export / variant / "config.json").read_text()).get("auto_map") is not None
        model = AutoModelForSequenceClassification.from_pretrained(export / variant, trust_remote_code=remote)
        tokenizer = AutoTokenizer.from_pretrained(export / variant)
        assert set(model.config.id2label.values()) == {"negative", "neutral", "positive"}
        with torch.no_grad():
            # model.device: on a GPU machine bitsandbytes puts the int8 model on CUDA, as the card's snippet says
            logits = model(**tokenizer(["i love this great movie"], return_tensors="pt").to(model.device)).logits
        assert logits.shape == (1, 3)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(export / "model-onnx-int8" / "model.onnx"))
    inputs = AutoTokenizer.from_pretrained(export / "model-onnx-int8")(["i love this great movie"], return_tensors="np")
    assert session.run(["logits"], {i.name: inputs[i.name] for i in session.get_inputs()})[0].shape == (1, 3)


def test_the_export_names_the_variant_to_deploy_everywhere(finished_sweep):
    """deploy.json, the model card, the parent run and summary.json name one variant: the fastest at batch 1 whose
    accuracy is within export.max_metric_drop of full precision's."""
    _, sweep_dir, _ = finished_sweep
    export = sweep_dir / "export"
    metrics, deploy = (json.loads((export / name).read_text()) for name in ("metrics.json", "deploy.json"))
    variant = deploy["variant"]
    within = [v for v, m in metrics.items() if metrics["full"]["accuracy"] - m["accuracy"] <= 0.01]
    assert variant == min(within, key=lambda v: metrics[v]["latency_ms_batch1"])
    assert deploy["speedup_batch1"] == pytest.approx(metrics["full"]["latency_ms_batch1"] / metrics[variant]["latency_ms_batch1"])
    assert f"## Deploy this\n\n**`{'model' if variant == 'full' else 'model-' + variant}`** ({variant})" in (export / "README.md").read_text()
    assert json.loads((sweep_dir / "summary.json").read_text())["deploy"]["variant"] == variant
    client, state = store(sweep_dir)
    parent = client.get_run(state["parent_run_id"]).data
    assert parent.tags["finesweep.deploy_variant"] == variant
    assert parent.metrics["deploy_speedup_batch1"] == pytest.approx(deploy["speedup_batch1"])


def test_predict_and_status_commands(finished_sweep):
    folder, sweep_dir, run = finished_sweep
    assert "Memory probe" in run.stdout and "Trials" in run.stdout and "Test split" in run.stdout
    predicted = finesweep("predict", str(sweep_dir / "export" / "model"), "so happy and great", cwd=folder)
    assert predicted.returncode == 0, predicted.stderr
    assert any(label in predicted.stdout for label in ("negative", "neutral", "positive"))
    predicted = finesweep("predict", str(sweep_dir / "export" / "model-onnx-int8"), "so happy and great", cwd=folder)
    assert predicted.returncode == 0 and any(label in predicted.stdout for label in ("negative", "neutral", "positive"))
    status = finesweep("status", "sweep.yaml", cwd=folder)
    assert status.returncode == 0, status.stderr
    best = json.loads((sweep_dir / "summary.json").read_text())["best"]
    assert status.stdout.count("trial-") == NUM_TRIALS + 1  # a row each, and the best by the name its row has
    assert f"best: trial-{best['trial_id']} at step {best['step']}" in status.stdout
    # The sweep ranks by eval_loss (min); --metric eval_accuracy alone ranks the way accuracy is better.
    by_accuracy = finesweep("status", "sweep.yaml", "--metric", "eval_accuracy", cwd=folder)
    assert by_accuracy.returncode == 0, by_accuracy.stderr
    lines = by_accuracy.stdout.splitlines()
    header = next(line for line in lines if "best eval_accuracy" in line).split("┃")  # the heading row
    column = next(i for i, cell in enumerate(header) if "best eval_accuracy" in cell)
    cells = [line.split("│")[column].strip() for line in lines if "trial-" in line and "│" in line]
    accuracies = [float(cell) for cell in cells if cell != "-"]
    assert len(accuracies) >= 2 and accuracies == sorted(accuracies, reverse=True), by_accuracy.stdout


def test_each_exported_variant_is_a_registered_model_version(finished_sweep):
    """full, int8 and onnx-int8 are versions of the registered model `tiny`, with test metrics as tags and the
    variant as alias; the registered full model loads through MLflow's transformers flavor and predicts a label, the
    onnx-int8 one through its onnx flavor as the int8 graph."""
    import mlflow

    _, sweep_dir, _ = finished_sweep
    client, state = store(sweep_dir)
    metrics = json.loads((sweep_dir / "export" / "metrics.json").read_text())
    versions = {v.tags["finesweep.variant"]: v for v in client.search_model_versions("name = 'tiny'")}
    assert set(versions) == {"full", "int8", "onnx-int8"}
    for variant, version in versions.items():
        assert version.run_id == state["parent_run_id"]
        assert float(version.tags["test_accuracy"]) == pytest.approx(metrics[variant]["accuracy"], rel=1e-5)
        assert client.get_model_version_by_alias("tiny", variant).version == version.version
    mlflow.set_tracking_uri(state["tracking_uri"])
    mlflow.set_registry_uri(state["tracking_uri"])
    classify = mlflow.transformers.load_model("models:/tiny@full")
    assert classify("so happy and great")[0]["label"] in {"negative", "neutral", "positive"}
    graph = mlflow.onnx.load_model("models:/tiny@onnx-int8")
    assert "MatMulInteger" in {node.op_type for node in graph.graph.node}


def test_export_command_exports_a_finished_sweep_again(finished_sweep, tmp_path):
    folder, sweep_dir, _ = finished_sweep
    client, _ = store(sweep_dir)
    before = len(client.search_model_versions("name = 'tiny'"))
    result = finesweep("export", "sweep.yaml", "--quantize", "nf4", "--out", str(tmp_path / "again"), cwd=folder)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert len(client.search_model_versions("name = 'tiny'")) == before + 2  # full and nf4: new versions
    assert client.get_model_version_by_alias("tiny", "nf4").tags["finesweep.variant"] == "nf4"
    metrics = json.loads((tmp_path / "again" / "metrics.json").read_text())
    assert set(metrics) == {"full", "nf4"} and (tmp_path / "again" / "model-nf4" / "model.safetensors").is_file()
    assert "nf4" in (tmp_path / "again" / "README.md").read_text()
    bad = finesweep("export", "sweep.yaml", "--quantize", "fp8", cwd=folder)
    assert bad.returncode == 2 and "--quantize: fp8" in bad.stderr and "Traceback" not in bad.stderr


FAILING_ONNX_EXPORT = """
import sys
from finesweep.search import cli
from finesweep.trainer.serving import quantize as quantize_module

real_quantize = quantize_module.quantize


def quantize(full_dir, method, out_dir, task):
    if method.value == "onnx-int8":
        raise RuntimeError("the exporter cannot trace this architecture")
    return real_quantize(full_dir, method, out_dir, task)


quantize_module.quantize = quantize
sys.argv = ["finesweep", *sys.argv[1:]]
cli.main()
"""


def test_a_variant_that_cannot_be_made_is_one_paragraph_and_exit_status_3(finished_sweep, tmp_path):
    """The real CLI with a fault injected into one exporter: the console says which variant, why, what was kept and
    what to do, in one paragraph and without a traceback; the traceback is in the sweep's log file; the card says
    the export is incomplete; the exit status is 3."""
    from finesweep.search.cli import EXPORT_INCOMPLETE_EXIT

    folder, sweep_dir, _ = finished_sweep
    out = tmp_path / "again"
    done = subprocess.run([sys.executable, "-c", FAILING_ONNX_EXPORT, "export", "sweep.yaml", "--quantize",
                           "onnx-int8,nf4", "--out", str(out)], cwd=folder, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    console = done.stdout + done.stderr
    assert done.returncode == EXPORT_INCOMPLETE_EXIT == 3, console[-3000:]
    assert "Traceback" not in console
    paragraph = " ".join(console.split())  # rich wraps the paragraph at the terminal's width
    assert "onnx-int8 could not be made (RuntimeError: the exporter cannot trace this architecture)" in paragraph
    assert "holds full, nf4 instead" in paragraph and "finesweep export <sweep folder> --quantize onnx-int8" in paragraph
    assert "the traceback is in" in paragraph and "finesweep.log" in paragraph
    logged = (sweep_dir / "finesweep.log").read_text()
    assert "Traceback" in logged and "the exporter cannot trace this architecture" in logged
    assert set(json.loads((out / "metrics.json").read_text())) == {"full", "nf4"}
    assert "**Incomplete export**: not made: `onnx-int8`" in (out / "README.md").read_text()


def test_ui_serves_the_sweep_experiment_on_loopback(finished_sweep):
    folder, _, _ = finished_sweep
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "finesweep.search.cli", "ui", "sweep.yaml", "--port", str(port)],
                              cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        body = get_json(f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/get-by-name?experiment_name=tiny", 60)
        assert body["experiment"]["name"] == "tiny"
    finally:
        server.terminate()
        server.wait(timeout=30)
    with pytest.raises(OSError):  # stopping `finesweep ui` stopped the server it started
        get_json(f"http://127.0.0.1:{port}/health", 3)


def test_bad_sweep_file_exits_2_with_a_clear_message_and_no_traceback(tmp_path):
    (tmp_path / "bad.yaml").write_text("name: x\ndata: {path: d.csv, splits: {train: 0.9, validation: 0.2, test: 0.1}}\nmodels: []\n")
    result = finesweep("run", "bad.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr + result.stdout
    assert "data.splits: split fractions must sum to at most 1" in result.stderr
    assert "models:" in result.stderr


def test_missing_data_file_exits_2_naming_the_file(tmp_path):
    model = tiny.build_tiny_classifier(tmp_path / "model")
    (tmp_path / "s.yaml").write_text(f"name: x\ndata: {{path: nowhere.csv}}\nmodels: [{{name: m, path: {model}}}]\n")
    result = finesweep("data", "s.yaml", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "nowhere.csv" in result.stderr and "Traceback" not in result.stderr


def test_schema_command_prints_the_json_schema(tmp_path):
    result = finesweep("schema", cwd=tmp_path)
    assert result.returncode == 0
    assert json.loads(result.stdout)["title"] == "finesweep sweep file"


CAUSAL_SWEEP = """
name: tiny-lm
seed: 3
output_root: runs
data:
  path: instructions.csv
  task: causal_lm
  splits: {train: 0.8, validation: 0.1, test: 0.1}
models:
  - {name: gpt, path: model}
space:
  learning_rate: {low: 1.0e-3, high: 1.0e-2, log: true}
  effective_batch_size: [8]
  precision: [fp32]
  method: [full, lora]
  lora_r: [4]
  lora_alpha: [8]
search:
  algorithm: random
  num_trials: 3
  eval_every_steps: 5
  max_steps: 10
resources: {cpus_per_trial: 1, memory_budget: 4GiB}
export: {quantization: [int8]}
"""


@pytest.mark.slow  # about 70 s: the GGUF and QLoRA sweeps of the default suite train causal LMs end to end too
def test_causal_lm_instruction_tuning_end_to_end(tmp_path):
    """Prompt + response data, loss on the response only, LoRA or full; exported model generates."""
    tiny.build_tiny_causal_lm(tmp_path / "model")
    tiny.write_csv(tmp_path / "instructions.csv", tiny.instruction_rows(300))
    (tmp_path / "sweep.yaml").write_text(CAUSAL_SWEEP)
    result = finesweep("run", "sweep.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sweep_dir = tmp_path / "runs" / "tiny-lm"
    metrics = json.loads((sweep_dir / "export" / "metrics.json").read_text())
    assert set(metrics) == {"full", "int8"}
    assert metrics["full"]["perplexity"] > 1 and abs(metrics["int8"]["loss"] - metrics["full"]["loss"]) < 0.1
    client, state = store(sweep_dir)
    trials = client.search_runs([state["experiment_id"]], filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")
    assert len(trials) == 3
    assert all(client.get_metric_history(r.info.run_id, "eval_perplexity") for r in trials)
    # The baseline's comparison of a causal LM also measures the untuned base model: what fine-tuning added.
    baseline = json.loads((sweep_dir / "summary.json").read_text())["baseline"]
    untuned = baseline["untuned_test"]["perplexity"]
    assert untuned > baseline["winner_test"]["perplexity"] > 1, "a few steps of fine-tuning lower the perplexity"
    assert client.get_run(state["parent_run_id"]).data.metrics["untuned_test_perplexity"] == untuned
    assert "| untuned base model |" in (sweep_dir / "export" / "README.md").read_text()
    predicted = finesweep("predict", str(sweep_dir / "export" / "model"), "name the colour red number 7", cwd=tmp_path)
    assert predicted.returncode == 0 and '"generated"' in predicted.stdout, predicted.stderr


LIMIT = 95  # seconds: --time-limit of the test below


def test_a_time_limit_bounds_the_command_its_budget_stops_running_trials_and_the_export_still_happens(tmp_path):
    """`run --time-limit 95s`: the search gets what data, probe and the export's estimate leave (about 35 s on a busy
    2-core machine, past a trial worker's start and first evaluation, with room for data that reads slowly beside
    other work); its end cuts the running trials."""
    tiny.classification_folder(tmp_path)
    # No baseline: it trains the Trainer's 3 epochs, not max_steps, and may end before the budget does; no plateau stop either. No
    # further training of the winner: the whole budget is the trials' (tests/search/tuning/test_exploit.py covers it).
    sweep = (SWEEP.replace(f"num_trials: {NUM_TRIALS}", "num_trials: 2\n  fit_to_budget: false\n  baseline: \"off\""
                                                        "\n  plateau_patience: null\n  exploit: {share: 0}")
             .replace(f"max_steps: {5 * EVALS_PER_TRIAL}", "max_steps: 100000"))
    (tmp_path / "sweep.yaml").write_text(sweep)
    started = time.monotonic()
    result = finesweep("run", "sweep.yaml", "--time-limit", f"{LIMIT}s", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    waited = time.monotonic() - started
    sweep_dir = tmp_path / "runs" / "tiny"
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert summary["plan"]["time_limit_seconds"] == LIMIT
    assert f"plan: the time limit {LIMIT}s ({LIMIT} s) divided: data and probe" in " ".join(result.stdout.split())
    assert f"of the {LIMIT} s limit" in result.stdout
    client, state = store(sweep_dir)
    budget = state["plan"]["budget_seconds"]  # what the plan decided, beside the file as written
    assert state["config"]["search"]["time_limit"] == f"{LIMIT}s" and state["config"]["search"]["time_budget_minutes"] \
        is None and 0 < budget < LIMIT - summary["phase_seconds"]["data"]
    # The search's phase ends with its budget (plus Ray's start and the records); the export's is an estimate.
    assert summary["phase_seconds"]["search"] < budget + 30 and waited < LIMIT + 60
    trials = client.search_runs([state["experiment_id"]], filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")
    assert trials and all(r.info.status != "RUNNING" for r in trials)
    assert any(r.data.tags["finesweep.end_state"].startswith("stopped_by_time_budget_at_step_") for r in trials)
    assert (sweep_dir / "export" / "model" / "model.safetensors").is_file()
    working = _trial_working_dirs(sweep_dir)  # a trial stopped by the budget ends with no clean-up of its own
    assert working and not [str(p) for folder in working for p in folder.glob("finesweep-*")]


def test_the_run_prints_its_plan_and_keeps_it_in_the_summary_and_on_the_parent_run(finished_sweep):
    _, sweep_dir, result = finished_sweep
    assert "Plan:" in result.stdout and "predicted:" in result.stdout, result.stdout[-3000:]
    plan = json.loads((sweep_dir / "summary.json").read_text())["plan"]
    # No budget: the trials keep the file's length and number; the plan only predicts.
    assert (plan["max_steps"], plan["num_trials"]) == (5 * EVALS_PER_TRIAL, NUM_TRIALS)
    assert plan["combinations"] and all(c["seconds_per_step"] > 0 for c in plan["combinations"].values())
    assert all(key.split("|")[0] in {"tiny-a", "tiny-b"} for key in plan["combinations"])
    client, state = store(sweep_dir)
    parent = client.get_run(state["parent_run_id"])
    assert parent.data.metrics["plan_predicted_wall_seconds"] == plan["predicted_wall_seconds"] > 0
    assert "plan.json" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    # The export's steps as the plan predicted them, and as they took: each beside the other, on the parent run too.
    steps = json.loads((sweep_dir / "summary.json").read_text())["export_steps"]
    assert set(steps) == set(plan["export_steps"]) == {"full", "baseline", "int8", "onnx-int8"}
    assert sum(plan["export_steps"].values()) == pytest.approx(plan["export_seconds"], abs=0.3)
    assert all(steps[name]["predicted"] == plan["export_steps"][name] for name in steps)
    assert all(steps[name]["seconds"] > 0 for name in ("full", "int8", "onnx-int8")), steps
    # (a re-export of this sweep by another test logs its own after them: the run's history holds both)
    assert all(step["seconds"] in [m.value for m in client.get_metric_history(parent.info.run_id,
                                                                                f"export_seconds_{name}")]
               for name, step in steps.items())
    # What they teach the next plan of these candidates on this machine (other sweeps of the tiny models in this
    # test session may have added their own steps under the same key since).
    learned = export_calibration.ratios(plan["export_calibration"]["key"])
    timed = {name for name, step in steps.items() if step["seconds"] >= export_calibration.MIN_STEP_SECONDS}
    assert timed and timed <= set(learned), (timed, learned)
    assert all(export_calibration.RATIO_BOUNDS[0] <= ratio <= export_calibration.RATIO_BOUNDS[1]
               for ratio in learned.values())
