"""How long a batch is once padded: the probe times rows of the full sequence length (the memory worst case), a
trial pads each batch to its longest row only, so its speed follows the data's token lengths and how its batches
are drawn.

Random batches pad to the longest of `batch` rows, near the 1 - 1/(batch + 1) quantile of the lengths. Batches
grouped by length (transformers' LengthGroupedSampler, data.group_by_length) are cut from a shuffled megabatch
sorted by length: its j-th batch pads to the length at rank j x batch from the top, so the batches of a large
megabatch pad to about the mean length. Pure: percentiles in, a fraction of seq_len out.
"""

from __future__ import annotations

import statistics

# The percentile keys of trainer/data/lengths.percentiles (a test keeps the two in step), with their quantiles.
# Older reports carry only p50 and up: what is present is used, a quantile below the lowest present takes its value.
ANCHORS = (("min", 0.0), ("p10", 0.10), ("p25", 0.25), ("p50", 0.50), ("p75", 0.75), ("p90", 0.90),
           ("p95", 0.95), ("p99", 0.99), ("max", 1.0))
# transformers' LengthGroupedSampler: a megabatch holds this many batches at most, and no more than a quarter of
# the rows' batches (get_length_grouped_indices).
MEGABATCH_BATCHES = 50


def length_grouped_megabatch(rows: int, batch: int) -> int:
    """Rows transformers' LengthGroupedSampler sorts together when it draws batches of `batch` from `rows` (the
    batch it is given is the optimizer step's rows on one device: micro-batch x accumulation)."""
    batch = max(batch, 1)
    return max(1, min(rows // (batch * 4), MEGABATCH_BATCHES)) * batch


def padded_fraction(percentiles: dict[str, float], batch: int, seq_len: int, sorted_rows: int | None = None) -> float:
    """The expected length of a `batch` padded to its longest row, as a fraction of seq_len (rows over seq_len are
    truncated to it). `sorted_rows`: the megabatch the batches are cut from after sorting it by length (None: the
    batch alone, random batches); a batch that is part of a larger step (gradient accumulation) is cut the same
    way from the megabatch of the step's rows."""
    batch = max(batch, 1)
    megabatch = max(sorted_rows or batch, batch)
    batches = megabatch // batch
    # The first batch holds the megabatch's longest row; the j-th, the row at rank j x batch from the top.
    quantiles = [1 - 1 / (megabatch + 1)] + [1 - j / batches for j in range(1, batches)]
    lengths = (min(max(quantile_length(percentiles, q), 1.0), seq_len) for q in quantiles)
    return statistics.fmean(lengths) / seq_len


def quantile_length(percentiles: dict[str, float], quantile: float) -> float:
    """The token length at `quantile`, interpolated between the percentiles present."""
    anchors = [(q, percentiles[key]) for key, q in ANCHORS if key in percentiles]
    if quantile <= anchors[0][0]:
        return anchors[0][1]
    for (low_q, low), (high_q, high) in zip(anchors, anchors[1:]):
        if low_q <= quantile <= high_q:
            return low + (high - low) * (quantile - low_q) / (high_q - low_q)
    return anchors[-1][1]
