"""transformers internals finesweep relies on (trainer/transformers_compat.py), pinned against the installed version."""

from __future__ import annotations

import transformers

from finesweep.trainer.transformers_compat import search_trial_of

CHECKED = (f"(checked on transformers 5.23; installed: transformers {transformers.__version__}): "
           "update finesweep/trainer/transformers_compat.py")


def test_the_trainer_holds_the_optuna_trial_of_a_hyperparameter_search(tmp_path, tiny_classifier):
    """A callback of `hyperparameter_search(backend="optuna")` reaches the trial it trains (and so its study)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

    seen = []

    class Look(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            seen.append(search_trial_of(trainer))

    rows = Dataset.from_dict({"input_ids": [[2, 5, 6, 3]] * 8, "attention_mask": [[1] * 4] * 8, "labels": [0, 1] * 4})
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, report_to="none",
                             use_cpu=True, disable_tqdm=True, save_strategy="no")
    trainer = Trainer(model_init=lambda trial: AutoModelForSequenceClassification.from_pretrained(tiny_classifier,
                                                                                                  num_labels=2),
                      args=args, train_dataset=rows, eval_dataset=rows, callbacks=[Look()])
    torch.manual_seed(0)
    trainer.hyperparameter_search(hp_space=lambda trial: {"learning_rate": trial.suggest_float("lr", 1e-4, 1e-3)},
                                  backend="optuna", n_trials=1, direction="minimize",
                                  compute_objective=lambda metrics: 0.0)
    assert seen and hasattr(seen[0], "study") and seen[0].number == 0, f"Trainer._trial is gone {CHECKED}"
