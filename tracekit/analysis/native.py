"""The analysis's C passes (`_paths.c`, `_slices.c`), built with the package when a C
compiler is there; every one has a Polars or Python reference that runs without them.

`enabled()` says whether they are built and not turned off (`TRACEKIT_NATIVE=0` in the
environment, which also turns off the loader's native scanner). Columns cross into C as
Arrow C streams (`Series.__arrow_c_stream__`, no copies) and come back the same way:
`Stream` hands a capsule the C code made to `pl.Series`.
"""

from __future__ import annotations

import os

try:
    from tracekit.analysis import _paths as paths
    from tracekit.analysis import _slices as slices
except ImportError:  # built without a C compiler
    paths = slices = None


def enabled() -> bool:
    """The C passes are built and not turned off."""
    return paths is not None and slices is not None and os.environ.get("TRACEKIT_NATIVE", "1") != "0"


class Stream:
    """A column made in C, handed to Polars through the Arrow PyCapsule interface."""

    def __init__(self, capsule: object) -> None:
        self._capsule = capsule

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self._capsule
