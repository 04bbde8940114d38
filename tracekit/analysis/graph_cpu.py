"""The CPU lanes of the dependency graph (`graph`): each thread's slices as a chain of start
and end points, the pieces between them with their class and weight, and the `cpu` edges
between anchors (launch calls, blocking calls, the lane's ends) that sum those pieces."""

from __future__ import annotations

from itertools import pairwise

import polars as pl

from tracekit.analysis.graph_columns import CLASS, I64, KIND, SEGMENT_SCHEMA, lane_of
from tracekit.analysis.nesting import rows_of
from tracekit.analysis.order import sort_order
from tracekit.analysis.walks import flag_callers
from tracekit.model import ENGINE, TEXT


def chain_points(nested: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    """Start/end points of the CPU slices in chain order; `node` = row index. And each
    thread's lane (`cpu:pid:tid`), by `_thread`.

    At equal times ends come before starts, inner ends before outer ones, outer starts
    before inner ones. A zero-length slice has only its start point. `owner` is the
    innermost slice open right after the point. Threads sort as (pid, tid) through one
    integer per thread (`_thread`, their rank): sorting on two strings costs more. The
    points carry that integer, not the lane's text: a row's lane is read from `lanes` where
    an edge or a piece needs it (a text column sorted with the points costs 16 bytes a
    point).
    """
    dur = pl.col("end_ns") - pl.col("ts_ns")
    threads = nested.select("pid", "tid").unique().sort("pid", "tid").with_row_index("_thread")
    lanes = threads.select(pl.format("cpu:{}:{}", "pid", "tid").cast(TEXT)).to_series().rename("lane")
    # each slice's thread number, found by a join of the two key columns alone (a join of
    # the slices' columns would copy them all)
    thread = nested.select("pid", "tid").join(threads, on=["pid", "tid"], how="left", nulls_equal=True,
                                              maintain_order="left")["_thread"]
    nested = nested.select("eid", "ts_ns", "end_ns", "depth", "parent_eid").with_columns(_thread=thread)
    del thread
    depth = pl.col("depth").cast(pl.Int32)  # (a sort key only: four bytes a point fewer to sort and hold)
    starts = nested.select("_thread", "eid", t=pl.col("ts_ns"), opening=pl.lit(True),
                           key=depth, owner=pl.when(dur > 0).then(pl.col("eid")).otherwise(pl.col("parent_eid")))
    ends = nested.lazy().filter(dur > 0).select(  # (lazy: only these columns are filtered)
        "_thread", "eid", t=pl.col("end_ns"), opening=pl.lit(False), key=-depth,
        owner=pl.col("parent_eid")).collect(engine=ENGINE)
    del nested
    # `nested` is in (ts, eid) order (`with_parents`), so the starts are in eid order among
    # equal times: with the ends put in eid order, a stable sort on the other four keys gives
    # the order of all five, in a third of the time of a sort on the five
    ends = ends.sort("eid")
    both = pl.concat([starts, ends])
    del starts, ends
    # the sort finds the order on its keys alone, and each column is then gathered in it and
    # let go (a sort of the whole frame holds every column twice)
    by = sort_order(both, "_thread", "t", "opening", "key", maintain_order=True)
    columns = dict(zip(both.columns, both.get_columns(), strict=True))
    del both
    pts = pl.DataFrame({"node": pl.int_range(by.len(), dtype=I64, eager=True),
                        **{name: columns.pop(name).gather(by) for name in list(columns)}})
    return pts, lanes


def chain_pieces(points: pl.DataFrame, lanes: pl.Series, nested: pl.DataFrame, syncs: pl.DataFrame,
              launched: pl.DataFrame, callers: pl.DataFrame, idle_gap_ns: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The CPU pieces (SEGMENT_SCHEMA, `src` = the anchor the piece's chain edge starts at) and the anchors."""
    same = pl.col("_thread") == pl.col("_thread").shift(-1)
    first = ~(pl.col("_thread") == pl.col("_thread").shift(1)).fill_null(False)
    # points stay in node order throughout (membership tests, not joins): `src` is a forward
    # fill along it, and the segments come out sorted by `src` (path_segments relies on it)
    launches = pl.col("eid").is_in(launched["launch_eid"].implode())
    waits = pl.col("eid").is_in(syncs["eid"].implode())
    pts = points.with_columns(_next=pl.when(same).then(pl.col("t").shift(-1)), _first=first,
                              _last=~same.fill_null(False))
    anchor = (pl.col("_first") | pl.col("_last") | (pl.col("opening") & launches) | (~pl.col("opening") & waits))
    pts = pts.with_columns(_anchor=anchor.fill_null(False))
    pts = pts.with_columns(src=pl.when("_anchor").then("node").forward_fill())
    anchors = pts.select("node", "_thread", "t", "eid", "_anchor").filter("_anchor").drop("_anchor")
    # (only what a piece reads: a filter of every point column would copy them all)
    # every point is made a piece and each thread's last (no next point: no piece) is left
    # out at the end (`_between`), so that the columns stay one chunk while they are worked on
    last = pts["_last"]
    seg = pts.select("src", "_thread", "t", "_next", "owner")
    del pts  # (the columns made here go before the pieces' own are made)
    owners = _owners(nested, syncs, callers)  # one row per slice: each piece reads its owner's row
    at = rows_of(owners, seg["owner"])
    seg = pl.concat([seg, owners.select("role", "name", "launches", "block_ns").gather(at.set(at < 0, None))],
                    how="horizontal")
    del owners, at
    length = pl.col("_next") - pl.col("t")
    hostless = pl.col("role").is_null() | (pl.col("role") == "python")
    idle = hostless & (length > idle_gap_ns)
    cls = (pl.when(idle).then(pl.lit("idle", CLASS))
           .when(hostless).then(pl.lit("python_overhead", CLASS))
           .when(pl.col("block_ns").is_not_null()).then(pl.lit("sync_wait", CLASS))
           .when(pl.col("launches")).then(pl.lit("launch_overhead", CLASS))
           .otherwise(pl.lit("cpu_compute", CLASS)))
    weight = (pl.when(idle).then(0)
              .when(pl.col("block_ns").is_not_null()).then(pl.min_horizontal(length, "block_ns"))
              .otherwise(length))
    # one step: the class and the weight side by side, and only the result's columns kept
    seg = seg.select("src", lanes.gather(seg["_thread"]), start_ns="t", end_ns="_next", cls=cls,
                     weight_ns=weight, eid="owner", name="name", role="role").cast(SEGMENT_SCHEMA)
    return _between(seg, last), anchors


def _between(points: pl.DataFrame, last: pl.Series) -> pl.DataFrame:
    """The rows of `points` but each thread's last (`last`): the pieces, one per point that
    has a next one on its thread. Those are a few rows of millions, so the rows between
    them are taken as slices of the columns, which copy nothing (a filter of the points
    would copy five columns, beside the points' own),
    unless there are more than `MAX_PIECE_RUNS` threads: the pieces' columns are then as
    many chunks, which every later gather would walk."""
    ends = last.arg_true()
    if ends.len() > MAX_PIECE_RUNS:
        return points.filter(~last)
    bounds = [-1, *ends.to_list()]
    runs = [points.slice(a + 1, b - a - 1) for a, b in pairwise(bounds) if b - a > 1]
    return pl.concat(runs) if runs else points.clear()


MAX_PIECE_RUNS = 64


def _owners(nested: pl.DataFrame, syncs: pl.DataFrame, callers: pl.DataFrame) -> pl.DataFrame:
    """Per slice: role, name, block weight, and `launches`: it launched GPU work, or a call
    below it did, or (for a runtime call) the op around it launches (dispatch work).

    The callers' ancestors (up to 256 levels) are flagged by `walks.flag_callers`."""
    out = flag_callers(nested.select("eid", "role", "name", "parent_eid"), nested, callers)
    out = out.with_columns(
        launches=pl.col("_up").fill_null(False) | ((pl.col("role") == "runtime") & pl.col("_around").fill_null(False)))
    return out.select("eid", "role", pl.col("name").cast(TEXT), "launches").join(
        syncs.select("eid", block_ns="tail_ns"), on="eid", how="left")


def piece_runs(src: pl.Series, anchors: pl.Series) -> tuple[pl.Series, pl.Series]:
    """(lo, hi) per anchor: its pieces are the rows lo..hi-1 of the segments, whose `src`
    column is sorted (`chain_pieces` makes it so; a binary search of unsorted anchors would
    find wrong runs, so it is checked, a pass over the column)."""
    if not src.is_sorted():
        raise ValueError("DepGraph.segments must be sorted by src, as build_graph makes them")
    return src.search_sorted(anchors, side="left").cast(I64), src.search_sorted(anchors, side="right").cast(I64)


def run_sums(weights: pl.Series, lo: pl.Series, hi: pl.Series) -> pl.Series:
    """The sum of `weights` over rows lo..hi-1, per (lo, hi): a difference of running sums
    (nulls count 0), instead of a group-by of every piece and a join back, which costs
    far more on millions of pieces."""
    running = pl.concat([pl.Series([0], dtype=I64), weights.cast(I64).fill_null(0).cum_sum()])
    return running.gather(hi) - running.gather(lo)


def chain_edges(segments: pl.DataFrame, anchors: pl.DataFrame, lanes: pl.Series) -> pl.LazyFrame:
    """One edge per pair of consecutive anchors on a thread: the sum of the pieces between
    (the anchor's run of pieces, `piece_runs`)."""
    same = pl.col("_thread") == pl.col("_thread").shift(-1)
    pairs = anchors.sort("node")
    sums = run_sums(segments["weight_ns"], *piece_runs(segments["src"], pairs["node"]))
    pairs = pairs.lazy().with_columns(weight_ns=sums, dst=pl.when(same).then(pl.col("node").shift(-1)),
                                      _end=pl.when(same).then(pl.col("t").shift(-1)))
    pairs = pairs.filter(pl.col("dst").is_not_null())
    return pairs.select(src="node", dst="dst", kind=pl.lit("cpu", KIND), weight_ns="weight_ns",
                        start_ns="t", end_ns="_end", cls=pl.lit(None, CLASS), eid=pl.lit(None, I64),
                        name=pl.lit(None, TEXT), lane=lane_of(lanes), inferred=pl.lit(False),
                        src_eid=pl.lit(None, I64))
