"""A cache of loaded traces: every frame as Parquet, the meta as JSON, one folder per entry.

An entry's name is a hash of what identifies the load: the file's absolute path, size,
modification time and its first and last 64 KB; the size limit; and the loader's
version (`LOADER_VERSION` plus a hash of the loader's, the model's, `format`'s and this
module's source, so any change to them invalidates every entry). An entry that cannot be
read back, or does not match the model's schemas, is ignored (and replaced by the next
write); one that fails its checksums (`cache.entries`) is deleted with a `CacheWarning`
and the trace read again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from tracekit.cache.entries import (
    DIGESTS,
    CorruptEntry,
    digest,
    drop,
    files_digest,
    index_bytes,
    publish,
    read_checked,
    read_index,
    touch,
)
from tracekit.sizes import trace_bytes

if TYPE_CHECKING:  # Polars (and the model with it) loads only to read or write an entry, so that a
    # command can look its trace up, and start reading it on a miss, while Polars is imported
    import polars as pl

    from tracekit.model import Trace

LOADER_VERSION = "2"  # bump when the loader's output changes in a way the source hash cannot see
EDGE_BYTES = 64 * 1024
COMPRESSION = "zstd"

# From this much JSON on (and where the size is unknown) a trace's entry is written before
# `Cache.load` returns, even inside `writes.writes_behind()`: written behind, the whole trace
# (its flows and args too, which a lean load leaves out) would be held beside the analyses
# until the entry was written. Below it the write goes behind the command's first report.
WRITE_NOW_BYTES = 500 * 10**6


def writes_now(path: str | os.PathLike[str]) -> bool:
    """Whether the entry of the trace at `path` is written in line (see `WRITE_NOW_BYTES`)."""
    size = trace_bytes([os.fspath(path)])
    return size is None or size >= WRITE_NOW_BYTES


@lru_cache(maxsize=1)
def code_version() -> str:
    """LOADER_VERSION plus a hash of the loader package's, the model's, the number
    formatting's and this module's source (the warnings' wording; the native scanner's C
    source and the Arrow header it includes too, in tracekit/native/, where they are shipped)."""
    package = Path(__file__).resolve().parent.parent
    loader = package / "loader"
    scanner = [f for f in (package / "native" / n for n in ("_scan.c", "_arrow.h")) if f.exists()]
    files = [*sorted(loader.glob("*.py")), *scanner, package / "model.py", package / "format.py",
             Path(__file__).resolve()]
    return files_digest(LOADER_VERSION, files, package)


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
    """The cached Trace, or None (no entry, or an entry that cannot be trusted: one that
    fails its checksums is deleted, with a `CacheWarning`)."""
    if key is None:
        return None
    entry = directory / key
    try:
        info = msgspec.json.decode(read_index(entry / "meta.json"))
        if not isinstance(info, dict) or info.get("key") != key or info.get("version") != code_version():
            return None
        names = [f"{name}.parquet" for name in _frame_schemas()]
        data = dict(zip(names, read_checked(entry, names, info.get(DIGESTS))))
    except CorruptEntry as exc:
        drop(entry, str(exc))
        return None
    except (OSError, msgspec.DecodeError):  # no entry, or one being replaced
        return None
    import polars as pl

    from tracekit.model import SCHEMAS, Trace, TraceMeta

    try:
        frames = {name: _read_frame(data, f"{name}.parquet", schema) for name, schema in SCHEMAS.items()}
        meta = dict(info["meta"])
        for name, schema in _meta_frames().items():
            meta[name] = _read_frame(data, f"meta_{name}.parquet", schema)
        meta["path"] = path
        touch(entry)
        return Trace(**frames, meta=TraceMeta(**meta))
    except (OSError, ValueError, KeyError, TypeError, pl.exceptions.PolarsError):
        return None


def _frame_schemas() -> dict[str, dict[str, pl.DataType]]:
    """Every frame of an entry by its file's stem: the Trace's, then TraceMeta's (`meta_<name>`)."""
    from tracekit.model import SCHEMAS

    return {**SCHEMAS, **{f"meta_{name}": schema for name, schema in _meta_frames().items()}}


def _meta_frames() -> dict[str, dict[str, pl.DataType]]:
    """TraceMeta's frames and their schemas: each is stored as meta_<name>.parquet."""
    from tracekit.model import DEVICES_SCHEMA, PROCESSES_SCHEMA, THREADS_SCHEMA

    return {"devices": DEVICES_SCHEMA, "processes": PROCESSES_SCHEMA, "threads": THREADS_SCHEMA}


def _read_frame(data: dict[str, bytes], name: str, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    import polars as pl

    # one chunk, as a fresh load gives: Parquet reads back one per row group, and gathering
    # text across chunks copies it
    frame = pl.read_parquet(data[name], memory_map=False).rechunk()
    if dict(frame.schema) != schema:
        raise ValueError(f"{name}: schema differs from the model")
    from tracekit.model import constant_columns

    return constant_columns(frame)


def write(directory: Path, key: str | None, trace: Trace) -> bool:
    """Store a Trace; False when it could not be written (the cache is only an optimisation)."""
    if key is None:
        return False
    import polars as pl

    from tracekit.model import TraceMeta

    tmp = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=directory))
        for name, frame in trace.frames().items():
            frame.write_parquet(tmp / f"{name}.parquet", compression=COMPRESSION, statistics=False)
        meta: dict[str, Any] = {}
        meta_frames = _meta_frames()
        for name in TraceMeta.__dataclass_fields__:
            value = getattr(trace.meta, name)
            if name in meta_frames:
                value.write_parquet(tmp / f"meta_{name}.parquet", compression=COMPRESSION, statistics=False)
            else:
                meta[name] = value
        digests = {f.name: digest(f.read_bytes()) for f in sorted(tmp.glob("*.parquet"))}
        info = {"key": key, "version": code_version(), "meta": meta, DIGESTS: digests}
        (tmp / "meta.json").write_bytes(index_bytes(msgspec.json.encode(info)))  # last: it vouches for the rest
        publish(tmp, directory / key, directory)
        return True
    except (OSError, TypeError, msgspec.EncodeError, pl.exceptions.PolarsError):
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return False
