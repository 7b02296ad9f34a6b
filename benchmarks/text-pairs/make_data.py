"""A task of text pairs from the chat corpus the LLM example ships (`sweeps/data/chatterbot-english.jsonl`): does
this reply answer this question? Each conversation's question with its own reply is `answers`; the same question with
the reply of another question of the same category (a hard negative: same topic) is `other`. Every reply is in one
pair of each label, so neither text alone tells the label: a model must read both. The `joined` column is what a
user without text-pair support writes: the question, a space, the reply (the control, answers-joined.yaml).

    .venv/bin/python benchmarks/text-pairs/make_data.py   # writes benchmarks/text-pairs/answers.csv
"""

from __future__ import annotations

import csv
import json
import random
from collections import defaultdict
from pathlib import Path

SEED = 3
CORPUS = Path(__file__).resolve().parents[2] / "sweeps" / "data" / "chatterbot-english.jsonl"


def conversations() -> list[dict[str, str]]:
    """(category, question, reply) of every conversation: its first user turn and the assistant's answer."""
    rows = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        turns = {message["role"]: message["content"] for message in row["messages"]}
        rows.append({"category": row["category"], "question": turns["user"], "reply": turns["assistant"]})
    return rows


def pairs(rows: list[dict[str, str]], rng: random.Random) -> list[dict[str, str]]:
    """Each question with its reply (answers) and with a same-category reply to another question (other)."""
    by_category = defaultdict(list)
    for row in rows:
        by_category[row["category"]].append(row)
    out = []
    for members in by_category.values():
        shuffled = members[:]
        rng.shuffle(shuffled)
        for position, row in enumerate(shuffled):
            # The next rows' replies in the shuffled order, the first to another question: a derangement, so every
            # reply is some other question's negative once.
            others = (shuffled[(position + step) % len(shuffled)] for step in range(1, len(shuffled)))
            negative = next((other for other in others if other["question"] != row["question"]), None)
            out.append({"question": row["question"], "reply": row["reply"], "label": "answers"})
            if negative is not None:
                out.append({"question": row["question"], "reply": negative["reply"], "label": "other"})
    rng.shuffle(out)
    return out


def main() -> None:
    rows = pairs(conversations(), random.Random(SEED))
    with Path(__file__).with_name("answers.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["question", "reply", "joined", "label"], quoting=csv.QUOTE_ALL)
        writer.writeheader()
        writer.writerows({**row, "joined": f"{row['question']} {row['reply']}"} for row in rows)
    print(f"{len(rows)} pairs")


if __name__ == "__main__":
    main()
