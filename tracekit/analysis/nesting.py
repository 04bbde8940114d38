"""Op nesting per thread, vectorised: `with_parents(ops)` adds `depth` and `parent_eid`;
an `OpTree` keeps such a frame with what the analyses derive from it (parent rows, name codes,
the closure), each made once per tree.

The rule. A thread's slices are ordered by (start, longer first, eid). A slice P contains a
later slice C when P.ts <= C.ts, C.end <= P.end and P.dur > 0: a zero-length slice contains
nothing. C's parent is the innermost (last in the order) slice that contains it, its depth
the parent's plus one (0 without one). So a zero-length slice at the instant a longer one
starts is inside it (and a run of them are siblings there); one at the instant a slice
ends is inside that slice, unless a slice of positive length starts at that instant (then
it is inside that one, which comes later in the order); of two equal spans the lower eid
is the parent.

How. The depth of a slice is the number of slices before it in that order that are still
open at its start t: all but those that ended before t, those that end at t when a slice
of positive length starts at t, and the zero-length slices of t before it
(`_ended_before`). Its parent is the closest earlier slice one level up: an as-of join on
the order index, by (pid, tid, depth). For properly nested slices (what profilers write:
every shared trace's `cpu_op`s, `tests/test_links_tree_real.py`) that is the rule exactly;
slices that overlap without nesting (seen with `with_stack`) get the count's answer, a
defined one whose parent may not contain the child.

After the sort, one pass per thread in C (`_slices.c`, built with the package when a C
compiler is there) gives the same depth and parent with two counters and a last-row-per-
depth table; the Polars joins below stay the reference and run without it, when a time or
eid is null, or with `TRACEKIT_NATIVE=0` (`tracekit.native` chooses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import polars as pl

from tracekit import native
from tracekit.model import I64_MIN
from tracekit.native import kernels

KEYS = ["pid", "tid"]
_NATIVE_COLS = ("_g", "ts_ns", "dur_ns", "end_ns", "eid")
DENSE = 4  # rows_of's table: at most this many slots per key (plus DENSE_SLACK), else the join
DENSE_SLACK = 1024
CLOSURE_SCHEMA: dict[str, pl.DataType] = {"eid": pl.Int64, "ancestor_eid": pl.Int64}


def with_parents(ops: pl.DataFrame) -> pl.DataFrame:
    """`ops` plus `depth` (0 = top level on its thread) and `parent_eid` (null at the top)."""
    if ops.is_empty():
        return ops.with_columns(depth=pl.lit(None, pl.Int64), parent_eid=pl.lit(None, pl.Int64))
    return in_time_order(_placed(ops))


def _placed_native(ops: pl.DataFrame) -> pl.DataFrame | None:
    """`ops` plus depth and parent_eid, in its own order, by the C pass (`_nest_native`)."""
    placed = _nest_native(ops.select("eid", *KEYS, "ts_ns", "dur_ns", "end_ns"))
    return None if placed is None else ops.with_columns(depth=placed[0], parent_eid=placed[1])


def _placed_joins(ops: pl.DataFrame) -> pl.DataFrame:
    """`ops` plus depth and parent_eid, in its own order, by the Polars joins (`_nest`)."""
    # the work runs on the columns it needs; the answer joins back onto the rows (a wide
    # frame sorted and joined three times cost more than the nesting itself)
    cols = ops.select("eid", *KEYS, "ts_ns", "dur_ns", "end_ns")
    return ops.join(_nest(cols), on="eid", how="left", maintain_order="left")


_placed = native.register("nest", c=_placed_native, reference=_placed_joins)


def in_time_order(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` sorted by (ts_ns, eid), as a trace's frames are: sorted only when it is not
    (the check reads two columns; a sort copies them all)."""
    return frame if in_time_order_already(frame) else frame.sort("ts_ns", "eid")


def in_time_order_already(frame: pl.DataFrame) -> bool:
    """The rows are in (ts_ns, eid) order, each after the one before (a null time or eid is
    out of order)."""
    if frame.height < 2:
        return True
    ts, eid = pl.col("ts_ns"), pl.col("eid")
    ordered = frame.select(((ts.diff() > 0) | ((ts.diff() == 0) & (eid.diff() > 0))).slice(1).all(ignore_nulls=False))
    return bool(ordered.item())


def rows_of(frame: pl.DataFrame, eids: pl.Series) -> pl.Series:
    """The row of each of `eids` in `frame` (by its `eid` column), -1 where absent: one
    entry per eid in their order, as long as the frame's eids are unique.

    A trace's event ids are dense (0 to the event count), so with the C passes the lookup
    is a table indexed by eid (`_slices.rows`) rather than a hash join; the join stays the
    reference, and runs when the ids are sparse, null or repeated."""
    return _rows(frame, eids)


def _rows_native(frame: pl.DataFrame, eids: pl.Series) -> pl.Series | None:
    """`rows_of` by table (None: the keys are empty, null, sparse or repeated)."""
    keys = frame["eid"]
    if keys.is_empty() or keys.null_count():
        return None
    low, high = int(keys.min()), int(keys.max())  # type: ignore[arg-type]
    span = high - low + 1
    if span > DENSE * keys.len() + DENSE_SLACK or low == I64_MIN:
        return None
    queries = eids.cast(pl.Int64).fill_null(low - 1)  # below the table: absent
    return kernels.rows(keys, queries, low, span)


def _rows_join(frame: pl.DataFrame, eids: pl.Series) -> pl.Series:
    """`rows_of` by a join (the reference)."""
    rows = frame.select(_key="eid", _row=pl.int_range(pl.len(), dtype=pl.Int64))
    found = eids.rename("_key").to_frame().join(rows, on="_key", how="left", maintain_order="left")
    return found["_row"].fill_null(-1)


_rows = native.register("rows_of", c=_rows_native, reference=_rows_join)


def parent_rows(nested: pl.DataFrame) -> pl.Series | None:
    """The row of each row's parent (`parent_eid`) in `nested`, -1 for none: the tree as row
    positions for the C walks (`OpTree.parent_rows` keeps it with its tree). None when an
    eid repeats (the walks need one row per eid)."""
    found = rows_of(nested, nested["parent_eid"])
    return found if found.len() == nested.height else None


@dataclass(frozen=True, eq=False)
class OpTree:
    """An op tree (`with_parents` rows: `links.cpu_ops`) and the arrays derived from it, each
    computed on first use and kept on this object: the analyses handed one `OpTree` share
    them, and they go with it. A bare frame passed to an analysis gets a fresh one (`tree_of`)."""

    frame: pl.DataFrame
    # `attribution.op_paths`' chains and their texts, per separator (filled there on first use)
    paths: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    @cached_property
    def parent_rows(self) -> pl.Series | None:
        """`parent_rows(frame)`: the tree as row positions for the C walks."""
        return parent_rows(self.frame)

    @cached_property
    def name_codes(self) -> pl.Series:
        """One integer per op name (equal names, equal codes), for the C walks that compare names."""
        return self.frame.select(pl.col("name").rank("dense").cast(pl.Int64)).to_series()

    @cached_property
    def closure(self) -> pl.DataFrame:
        """(eid, ancestor_eid) for every op and each of its ancestors, itself included."""
        if self.frame.is_empty():
            return pl.DataFrame(schema=CLOSURE_SCHEMA)
        own = self.frame.select("eid", pl.col("eid").alias("ancestor_eid"))
        return pl.concat([own, ancestors(self.frame).cast(CLOSURE_SCHEMA)])


def tree_of(ops: pl.DataFrame | OpTree) -> OpTree:
    """`ops` as an `OpTree`: itself, or a fresh one around a bare frame (nothing shared)."""
    return ops if isinstance(ops, OpTree) else OpTree(ops)


def frame_of(ops: pl.DataFrame | OpTree) -> pl.DataFrame:
    """The op rows of `ops` (a frame, or an `OpTree`'s)."""
    return ops.frame if isinstance(ops, OpTree) else ops


def _nest_native(cols: pl.DataFrame) -> tuple[pl.Series, pl.Series] | None:
    """(depth, parent_eid) aligned with the rows of `cols` (eid, pid, tid, ts_ns, dur_ns,
    end_ns) from the C pass; None when a time or eid is null (the Polars joins take those)."""
    if any(cols[c].null_count() for c in _NATIVE_COLS[1:]):
        return None
    # a sort of the narrow frame with the row numbers costs half an arg_sort_by on the same keys;
    # rows in (ts, eid) order already (a trace's frames are) take a stable sort on the first
    # three keys, which keeps eid order among equals
    keys, descending = ["_g", "ts_ns", "dur_ns", "eid"], [False, False, True, False]
    stable = in_time_order_already(cols)
    ordered = cols.select(pl.struct(KEYS).rank("dense").cast(pl.Int64).alias("_g"),
                          *[pl.col(c).cast(pl.Int64) for c in _NATIVE_COLS[1:]],
                          pl.int_range(pl.len(), dtype=pl.UInt32).alias("_row")).sort(
        keys[:3] if stable else keys, descending=descending[:3] if stable else descending, maintain_order=stable)
    perm = ordered["_row"]
    depth, parent = kernels.nest(*(ordered[c] for c in _NATIVE_COLS))
    back = perm.arg_sort()  # row i of `cols` sits at back[i] in the sorted order
    return depth.gather(back), parent.gather(back)


def _nest(ops: pl.DataFrame) -> pl.DataFrame:
    """(eid, depth, parent_eid) of the slices (eid, pid, tid, ts_ns, dur_ns, end_ns): the
    Polars reference of the C pass."""
    # one integer per thread (the sort and the joins below key on it instead of two strings)
    # and the order index within the thread, from where each thread's run of rows starts
    threads = ops.select(KEYS).unique().with_row_index("_g").with_columns(pl.col("_g").cast(pl.Int64))
    ordered = ops.join(threads, on=KEYS, how="left", nulls_equal=True).sort(
        ["_g", "ts_ns", "dur_ns", "eid"], descending=[False, False, True, False])
    ordered = ordered.with_columns(_order=_index_in_run("_g"))
    ended = _ended_before(ordered)
    ordered = ordered.join(ended, on="eid", how="left").with_columns(
        depth=(pl.col("_order") - pl.col("_ended")).clip(lower_bound=0)
    )
    right = ordered.select("_g", "_order", pl.col("depth").alias("_parent_depth"), pl.col("eid").alias("parent_eid"))
    left = ordered.with_columns(_parent_depth=pl.col("depth") - 1)
    joined = left.join_asof(
        right, on="_order", by=["_g", "_parent_depth"], strategy="backward",
        allow_exact_matches=False, check_sortedness=False,
    )
    return joined.select("eid", "depth", "parent_eid")


def _index_in_run(group: str) -> pl.Expr:
    """0, 1, 2, ... within each run of equal `group` values (rows sorted by it)."""
    first = pl.int_range(pl.len(), dtype=pl.Int64)
    fresh = (first == 0) | (pl.col(group) != pl.col(group).shift(1))
    return first - pl.when(fresh).then(first).forward_fill()


def _ended_before(ordered: pl.DataFrame) -> pl.DataFrame:
    """Per slice: how many slices before it in its thread's order (`_g`, then the tree's
    order) are closed at it (`_ended`), for the depth: its index less these.

    Closed at a slice starting at t: those that ended before t; those that end at t, when
    a slice of positive length starts at t (a slice starting there is not inside them) and
    are open otherwise (a zero-length slice at the instant a longer one ends is inside
    it); and the zero-length slices at t before it (a zero-length slice contains nothing).
    """
    ends = ordered.select("_g", pl.col("end_ns").alias("_t")).sort("_g", "_t")
    ends = ends.with_columns(_n=_index_in_run("_g") + 1)
    starts = ordered.select("_g", "eid", "dur_ns", pl.col("ts_ns").alias("_t"))  # sorted by (_g, _t) already
    upto = {"on": "_t", "by": "_g", "strategy": "backward", "check_sortedness": False}
    counted = starts.join_asof(ends, **upto).join_asof(
        ends.rename({"_n": "_lt"}), allow_exact_matches=False, **upto)
    # per start instant (a run of rows: scans and fills, no group-by): its rows of length
    # <= 0 in all (`flat_all`) and before the row, and whether its longest row has a length
    first = pl.int_range(pl.len(), dtype=pl.Int64) == 0
    fresh = first | (pl.col("_g") != pl.col("_g").shift(1)) | (pl.col("_t") != pl.col("_t").shift(1))
    last = fresh.shift(-1, fill_value=True)
    flat = (pl.col("dur_ns") <= 0).cast(pl.Int64)  # ends at its start
    seen = flat.cum_sum()
    base = pl.when(fresh).then(seen - flat).forward_fill()
    flat_before = seen - flat - base
    flat_all = pl.when(last).then(seen).backward_fill() - base
    opens = pl.when(fresh).then(pl.col("dur_ns") > 0).forward_fill()  # (the longest of the instant sorts first)
    le, lt = pl.col("_n").fill_null(0), pl.col("_lt").fill_null(0)
    at_t = le - lt - flat_all  # those that started before t and end at t
    ended = lt + pl.when(opens).then(at_t).otherwise(0) + flat_before
    return counted.select("eid", _ended=ended.clip(lower_bound=0))


def ancestors(nested: pl.DataFrame, *, max_depth: int = 256) -> pl.DataFrame:
    """(eid, ancestor_eid) pairs for every slice and each of its ancestors (not itself)."""
    parent = nested.select("eid", "parent_eid").filter(pl.col("parent_eid").is_not_null())
    pairs = []
    frontier = parent.rename({"parent_eid": "ancestor_eid"})
    for _ in range(max_depth):
        if frontier.is_empty():
            break
        pairs.append(frontier)
        frontier = frontier.join(parent, left_on="ancestor_eid", right_on="eid", how="inner").select(
            "eid", pl.col("parent_eid").alias("ancestor_eid")
        )
    if not pairs:
        return pl.DataFrame(schema={"eid": pl.Int64, "ancestor_eid": pl.Int64})
    return pl.concat(pairs)
