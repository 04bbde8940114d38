"""The native scanner (`tracekit/native/_scan.c`, built when a C compiler is there): a piece -> a batch.

It makes the batch `tracekit.loader.batch.build_batch` makes, without a Python object per
event, for pieces in the common shape of a trace; for anything else it returns None and
the piece takes the Python path (msgspec structs), which stays the reference for every
edge case. `TRACEKIT_NATIVE=0` in the environment turns it off (`tracekit.native.available`).

Its columns' buffers are the scanner's own memory (`_scan.Buffer`), handed to Polars as
one Arrow array a column through the PyCapsule interface (`frame`): no copy, where
writing them as an Arrow IPC stream and reading that back would copy them twice, on the
loading thread that turns batches into frames.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from tracekit.loader import args as A
from tracekit.loader import decoded as W
from tracekit.loader.batch import FIELDS, GROUP_BY_PH, REST_ARGS, TYPED, WITH_ARGS_TEXT, WITH_PH
from tracekit.loader.categories import X_KIND
from tracekit.native import (
    _scan,  # (None: built without a C compiler)
    available,
)

if TYPE_CHECKING:
    import polars as pl

_KIND_CODE = {"int": 0, "float": 1, "str": 2, "list": 3}
_INDEX = {f: i for i, f in enumerate(A.ALL_KEYS)}
ARG_KEYS = tuple((A.ALL_KEYS[f].encode(), _KIND_CODE[A.KIND[f]]) for f in A.ALL_KEYS)


@cache
def _specs() -> dict[str, tuple]:
    """Per group: the fields its frame reads, whether it keeps `ph` and `args`, its typed
    args keys (index in ARG_KEYS, column name), whether it keeps the shape keys, and
    whether its `args` keeps only the rest."""
    return {
        key: (fields, key in WITH_PH, key in WITH_ARGS_TEXT,
              tuple((_INDEX[f], f) for f in A.FAMILIES[key]) if key in TYPED else (), key in ("ops", "pairs"),
              key in REST_ARGS)
        for key, fields in FIELDS.items()
    }


def native_batch(piece: bytes | memoryview, bare: bool = False) -> dict | None:
    """`piece` (`[` + whole events + `]`, or with `bare` the events alone) -> a batch, or
    None: not in the common shape (or no scanner), left to the Python path."""
    if not available():
        return None
    out = _scan.scan(piece, ARG_KEYS, GROUP_BY_PH, X_KIND, _specs(), bare)
    if out is None:
        return None
    n, phs, cats, groups = out
    dicts: dict = {"ph": phs, "cat": cats}
    columns: dict[str, W.Columns] = {}
    for key, rows, cols, group_dicts in groups:
        dicts[key] = group_dicts
        columns[key] = W.Columns(cols, rows)  # made a frame by the thread that reads it (`frame`)
    return {"n": n, "bad_types": 0, "dropped": 0, "dicts": dicts, "groups": columns, "counts": {}}


class ArrowColumn:
    """One column of a native batch's group (name, kind, `_scan.Buffer`s) as an Arrow array,
    for `pl.Series(...)`: the array shares the scanner's buffers, which live on as long as
    the Series or the batch holds them, whichever thread lets them go."""

    def __init__(self, column: tuple[str, str, tuple[object, ...]], length: int) -> None:
        self.column, self.length = column, length

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]:
        return _scan.arrow_column(self.column, self.length)


def scanned(group: object) -> bool:
    """Whether `group` holds the scanner's buffers (`frame` can hand it to Polars)."""
    if _scan is None or not isinstance(group, W.Columns) or not group.columns:
        return False
    return all(isinstance(b, _scan.Buffer) for _, _, bufs in group.columns for b in bufs)


def frame(group: W.Columns) -> pl.DataFrame:
    """A `scanned` group as a frame, its buffers taken over as they are."""
    import polars as pl

    return pl.DataFrame([pl.Series(ArrowColumn(column, group.length)) for column in group.columns])
