"""Every Ray internal finesweep relies on (search/tuning/ray_compat.py), pinned against the installed Ray: a release
that renames or reshapes one fails here, naming the version, before a sweep fails somewhere far from the cause."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from finesweep.search.tuning import ray_compat

RAY = __import__("ray").__version__
CHECKED = f"(checked on ray 2.60; installed: ray {RAY}): update search/tuning/ray_compat.py"


def _tiny_trainable(config):
    """Two evaluations with a checkpoint each, and a look at Ray Train's queue from inside the Tune session."""
    from ray import tune
    from ray.tune.integration.ray_train import TuneReportCallback

    queue = ray_compat.tune_report_queue(TuneReportCallback())
    queue_ok = all(callable(getattr(queue, name, None)) for name in ("put", "get_nowait", "empty"))
    for step in (1, 2):
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "state.txt").write_text(str(step))
            tune.report({"step": step, "eval_accuracy": step / 4, "queue_ok": queue_ok},
                        checkpoint=tune.Checkpoint.from_directory(folder))


@pytest.fixture(scope="module")
def tiny_experiment(tmp_path_factory):
    """A real Tune experiment on a local Ray started as finesweep starts it."""
    import ray
    from ray import tune

    from finesweep.search.tuning import ray_cluster

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ray_cluster, "usable_cores", lambda: 1)  # a job allowed one of the machine's cores
        ray_cluster.start_ray(None)
    ray_cluster.tune_environment()
    storage = tmp_path_factory.mktemp("tune")
    try:
        tuner = tune.Tuner(tune.with_resources(_tiny_trainable, {"cpu": 1}),
                           param_space={"model": "m", "effective_batch_size": 4},
                           run_config=tune.RunConfig(name="compat", storage_path=str(storage), verbose=0))
        results = tuner.fit()
        yield (storage / "compat", results, [node["NodeManagerAddress"] for node in ray.nodes()],
               ray.cluster_resources().get("CPU"))
    finally:
        ray.shutdown()


def test_a_local_ray_node_binds_loopback_with_the_cores_the_plan_counted(tiny_experiment):
    _, _, addresses, cpus = tiny_experiment
    assert addresses == ["127.0.0.1"], f"ray.init(**local_node_on_loopback()) no longer binds loopback {CHECKED}"
    assert cpus == 1  # cores.usable_cores, not the machine's count that Ray takes by default


def test_saved_trials_reads_tunes_experiment_state(tiny_experiment):
    experiment, results, _, _ = tiny_experiment
    saved = ray_compat.saved_trials(experiment)
    assert len(saved) == 1, f"Tune's experiment_state JSON changed shape {CHECKED}"
    trial, result = saved[0], results[0]
    assert trial.status == "TERMINATED" and trial.folder.is_dir(), f"trial status or relative_logdir moved {CHECKED}"
    assert trial.trial_id in trial.folder.name
    assert trial.checkpoint == Path(result.checkpoint.path).name, f"last_result.checkpoint_dir_name moved {CHECKED}"
    assert (trial.folder / trial.checkpoint / "state.txt").read_text() == "2"


def test_tunes_saved_state_files_are_found_by_kind_and_read_as_whole(tiny_experiment):
    experiment, _, _, _ = tiny_experiment
    kinds = ray_compat.state_files(experiment)
    assert {"experiment_state", "basic-variant-state"} <= set(kinds), f"Tune's state files were renamed {CHECKED}"
    assert all(ray_compat.is_whole_state_file(path) for files in kinds.values() for path in files), (
        f"Tune's state files are neither JSON nor a pickle now {CHECKED}")


def test_a_results_dataframe_holds_every_evaluation_the_continuations_model_choice_reads(tiny_experiment):
    from finesweep.search.tuning.exploit import histories

    _, results, _, _ = tiny_experiment
    [history] = histories(results, "eval_accuracy")
    assert (history.model, history.evaluations) == ("m", ((4, 0.25), (8, 0.5))), \
        f"Result.metrics_dataframe no longer holds each reported row {CHECKED}"
    assert history.trial_id == results[0].metrics["trial_id"]


def test_tune_report_callbacks_queue_is_reachable_inside_a_trial(tiny_experiment):
    _, results, _, _ = tiny_experiment
    assert results[0].metrics["queue_ok"] is True, f"TuneReportCallback's item queue moved {CHECKED}"


def test_the_train_session_dir_holds_the_trials_working_dirs(tiny_experiment):
    session_dir = ray_compat.train_session_dir()  # the fixture's Ray session is still up
    working = list(session_dir.glob("*/compat/working_dirs/*"))
    assert len(working) == 1, f"trials' working dirs are no longer under _get_ray_train_session_dir() {CHECKED}"


def test_an_actor_mixin_reaches_the_function_trainables_class():
    from ray.tune.trainable.function_trainable import wrap_function

    class Marker:
        def cleanup(self):
            self.cleaned = True
            super().cleanup()

    def trainable(config):
        return None

    wrapped = wrap_function(ray_compat.add_actor_mixin(trainable, Marker))
    assert issubclass(wrapped, Marker), f"Tune's __mixins__ hook is gone {CHECKED}"


def test_ray_trains_controller_callback_has_the_start_hook():
    hook = getattr(ray_compat.ControllerCallback, "after_controller_start", None)
    assert callable(hook), f"ControllerCallback.after_controller_start is gone {CHECKED}"


def test_asha_milestones_are_readable_from_the_scheduler():
    from ray.tune.schedulers import ASHAScheduler

    scheduler = ASHAScheduler(time_attr="training_iteration", max_t=9, grace_period=1, reduction_factor=3)
    assert ray_compat.asha_milestones_of(scheduler) == [1, 3, 9], CHECKED
