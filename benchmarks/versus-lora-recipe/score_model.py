"""Score one saved causal LM on a tokenized test split, row by row, with finesweep's own evaluation code (the same
for every arm): each row's summed response-token loss and token count (trainer/serving/evaluate.py), and the greedy
answer to each of the first LIMIT prompts with its token F1 and ROUGE-L (trainer/serving/generate.py).

    .venv/bin/python benchmarks/versus-lora-recipe/score_model.py MODEL_DIR TOKENIZED_DIR OUT.json [--limit 256]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from finesweep.trainer.data.tokenizing import collator, load_tokenized
from finesweep.trainer.serving.evaluate import evaluate_rows
from finesweep.trainer.serving.generate import rouge_l, score_generation, token_f1
from finesweep.spaces.sections import Task


def score(model_dir: Path, tokenized: Path, limit: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from finesweep.trainer.models import with_pad_token

    tokenizer = with_pad_token(AutoTokenizer.from_pretrained(model_dir))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    test = load_tokenized(tokenized)["test"]
    metrics, rows = evaluate_rows(model, test, collator(tokenizer, Task.causal_lm), Task.causal_lm)
    means, examples = score_generation(model, tokenizer, test, limit)
    for example in examples:
        example["token_f1"] = token_f1(example["generated"], example["reference"])
        example["rouge_l"] = rouge_l(example["generated"], example["reference"])
    return {"model": str(model_dir), "loss": metrics["loss"], "perplexity": math.exp(metrics["loss"]),
            "row_loss_sums": rows.values.tolist(), "row_tokens": rows.weights.tolist(), "generation": means,
            "answers": examples}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("tokenized", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--limit", type=int, default=256)
    args = parser.parse_args()
    args.out.write_text(json.dumps(score(args.model_dir, args.tokenized, args.limit), indent=1))
