"""export_best on the tiny classifier: every file, metrics for each variant, model card, labels, predict()."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from finesweep.spaces import Task
from tests.exports import (BEST, LABELS, causal_lm_collate, causal_lm_split, classification_collate,
                           classification_split, export_config, train_classifier)

@pytest.fixture(scope="module")
def exported(tiny_classifier, tmp_path_factory):
    from transformers import AutoTokenizer

    from finesweep.search.outputs.export import export_best

    checkpoint = train_classifier(tiny_classifier, tmp_path_factory.mktemp("checkpoint-40"))
    tokenizer = AutoTokenizer.from_pretrained(tiny_classifier)
    out = tmp_path_factory.mktemp("export")
    result = export_best(
        config=export_config(tiny_classifier), checkpoint_dir=checkpoint, tokenizer_source=tiny_classifier,
        test_split=classification_split(tokenizer, 60), collate=classification_collate(tokenizer), best=BEST, out_dir=out,
    )
    return result, out


def test_export_writes_every_file(exported):
    result, out = exported
    assert result.folder == out
    for name in ["model/config.json", "model/model.safetensors", "model/tokenizer.json",
                 "model-int8/config.json", "model-int8/model.safetensors", "model-int8/tokenizer.json",
                 "metrics.json", "sweep.json", "README.md"]:
        assert (out / name).is_file(), name
    assert not list(out.rglob("*.bin"))
    assert json.loads((out / "sweep.json").read_text())["models"][0]["name"] == "tiny"


def test_export_metrics_for_full_and_int8(exported):
    result, out = exported
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics == result.metrics and set(metrics) == {"full", "int8"}
    for values in metrics.values():
        assert {"accuracy", "f1_macro", "loss", "latency_ms_per_sample", "size_bytes"} <= set(values)
    assert metrics["int8"]["size_bytes"] < metrics["full"]["size_bytes"]
    assert abs(metrics["int8"]["accuracy"] - metrics["full"]["accuracy"]) <= 0.1
    # int8 stores one byte per weight plus a scale per row, fp32 four: the linear layers shrink about 4x (the head
    # stays fp32), the whole file less (embeddings stay as they are).
    linear_ratio = metrics["full"]["linear_layers_bytes"] / metrics["int8"]["linear_layers_bytes"]
    assert 3.0 < linear_ratio < 4.0
    assert metrics["full"]["size_bytes"] / metrics["int8"]["size_bytes"] < linear_ratio


def test_each_export_step_is_timed_under_the_plans_name_for_it(exported):
    """The full model (saved, scored, timed), the references (no baseline here: nothing to score) and each variant
    (made, scored, timed): the names search/budget/export_time.py::export_steps predicts."""
    result, _ = exported
    assert set(result.seconds) == {"full", "baseline", "int8"}
    assert result.seconds["full"] > 0 and result.seconds["int8"] > 0 and result.seconds["baseline"] < 0.1


def test_export_keeps_labels_and_predicts_names(exported):
    from finesweep.trainer.serving.predict import predict

    _, out = exported
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["id2label"] == {str(i): name for i, name in enumerate(LABELS)}
    assert config["pad_token_id"] is not None
    for folder in ("model", "model-int8"):
        labels = [p["label"] for p in predict(out / folder, ["i love this great fun day", "awful sad terrible"])]
        assert set(labels) <= set(LABELS)


def test_model_card_names_params_and_both_metric_sets(exported):
    result, out = exported
    card = (out / "README.md").read_text()
    for text in ["tiny", "x.csv", "classification", "`learning_rate`", "0.00123", "`effective_batch_size`",
                 "eval_accuracy", "0.8125", "step 40", "bitsandbytes", "AutoModelForSequenceClassification",
                 '"model-int8"']:
        assert text in card, text
    rows = [line for line in card.splitlines() if line.startswith("| full ") or line.startswith("| int8 ")]
    assert len(rows) == 2
    assert f"{result.metrics['full']['accuracy']:.4g}" in rows[0]
    assert f"{result.metrics['int8']['accuracy']:.4g}" in rows[1]
    ratio = result.metrics["full"]["linear_layers_bytes"] / result.metrics["int8"]["linear_layers_bytes"]
    assert f"({ratio:.2f}x smaller)" in rows[1]


def test_the_export_warns_where_the_model_is_no_better_than_the_test_splits_most_frequent_class(exported,
                                                                                               tiny_classifier):
    from transformers import AutoTokenizer

    result, out = exported
    labels = classification_split(AutoTokenizer.from_pretrained(tiny_classifier), 60)["labels"]
    share = max(labels.count(label) for label in set(labels)) / len(labels)
    warned = [w for w in result.warnings if "no better than always answering the test split's most frequent" in w]
    assert len(warned) == (result.metrics["full"]["accuracy"] <= share)
    assert all(w in (out / "README.md").read_text() for w in warned)


def test_the_cards_metadata_block_is_what_the_hubs_card_reader_takes(exported):
    from huggingface_hub import ModelCard

    _, out = exported
    data = ModelCard((out / "README.md").read_text()).data
    assert (data.library_name, data.pipeline_tag, data.tags) == ("transformers", "text-classification", ["finesweep"])


def test_cpu_timings_load_each_variant_onto_the_cpu(exported, tiny_classifier, tmp_path):
    """What a machine with a GPU adds for every variant (the main pass ran on the GPU): its timings on the CPU."""
    from transformers import AutoTokenizer

    from finesweep.search.outputs.export import cpu_timings

    _, out = exported
    tokenizer = AutoTokenizer.from_pretrained(tiny_classifier)
    split, collate = classification_split(tokenizer, 60), classification_collate(tokenizer)
    for folder in ("model", "model-int8"):
        timings = cpu_timings(out / folder, Task.classification, split, collate)
        assert set(timings) == {"cpu_latency_ms_batch1", "cpu_ms_per_sample_batch32"}, folder
        assert all(value > 0 for value in timings.values()), folder
    # A variant timed on the CPU already (an ONNX Runtime session) keeps its figures; one that does not load has none.
    already = {"accuracy": 0.8, "latency_ms_batch1": 1.5, "ms_per_sample_batch32": 0.5}
    assert cpu_timings(out / "model", Task.classification, split, collate, already) == {
        "cpu_latency_ms_batch1": 1.5, "cpu_ms_per_sample_batch32": 0.5}
    assert cpu_timings(tmp_path / "not-a-model", Task.classification, split, collate) == {}


def test_the_card_shows_cpu_timings_and_the_cpu_deploy_pick(exported):
    from finesweep.search.outputs.card import model_card
    from finesweep.search.selection.deploy import deploy_choices, with_speedups

    result, out = exported
    metrics = {variant: dict(values) for variant, values in result.metrics.items()}
    metrics["full"].update(cpu_latency_ms_batch1=10.0, cpu_ms_per_sample_batch32=2.0)
    metrics["int8"].update(cpu_latency_ms_batch1=5.0, cpu_ms_per_sample_batch32=1.0)
    metrics["int8"]["accuracy"] = metrics["full"]["accuracy"]
    metrics = with_speedups(metrics)
    deploy = deploy_choices(metrics, Task.classification, 0.01)
    card = model_card(export_config(out / "model"), BEST, metrics, [], False, [], deploy)
    assert "| CPU ms/sample, batch 1 | CPU ms/sample, batch 32 |" in card
    row = next(line for line in card.splitlines() if line.startswith("| int8 "))
    assert "5 (2.00x)" in row and "1 (2.00x)" in row
    assert "On a CPU: **`model-int8`** (int8): fastest on the CPU at batch 1" in card


def test_drop_warnings_accuracy_absolute_perplexity_relative():
    from finesweep.search.outputs.export import drop_warnings

    cls = {"full": {"accuracy": 0.80}, "int8": {"accuracy": 0.777}, "nf4": {"accuracy": 0.795}}
    assert drop_warnings(cls, Task.classification, 0.01) == [
        "int8: accuracy fell by 0.023 (> export.max_metric_drop 0.01)"
    ]
    lm = {"full": {"perplexity": 40.0}, "int8": {"perplexity": 40.2}, "nf4": {"perplexity": 42.0}}
    warnings = drop_warnings(lm, Task.causal_lm, 0.01)
    assert len(warnings) == 1 and warnings[0].startswith("nf4: perplexity rose by 5.0%")


def test_a_variant_that_cannot_be_made_is_named_and_the_others_are_exported(tiny_causal_lm, tmp_path, monkeypatch):
    """An exporter that cannot trace the model's architecture (the fault injected here) costs that variant, not the
    export: the full model and the other variants are measured, and the warnings and the card say what is missing."""
    from transformers import AutoTokenizer

    from finesweep.search.outputs.export import export_best
    from finesweep.trainer.serving import onnx_decoder

    def cannot_trace(*_: object) -> None:
        raise RuntimeError("the exporter cannot trace this architecture")

    monkeypatch.setattr(onnx_decoder, "export_float", cannot_trace)
    tokenizer = AutoTokenizer.from_pretrained(tiny_causal_lm)
    tokenizer.pad_token = tokenizer.eos_token
    result = export_best(
        config=export_config(tiny_causal_lm, "causal_lm", ("onnx-int8", "int8"), generation_samples=0),
        checkpoint_dir=tiny_causal_lm, tokenizer_source=tiny_causal_lm, test_split=causal_lm_split(tokenizer, 12),
        collate=causal_lm_collate(tokenizer), best={**BEST, "metric": "eval_loss", "value": 5.5}, out_dir=tmp_path / "out",
    )
    assert set(result.metrics) == {"full", "int8"} and result.deploy["variant"] in result.metrics
    assert result.not_made == {"onnx-int8": "RuntimeError: the exporter cannot trace this architecture"}
    assert result.warnings[0].startswith("onnx-int8 could not be made (RuntimeError: the exporter cannot trace this "
                                         "architecture). The export in ") and "holds full, int8 instead" in result.warnings[0]
    assert not (tmp_path / "out" / "model-onnx-int8").exists()
    assert set(result.seconds) == {"full", "baseline", "onnx-int8", "int8"}, "a failed step's seconds are kept too"
    card = (tmp_path / "out" / "README.md").read_text()
    assert "**Incomplete export**: not made: `onnx-int8` (RuntimeError" in card and "> Warning: onnx-int8 could not" in card


def test_export_merges_a_lora_adapter_causal_lm(tiny_causal_lm, tmp_path):
    """A LoRA trial checkpoint (adapter only) is merged onto its base; nf4 is measured too."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from finesweep.search.outputs.export import export_best
    from finesweep.trainer.models import apply_lora

    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_causal_lm), Task.causal_lm, r=4, alpha=8, dropout=0.0)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            param.data.normal_(0, 0.05)  # a nonzero adapter, so merging changes the weights
    model.save_pretrained(tmp_path / "adapter")
    tokenizer = AutoTokenizer.from_pretrained(tiny_causal_lm)
    tokenizer.pad_token = tokenizer.eos_token
    result = export_best(
        config=export_config(tiny_causal_lm, "causal_lm", ("int8", "nf4", "none"), generation_samples=8),
        checkpoint_dir=tmp_path / "adapter",
        tokenizer_source=tiny_causal_lm, test_split=causal_lm_split(tokenizer, 12),
        collate=causal_lm_collate(tokenizer), best={**BEST, "metric": "eval_loss", "value": 5.5}, out_dir=tmp_path / "out",
    )
    assert set(result.metrics) == {"full", "int8", "nf4"}
    # A causal LM's deploy pick ranks its variants by greedy decoding, which each of them was timed at.
    assert all(m["ms_per_generated_token"] > 0 for m in result.metrics.values())
    assert result.deploy["ranked_by"] == "ms_per_generated_token" and "speedup_decode" in result.metrics["int8"]
    assert "ms/generated token" in (tmp_path / "out" / "README.md").read_text()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "model")
    assert not any("lora" in name for name, _ in merged.named_parameters())
    base = AutoModelForCausalLM.from_pretrained(tiny_causal_lm)
    assert not merged.transformer.h[0].attn.c_attn.weight.equal(base.transformer.h[0].attn.c_attn.weight)
    assert "perplexity" in (tmp_path / "out" / "README.md").read_text()
    assert result.metrics["int8"]["perplexity"] == pytest.approx(result.metrics["full"]["perplexity"], rel=0.05)
    generation = json.loads((tmp_path / "out" / "model" / "generation_config.json").read_text())
    assert generation["pad_token_id"] == tokenizer.pad_token_id and generation["eos_token_id"] == tokenizer.eos_token_id
    _assert_adapter_export_matches_merged(AutoModelForCausalLM.from_pretrained(tiny_causal_lm), tmp_path / "out", merged)
    _assert_generations(result, tmp_path / "out", ["full", "int8", "nf4"], samples=8)


def test_a_causal_lms_baseline_and_untuned_base_answer_the_prompts_the_export_answers(tiny_causal_lm, tmp_path):
    """Perplexity and generation scores before any training: the baseline's checkpoint and the untuned base model
    answer the same test prompts as the exported model, scored by the same code, beside it in
    summary.json's comparison, its sentence and the card. The baseline here is the base model's own weights, so
    the two reference rows must agree to the last digit."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from finesweep.search.outputs.export import export_best

    tuned = AutoModelForCausalLM.from_pretrained(tiny_causal_lm)
    with torch.no_grad():
        for param in tuned.parameters():
            param.add_(torch.randn_like(param) * 0.02)  # another checkpoint, as training would leave
    tuned.save_pretrained(tmp_path / "winner")
    tokenizer = AutoTokenizer.from_pretrained(tiny_causal_lm)
    tokenizer.pad_token = tokenizer.eos_token
    best = {**BEST, "metric": "eval_loss", "value": 5.5}
    baseline = {**best, "trial_id": "trial_0001", "step": 10, "value": 5.6, "checkpoint_dir": str(tiny_causal_lm)}
    result = export_best(
        config=export_config(tiny_causal_lm, "causal_lm", ("none",), generation_samples=4),
        checkpoint_dir=tmp_path / "winner", tokenizer_source=tiny_causal_lm, test_split=causal_lm_split(tokenizer, 12),
        collate=causal_lm_collate(tokenizer), best=best, out_dir=tmp_path / "out", baseline=baseline)
    against = result.baseline
    scores = ("perplexity", "loss", "gen_rouge_l", "gen_token_f1", "gen_exact_match")
    assert set(against["test"]) == set(against["untuned_test"]) == set(against["winner_test"]) == set(scores)
    assert against["untuned_test"] == against["test"], "the same weights, the same code"
    assert against["winner_test"]["gen_rouge_l"] == result.metrics["full"]["gen_rouge_l"]
    assert against["winner_test"]["perplexity"] != against["test"]["perplexity"]
    # The difference's interval from the two checkpoints' rows of the same test split (a paired bootstrap), in the
    # sentence and so in the card; no arm says it trained at equal time, so it is not called a gain.
    low, high = against["difference_interval"]
    assert against["test_rows"] == 12 and low < high and low <= against["difference"] <= high
    assert against["footing"] == "unequal" and against["gain"] is None
    assert (f"{against['difference']:+.2f} %; 95% interval {low:+.2f} to {high:+.2f} over 12 test rows"
            in against["sentence"])
    assert (f"the ROUGE-L of its greedy answers {against['untuned_test']['gen_rouge_l']:.3f} against the export's "
            f"{against['winner_test']['gen_rouge_l']:.3f}") in against["sentence"]
    card = (tmp_path / "out" / "README.md").read_text()
    assert "|  | perplexity | loss | ROUGE-L | token F1 | exact match | training samples | seconds |" in card
    assert all(sentence in card for sentence in against["sentences"])
    # Its answers beside the export's, in generations.json (and the MLflow table made from it) and the card.
    saved = json.loads(result.generations.read_text())
    assert saved["scores"]["untuned base model"]["rouge_l"] == against["untuned_test"]["gen_rouge_l"]
    assert [set(row) for row in saved["examples"]] == [{"prompt", "reference", "full", "untuned base model"}] * 4
    section = card.split("## What it generates", 1)[1].split("\n## ", 1)[0]
    assert "| prompt (its end) | reference | full | untuned base model |" in section
    assert f"| untuned base model | {against['untuned_test']['gen_exact_match']:.4g} |" in section


def _assert_generations(result, out: Path, variants: list[str], samples: int) -> None:
    """Each variant's generation scores are in metrics.json, its answers in generations.json, both in the card."""
    metrics = json.loads((out / "metrics.json").read_text())
    for variant in variants:
        for key in ("gen_exact_match", "gen_token_f1", "gen_rouge_l"):
            assert 0.0 <= metrics[variant][key] <= 1.0, (variant, key)
    assert result.generations == out / "generations.json"
    saved = json.loads(result.generations.read_text())
    assert saved["samples"] == samples and len(saved["examples"]) == samples
    assert saved["scores"]["nf4"]["token_f1"] == metrics["nf4"]["gen_token_f1"]
    first = saved["examples"][0]
    assert set(first) == {"prompt", "reference", *variants}
    assert first["prompt"] == "name the colour green number 0" and first["reference"] == "the colour is green"
    card = (out / "README.md").read_text()
    section = card.split("## What it generates", 1)[1].split("\n## ", 1)[0]
    for variant in variants:
        assert f"| {variant} | {metrics[variant]['gen_exact_match']:.4g} |" in section
    assert section.count("the colour is green") == 1 and "| prompt (its end) | reference | full | int8 | nf4 |" in section
    assert len([line for line in section.splitlines() if line.startswith("| name the colour")]) == 3


def test_a_classification_export_generates_nothing(exported):
    result, out = exported
    assert result.generations is None and not (out / "generations.json").exists()
    assert not any(key.startswith("gen_") for values in result.metrics.values() for key in values)
    assert "What it generates" not in (out / "README.md").read_text()


def test_side_by_side_rows_and_no_stale_generations(tmp_path):
    from finesweep.search.outputs.export import _write_generations, side_by_side

    answers = {"full": [{"prompt": "p1", "reference": "r1", "generated": "a"}, {"prompt": "p2", "reference": "r2",
                                                                               "generated": "b"}],
               "int8": [{"prompt": "p1", "reference": "r1", "generated": "c"}, {"prompt": "p2", "reference": "r2",
                                                                               "generated": "d"}]}
    rows = side_by_side(answers)
    assert rows == [{"prompt": "p1", "reference": "r1", "full": "a", "int8": "c"},
                    {"prompt": "p2", "reference": "r2", "full": "b", "int8": "d"}]
    path = tmp_path / "generations.json"
    metrics = {"full": {"loss": 1.0, "gen_rouge_l": 0.5}, "int8": {"loss": 1.1, "gen_rouge_l": 0.25}}
    assert _write_generations(path, metrics, rows) == path
    assert json.loads(path.read_text())["scores"] == {"full": {"rouge_l": 0.5}, "int8": {"rouge_l": 0.25}}
    assert _write_generations(path, metrics, []) is None and not path.exists()  # a re-export with samples 0


def _assert_adapter_export_matches_merged(base, out: Path, merged) -> None:
    """The adapter folder, put on its base with peft as the model card says, predicts what the merged model does."""
    import torch
    from peft import PeftModel

    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer_config.json"} <= {
        p.name for p in (out / "adapter").iterdir()}
    assert "PeftModel.from_pretrained(base, \"adapter\")" in (out / "README.md").read_text()
    adapted = PeftModel.from_pretrained(base, out / "adapter").eval()
    inputs = torch.tensor([[1, 5, 9, 3, 7, 2]])
    with torch.no_grad():
        assert torch.allclose(adapted(input_ids=inputs).logits, merged.eval()(input_ids=inputs).logits, atol=1e-5)


def test_export_merges_a_lora_classifier_with_labels_from_the_split(tiny_classifier, tmp_path):
    """A LoRA classification adapter has no config.json: the head is rebuilt from the split's ClassLabel names."""
    from datasets import ClassLabel
    from transformers import AutoTokenizer

    from finesweep.search.outputs.export import export_best
    from finesweep.trainer.models import apply_lora, load_model

    config = export_config(tiny_classifier)
    model = apply_lora(load_model(config.candidate("tiny"), Task.classification, LABELS), Task.classification, 4, 8, 0.0)
    model.save_pretrained(tmp_path / "adapter")
    tokenizer = AutoTokenizer.from_pretrained(tiny_classifier)
    split = classification_split(tokenizer, 30).cast_column("labels", ClassLabel(names=LABELS))
    result = export_best(
        config=config, checkpoint_dir=tmp_path / "adapter", tokenizer_source=tiny_classifier, test_split=split,
        collate=classification_collate(tokenizer), best=BEST, out_dir=tmp_path / "out",
    )
    saved = json.loads((tmp_path / "out" / "model" / "config.json").read_text())
    assert saved["id2label"] == {str(i): name for i, name in enumerate(LABELS)}
    assert set(result.metrics) == {"full", "int8"}
    from safetensors.torch import load_file

    merged = load_file(str(tmp_path / "out" / "model" / "model.safetensors"))
    trained_head = model.base_model.model.classifier.modules_to_save["default"].weight
    assert merged["classifier.weight"].equal(trained_head.detach())  # the adapter's head, not a fresh one
    from transformers import AutoModelForSequenceClassification

    _assert_adapter_export_matches_merged(load_model(config.candidate("tiny"), Task.classification, LABELS),
                                          tmp_path / "out",
                                          AutoModelForSequenceClassification.from_pretrained(tmp_path / "out" / "model"))


def test_a_full_fine_tune_exports_no_adapter(exported):
    _, out = exported
    assert not (out / "adapter").exists() and "LoRA adapter" not in (out / "README.md").read_text()


def test_record_export_puts_the_generations_on_the_parent_run(tmp_path):
    """generations.json as an artifact and its answers as an MLflow table; gen_* among the parent's test metrics."""
    from finesweep.search.outputs.console import Console
    from finesweep.search.outputs.export import ExportResult, _write_generations
    from finesweep.search.tracking.export_record import record_export
    from finesweep.search.tracking.client import Tracker

    metrics = {"full": {"loss": 1.0, "gen_exact_match": 0.5}, "int8": {"loss": 1.1, "gen_exact_match": 0.0}}
    rows = [{"prompt": "p1", "reference": "red", "full": "red", "int8": "blue"},
            {"prompt": "p2", "reference": "blue", "full": "green", "int8": "green"}]
    (tmp_path / "README.md").write_text("card")
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    exported = ExportResult(folder=tmp_path, metrics=metrics, generations=_write_generations(
        tmp_path / "generations.json", metrics, rows))
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = tracker.experiment("gen", tmp_path / "artifacts")
    parent = tracker.start_run(experiment, "parent")
    config = export_config(tmp_path, "causal_lm", register_model=False)
    assert record_export(config, tracker, experiment, parent, exported, None, Console()) == []
    run = tracker.client.get_run(parent)
    assert run.data.metrics["test_full_gen_exact_match"] == 0.5 and run.data.metrics["test_int8_gen_exact_match"] == 0.0
    assert {a.path for a in tracker.client.list_artifacts(parent, "export")} >= {
        "export/generations.json", "export/generations_table.json"}
    table = json.loads(Path(tracker.client.download_artifacts(parent, "export/generations_table.json", str(tmp_path / "dl")))
                       .read_text())
    assert table["columns"] == ["prompt", "reference", "full", "int8"]
    assert table["data"] == [["p1", "red", "red", "blue"], ["p2", "blue", "green", "green"]]


def test_the_parent_run_and_the_console_name_the_cpu_pick_beside_the_devices(tmp_path, capsys):
    from finesweep.search.outputs.console import Console
    from finesweep.search.selection.deploy import deploy_choices, with_speedups
    from finesweep.search.tracking.export_record import record_deploy
    from finesweep.search.tracking.client import Tracker

    metrics = with_speedups({
        "full": {"accuracy": 0.8, "latency_ms_batch1": 2.0, "ms_per_sample_batch32": 0.5,
                 "cpu_latency_ms_batch1": 12.0, "cpu_ms_per_sample_batch32": 4.0},
        "int8": {"accuracy": 0.8, "latency_ms_batch1": 1.0, "ms_per_sample_batch32": 0.4,
                 "cpu_latency_ms_batch1": 24.0, "cpu_ms_per_sample_batch32": 8.0},
        "onnx-int8": {"accuracy": 0.8, "latency_ms_batch1": 3.0, "ms_per_sample_batch32": 1.0,
                      "cpu_latency_ms_batch1": 3.0, "cpu_ms_per_sample_batch32": 1.0}})
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = tracker.start_run(tracker.experiment("deploy", tmp_path / "artifacts"), "parent")
    record_deploy(tracker, parent, deploy_choices(metrics, Task.classification, 0.01), Console())
    run = tracker.client.get_run(parent)
    assert run.data.tags["finesweep.deploy_variant"] == "int8"
    assert run.data.tags["finesweep.deploy_variant_cpu"] == "onnx-int8"
    assert run.data.metrics["deploy_speedup_batch1"] == pytest.approx(2.0)
    assert run.data.metrics["deploy_cpu_speedup_batch1"] == pytest.approx(4.0)
    console = capsys.readouterr().out
    assert "Deploy: int8" in console and "Deploy on a CPU: onnx-int8 (fastest on the CPU at batch 1" in console


def test_the_cards_loading_snippet_puts_torchaos_gpu_variants_on_the_gpu():
    from finesweep.search.outputs.card import model_card

    metrics = {variant: {"accuracy": 0.8, "latency_ms_batch1": 1.0}
               for variant in ("full", "torchao-int8", "torchao-int4", "torchao-fp8")}
    card = model_card(export_config(Path("m"), quantization=("torchao-int8", "torchao-int4", "torchao-fp8")), BEST,
                      metrics, [])
    assert 'from_pretrained("model")  # full' in card and 'from_pretrained("model-torchao-int8")  # torchao-int8' in card
    for variant in ("torchao-int4", "torchao-fp8"):
        assert f'from_pretrained("model-{variant}", device_map="cuda")  # {variant}' in card


@pytest.mark.parametrize("chat_format,said", [
    ("messages", "(chat format messages, columns: `messages`)"),
    ("alpaca", "(chat format alpaca, columns: instruction `instruction`, input `input`, output `output`)"),
    ("prompt_response", "(chat format prompt_response, columns: prompt `prompt`, response `response`)"),
    ("train=messages, test=sharegpt", "(chat formats train=messages, test=sharegpt)"),
])
def test_the_card_names_the_columns_of_the_chat_format_the_data_was_read_in(chat_format, said):
    from finesweep.search.outputs.card import model_card

    metrics = {"full": {"perplexity": 9.0, "loss": 2.2, "latency_ms_batch1": 1.0}}
    card = model_card(export_config(Path("m"), task="causal_lm"), BEST, metrics, [], chat_format=chat_format)
    assert f"- Data: `x.csv` {said}" in card
    classifier = model_card(export_config(Path("m")), BEST, {"full": {"accuracy": 0.8}}, [])
    assert "- Data: `x.csv` (columns: text `text`, label `label`)" in classifier
