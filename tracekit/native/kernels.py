"""The C passes as plain functions over Polars Series (Int64), for the C routes that
`register` pairs with their references: columns cross into C as Arrow C streams
(`Series.__arrow_c_stream__`, no copy: `arrow`) and come back the same way (`series`).

Each needs the passes built (`tracekit.native.BUILT`); what each computes is documented
in `_slices.c` and `_paths.c`.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from tracekit.native import _paths, _slices

Series = pl.Series
Columns = tuple[pl.Series, ...]


def arrow(column: pl.Series) -> object:
    """`column` as the C passes read it: Int64 in one chunk, as an Arrow C stream capsule."""
    return column.cast(pl.Int64).rechunk().__arrow_c_stream__()


def series(capsule: object, name: str = "") -> pl.Series:
    """A column the C passes made (an Arrow C stream capsule) as a Series named `name`
    (Polars would take the stream's own field name, which the C passes leave empty)."""
    return pl.Series(_Stream(capsule)).rename(name)


class _Stream:
    """A capsule made in C, handed to Polars through the Arrow PyCapsule interface."""

    def __init__(self, capsule: object) -> None:
        self._capsule = capsule

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self._capsule


def _in(columns: Sequence[pl.Series]) -> tuple[object, ...]:
    return tuple(arrow(c) for c in columns)


def nest(group: Series, ts: Series, dur: Series, end: Series, eid: Series) -> tuple[Series, Series]:
    """(depth, parent_eid) of slices sorted by (group, ts, dur desc, eid)."""
    depth, parent = _slices.nest(*_in((group, ts, dur, end, eid)))
    return series(depth, "depth"), series(parent, "parent_eid")


def rows(keys: Series, queries: Series, low: int, span: int) -> Series | None:
    """The row of each query in `keys` (unique, in [low, low + span)), -1 absent; None when
    a key repeats."""
    found = _slices.rows(arrow(keys), arrow(queries), low, span)
    return None if found is None else series(found, "_row")


def tree_sums(parent: Series, at: Series, dur: Series, kernel: Series, levels: int) -> Columns:
    """Per row of the tree (`parent` rows): its own and its subtree's events (events at rows
    `at`, durations `dur`, kernel flags `kernel`), as gpu_events_self, gpu_self_ns,
    gpu_events_incl, kernels_incl, gpu_incl_ns."""
    found = _slices.tree_sums((arrow(parent),), _in((at, dur, kernel)), levels)
    names = ("gpu_events_self", "gpu_self_ns", "gpu_events_incl", "kernels_incl", "gpu_incl_ns")
    return tuple(series(c, name) for c, name in zip(found, names))


def same_above(parent: Series, codes: Series, levels: int) -> Series:
    """Per row: whether a row above it (up to `levels`) has its code (Boolean)."""
    return series(_slices.same_above(_in((parent, codes)), levels)) != 0


def chains(parent: Series, codes: Series) -> tuple[Series, Series, Series]:
    """(chain of each row, parent chain of each chain (-1: none), code of each chain):
    rows with the same codes from the root down share a chain; parents come first."""
    row_chain, chain_parent, chain_code = _slices.chains(_in((parent, codes)))
    return series(row_chain), series(chain_parent), series(chain_code)


def covered(runs: Columns, queries: Columns, whole: bool) -> tuple[Series, Series]:
    """(part, hit) per query (group, start, end) against the intervals (group, start, end),
    sorted by (group, start)."""
    part, hit = _slices.covered(_in(runs), _in(queries), whole)
    return series(part), series(hit)


def stab(starts: Series, ends: Series, points: Series) -> tuple[Series, Series]:
    """(point, slice) positions of every pair start <= point < end, both sorted by time."""
    pi, si = _slices.stab(_in((starts, ends)), (arrow(points),))
    return series(pi), series(si)


def innermost(slices: Columns, points: Columns) -> Series:
    """Per point (group, t): the picked slice row (group, start, end, length, order, by), or null."""
    return series(_slices.innermost(_in(slices), _in(points)), "_i")


def up_until(parent: Series, ends: Series, at: Series, need: Series, levels: int) -> Series:
    """Per start row `at`: the first row up from it whose end is >= `need`, -1 none."""
    return series(_slices.up_until(_in((parent, ends)), arrow(at), arrow(need), levels))


def climb(parent: Series, hit: Series, go: Series, op: Series, at: Series, levels: int) -> tuple[Series, Series]:
    """Per start row `at`: (the first `hit` row up while `go`, the last `op` row met), -1 none."""
    mod, top = _slices.climb(_in((parent, hit, go, op)), arrow(at), levels)
    return series(mod), series(top)


def flag_up(parent: Series, flags: Series, levels: int) -> Series:
    """Per row: it or a row below it (up to `levels`) is flagged (Boolean)."""
    return series(_slices.flag_up(_in((parent, flags)), levels)) != 0


PIXEL_COLUMNS = ("x0", "x1", "code", "covered", "n", "level")


def pixels(start: Series, end: Series, codes: Series, prio: Series, t0: int, t1: int, width: int,
           classes: int) -> pl.DataFrame | None:
    """One lane's pixel runs (PIXEL_COLUMNS); None for a window too wide for 64-bit units."""
    out = _slices.pixels(_in((start, end, codes, prio)), t0, t1, width, classes)
    return None if out is None else pl.DataFrame([series(c, name) for c, name in zip(out, PIXEL_COLUMNS)])


def longest_weight(src: Series, dst: Series, weights: Series, nodes: int) -> int:
    """The longest path's weight over edges in topological positions (OverflowError beyond 64 bits)."""
    return int(_paths.longest_weight(arrow(src), arrow(dst), arrow(weights), nodes))


def longest_path(src: Series, dst: Series, weights: Series, nodes: int) -> tuple[Series, int]:
    """(positions of the longest path, its weight) (OverflowError beyond 64 bits)."""
    positions, weight = _paths.longest_path(arrow(src), arrow(dst), arrow(weights), nodes)
    return series(positions), int(weight)
