"""A cache of loaded traces: every frame as Parquet, the meta as JSON, one folder per entry.

An entry's name is a hash of what identifies the load: the file's absolute path, size,
modification time and its first and last 64 KB; the size limit; and the loader's
version (`LOADER_VERSION` plus a hash of the loader's and the model's source, so any
change to them invalidates every entry). An entry is written into a temporary folder and
renamed into place, so a reader never sees half of one. An entry that cannot be read
back, or does not match the model's schemas, is ignored (and replaced by the next write).

Nothing is ever evicted: delete the folder to reclaim the space.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from tracekit.model import DEVICES_SCHEMA, PROCESSES_SCHEMA, SCHEMAS, THREADS_SCHEMA, Trace, TraceMeta

LOADER_VERSION = "2"  # bump when the loader's output changes in a way the source hash cannot see
EDGE_BYTES = 64 * 1024
META_FRAMES = {"devices": DEVICES_SCHEMA, "processes": PROCESSES_SCHEMA, "threads": THREADS_SCHEMA}
COMPRESSION = "zstd"


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """`override`, else `$XDG_CACHE_HOME/tracekit`, else `~/.cache/tracekit`."""
    if override is not None:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "tracekit"


@lru_cache(maxsize=1)
def code_version() -> str:
    """LOADER_VERSION plus a hash of the loader package's and the model's source (the
    native scanner's C source too, where it is shipped)."""
    h = hashlib.sha256(LOADER_VERSION.encode())
    here = Path(__file__).resolve().parent
    for f in [*sorted(here.glob("*.py")), *sorted(here.glob("*.c")), here.parent / "model.py"]:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def entry_key(path: str | os.PathLike[str], *, max_bytes: int) -> str | None:
    """The entry name for a file as it is now; None when the file cannot be read."""
    try:
        real = os.path.realpath(path)
        if not stat.S_ISREG(os.stat(real).st_mode):  # a FIFO or device: the load refuses it
            return None
        with open(real, "rb") as fh:
            st = os.fstat(fh.fileno())
            head = fh.read(EDGE_BYTES)
            tail = b""
            if st.st_size > EDGE_BYTES:
                fh.seek(max(EDGE_BYTES, st.st_size - EDGE_BYTES))
                tail = fh.read(EDGE_BYTES)
    except OSError:
        return None
    h = hashlib.sha256()
    for part in (code_version(), real, str(st.st_size), str(st.st_mtime_ns), str(max_bytes)):
        h.update(part.encode())
        h.update(b"\0")
    h.update(head)
    h.update(tail)
    return h.hexdigest()[:32]


def read(directory: Path, key: str | None, *, path: str) -> Trace | None:
    """The cached Trace, or None (no entry, or an entry that cannot be trusted)."""
    if key is None:
        return None
    entry = directory / key
    try:
        info = msgspec.json.decode((entry / "meta.json").read_bytes())
        if info.get("key") != key or info.get("version") != code_version():
            return None
        frames = {name: _read_frame(entry / f"{name}.parquet", schema) for name, schema in SCHEMAS.items()}
        meta = dict(info["meta"])
        for name, schema in META_FRAMES.items():
            meta[name] = _read_frame(entry / f"meta_{name}.parquet", schema)
        meta["path"] = path
        return Trace(**frames, meta=TraceMeta(**meta))
    except (OSError, ValueError, KeyError, TypeError, msgspec.DecodeError, pl.exceptions.PolarsError):
        return None


def _read_frame(file: Path, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    frame = pl.read_parquet(file, memory_map=False)
    if dict(frame.schema) != schema:
        raise ValueError(f"{file.name}: schema differs from the model")
    return frame


def write(directory: Path, key: str | None, trace: Trace) -> bool:
    """Store a Trace; False when it could not be written (the cache is only an optimisation)."""
    if key is None:
        return False
    tmp = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=directory))
        for name, frame in trace.frames().items():
            frame.write_parquet(tmp / f"{name}.parquet", compression=COMPRESSION, statistics=False)
        meta: dict[str, Any] = {}
        for name in TraceMeta.__dataclass_fields__:
            value = getattr(trace.meta, name)
            if name in META_FRAMES:
                value.write_parquet(tmp / f"meta_{name}.parquet", compression=COMPRESSION, statistics=False)
            else:
                meta[name] = value
        info = {"key": key, "version": code_version(), "meta": meta}
        (tmp / "meta.json").write_bytes(msgspec.json.encode(info))
        final = directory / key
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:  # another process stored it first
            shutil.rmtree(tmp, ignore_errors=True)
        return True
    except (OSError, TypeError, msgspec.EncodeError, pl.exceptions.PolarsError):
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return False


def clear(directory: str | os.PathLike[str] | None = None) -> None:
    """Delete every cache entry."""
    shutil.rmtree(cache_dir(directory), ignore_errors=True)
