"""The output folder: atomic writes that stay inside it.

Layout of OUTDIR:

    .cache/<sha256>.json   one result entry per analysed content (trace bytes or rank group;
                           `tracekit.cache.results`, in the folder of the batch's `Cache`)
    reports/<name>.html    per-trace reports (--reports)
    summary.parquet, summary.csv, kernel_classes.parquet, findings.parquet, ranks.parquet
    index.html

Every file is written to a temporary name in its final folder and renamed over the target
(`os.replace`, atomic on POSIX), so a reader or an interrupted run never sees half a file.
Every path is checked to resolve inside OUTDIR; names come from `sources.safe_name`.
A folder or file that cannot be written (disk full, read-only, not a folder) is an
`OutputError`: exit 2 and one line, as for any output a command names.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.atomic import file_mode, write_file, writing
from tracekit.cache.results import TEMP_PREFIX
from tracekit.errors import UsageError


class Store:
    """Atomic writes under one output folder (its result entries: `cache.results`)."""

    def __init__(self, out_dir: str | os.PathLike[str]) -> None:
        self.root = Path(out_dir).resolve()
        if self.root.exists() and not self.root.is_dir():
            raise UsageError(f"{out_dir} exists and is not a directory")
        with writing(self.root):
            self.root.mkdir(parents=True, exist_ok=True)
        self.mode = file_mode()  # what open() would give; mkstemp's 0600 is too strict

    def path(self, relative: str) -> Path:
        """OUTDIR/relative, refused when it would land outside OUTDIR."""
        target = (self.root / relative).resolve()
        if not target.is_relative_to(self.root) or target == self.root:
            raise UsageError(f"refusing to write outside the output folder: {relative!r}")
        return target

    # -- atomic writes ----------------------------------------------------------------
    def write_bytes(self, relative: str, data: bytes) -> Path:
        return self._atomic(relative, lambda fh: fh.write(data))

    def write_text(self, relative: str, text: str) -> Path:
        return self.write_bytes(relative, text.encode("utf-8"))

    def write_frame(self, relative: str, frame: pl.DataFrame) -> Path:
        """A frame as Parquet or CSV (by the name's suffix). The Parquet bytes are made in
        memory first: Polars reports a failed write to the file as its own error, not the
        OSError (a full disk) behind it."""
        if relative.endswith(".csv"):
            return self._atomic(relative, lambda fh: frame.write_csv(fh))
        data = io.BytesIO()
        frame.write_parquet(data)
        return self.write_bytes(relative, data.getvalue())

    def _atomic(self, relative: str, write: Callable[[Any], Any]) -> Path:
        target = self.path(relative)
        with writing(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            return write_file(target, write, prefix=TEMP_PREFIX, mode=self.mode, sync=True)
