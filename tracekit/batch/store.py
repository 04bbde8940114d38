"""The output folder: a content-hash cache of results, and atomic writes that stay inside it.

Layout of OUTDIR:

    .cache/<sha256>.json   one result entry per analysed content (trace bytes or rank group)
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
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.atomic import file_mode, write_file
from tracekit.errors import OutputError, UsageError

HASH = re.compile(r"^[0-9a-f]{64}$")
TEMP_PREFIX = ".tracekit-tmp-"
STALE_TEMP_S = 3600


class Store:
    """Cache lookups and atomic writes under one output folder."""

    def __init__(self, out_dir: str | os.PathLike[str]) -> None:
        self.root = Path(out_dir).resolve()
        if self.root.exists() and not self.root.is_dir():
            raise UsageError(f"{out_dir} exists and is not a directory")
        self.cache_dir = self.root / ".cache"
        with _writing(self.cache_dir):
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(self.cache_dir)
        self.mode = file_mode()  # what open() would give; mkstemp's 0600 is too strict

    def path(self, relative: str) -> Path:
        """OUTDIR/relative, refused when it would land outside OUTDIR."""
        target = (self.root / relative).resolve()
        if not target.is_relative_to(self.root) or target == self.root:
            raise UsageError(f"refusing to write outside the output folder: {relative!r}")
        return target

    # -- cache ------------------------------------------------------------------------
    def get(self, content_hash: str, fingerprint: str) -> dict[str, Any] | None:
        """The cached entry for this content, when written by the same kind of tracekit."""
        if not HASH.match(content_hash):
            return None
        try:
            entry = json.loads((self.cache_dir / f"{content_hash}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = isinstance(entry, dict) and entry.get("fingerprint") == fingerprint and "summary" in entry
        return entry if ok else None

    def put(self, content_hash: str, entry: dict[str, Any]) -> None:
        if not HASH.match(content_hash):
            raise UsageError(f"not a sha256 digest: {content_hash!r}")
        kept = {k: v for k, v in entry.items() if k not in ("report_html", "cacheable")}
        text = json.dumps(kept, ensure_ascii=False, sort_keys=True)
        self.write_bytes(f".cache/{content_hash}.json", text.encode("utf-8"))

    def cached_hashes(self) -> set[str]:
        return {p.stem for p in self.cache_dir.glob("*.json") if HASH.match(p.stem)}

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
        with _writing(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            return write_file(target, write, prefix=TEMP_PREFIX, mode=self.mode, sync=True)


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An OSError while writing `path` as the `OutputError` the command reports."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or re.sub(r"^\[Errno \d+\] ", "", str(exc))  # (Polars re-raises it as text)
        raise OutputError(f"cannot write {path}: {reason}") from None


def _remove_stale_temps(folder: Path) -> None:
    """Temp files left by a killed run (older than an hour, so a concurrent run's are kept)."""
    cutoff = time.time() - STALE_TEMP_S
    for p in folder.glob(f"{TEMP_PREFIX}*"):
        try:
            if p.stat().st_mtime < cutoff:
                p.unlink()
        except OSError:
            pass
