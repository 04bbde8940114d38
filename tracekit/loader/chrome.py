"""Generic Chrome trace phases turned into slices: B/E pairs, async b/e and S/F pairs.

Pairing is vectorised: within each key (thread for B/E, async id for b/e), events are
ordered by time (file order breaks ties); a running depth gives each begin and each end a
nesting level, and the k-th begin at a level pairs with the k-th end at that level.
"""

from __future__ import annotations

import polars as pl


def pair_spans(
    events: pl.DataFrame, begin: str, end: str, keys: list[str]
) -> tuple[pl.DataFrame, int, int]:
    """Pair begin/end rows of `events` (columns eid, ph, ts_ns, and `keys`) into slices.

    Returns (slices with the begin row's columns and `dur_ns`, unmatched begins, unmatched ends).
    """
    rows = events.filter(pl.col("ph").is_in([begin, end]) & pl.col("ts_ns").is_not_null())
    if rows.is_empty():
        return rows.with_columns(dur_ns=pl.lit(None, pl.Int64)), 0, 0
    is_begin = pl.col("ph") == begin
    rows = rows.sort([*keys, "ts_ns", "eid"], nulls_last=True).with_columns(
        _depth=pl.when(is_begin).then(1).otherwise(-1).cum_sum().over(keys)
    )
    rows = rows.with_columns(_level=pl.when(is_begin).then(pl.col("_depth")).otherwise(pl.col("_depth") + 1))
    rows = rows.with_columns(_k=pl.int_range(pl.len()).over([*keys, "_level", "ph"]))
    begins = rows.filter(is_begin)
    ends = rows.filter(~is_begin).select([*keys, "_level", "_k", pl.col("ts_ns").alias("_end_ns")])
    joined = begins.join(ends, on=[*keys, "_level", "_k"], how="left", nulls_equal=True)
    ok = pl.col("_end_ns").is_not_null() & (pl.col("_end_ns") >= pl.col("ts_ns"))
    matched = joined.filter(ok).with_columns(dur_ns=pl.col("_end_ns") - pl.col("ts_ns"))
    unmatched_begin = joined.height - matched.height
    unmatched_end = ends.height - matched.height
    return matched.drop("_depth", "_level", "_k", "_end_ns"), unmatched_begin, max(unmatched_end, 0)
