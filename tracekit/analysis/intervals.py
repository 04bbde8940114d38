"""Interval arithmetic on Polars frames, vectorised (no per-row Python).

Intervals are half-open `[start, end)` in integer nanoseconds. An interval whose end is
before its start is read as zero-length at its start.

- `union`: merge overlapping or touching intervals per group. Sort by start within the
  group; a row opens a new run when its start is after the running maximum of the ends of
  the rows before it (`cum_max` of end, shifted by one); runs are then aggregated.
- `union_ns` / `total_union_ns`: the length of that union, per group or in all.
- `gaps`: the holes between the merged intervals of each group inside its bounds, each with
  its position (`before_first`, `between`, `after_last`, or `empty` when the bounds hold no
  interval at all). Lengths of the union plus lengths of the gaps equal the bounds' length.
- `clip_to_window`, `clip_to_windows`: keep the part of each interval inside one window or
  inside each of many windows (an interval-overlap join).
- `covered_ns`: for query intervals, how much of each is covered by a set of intervals.
- `stab`: for points, every interval that contains them.

The joins on time use `DataFrame.join_where` with exactly two inequalities (Polars runs
those as an IEJoin); equality keys are applied afterwards as a filter, because mixing them
into `join_where` makes Polars fall back to a cross join.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

I64 = pl.Int64
GAP_POSITIONS = ("before_first", "between", "after_last", "empty")
_KEY = "_group"


def _keys(frame: pl.DataFrame, by: Sequence[str]) -> tuple[pl.DataFrame, list[str]]:
    """The frame with a constant key column added when `by` is empty."""
    if by:
        return frame, list(by)
    return frame.with_columns(pl.lit(0, I64).alias(_KEY)), [_KEY]


def _key_schema(frame: pl.DataFrame, by: Sequence[str]) -> dict[str, pl.DataType]:
    return {k: frame.schema[k] for k in by}


def union(frame: pl.DataFrame, *, by: Sequence[str] = (), start: str = "ts_ns",
          end: str = "end_ns") -> pl.DataFrame:
    """Merged intervals per group: columns `by..., start_ns, end_ns`, sorted by group and start."""
    schema = {**_key_schema(frame, by), "start_ns": I64, "end_ns": I64}
    rows = frame.select(*by, pl.col(start).cast(I64).alias("start_ns"),
                        pl.max_horizontal(start, end).cast(I64).alias("end_ns"))
    rows = rows.drop_nulls(["start_ns", "end_ns"])
    if rows.is_empty():
        return pl.DataFrame(schema=schema)
    rows, keys = _keys(rows, by)
    rows = rows.sort([*keys, "start_ns"])
    before = pl.col("end_ns").cum_max().shift(1).over(keys)
    fresh = (before.is_null() | (pl.col("start_ns") > before)).cast(I64)
    runs = rows.with_columns(_run=fresh.cum_sum().over(keys))
    merged = runs.group_by([*keys, "_run"]).agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    return merged.sort([*keys, "start_ns"]).select(*by, "start_ns", "end_ns")


def union_ns(frame: pl.DataFrame, *, by: Sequence[str], start: str = "ts_ns",
             end: str = "end_ns") -> pl.DataFrame:
    """Length of the union per group: columns `by..., union_ns` (groups with rows only)."""
    merged = union(frame, by=by, start=start, end=end)
    lengths = merged.group_by(list(by)).agg(union_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    return lengths.cast({"union_ns": I64}).sort(list(by))


def total_union_ns(frame: pl.DataFrame, *, start: str = "ts_ns", end: str = "end_ns") -> int:
    """Length of the union of all the intervals of the frame, in ns (0 when empty)."""
    merged = union(frame, start=start, end=end)
    return int((merged["end_ns"] - merged["start_ns"]).sum() or 0)


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
    frame, keys = _keys(frame, by)
    schema = {**_key_schema(frame, by), "start_ns": I64, "end_ns": I64, "gap_ns": I64, "position": pl.String}
    merged = union(frame, by=keys, start=start, end=end)
    if bounds is None:
        bounds = merged.group_by(keys).agg(window_start_ns=pl.col("start_ns").min(),
                                           window_end_ns=pl.col("end_ns").max())
    elif not by:
        bounds = bounds.with_columns(pl.lit(0, I64).alias(_KEY))
    if bounds.is_empty():
        return pl.DataFrame(schema=schema)
    bounds = bounds.select(*keys, "window_start_ns", "window_end_ns")
    inside = merged.join(bounds, on=keys, how="inner", nulls_equal=True).filter(
        (pl.col("start_ns") <= pl.col("window_end_ns")) & (pl.col("end_ns") >= pl.col("window_start_ns"))
    ).select(*keys, pl.max_horizontal("start_ns", "window_start_ns").alias("start_ns"),
             pl.min_horizontal("end_ns", "window_end_ns").alias("end_ns"), pl.lit(1, I64).alias("_kind"))
    edges = pl.concat([
        bounds.select(*keys, pl.col("window_start_ns").alias("start_ns"),
                      pl.col("window_start_ns").alias("end_ns"), pl.lit(0, I64).alias("_kind")),
        bounds.select(*keys, pl.col("window_end_ns").alias("start_ns"),
                      pl.col("window_end_ns").alias("end_ns"), pl.lit(2, I64).alias("_kind")),
    ])
    rows = pl.concat([edges, inside.cast(edges.schema)]).sort([*keys, "start_ns", "_kind"])
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


def covered_ns(queries: pl.DataFrame, intervals: pl.DataFrame, *, on: Sequence[str] = (),
               start: str = "ts_ns", end: str = "end_ns", whole: bool = False) -> pl.DataFrame:
    """For each query (`qid, q_start_ns, q_end_ns` plus the `on` keys), the length of the
    query covered by the union of the `intervals` with the same keys: `qid, covered_ns`.

    With `whole`, the full length of every merged interval that overlaps the query is
    counted instead (how long the overlapping activity lasted, inside the query or not).
    Queries that nothing covers, and empty queries, are absent (read them as 0).
    """
    out_schema = {"qid": I64, "covered_ns": I64}
    merged = union(intervals, by=on, start=start, end=end)
    queries = queries.filter(pl.col("q_end_ns") > pl.col("q_start_ns"))
    if queries.is_empty() or merged.is_empty():
        return pl.DataFrame(schema=out_schema)
    right = merged.rename({k: f"_r_{k}" for k in on})
    pairs = queries.select("qid", "q_start_ns", "q_end_ns", *on).join_where(
        right, pl.col("start_ns") < pl.col("q_end_ns"), pl.col("end_ns") > pl.col("q_start_ns"))
    for k in on:
        pairs = pairs.filter(pl.col(k) == pl.col(f"_r_{k}"))
    part = pl.min_horizontal("end_ns", "q_end_ns") - pl.max_horizontal("start_ns", "q_start_ns")
    if whole:
        part = pl.col("end_ns") - pl.col("start_ns")
    return pairs.group_by("qid").agg(covered_ns=part.sum()).cast(out_schema)


def stab(points: pl.DataFrame, slices: pl.DataFrame, *, at: str = "t", start: str = "ts_ns",
         end: str = "end_ns") -> pl.DataFrame:
    """Every (point, slice) pair with `start <= at < end`: the columns of both frames.

    Columns present in both get the suffix `_right` on the slice side.
    """
    if points.is_empty() or slices.is_empty():
        right = {(f"{c}_right" if c in points.columns else c): t for c, t in slices.schema.items()}
        return pl.DataFrame(schema={**points.schema, **right})
    return points.join_where(slices, pl.col(at) >= pl.col(start), pl.col(at) < pl.col(end))
