"""The LoRA recipe LLM users copy, in transformers' Trainer with peft: LoRA r 16, alpha 32, dropout 0.05 on every
linear layer, learning rate 2e-4 with a cosine schedule after 3% warm-up, batch 8, fp32, 3 epochs, every core.

Given a deadline (the other arm's wall seconds), it fits the recipe to it as a user who knows their time would: it
times 3 training steps first, then trains min(3 epochs, the steps that fit before the deadline) so that its cosine
schedule ends when the time does; a callback stops it at the deadline all the same. The clock starts when this
process does (imports and the model's load count, as they do for `finesweep run`); it saves the merged model and
prints one JSON line: wall seconds, steps, epochs.

    .venv/bin/python lora_recipe.py MODEL_DIR TOKENIZED_DIR OUT_DIR --deadline SECONDS [--seed 42]
"""

from __future__ import annotations

import time

STARTED = time.monotonic()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
from pathlib import Path  # noqa: E402

RECIPE = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.05, "learning_rate": 2e-4, "warmup": 0.03, "batch": 8,
          "epochs": 3, "scheduler": "cosine", "target_modules": "all-linear"}
TIMED_STEPS = 3
SAVE_SECONDS = 15  # merging the adapter and saving 135M parameters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("tokenized", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--deadline", type=float, required=True, help="wall seconds from this process's start")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import (AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer,
                              TrainerCallback, TrainingArguments, set_seed)

    from finesweep.trainer.data.tokenizing import load_tokenized
    from finesweep.trainer.models import with_pad_token

    set_seed(args.seed)
    tokenizer = with_pad_token(AutoTokenizer.from_pretrained(args.model_dir))
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=RECIPE["r"], lora_alpha=RECIPE["lora_alpha"],
                                             lora_dropout=RECIPE["lora_dropout"], task_type="CAUSAL_LM",
                                             target_modules=RECIPE["target_modules"]))
    train = load_tokenized(args.tokenized)["train"]
    collate = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    epoch_steps = math.ceil(len(train) / RECIPE["batch"])

    step_seconds = time_steps(model, train, collate)
    left = args.deadline - (time.monotonic() - STARTED) - SAVE_SECONDS
    steps = max(1, min(RECIPE["epochs"] * epoch_steps, int(left / step_seconds)))

    class Deadline(TrainerCallback):
        def on_step_end(self, _args, state, control, **_):
            if time.monotonic() - STARTED > args.deadline - SAVE_SECONDS:
                control.should_training_stop = True

    trainer = Trainer(model=model, data_collator=collate, train_dataset=train, callbacks=[Deadline()],
                      args=TrainingArguments(
                          output_dir=str(args.out / "trainer"), learning_rate=RECIPE["learning_rate"],
                          lr_scheduler_type=RECIPE["scheduler"], warmup_steps=round(RECIPE["warmup"] * steps),
                          per_device_train_batch_size=RECIPE["batch"], max_steps=steps, save_strategy="no",
                          report_to="none", logging_steps=50, seed=args.seed, use_cpu=True))
    trained = trainer.train()
    merged = model.merge_and_unload()
    merged.save_pretrained(args.out / "model")
    tokenizer.save_pretrained(args.out / "model")
    print(json.dumps({"wall_seconds": round(time.monotonic() - STARTED, 1), "steps": trained.global_step,
                      "planned_steps": steps, "epochs": round(trained.global_step / epoch_steps, 2),
                      "timed_step_seconds": round(step_seconds, 3), "train_loss": trained.training_loss,
                      "recipe": RECIPE}))


def time_steps(model, train, collate) -> float:
    """Seconds per optimizer step of the recipe's batch: TIMED_STEPS forward and backward passes on random rows,
    after an untimed one (no optimizer step: the timing does not train)."""
    rows = random.Random(0).sample(range(len(train)), RECIPE["batch"] * (TIMED_STEPS + 1))
    batches = [collate([train[i] for i in rows[start:start + RECIPE["batch"]]])
               for start in range(0, len(rows), RECIPE["batch"])]
    model(**batches[0]).loss.backward()  # the first pass allocates: untimed
    started = time.perf_counter()
    for batch in batches[1:]:
        model(**batch).loss.backward()
    seconds = (time.perf_counter() - started) / TIMED_STEPS
    model.zero_grad(set_to_none=True)
    return seconds


if __name__ == "__main__":
    main()
