"""A group's columns as a decoder hands them on: (name, kind, buffers) and the row count.

The native scanner's buffers are its own memory (`native.frame` hands them to Polars as
Arrow arrays); the Python decoder's are lists (`batch.frame` makes them Series). Kinds:
non-null Int64, Float64 and UTF-8 text (nulls are markers that `tracekit.loader.columns`
turns back into nulls).
"""

from __future__ import annotations

from typing import Any, NamedTuple

INT64, FLOAT64, UTF8 = "i64", "f64", "utf8"


class Columns(NamedTuple):
    """One group's columns: (name, kind, buffers), `length` rows each. Buffers: the
    scanner's (values,) or (offsets, data) in Arrow's layout, or the Python decoder's (values,)."""

    columns: list[tuple[str, str, tuple[Any, ...]]]
    length: int
