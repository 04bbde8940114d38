"""Columns that hold one value on every row, kept as that value and a length.

A column that is all null, or the same number or text on every row, becomes Polars'
constant (scalar) column. Every reader sees the same values, but the column takes no
memory, and filters, gathers, sorts and joins of its frame copy nothing for it, where a
plain column is copied row by row (16 bytes a row for text, nulls too). Traces are full of
such columns: the shape columns of a capture without `record_shapes`, one process or
category on every runtime call, the flows' fixed category and name. On the 1 GB trace the
op tree alone (`links.cpu_ops`, a filter of the ops) copied 0.1 GB of them.

Made by the load (each frame as it is built) and by the caches as they read a frame back
(a file read back fills every column's values).
"""

from __future__ import annotations

import polars as pl

# dtypes whose equality is plain equality (floats are left out: NaN and -0.0 compare oddly)
_EXACT = (pl.String, pl.Categorical, pl.Boolean, pl.Int8, pl.Int16, pl.Int32, pl.Int64,
          pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64)


def constant_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with each column that holds only nulls (of any dtype), or one value and no
    null (text, integers, booleans), as a constant column."""
    if frame.height < 2:
        return frame
    fixed = []
    for name, dtype in frame.schema.items():
        column = frame.get_column(name)
        if column.null_count() == frame.height:
            fixed.append(pl.lit(None, dtype).alias(name))
        elif dtype in _EXACT and not column.null_count() and _one_value(column):
            fixed.append(pl.lit(column[0], dtype).alias(name))
    return frame.with_columns(fixed) if fixed else frame


def _one_value(column: pl.Series) -> bool:
    first = column[0]
    return column[-1] == first and bool((column == first).all())
