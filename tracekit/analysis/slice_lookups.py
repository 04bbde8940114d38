"""Point-in-slice lookups on Polars frames, vectorised (no per-row Python).

- `innermost`: for points, the one slice with the same keys (e.g. thread) that contains
  them and started last. Sort the slices by key and start; the candidates of a point are
  the slices up to the last one that started at or before it (an as-of join); the answer
  is the last of those that ends after the point, found by binary lifting over running
  maxima of the ends (log2(n) vectorised steps, no pairs of point and slice formed). With
  the C passes built (`_slices.c`), one merge of the sorted slices and points with a stack
  per key finds the same slice in linear time; the Polars steps stay the reference.
- `touched`: the slices that contain at least one point with the same keys: the number
  of points inside a slice is a difference of two as-of counts.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from tracekit import native
from tracekit.analysis.interval_keys import group_numbers, one_key
from tracekit.analysis.order import sort_order
from tracekit.model import ENGINE, I64_MAX, I64_MIN
from tracekit.native import kernels

I64 = pl.Int64


def innermost(points: pl.DataFrame, slices: pl.DataFrame, *, on: Sequence[str], at: str = "t",
              start: str = "ts_ns", end: str = "end_ns", length: str = "dur_ns", order: str = "eid") -> pl.DataFrame:
    """For each point, the slice with the same `on` values that contains it (`start <= at < end`)
    and starts last; of several, the shortest (`length`), then the highest `order`.

    The same pick as `stab` filtered on the keys and sorted by (start desc, length asc, order
    desc, nulls first), without forming every pair. Returns the points that have one, with
    the slice's columns (those not in `on`) added.
    """
    keys = list(on)
    cols = [c for c in slices.columns if c not in keys]
    if points.is_empty() or slices.is_empty():
        return pl.DataFrame(schema={**points.schema, **{c: slices.schema[c] for c in cols}})
    return _innermost(points, slices, keys, cols, at=at, start=start, end=end, length=length, order=order)


def _innermost_steps(points: pl.DataFrame, slices: pl.DataFrame, keys: list[str], cols: list[str], *, at: str,
                     start: str, end: str, length: str, order: str) -> pl.DataFrame:
    """`innermost` by an as-of join and binary lifting over the slices' ends (the reference)."""
    # ascending order in which the pick is the *last* candidate (nulls of length/order last: they win ties)
    rows = slices.drop_nulls([*keys, start, end]).sort(
        [*keys, start, length, order], descending=[False] * len(keys) + [False, True, False], nulls_last=True
    ).with_row_index("_i")
    last = rows.unique([*keys, start], keep="last", maintain_order=True).select(*keys, start, _i=pl.col("_i").cast(I64))
    pts = points.with_row_index("_pt").drop_nulls([*keys, at]).sort(at)
    cand = pts.join_asof(last.sort(start), left_on=at, right_on=start, by=keys, strategy="backward",
                         check_sortedness=False).filter(pl.col("_i").is_not_null())
    # binary lifting: peaks[j][i] = max end over rows (i - 2^j, i]; skip a block that ends by `at`
    ends = rows[end].cast(I64)
    peaks = [ends]
    while (1 << (len(peaks) - 1)) < rows.height:
        size = 1 << (len(peaks) - 1)
        prev = peaks[-1]
        peaks.append(pl.select(pl.max_horizontal(prev, prev.shift(size))).to_series())
    i, t = cand["_i"], cand[at].cast(I64)
    for level in reversed(range(len(peaks))):
        skip = (i >= 0) & (peaks[level].gather(i.clip(lower_bound=0)) <= t)
        i = pl.select(pl.when(skip).then(i - (1 << level)).otherwise(i)).to_series()
    found = cand.select("_pt", *keys, at, _i=i).filter(pl.col("_i") >= 0)
    picked = rows.select(*keys, *cols, _i=pl.col("_i").cast(I64)).rename({k: f"_s_{k}" for k in keys})
    found = found.join(picked, on="_i", how="left")
    same = pl.all_horizontal(*[pl.col(k) == pl.col(f"_s_{k}") for k in keys], pl.col(end) > pl.col(at))
    found = found.filter(same).select("_pt", *cols)
    out = points.with_row_index("_pt").join(found, on="_pt", how="inner", maintain_order="left")
    return out.drop("_pt")


def _innermost_native(points: pl.DataFrame, slices: pl.DataFrame, keys: list[str], cols: list[str], *, at: str,
                      start: str, end: str, length: str, order: str) -> pl.DataFrame:
    """`innermost` by the C pass: the keys become one group number shared by slices and
    points, both are sorted by it, and the pass returns each point's slice row."""
    rows = slices.drop_nulls([*keys, start, end])
    pts = points.with_row_index("_pt").drop_nulls([*keys, at])
    group = group_numbers(rows.select(keys), pts.select(keys).cast(rows.select(keys).schema))
    # the pass reads the slices through the permutation that sorts them by group and start
    # (it orders the slices that start together itself): nothing of theirs is gathered into
    # that order, and the picked slices' columns are gathered once, by row. Slices in time
    # order (a trace's are) take a stable sort on the group alone (ranking the numbers,
    # sorting on the pick's four keys and gathering into that order peaks twice as high)
    keyed = rows.select(start, end, _len=pl.col(length).cast(I64).fill_null(I64_MIN),
                        _ord=pl.col(order).cast(I64).fill_null(I64_MAX), _g=group.head(rows.height))
    by = sort_order(keyed, "_g", maintain_order=True) if keyed[start].is_sorted() else sort_order(keyed, "_g", start)
    pts = pts.select("_pt", _g=group.tail(pts.height), _t=pl.col(at).cast(I64)).sort("_g", "_t")
    del group
    pick = kernels.innermost((*(keyed[c] for c in ("_g", start, end, "_len", "_ord")), by), (pts["_g"], pts["_t"]))
    del keyed, by
    found = pts.select("_pt").with_columns(_i=pick).drop_nulls("_i").sort("_pt")
    picked = rows.select(cols).gather(found["_i"])
    taken = points.gather(found["_pt"])
    return pl.concat([taken, picked.rename({c: f"{c}_right" for c in cols if c in taken.columns})], how="horizontal")


_innermost = native.register("innermost", c=_innermost_native, reference=_innermost_steps)


def touched(slices: pl.DataFrame, points: pl.DataFrame, *, on: Sequence[str], at: str = "t",
            start: str = "ts_ns", end: str = "end_ns") -> pl.DataFrame:
    """The rows of `slices` that contain at least one point with the same `on` values
    (`start <= at < end`; integer times), in their order.

    Points per key are counted up to a time with an as-of join on their distinct times:
    a slice holds count(at <= end - 1) - count(at <= start - 1) of them.
    """
    if slices.is_empty() or points.is_empty():
        return slices.clear()
    numbered = slices.lazy().with_row_index("_row")
    (pts, rows), keys = one_key([points.lazy().select(*on, at), numbered.select("_row", *on, start, end)], on)
    counts = (pts.drop_nulls([*keys, at]).group_by([*keys, at]).len().sort([*keys, at])
              .select(*keys, _t=pl.col(at).cast(I64), _n=pl.col("len").cum_sum().over(keys).cast(I64)))
    rows = rows.drop_nulls([*keys, start, end]).select(
        "_row", *keys, _lo=pl.col(start).cast(I64) - 1, _hi=pl.col(end).cast(I64) - 1)
    upto = counts.sort("_t")
    rows = rows.sort("_hi").join_asof(upto, left_on="_hi", right_on="_t", by=keys, strategy="backward",
                                      check_sortedness=False).rename({"_n": "_n_hi"}).drop("_t")
    rows = rows.sort("_lo").join_asof(upto, left_on="_lo", right_on="_t", by=keys, strategy="backward",
                                      check_sortedness=False)
    hit = rows.filter(pl.col("_n_hi").fill_null(0) > pl.col("_n").fill_null(0)).select("_row")
    return numbered.join(hit, on="_row", how="semi", maintain_order="left").drop("_row").collect(engine=ENGINE)
