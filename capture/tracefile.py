"""Atomic writing of traces (`.json.gz` or `.json`) and of the sweep index.

A trace is exported to a temporary file in the destination folder, copied (gzipped when
the name ends in `.gz`) to a second temporary file there, and moved into place with
`os.replace`, so a reader never sees half a file. Kineto writes the export path as
`traceName`; the copy puts the final file name there instead of the temporary one.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any

from .errors import CaptureError

TAIL_BYTES = 64 * 1024


def check_trace_path(path: str | os.PathLike[str]) -> Path:
    """Return `path` as a Path, or raise `CaptureError` unless it ends in .json.gz or .json."""
    result = Path(path)
    if not result.name.endswith((".json.gz", ".json")):
        raise CaptureError(f"trace file name must end in .json.gz or .json: {str(path)!r}")
    return result


def write_trace(profiler: Any, path: str | os.PathLike[str]) -> Path:
    """Export `profiler`'s trace (a torch.profiler.profile) atomically to `path`."""
    final = check_trace_path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    raw = _temp_path(final, ".export.json")
    try:
        profiler.export_chrome_trace(str(raw))
        with _atomic_file(final) as out:
            if final.name.endswith(".gz"):
                with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=6, mtime=0) as sink:
                    _copy_renaming_trace(raw, sink, old=str(raw), new=final.name)
            else:
                _copy_renaming_trace(raw, out, old=str(raw), new=final.name)
    finally:
        raw.unlink(missing_ok=True)
    return final


def write_json(path: str | os.PathLike[str], value: Any) -> Path:
    """Write `value` as indented JSON to `path` atomically."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    with _atomic_file(final) as out:
        out.write(json.dumps(value, indent=2).encode() + b"\n")
    return final


@contextlib.contextmanager
def _atomic_file(final: Path):
    """Yield a binary file in `final`'s folder; on success it replaces `final`."""
    temp = _temp_path(final, ".tmp")
    try:
        with open(temp, "wb") as out:
            yield out
        os.chmod(temp, 0o666 & ~_umask())
        os.replace(temp, final)
    finally:
        temp.unlink(missing_ok=True)


def _temp_path(final: Path, suffix: str) -> Path:
    handle, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix, dir=final.parent)
    os.close(handle)
    return Path(name)


def _copy_renaming_trace(source: Path, sink: IO[bytes], old: str, new: str) -> None:
    """Copy `source` into `sink`, rewriting the closing `"traceName": old` to `new`."""
    size = source.stat().st_size
    head = max(0, size - TAIL_BYTES)
    with open(source, "rb") as src:
        remaining = head
        while remaining:
            chunk = src.read(min(remaining, 1 << 20))
            if not chunk:
                break
            sink.write(chunk)
            remaining -= len(chunk)
        tail = src.read()
    old_field = b'"traceName": ' + json.dumps(old).encode()
    new_field = b'"traceName": ' + json.dumps(new).encode()
    sink.write(tail.replace(old_field, new_field))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
