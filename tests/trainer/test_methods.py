"""How a candidate trains: full, LoRA, or QLoRA (LoRA on a 4-bit NF4 base), with or without gradient checkpointing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from finesweep.spaces import ModelCandidate, SweepConfig, Task
from finesweep.trainer import data
from finesweep.trainer.models import TrainingSetup, freeze_input_embeddings, load_trainable
from finesweep.trainer.trial import BatchPlan, TrialPlan, train

LABELS = ["negative", "neutral", "positive"]


def _load(model_dir: Path, **setup) -> torch.nn.Module:
    torch.manual_seed(0)
    return load_trainable(ModelCandidate(name="t", path=str(model_dir)), Task.classification, LABELS,
                          TrainingSetup(**setup))


def _batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 200, (4, 16), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 1, 2, 1])}


def _gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    model.train()
    torch.manual_seed(2)  # the same dropout masks for both (the recompute replays the RNG state it saw)
    model(**_batch()).loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad and p.grad is not None}


def test_qlora_puts_lora_on_a_4bit_nf4_base_with_double_quantization(qlora_classifier):
    import bitsandbytes as bnb

    model = _load(qlora_classifier, method="qlora", lora_r=4, lora_alpha=8)
    four_bit = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert four_bit, "the base's linear layers are 4-bit"
    weight = four_bit[0].weight
    assert weight.quant_state.quant_type == "nf4" and weight.quant_state.nested, "NF4, double quantization"
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name or "classifier" in name for name in trainable), trainable
    losses = []
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(6):
        loss = model(**_batch()).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0], f"the adapters learn on the 4-bit base: {losses}"


@pytest.mark.parametrize("method", ["full", "lora"])
def test_gradient_checkpointing_recomputes_and_gives_the_same_gradients(tiny_classifier, method):
    plain = _load(tiny_classifier, method=method)
    recomputing = _load(tiny_classifier, method=method, gradient_checkpointing=True)
    assert not plain.is_activation_checkpointing and recomputing.is_activation_checkpointing
    expected, got = _gradients(plain), _gradients(recomputing)
    assert expected.keys() == got.keys() and expected
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-6, msg=name)


def test_frozen_embeddings_keep_the_word_embeddings_and_train_every_other_weight(tiny_classifier):
    model = _load(tiny_classifier, freeze_embeddings=True)
    words = model.get_input_embeddings().weight
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model(**_batch()).loss.backward()
    optimizer.step()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])}
    frozen = {name for name, p in model.named_parameters() if p is words}
    assert not words.requires_grad and words.grad is None and not frozen & changed
    assert changed == set(before) - frozen, "every other weight trains: positions, layers, the head"
    assert all(p.requires_grad for p in _load(tiny_classifier).parameters()), "false (the baseline's) trains them all"


def test_frozen_embeddings_leave_a_tied_output_head_and_lora_as_they_were(tiny_llama, tiny_classifier):
    causal = load_trainable(ModelCandidate(name="t", path=str(tiny_llama)), Task.causal_lm, None,
                            TrainingSetup(freeze_embeddings=True))
    assert causal.get_input_embeddings().weight.requires_grad, "its output layer shares them: they keep training"
    assert causal.get_output_embeddings().weight is causal.get_input_embeddings().weight
    assert not freeze_input_embeddings(causal), "and says it left them"
    assert causal.get_input_embeddings().weight.requires_grad
    trainable = {name for name, p in _load(tiny_classifier, method="lora", freeze_embeddings=True).named_parameters()
                 if p.requires_grad}
    assert trainable == {name for name, p in _load(tiny_classifier, method="lora").named_parameters() if p.requires_grad}


class _Sink:
    def __init__(self):
        self.evaluations: list[tuple[int, dict, Path]] = []

    def on_log(self, step, metrics):
        return None

    def flush(self):
        return None

    def on_evaluation(self, step, metrics, checkpoint_dir: Path):
        self.evaluations.append((step, metrics, checkpoint_dir))


def test_a_qlora_trial_with_checkpointing_trains_and_saves_its_adapter(tmp_path, sentiment_csv, qlora_classifier):
    tiny_classifier = qlora_classifier
    from transformers import AutoTokenizer

    config = SweepConfig.model_validate({"name": "t", "data": {"path": str(sentiment_csv)},
                                         "models": [{"name": "t", "path": str(tiny_classifier)}]})
    prepared = data.prepare(config.data, 0, tmp_path / "cache")
    tokenized = data.tokenize(prepared, AutoTokenizer.from_pretrained(tiny_classifier), Task.classification, 32,
                              tmp_path / "cache")
    plan = TrialPlan(candidate=config.candidate("t").model_dump(), task="classification",
                     label_names=prepared.label_names, tokenized_dir=str(tokenized), output_dir=str(tmp_path / "out"),
                     precision="fp32", method="qlora", learning_rate=1e-2, weight_decay=0.0, warmup_ratio=0.0,
                     batch=BatchPlan(effective=8, micro=4, accumulation=2), eval_batch=16, max_steps=4,
                     eval_every_steps=2, seed=0, threads=1, lora_r=4, lora_alpha=8, gradient_checkpointing=True)
    sink = _Sink()
    train(plan, sink)
    assert [step for step, _, _ in sink.evaluations] == [2, 4]
    assert plan.params()["gradient_checkpointing"] is True, "logged with the trial's parameters"
    saved = sink.evaluations[-1][2]
    assert (saved / "adapter_model.safetensors").is_file() and not (saved / "model.safetensors").exists()
