"""Columns that hold one value on every row, kept as that value and a length.

A column that is all null, or the same number or text on every row, becomes Polars'
constant (scalar) column. Every reader sees the same values, but the column takes no
memory, and filters, gathers, sorts and joins of its frame copy nothing for it, where a
plain column is copied row by row (16 bytes a row for text, nulls too). Traces are full of
such columns: the shape columns of a capture without `record_shapes`, one process or
category on every runtime call, the flows' fixed category and name; the op tree alone
(`links.cpu_ops`, a filter of the ops) would copy them for every op.

Made by the load (each frame as it is built) and by the caches as they read a frame back
(a file read back fills every column's values). Defined in the model (`model.constant_columns`),
as the analyses and caches use it too; the loader's modules import it from here.
"""

from tracekit.model import constant_columns

__all__ = ["constant_columns"]
