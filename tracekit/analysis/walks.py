"""Walks up an op tree held as parent rows (`nesting.parent_rows`), for the dependency
graph and the critical path: in C (`flag_up`, `climb` in `_slices.c`) when the C passes
are built, else by joins or gathers, one step per level (the references);
`tracekit.native` chooses.
"""

from __future__ import annotations

import polars as pl

from tracekit import native
from tracekit.analysis.nesting import parent_rows
from tracekit.native import kernels

I64 = pl.Int64
LEVELS = 256  # how far up the callers' flags go (the closure's depth)


def _flag_native(out: pl.DataFrame, nested: pl.DataFrame, callers: pl.DataFrame) -> pl.DataFrame | None:
    # (a frame of this graph's alone: remembered, it and its rows outlived the graph)
    rows = parent_rows(out)
    if rows is None:  # an eid repeats: the joins flag
        return None
    called = out.select(pl.col("eid").is_in(callers["eid"].implode())).to_series()
    up = kernels.flag_up(rows, called, LEVELS)
    return out.with_columns(_up=up, _around=up.gather(rows.clip(lower_bound=0)) & (rows >= 0))


def _flag_joins(out: pl.DataFrame, nested: pl.DataFrame, callers: pl.DataFrame) -> pl.DataFrame:
    """`out` (the slices: eid, parent_eid, ...) plus `_up` (it is one of `callers` or above
    one, up to `LEVELS`; true or null) and `_around` (its parent's `_up`)."""
    parent = nested.select("eid", "parent_eid").filter(pl.col("parent_eid").is_not_null())
    frontier = nested.select("eid").join(callers, on="eid", how="semi")
    found = [frontier]
    for _ in range(LEVELS):
        frontier = frontier.join(parent, on="eid").select(eid="parent_eid").unique()
        if frontier.is_empty():
            break
        found.append(frontier)
    flagged = pl.concat(found).unique().with_columns(_up=pl.lit(True))
    out = out.join(flagged, on="eid", how="left", maintain_order="left")
    return out.join(flagged.select(parent_eid="eid", _around="_up"), on="parent_eid", how="left",
                    maintain_order="left")


flag_callers = native.register("flag_up", c=_flag_native, reference=_flag_joins)


def _climb_native(parent: pl.Series, hit: pl.Series, go: pl.Series, op: pl.Series, at: pl.Series,
                  max_depth: int) -> tuple[pl.Series, pl.Series] | None:
    if parent.len() != hit.len():  # an eid repeats: the gathers climb
        return None
    return kernels.climb(parent, hit, go, op, at, max_depth)


def _climb_gathers(parent: pl.Series, hit: pl.Series, go: pl.Series, op: pl.Series, at: pl.Series,
                   max_depth: int) -> tuple[pl.Series, pl.Series]:
    """Per start row `at` (-1: none): (the first `hit` row on the way up, the last `op` row
    met), -1 where none; the climb goes on from a row while its `go` holds, through its
    parent row (`parent`, -1 at the top), `max_depth` steps at most. Series gathers, one
    step per level for the rows still climbing (a join per level against every slice cost
    more than the whole walk, and grew with trace size times depth)."""
    n = at.len()
    live = pl.int_range(n, dtype=I64, eager=True).filter(at >= 0)
    at = at.filter(at >= 0)
    mod, top = pl.repeat(-1, n, dtype=I64, eager=True), pl.repeat(-1, n, dtype=I64, eager=True)
    for _ in range(max_depth):
        if live.is_empty():
            break
        is_op, is_hit, up = op.gather(at), hit.gather(at), go.gather(at)
        top.scatter(live.filter(is_op), at.filter(is_op))  # the last op met on the way up is the outermost
        mod.scatter(live.filter(is_hit), at.filter(is_hit))
        live, at = live.filter(up), parent.gather(at.filter(up))
        live, at = live.filter(at >= 0), at.filter(at >= 0)
    return mod, top


climb = native.register("climb", c=_climb_native, reference=_climb_gathers)
