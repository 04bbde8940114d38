"""Generic Chrome trace phases turned into slices: B/E pairs, async b/e and S/F pairs.

Pairing is vectorised and follows a stack per key (thread for B/E, async id for b/e):
events are ordered by time (file order breaks ties); an end with nothing open is left
alone (it closes nothing, and later pairs are not shifted by it); the others get their
nesting level from a running depth, and the k-th begin at a level pairs with the k-th end
at that level. A begin still open at the end of its key is returned apart: B/E begins are
closed at the end of their thread (`frames._pairs`), async begins are dropped.
"""

from __future__ import annotations

import polars as pl


def pair_spans(
    events: pl.DataFrame, begin: str, end: str, keys: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Pair begin/end rows of `events` (columns eid, ph, ts_ns, and `keys`) into slices.

    Returns (slices with the begin row's columns and `dur_ns`, the begin rows no end closes,
    the number of ends with no open begin).
    """
    rows = events.filter(pl.col("ph").is_in([begin, end]) & pl.col("ts_ns").is_not_null())
    if rows.is_empty():
        return rows.with_columns(dur_ns=pl.lit(None, pl.Int64)), rows, 0
    is_begin = pl.col("ph") == begin
    rows = rows.sort([*keys, "ts_ns", "eid"], nulls_last=True).with_columns(
        _sum=pl.when(is_begin).then(1).otherwise(-1).cum_sum().over(keys))
    # the running sum's lowest point below 0 so far: an end that takes it lower closes
    # nothing (the stack was empty); the depth is the sum above that floor
    floor = pl.min_horizontal(pl.col("_sum").cum_min().over(keys), 0)
    before = pl.col("_sum").cum_min().shift(1).over(keys).fill_null(0)
    rows = rows.with_columns(
        _lone=~is_begin & (pl.col("_sum") < pl.min_horizontal(before, 0)), _depth=pl.col("_sum") - floor)
    lone = int(rows["_lone"].sum())
    rows = rows.filter(~pl.col("_lone")).with_columns(
        _level=pl.when(is_begin).then(pl.col("_depth")).otherwise(pl.col("_depth") + 1))
    rows = rows.with_columns(_k=pl.int_range(pl.len()).over([*keys, "_level", "ph"]))
    begins = rows.filter(is_begin)
    ends = rows.filter(~is_begin).select([*keys, "_level", "_k", pl.col("ts_ns").alias("_end_ns")])
    joined = begins.join(ends, on=[*keys, "_level", "_k"], how="left", nulls_equal=True)
    temp = ["_sum", "_lone", "_depth", "_level", "_k", "_end_ns"]
    closed = pl.col("_end_ns").is_not_null()
    matched = joined.filter(closed).with_columns(dur_ns=pl.col("_end_ns") - pl.col("ts_ns"))
    return matched.drop(temp), joined.filter(~closed).drop(temp), lone
