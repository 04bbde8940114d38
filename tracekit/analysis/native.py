"""The analysis's C passes (`_paths.c`, `_slices.c`), built with the package when a C
compiler is there; every one has a Polars or Python reference that runs without them.

`enabled()` says whether they are built and not turned off (`TRACEKIT_NATIVE=0` in the
environment, which also turns off the loader's native scanner). Columns cross into C as
Arrow C streams (`Series.__arrow_c_stream__`, no copies; `arrow`) and come back the same
way (`series`).
"""

from __future__ import annotations

import os

import polars as pl

try:
    from tracekit.analysis import _paths as paths
    from tracekit.analysis import _slices as slices
except ImportError:  # built without a C compiler
    paths = slices = None


def enabled() -> bool:
    """The C passes are built and not turned off."""
    return paths is not None and slices is not None and os.environ.get("TRACEKIT_NATIVE", "1") != "0"


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
