"""Copies of run.py's split files with tweets' links, and optionally their user mentions, replaced by one token each
(`http`, `@user`: the rewrite tweet models' authors apply before training): whether the text as a user holds it or
the rewritten text trains the better classifier. Then per_step.py on both folders with the same seed:

    .venv/bin/python benchmarks/versus-defaults/rewrite_texts.py runs/versus-defaults/tweets/data /tmp/links
    .venv/bin/python benchmarks/versus-defaults/rewrite_texts.py runs/versus-defaults/tweets/data /tmp/both --mentions
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/versus-defaults/per_step.py /tmp/links \
        --pooling mean --dropout off --learning-rate 1e-4 --epochs 2 --validation --seed 0
"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

from defaults_trainer import read_split

LINK = re.compile(r"https?://\S+|www\.\S+")
MENTION = re.compile(r"@\w+")
SPLITS = ("train", "validation", "test")


def rewrite(text: str, mentions: bool) -> str:
    text = LINK.sub("http", text)
    return MENTION.sub("@user", text) if mentions else text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path, help="run.py's split files (train.csv, validation.csv, test.csv)")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--mentions", action="store_true", help="Also replace user mentions with @user.")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        texts, labels = read_split(args.data_dir / f"{split}.csv")
        with (args.out_dir / f"{split}.csv").open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, quoting=csv.QUOTE_ALL)  # as run.py writes them: tweets hold bare returns
            writer.writerow(["text", "label"])
            writer.writerows((rewrite(text, args.mentions), label) for text, label in zip(texts, labels))


if __name__ == "__main__":
    main()
