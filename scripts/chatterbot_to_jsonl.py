"""Write the English ChatterBot corpus (the registry package `chatterbot-corpus`, BSD License, by Gunther Cox and
contributors) as OpenAI-style conversations, one JSON line each: what sweeps/smollm2-chat.yaml trains on.

    pip install --no-deps chatterbot-corpus==1.3.3 pyyaml
    python scripts/chatterbot_to_jsonl.py sweeps/data/chatterbot-english.jsonl

Each corpus conversation is a list of utterances; they alternate user, assistant, user, ... as the corpus means them
(a statement, then its response). The category becomes a field of its own; nothing else is changed.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import yaml


def conversations(corpus: Path):
    for path in sorted(corpus.glob("*.yml")):
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        for turns in document.get("conversations") or []:
            texts = [str(t).strip() for t in turns if t is not None and str(t).strip()]
            if len(texts) >= 2:
                roles = ["user" if i % 2 == 0 else "assistant" for i in range(len(texts))]
                if roles[-1] == "user":  # a conversation ends with the assistant's answer
                    texts, roles = texts[:-1], roles[:-1]
                yield {"category": path.stem, "messages": [{"role": r, "content": t} for r, t in zip(roles, texts)]}


def main(out: str) -> None:
    spec = importlib.util.find_spec("chatterbot_corpus")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("install the corpus first: pip install --no-deps chatterbot-corpus==1.3.3")
    corpus = Path(list(spec.submodule_search_locations)[0]) / "data" / "english"
    rows = list(conversations(corpus))
    with open(out, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} conversations from {corpus} -> {out}")


if __name__ == "__main__":
    main(sys.argv[1])
