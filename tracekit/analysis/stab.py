"""Every (point, slice) pair with `start <= at < end`: `stab`, and the rows of its pairs
(`stab_rows`). In C (`stab`: one sweep in time order) when the C passes are built, else a
`join_where` (the reference); `tracekit.native` chooses.
"""

from __future__ import annotations

import polars as pl

from tracekit import native
from tracekit.native import kernels

I64 = pl.Int64


def stab(points: pl.DataFrame, slices: pl.DataFrame, *, at: str = "t", start: str = "ts_ns",
         end: str = "end_ns") -> pl.DataFrame:
    """Every (point, slice) pair with `start <= at < end`: the columns of both frames, in
    the points' order and, for one point, the slices'.

    Columns present in both get the suffix `_right` on the slice side. In C (`stab`: one
    sweep in time order) when the C passes are built, else a `join_where` (the reference,
    several times slower on large traces).
    """
    suffixed = {c: f"{c}_right" for c in slices.columns if c in points.columns}
    if points.is_empty() or slices.is_empty():
        return pl.DataFrame(schema={**points.schema, **{suffixed.get(c, c): t for c, t in slices.schema.items()}})
    p, s = stab_rows(points, slices, at=at, start=start, end=end)
    return pl.concat([points.gather(p), slices.gather(s).rename(suffixed)], how="horizontal")


def stab_rows(points: pl.DataFrame, slices: pl.DataFrame, *, at: str = "t", start: str = "ts_ns",
              end: str = "end_ns") -> tuple[pl.Series, pl.Series]:
    """The rows (point, slice) of `stab`'s pairs, in its order: a caller that keeps a few of
    the pairs, or a few columns, gathers only those."""
    if points.is_empty() or slices.is_empty():
        return pl.Series("p", [], I64), pl.Series("s", [], I64)
    return _stab(points, slices, at=at, start=start, end=end)


def _stab_join(points: pl.DataFrame, slices: pl.DataFrame, *, at: str, start: str,
               end: str) -> tuple[pl.Series, pl.Series]:
    """The rows (point, slice) of `stab`'s pairs, in its order, by a `join_where` (the reference)."""
    p_row, s_row = "__stab_point", "__stab_slice"
    pairs = points.select(pl.col(at)).with_row_index(p_row).join_where(
        slices.select(start, end).with_row_index(s_row), pl.col(at) >= pl.col(start), pl.col(at) < pl.col(end))
    pairs = pairs.sort(p_row, s_row)
    return pairs[p_row].cast(I64).rename("p"), pairs[s_row].cast(I64).rename("s")


def _stab_native(points: pl.DataFrame, slices: pl.DataFrame, *, at: str, start: str,
                 end: str) -> tuple[pl.Series, pl.Series]:
    """The rows (point, slice) of `stab`'s pairs, in its order, by the C sweep."""
    pts = points.select(pl.col(at).cast(I64)).with_row_index("__row").drop_nulls(at).sort(at, "__row")
    sls = slices.select(pl.col(start).cast(I64), pl.col(end).cast(I64)).with_row_index("__row").drop_nulls().sort(start, "__row")
    pi, si = kernels.stab(sls[start], sls[end], pts[at])
    rows = pl.DataFrame({"p": pts["__row"].cast(I64).gather(pi), "s": sls["__row"].cast(I64).gather(si)}).sort("p", "s")
    return rows["p"], rows["s"]


_stab = native.register("stab", c=_stab_native, reference=_stab_join)
