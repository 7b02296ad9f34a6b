"""One trial: exact effective batches, and a real Trainer run reporting each evaluation with its checkpoint."""

from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path

import pytest

from finesweep.spaces import ModelCandidate, SweepConfig
from finesweep.trainer import data
from finesweep.trainer.row_scores import RowScores
from finesweep.trainer.trial import BatchPlan, TrialPlan, plan_batches, train
from tests import tiny


@pytest.mark.parametrize("effective,max_micro,devices,expected", [
    (32, 32, 1, (32, 1)), (32, 12, 1, (8, 4)), (24, 16, 1, (12, 2)), (7, 4, 1, (1, 7)), (8, 64, 1, (8, 1)),
    (32, 8, 2, (8, 2)),
])
def test_plan_batches_makes_the_effective_batch_exactly(effective, max_micro, devices, expected):
    plan = plan_batches(effective, max_micro, devices)
    assert (plan.micro, plan.accumulation) == expected
    assert plan.micro * plan.accumulation * plan.devices == effective and plan.micro <= max_micro


def test_plan_batches_rejects_an_uneven_split_over_devices():
    with pytest.raises(ValueError, match="cannot be split evenly"):
        plan_batches(9, 4, 2)


class RecordingSink:
    def __init__(self):
        self.logs: list[tuple[int, dict]] = []
        self.evaluations: list[tuple[int, dict, bool]] = []

    def on_log(self, step, metrics):
        self.logs.append((step, metrics))

    def on_evaluation(self, step, metrics, checkpoint_dir: Path):
        self.evaluations.append((step, metrics, (checkpoint_dir / "model.safetensors").is_file()))


def tokenized_splits(tmp_path, sentiment_csv, model_dir):
    from transformers import AutoTokenizer

    config = SweepConfig.model_validate({"name": "t", "data": {"path": str(sentiment_csv), "splits": {"train": 0.6, "validation": 0.2, "test": 0.2}},
                                         "models": [{"name": "t", "path": str(model_dir)}]})
    prepared = data.prepare(config.data, 0, tmp_path / "cache")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return prepared, data.tokenize(prepared, tokenizer, config.data.task, 32, tmp_path / "cache")


def make_plan(tmp_path, model_dir, tokenized_dir, labels, **overrides) -> TrialPlan:
    values = dict(candidate=ModelCandidate(name="t", path=str(model_dir)).model_dump(), task="classification",
                  label_names=labels, tokenized_dir=str(tokenized_dir), output_dir=str(tmp_path / "out"),
                  precision="fp32", method="full", learning_rate=1e-2, weight_decay=0.0, warmup_ratio=0.0,
                  batch=BatchPlan(effective=16, micro=8, accumulation=2), eval_batch=32, max_steps=12, eval_every_steps=4, seed=0, threads=1)
    values.update(overrides)
    return TrialPlan(**values)


def test_a_trial_reports_every_evaluation_with_its_checkpoint(tmp_path, sentiment_csv, tiny_classifier):
    prepared, tokenized = tokenized_splits(tmp_path, sentiment_csv, tiny_classifier)
    sink = RecordingSink()
    train(make_plan(tmp_path, tiny_classifier, tokenized, prepared.label_names), sink)
    assert [step for step, _, _ in sink.evaluations] == [4, 8, 12]
    assert all(saved for _, _, saved in sink.evaluations)
    assert all({"eval_loss", "eval_accuracy", "eval_f1_macro"} <= set(m) for _, m, _ in sink.evaluations)
    # Each checkpoint holds its evaluation's rows, in the split's order, whose means are the evaluation's scores.
    validation_rows = len(data.load_tokenized(tokenized)["validation"])
    for step, metrics, _ in sink.evaluations:
        rows = RowScores.load(tmp_path / "out" / f"checkpoint-{step}")
        if rows is None:  # save_total_limit 1: only the latest checkpoint is left
            continue
        assert len(rows.loss) == len(rows.correct) == validation_rows
        assert sum(rows.correct) / validation_rows == pytest.approx(metrics["eval_accuracy"])
        assert sum(rows.loss) / validation_rows == pytest.approx(metrics["eval_loss"], rel=1e-3)
    assert RowScores.load(tmp_path / "out" / "checkpoint-12") is not None
    assert sink.logs and all("loss" in m or "train_loss" in m for _, m in sink.logs)
    for _, metrics, _ in sink.evaluations:  # non-padding tokens per sample: between 2 and max_seq_len (32)
        per_sample = metrics["train_tokens_per_second_so_far"] / metrics["train_samples_per_second_so_far"]
        assert 2 <= per_sample <= 32
    peaks = [m["peak_memory_mib"] for _, m, _ in sink.evaluations]
    assert 10 < peaks[0] <= peaks[-1] < 24 * 1024  # this process's resident peak, in MiB, never shrinking


def test_a_trial_batches_rows_of_similar_length_together_unless_told_not_to(tmp_path, tiny_classifier):
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from finesweep.trainer.trial import _build_trainer

    rng = random.Random(0)
    rows = [{**row, "text": " ".join([row["text"]] + rng.choices(tiny.FILLER, k=rng.randrange(12)))}
            for row in tiny.sentiment_rows(300)]  # 6 to 17 words
    prepared, tokenized = tokenized_splits(tmp_path, tiny.write_csv(tmp_path / "varied.csv", rows), tiny_classifier)

    def one_epoch(group_by_length: bool) -> tuple[int, int, bool]:
        """(token positions of the padded batches, real tokens, whether transformers' length sampler drew them)"""
        plan = make_plan(tmp_path, tiny_classifier, tokenized, prepared.label_names, group_by_length=group_by_length)
        trainer = _build_trainer(plan, RecordingSink())
        batches = list(trainer.get_train_dataloader())
        grouped = isinstance(trainer._get_train_sampler(), LengthGroupedSampler)
        return (sum(b["input_ids"].numel() for b in batches), sum(int(b["attention_mask"].sum()) for b in batches),
                grouped)

    grouped_positions, grouped_tokens, grouped = one_epoch(True)
    random_positions, random_tokens, by_length = one_epoch(False)
    assert grouped and not by_length
    assert grouped_tokens == random_tokens  # every training row once either way
    assert grouped_positions < 0.9 * random_positions  # less padding


def test_a_trial_evaluates_the_validation_split_longest_rows_first_with_less_padding(tmp_path, tiny_classifier):
    from finesweep.trainer.trial import _build_trainer

    rng = random.Random(1)
    rows = [{**row, "text": " ".join([row["text"]] + rng.choices(tiny.FILLER, k=rng.randrange(12)))}
            for row in tiny.sentiment_rows(300)]
    prepared, tokenized = tokenized_splits(tmp_path, tiny.write_csv(tmp_path / "varied.csv", rows), tiny_classifier)
    plan = make_plan(tmp_path, tiny_classifier, tokenized, prepared.label_names, eval_batch=8)
    for group_by_length in (True, False):  # the baseline's Trainer-like sampling evaluates the same way
        trainer = _build_trainer(dataclasses.replace(plan, group_by_length=group_by_length), RecordingSink())
        batches = list(trainer.get_eval_dataloader())
        real = [int(b["attention_mask"].sum(dim=1).max()) for b in batches]
        assert real == sorted(real, reverse=True), "longest rows first"
        assert sum(len(b["input_ids"]) for b in batches) == len(data.load_tokenized(tokenized)["validation"])
    shuffled = data.load_tokenized(tokenized)["validation"].shuffle(seed=0)
    random_positions = sum(8 * max(len(ids) for ids in shuffled[i:i + 8]["input_ids"])
                           for i in range(0, len(shuffled), 8))
    assert sum(b["input_ids"].numel() for b in batches) < 0.9 * random_positions, "less padding than random batches"


def test_lora_trial_trains_only_adapters_and_reports(tmp_path, sentiment_csv, tiny_classifier):
    prepared, tokenized = tokenized_splits(tmp_path, sentiment_csv, tiny_classifier)
    sink = RecordingSink()
    plan = make_plan(tmp_path, tiny_classifier, tokenized, prepared.label_names, method="lora", lora_r=4, lora_alpha=8,
                     max_steps=4, eval_every_steps=4)
    train(plan, sink)
    assert [step for step, _, _ in sink.evaluations] == [4]
    assert plan.params()["micro_batch"] * plan.params()["gradient_accumulation"] == plan.params()["effective_batch_size"]


def test_the_same_plan_trains_to_the_same_numbers(tmp_path, sentiment_csv, tiny_classifier):
    """The new head is initialised before the Trainer seeds: the trial must seed first, or runs differ."""
    prepared, tokenized = tokenized_splits(tmp_path, sentiment_csv, tiny_classifier)
    losses = []
    for attempt in range(2):
        sink = RecordingSink()
        train(make_plan(tmp_path / str(attempt), tiny_classifier, tokenized, prepared.label_names, max_steps=4,
                        eval_every_steps=4), sink)
        losses.append(sink.evaluations[0][1]["eval_loss"])
    assert losses[0] == losses[1]


def test_a_run_that_ends_by_a_deadline_trains_nothing_once_an_evaluation_would_end_past_it(tmp_path, sentiment_csv,
                                                                                          tiny_classifier, monkeypatch):
    from finesweep.trainer import trial

    prepared, tokenized = tokenized_splits(tmp_path, sentiment_csv, tiny_classifier)
    sink = RecordingSink()
    plan = make_plan(tmp_path, tiny_classifier, tokenized, prepared.label_names, finish_by=time.time() + 60,
                     evaluation_seconds=120.0, evaluations=2)
    assert train(plan, sink) == {}
    assert sink.logs == [] and sink.evaluations == []
    # Asked again once the model is loaded: a load that ate the last seconds (a starved worker's) trains nothing.
    build = trial._build_trainer

    def slow_build(*args):
        time.sleep(1.5)
        return build(*args)

    monkeypatch.setattr(trial, "_build_trainer", slow_build)
    assert train(dataclasses.replace(plan, finish_by=time.time() + 11, evaluation_seconds=10.0), sink) == {}
    assert sink.logs == [] and sink.evaluations == []
    monkeypatch.setattr(trial, "_build_trainer", build)
    in_time = dataclasses.replace(plan, finish_by=time.time() + 600, evaluation_seconds=1.0)
    train(in_time, sink)
    assert sink.evaluations, "with time for a step and an evaluation it trains"


def test_an_exploding_loss_stops_the_trial_as_diverged(tmp_path, sentiment_csv, tiny_classifier):
    from finesweep.trainer.trial import DivergedError

    prepared, tokenized = tokenized_splits(tmp_path, sentiment_csv, tiny_classifier)
    candidate = ModelCandidate(name="t", path=str(tiny_classifier), config_overrides={"initializer_range": 1e37})
    plan = make_plan(tmp_path, tiny_classifier, tokenized, prepared.label_names, candidate=candidate.model_dump())
    sink = RecordingSink()
    with pytest.raises(DivergedError, match=r"training loss became .* at step 1 \(the limit is 110"):
        train(plan, sink)
    assert sink.evaluations == []


class CopyingSink(RecordingSink):
    """Keeps a copy of each evaluation's checkpoint (the Trainer rotates its own), as Tune keeps reported ones."""

    def __init__(self, keep: Path):
        super().__init__()
        self.keep = keep

    def on_evaluation(self, step, metrics, checkpoint_dir: Path):
        import shutil

        super().on_evaluation(step, metrics, checkpoint_dir)
        shutil.copytree(checkpoint_dir, self.keep / f"step-{step}")


def test_a_trial_restarted_from_a_checkpoint_trains_only_the_steps_left(tmp_path, sentiment_csv, tiny_classifier):
    prepared, tokenized = tokenized_splits(tmp_path, sentiment_csv, tiny_classifier)
    first = CopyingSink(tmp_path / "kept")
    train(make_plan(tmp_path, tiny_classifier, tokenized, prepared.label_names, max_steps=8), first)
    assert [step for step, _, _ in first.evaluations] == [4, 8]

    middle = RecordingSink()
    train(make_plan(tmp_path, tiny_classifier, tokenized, prepared.label_names, max_steps=8,
                    output_dir=str(tmp_path / "again"), resume_from=str(tmp_path / "kept" / "step-4")), middle)
    assert [step for step, _, _ in middle.evaluations] == [8]
    # killed after its last report: restarted from its final checkpoint, it trains no further step (it did one)
    final = RecordingSink()
    train(make_plan(tmp_path, tiny_classifier, tokenized, prepared.label_names, max_steps=8,
                    output_dir=str(tmp_path / "last"), resume_from=str(tmp_path / "kept" / "step-8")), final)
    assert final.evaluations == [] and final.logs == []
