"""The data pipeline: read (readers), clean (cleaning), split (splitting), tokenize (tokenizing), lengths; pipeline.prepare()
runs the first three and caches the result by content. The names below are what the rest of finesweep uses."""

from finesweep.trainer.data.pipeline import (DataReport, PreparedData, finish_report, prepare, token_entry)
from finesweep.trainer.data.readers import DataError
from finesweep.trainer.data.tokenizing import collator, load_tokenized, tokenize

__all__ = ["DataError", "DataReport", "PreparedData", "collator", "finish_report", "load_tokenized", "prepare",
           "token_entry", "tokenize"]
