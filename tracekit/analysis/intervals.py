"""Interval arithmetic on Polars frames, vectorised (no per-row Python).

Intervals are half-open `[start, end)` in integer nanoseconds. An interval whose end is
before its start is read as zero-length at its start.

- `union`: merge overlapping or touching intervals per group. Sort by start within the
  group; a row opens a new run when its start is after the running maximum of the ends of
  the rows before it (`cum_max` of end, shifted by one); a run starts at its first row and
  ends at that running maximum on its last row (no group_by, and the order is kept).
- `union_ns` / `total_union_ns`: the length of that union, per group or in all.
- `gaps`: the holes between the merged intervals of each group inside its bounds, each with
  its position (`before_first`, `between`, `after_last`, or `empty` when the bounds hold no
  interval at all). Lengths of the union plus lengths of the gaps equal the bounds' length.
- `clip_to_window`, `clip_to_windows`: keep the part of each interval inside one window or
  inside each of many windows (an interval-overlap join).
- `covered_ns`: for query intervals, how much of each is covered by a set of intervals:
  the merged intervals are disjoint, so a running sum of their lengths, read with two
  as-of joins at each query's start and end, gives it (no pairs of query and interval).
- `stab`: for points, every interval that contains them.
- `innermost`, `touched` (`slice_lookups`, re-exported here): for points, the slice
  of the same keys that contains them and started last; the slices that contain one.

The joins on time use `DataFrame.join_where` with exactly two inequalities (Polars runs
those as an IEJoin); equality keys are applied afterwards as a filter, because mixing them
into `join_where` makes Polars fall back to a cross join.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from tracekit import native
from tracekit.analysis.interval_keys import one_key
from tracekit.analysis.slice_lookups import innermost, touched
from tracekit.analysis.stab import stab, stab_rows
from tracekit.model import ENGINE
from tracekit.native import kernels

# `stab`, `innermost` and `touched` are re-exported, beside the other interval passes
__all__ = [
    "GAP_POSITIONS", "clip_to_window", "clip_to_windows", "covered_ns", "gaps", "gaps_plan", "innermost", "stab",
    "stab_rows", "total_union_ns", "touched", "union", "union_ns", "union_ns_plan", "union_plan",
]

I64 = pl.Int64
GAP_POSITIONS = ("before_first", "between", "after_last", "empty")
_KEY = "_group"


def _key_schema(frame: pl.DataFrame, by: Sequence[str]) -> dict[str, pl.DataType]:
    return {k: frame.schema[k] for k in by}


def union(frame: pl.DataFrame, *, by: Sequence[str] = (), start: str = "ts_ns",
          end: str = "end_ns") -> pl.DataFrame:
    """Merged intervals per group: columns `by..., start_ns, end_ns`, sorted by group and start."""
    if frame.is_empty():
        return pl.DataFrame(schema={**_key_schema(frame, by), "start_ns": I64, "end_ns": I64})
    return union_plan(frame.lazy(), list(by), start, end).collect(engine=ENGINE)


def union_plan(rows: pl.LazyFrame, by: list[str], start: str = "ts_ns", end: str = "end_ns") -> pl.LazyFrame:
    """`union` as a plan, for a caller's larger plan (one plan pays Polars' planning once,
    where eager steps pay it per step)."""
    rows = rows.select(*by, start_ns=pl.col(start).cast(I64), end_ns=pl.max_horizontal(start, end).cast(I64))
    rows = rows.drop_nulls(["start_ns", "end_ns"]).sort([*by, "start_ns"])
    first = pl.int_range(pl.len()) == 0
    if by:
        group_start = first | pl.any_horizontal(pl.col(k).ne_missing(pl.col(k).shift(1)) for k in by)
        reach = pl.col("end_ns").cum_max().over(by)
    else:
        group_start, reach = first, pl.col("end_ns").cum_max()
    rows = rows.with_columns(_reach=reach, _new=group_start)
    rows = rows.with_columns(_fresh=pl.col("_new") | (pl.col("start_ns") > pl.col("_reach").shift(1)))
    # a run starts at its first row and ends at the running maximum on its last row (the row
    # before the next run's first): as many of each, so one selection takes both
    last = pl.col("_fresh").shift(-1, fill_value=True)
    return rows.select(*(pl.col(k).filter("_fresh") for k in by), pl.col("start_ns").filter("_fresh"),
                       end_ns=pl.col("_reach").filter(last))


def union_ns(frame: pl.DataFrame, *, by: Sequence[str], start: str = "ts_ns",
             end: str = "end_ns") -> pl.DataFrame:
    """Length of the union per group: columns `by..., union_ns` (groups with rows only)."""
    return union_ns_plan(frame.lazy(), list(by), start, end).sort(list(by)).collect(engine=ENGINE)


def union_ns_plan(rows: pl.LazyFrame, by: list[str], start: str = "ts_ns", end: str = "end_ns", *,
                  name: str = "union_ns") -> pl.LazyFrame:
    """`union_ns` as a plan (in no particular order), its length column called `name`."""
    merged = union_plan(rows, by, start, end)
    return merged.group_by(by).agg((pl.col("end_ns") - pl.col("start_ns")).sum().cast(I64).alias(name))


def total_union_ns(frame: pl.DataFrame, *, start: str = "ts_ns", end: str = "end_ns") -> int:
    """Length of the union of all the intervals of the frame, in ns (0 when empty)."""
    if frame.is_empty():
        return 0
    merged = union_plan(frame.lazy(), [], start, end)
    return int(merged.select((pl.col("end_ns") - pl.col("start_ns")).sum()).collect(engine=ENGINE).item() or 0)


def clip_to_window(frame: pl.DataFrame, start_ns: int, end_ns: int, *, start: str = "ts_ns",
                   end: str = "end_ns") -> pl.DataFrame:
    """Rows overlapping `[start_ns, end_ns)`, their `start`/`end` columns clipped to it.

    Zero-length rows inside the window (boundaries included) are kept.
    """
    stop = pl.max_horizontal(start, end)
    overlaps = (pl.col(start) < end_ns) & (stop > start_ns)
    point = (stop == pl.col(start)) & pl.col(start).is_between(start_ns, end_ns)
    return frame.filter(overlaps | point).with_columns(
        pl.col(start).clip(start_ns, end_ns), stop.clip(start_ns, end_ns).alias(end)
    )


def clip_to_windows(frame: pl.DataFrame, windows: pl.DataFrame, *, start: str = "ts_ns",
                    end: str = "end_ns") -> pl.DataFrame:
    """Every (row, window) pair that overlaps, the row clipped to the window.

    `windows` has `window_eid`, `window_start_ns`, `window_end_ns` (and may carry more
    columns); the result is the frame's columns plus the windows' columns. A row that only
    touches a window (ends at its start or starts at its end) is not paired with it.
    """
    if frame.is_empty() or windows.is_empty():
        return pl.DataFrame(schema={**frame.schema, **windows.schema})
    pairs = frame.join_where(windows, pl.col(start) < pl.col("window_end_ns"),
                             pl.max_horizontal(start, end) > pl.col("window_start_ns"))
    return pairs.with_columns(
        pl.max_horizontal(start, "window_start_ns").alias(start),
        pl.min_horizontal(pl.max_horizontal(start, end), "window_end_ns").alias(end),
    ).select(*frame.columns, *[c for c in windows.columns if c not in frame.columns])


def gaps(frame: pl.DataFrame, bounds: pl.DataFrame | None = None, *, by: Sequence[str] = (),
         start: str = "ts_ns", end: str = "end_ns") -> pl.DataFrame:
    """The idle gaps of each group inside its bounds.

    `bounds` has the `by` columns plus `window_start_ns`, `window_end_ns` (one row per
    group); without it each group is bounded by its own first start and last end. Groups in
    `bounds` with no interval give one `empty` gap; intervals are clipped to the bounds.
    Returns `by..., start_ns, end_ns, gap_ns, position`, sorted by group and start.
    """
    return gaps_plan(frame, bounds, by=by, start=start, end=end).collect(engine=ENGINE)


def gaps_plan(frame: pl.DataFrame, bounds: pl.DataFrame | None = None, *, by: Sequence[str] = (),
              start: str = "ts_ns", end: str = "end_ns") -> pl.LazyFrame:
    """`gaps` as a plan, for a caller that runs it with others (one `collect_all`, or a
    concat, whose parts Polars runs side by side)."""
    schema = {**_key_schema(frame, by), "start_ns": I64, "end_ns": I64, "gap_ns": I64, "position": pl.String}
    if bounds is not None and bounds.is_empty():
        return pl.LazyFrame(schema=schema)
    keys = list(by) or [_KEY]
    merged = union_plan(_keyed(frame.lazy(), by), keys, start, end)
    if bounds is None:
        win = merged.group_by(keys).agg(window_start_ns=pl.col("start_ns").min(),
                                        window_end_ns=pl.col("end_ns").max())
    else:
        win = _keyed(bounds.lazy(), by)
    win = win.select(*keys, pl.col("window_start_ns").cast(I64), pl.col("window_end_ns").cast(I64))
    inside = merged.join(win, on=keys, how="inner", nulls_equal=True).filter(
        (pl.col("start_ns") <= pl.col("window_end_ns")) & (pl.col("end_ns") >= pl.col("window_start_ns"))
    ).select(*keys, pl.max_horizontal("start_ns", "window_start_ns").alias("start_ns"),
             pl.min_horizontal("end_ns", "window_end_ns").alias("end_ns"), pl.lit(1, I64).alias("_kind"))
    edges = [win.select(*keys, start_ns=pl.col(c), end_ns=pl.col(c), _kind=pl.lit(k, I64))
             for c, k in (("window_start_ns", 0), ("window_end_ns", 2))]
    rows = pl.concat([*edges, inside]).sort([*keys, "start_ns", "_kind"])
    rows = rows.with_columns(
        _before=pl.col("end_ns").cum_max().shift(1).over(keys),
        _seen=(pl.col("_kind") == 1).cast(I64).cum_sum().shift(1, fill_value=0).over(keys),
    )
    found = rows.filter(pl.col("start_ns") > pl.col("_before")).select(
        *by, pl.col("_before").alias("start_ns"), pl.col("start_ns").alias("end_ns"),
        (pl.col("start_ns") - pl.col("_before")).alias("gap_ns"),
        pl.when((pl.col("_seen") == 0) & (pl.col("_kind") == 2)).then(pl.lit("empty"))
        .when(pl.col("_seen") == 0).then(pl.lit("before_first"))
        .when(pl.col("_kind") == 2).then(pl.lit("after_last"))
        .otherwise(pl.lit("between")).alias("position"),
    )
    return found.cast(schema).sort([*by, "start_ns"])


def _keyed(rows: pl.LazyFrame, by: Sequence[str]) -> pl.LazyFrame:
    """`rows` with a constant key column when `by` is empty."""
    return rows if by else rows.with_columns(pl.lit(0, I64).alias(_KEY))


def covered_ns(queries: pl.DataFrame, intervals: pl.DataFrame, *, on: Sequence[str] = (),
               start: str = "ts_ns", end: str = "end_ns", whole: bool = False) -> pl.DataFrame:
    """For each query (`qid, q_start_ns, q_end_ns` plus the `on` keys), the length of the
    query covered by the union of the `intervals` with the same keys: `qid, covered_ns`.

    With `whole`, the full length of every merged interval that overlaps the query is
    counted instead (how long the overlapping activity lasted, inside the query or not).
    Queries that nothing covers, and empty queries, are absent (read them as 0).
    """
    out_schema = {"qid": I64, "covered_ns": I64}
    if queries.is_empty() or intervals.is_empty():
        return pl.DataFrame(schema=out_schema)
    (ivs, qs), on = one_key([intervals.lazy().select(*on, start, end), queries.lazy()], on)
    return _covered(ivs, qs, on, start, end, whole).cast(out_schema)


def _covered_joins(ivs: pl.LazyFrame, qs: pl.LazyFrame, on: list[str], start: str, end: str,
                   whole: bool) -> pl.DataFrame:
    """`covered_ns` by two as-of joins per query against the merged runs (the reference)."""
    keys = on or [_KEY]
    merged = _keyed(union_plan(ivs, on, start, end).drop_nulls(on), on)
    queries = _keyed(qs.filter(pl.col("q_end_ns") > pl.col("q_start_ns")).drop_nulls(on), on)
    # merged runs are disjoint and apart, so both their starts and their ends rise; per key,
    # `_n` counts the runs up to one and `_cum` sums their lengths
    runs = merged.with_columns(_n=pl.int_range(1, pl.len() + 1, dtype=I64).over(keys),
                               _cum=(pl.col("end_ns") - pl.col("start_ns")).cum_sum().over(keys)).sort("start_ns")
    q = queries.select("qid", *keys, _qs=pl.col("q_start_ns").cast(I64), _qe=pl.col("q_end_ns").cast(I64),
                       _t=pl.col("q_start_ns").cast(I64))
    q = q.sort("_t").join_asof(runs, left_on="_t", right_on="start_ns", by=keys, strategy="backward",
                               check_sortedness=False)
    q = q.select("qid", *keys, "_qs", "_qe", _n1=pl.col("_n").fill_null(0), _c1=pl.col("_cum").fill_null(0),
                 _s1=pl.col("start_ns"), _e1=pl.col("end_ns"), _t=pl.col("_qe") - 1)
    q = q.sort("_t").join_asof(runs, left_on="_t", right_on="start_ns", by=keys, strategy="backward",
                               check_sortedness=False)
    # the last run starting at or before the query's start overlaps it when it ends after it
    first_in = (pl.col("_e1") > pl.col("_qs")).fill_null(False)
    count = pl.col("_n").fill_null(0) - pl.col("_n1") + first_in.cast(I64)
    # covered length up to t: the runs before t, less the part of the last one after t
    upto_end = pl.col("_cum").fill_null(0) - (pl.col("end_ns") - pl.col("_qe")).clip(lower_bound=0).fill_null(0)
    upto_start = pl.col("_c1") - (pl.col("_e1") - pl.col("_qs")).clip(lower_bound=0).fill_null(0)
    part = upto_end - upto_start
    if whole:
        part = pl.col("_cum").fill_null(0) - pl.col("_c1") + pl.when(first_in).then(
            pl.col("_e1") - pl.col("_s1")).otherwise(0)
    found = q.filter(count > 0).select("qid", part=part)
    return found.group_by("qid").agg(covered_ns=pl.col("part").sum()).collect(engine=ENGINE)


def _covered_native(ivs: pl.LazyFrame, qs: pl.LazyFrame, on: list[str], start: str, end: str,
                    whole: bool) -> pl.DataFrame:
    """`covered_ns` by the C pass (`covered`): the same runs (`union_plan`'s), found per
    query by binary search instead of two as-of joins."""
    group = pl.col(on[0]).cast(I64) if on else pl.lit(0, I64)
    rows = ivs.select(_g=group, _s=pl.col(start).cast(I64), _e=pl.max_horizontal(start, end).cast(I64)).drop_nulls(
    ).sort("_g", "_s")
    asked = qs.filter(pl.col("q_end_ns") > pl.col("q_start_ns")).select(
        "qid", _g=group, _qs=pl.col("q_start_ns").cast(I64), _qe=pl.col("q_end_ns").cast(I64)).drop_nulls("_g")
    rows, asked = pl.collect_all([rows, asked], engine=ENGINE)
    part, hit = kernels.covered(tuple(rows[c] for c in ("_g", "_s", "_e")),
                                tuple(asked[c] for c in ("_g", "_qs", "_qe")), whole)
    found = asked.select("qid").with_columns(part=part).filter(hit == 1)
    return found.group_by("qid").agg(covered_ns=pl.col("part").sum())


_covered = native.register("covered_ns", c=_covered_native, reference=_covered_joins)
