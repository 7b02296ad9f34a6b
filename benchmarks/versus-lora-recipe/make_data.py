"""Chat data finesweep does not ship, from a registry package: the BYU chit-chat corpus (`chitchat-dataset` 0.9.0,
MIT; 7,168 open-domain conversations between two people), cut into exchanges of one message and its reply.

Each exchange is two consecutive turns of a conversation (a turn: one person's consecutive messages, joined with
spaces): the first is the user's, the second the assistant's reply, the reference a test prompt is scored against.
Up to two exchanges per conversation, never overlapping; a conversation's exchanges all go to one split, so no test
reply was seen in training. Turns shorter than 2 or longer than 300 characters are left out (the reply must fit the
sweep's max_seq_len whole). Writes train.jsonl, validation.jsonl and test.jsonl ({"messages": [...]} per line):

    .venv/bin/pip install --no-deps chitchat-dataset==0.9.0
    .venv/bin/python benchmarks/versus-lora-recipe/make_data.py OUT_FOLDER
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
from pathlib import Path

SEED = 2031
ROWS = {"train": 2000, "validation": 128, "test": 256}
PER_CONVERSATION = 2
CHARACTERS = (2, 300)


def corpus() -> dict[str, dict]:
    spec = importlib.util.find_spec("chitchat_dataset")
    if spec is None:
        raise SystemExit("the chit-chat corpus is not installed: "
                         ".venv/bin/pip install --no-deps chitchat-dataset==0.9.0")
    return json.loads((Path(spec.submodule_search_locations[0]) / "dataset.json").read_text(encoding="utf-8"))


def turns(conversation: dict) -> list[str]:
    return [" ".join(" ".join(m["text"].split()) for m in turn) for turn in conversation["messages"]]


def exchanges(conversation: dict, rng: random.Random) -> list[list[dict[str, str]]]:
    """Up to PER_CONVERSATION non-overlapping (message, reply) pairs of usable turns, at seeded positions."""
    said = turns(conversation)
    usable = [i for i in range(len(said) - 1)
              if all(CHARACTERS[0] <= len(t) <= CHARACTERS[1] for t in said[i:i + 2])]
    rng.shuffle(usable)
    picked: list[int] = []
    for start in usable:
        if len(picked) < PER_CONVERSATION and all(abs(start - other) >= 2 for other in picked):
            picked.append(start)
    return [[{"role": "user", "content": said[i]}, {"role": "assistant", "content": said[i + 1]}]
            for i in sorted(picked)]


def splits(seed: int = SEED) -> dict[str, list[list[dict[str, str]]]]:
    rng = random.Random(seed)
    conversations = list(corpus().values())
    rng.shuffle(conversations)
    out: dict[str, list] = {split: [] for split in ROWS}
    seen: set[tuple[str, str]] = set()
    order = iter(conversations)
    for split, wanted in (("test", ROWS["test"]), ("validation", ROWS["validation"]), ("train", ROWS["train"])):
        while len(out[split]) < wanted:
            for exchange in exchanges(next(order), rng):
                key = (exchange[0]["content"].lower(), exchange[1]["content"].lower())
                if key not in seen and len(out[split]) < wanted:  # "hi"/"hello" exchanges repeat across people
                    seen.add(key)
                    out[split].append(exchange)
    return out


def write(folder: Path) -> dict[str, int]:
    folder.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, rows in splits().items():
        with (folder / f"{split}.jsonl").open("w", encoding="utf-8") as handle:
            for messages in rows:
                handle.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")
        counts[split] = len(rows)
    return counts


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    print(write(parser.parse_args().out))
