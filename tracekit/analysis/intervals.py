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
- `innermost`: for points, the one slice with the same keys (e.g. thread) that contains
  them and started last. Sort the slices by key and start; the candidates of a point are
  the slices up to the last one that started at or before it (an as-of join); the answer
  is the last of those that ends after the point, found by binary lifting over running
  maxima of the ends (log2(n) vectorised steps, no pairs of point and slice formed). With
  the C passes built (`_slices.c`), one merge of the sorted slices and points with a stack
  per key finds the same slice in linear time; the Polars steps stay the reference.
- `touched`: the slices that contain at least one point with the same keys: the number
  of points inside a slice is a difference of two as-of counts.

The joins on time use `DataFrame.join_where` with exactly two inequalities (Polars runs
those as an IEJoin); equality keys are applied afterwards as a filter, because mixing them
into `join_where` makes Polars fall back to a cross join.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from tracekit import native
from tracekit.analysis.order import sort_order
from tracekit.analysis.stab import stab, stab_rows  # noqa: F401  (re-exported, beside the other interval passes)
from tracekit.model import ENGINE, I64_MAX, I64_MIN
from tracekit.native import kernels

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


def _one_key(frames: Sequence[pl.LazyFrame], keys: Sequence[str]) -> tuple[list[pl.LazyFrame], list[str]]:
    """The frames with their `keys` (a thread's pid and tid, say) replaced by one Int64
    column, equal in every frame for equal keys and null where a key is null; a single
    integer key stays as it is. Sorts, windows and as-of joins `by` one integer run several
    times faster than by text, and the coding costs little."""
    keys = list(keys)
    if not keys or (len(keys) == 1 and frames[0].collect_schema()[keys[0]].is_integer()):
        return list(frames), keys
    schema = frames[0].select(keys).collect_schema()
    if _codes(schema):  # text held as codes: the codes side by side, with no table to join (`_group_numbers`)
        number = _code_number(schema).alias(_CODE)
        return [f.with_columns(number).drop(keys) for f in frames], [_CODE]
    # made once (as a plan, each frame's join could run it on its own and number the keys
    # in another order)
    table = pl.concat([f.select(keys).cast(dict(schema)) for f in frames]).drop_nulls().unique(
        maintain_order=True).with_row_index(_CODE).select(*keys, pl.col(_CODE).cast(I64)).collect(engine=ENGINE)
    return [f.join(table.lazy(), on=keys, how="left", maintain_order="left").drop(keys) for f in frames], [_CODE]


_CODE = "_key_code"


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
    (ivs, qs), on = _one_key([intervals.lazy().select(*on, start, end), queries.lazy()], on)
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
    group = _group_numbers(rows.select(keys), pts.select(keys).cast(rows.select(keys).schema))
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


def _codes(schema: Mapping[str, pl.DataType]) -> bool:
    """Keys whose codes make one number (`_code_number`): one or two text columns held as codes."""
    return 0 < len(schema) <= 2 and all(isinstance(t, (pl.Categorical, pl.Enum)) for t in schema.values())


def _code_number(schema: Mapping[str, pl.DataType]) -> pl.Expr:
    """One Int64 from the codes of the `_codes` keys (32 bits each, side by side): equal where
    the keys are equal in every frame of the same column types (the codes are the type's,
    not the frame's), null where one is null."""
    number = pl.lit(0, I64)
    for name in schema:
        number = number * (1 << 32) + pl.col(name).cast(schema[name]).to_physical().cast(I64)
    return number


def _group_numbers(first: pl.DataFrame, second: pl.DataFrame) -> pl.Series:
    """One Int64 per row of `first` then of `second` (frames of the same key columns, no
    nulls), equal where the keys are equal. Up to two text columns held as codes
    (`model.TEXT`: a thread's pid and tid) or one integer column give their numbers as they
    are (the codes side by side in one number); other keys are ranked."""
    schema = first.schema
    if _codes(schema):
        number = _code_number(schema)
    elif len(schema) == 1 and next(iter(schema.values())) in (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8,
                                                             pl.UInt16, pl.UInt32):
        number = pl.col(next(iter(schema))).cast(I64)
    else:
        both = pl.concat([first, second])
        return both.select(pl.struct(list(schema)).rank("dense").cast(I64)).to_series()
    return pl.concat([first.select(number), second.select(number)]).to_series()


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
    (pts, rows), keys = _one_key([points.lazy().select(*on, at), numbered.select("_row", *on, start, end)], on)
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
