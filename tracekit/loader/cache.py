"""A cache of loaded traces: every frame as Parquet, the meta as JSON, one folder per entry.

An entry's name is a hash of what identifies the load: the file's absolute path, size,
modification time and its first and last 64 KB; the size limit; and the loader's
version (`LOADER_VERSION` plus a hash of the loader's, the model's and `format`'s source,
so any change to them invalidates every entry). An entry is written into a temporary folder and
renamed into place, so a reader never sees half of one. An entry that cannot be read
back, or does not match the model's schemas, is ignored (and replaced by the next write).

Every file of an entry is checked before any of it is parsed: the index (`meta.json`, written
last) starts with a SHA-256 of the rest of it, and lists one of each data file, which is read
into memory, checked, and parsed from those same bytes. Parquet's own page checksums are
optional and Polars does not check them; a flipped byte gave wrong numbers, a panic or an
abort. An entry that fails the check is deleted with a `CacheWarning` and the trace read again.

The folder has a size limit, shared with the analysis cache's entries (`analyses/`):
after each write, the least recently used entries (by the folder's modification time,
which a read refreshes) are deleted until the rest fit (`size_limit`: 4 GiB, or
`$TRACEKIT_CACHE_MAX`, e.g. `20G`; `0` for no limit). The entry just written is never
deleted, and nothing but entries is: folders named by a key holding an entry's files,
and temporary folders that crashed writers left behind (after an hour).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import time
import warnings
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from tracekit.errors import CacheWarning
from tracekit.format import parse_size

if TYPE_CHECKING:  # Polars (and the model with it) loads only to read or write an entry, so that a
    # command can look its trace up, and start reading it on a miss, while Polars is imported
    import polars as pl

    from tracekit.model import Trace

ANALYSES = "analyses"  # the analysis cache's entries (`tracekit.analysis_cache`)
LIMIT_ENV = "TRACEKIT_CACHE_MAX"
DEFAULT_LIMIT = 4 * 1024**3
STALE_TMP_S = 3600  # a writer's temporary folder this old is left over from a crash
KEY_LENGTH = 32
LOADER_VERSION = "2"  # bump when the loader's output changes in a way the source hash cannot see
EDGE_BYTES = 64 * 1024
COMPRESSION = "zstd"
INDEX_MAGIC = b"tracekit-entry sha256:"  # the index's first line: this, the digest of the rest
DIGESTS = "digests"  # the index's field: data file name -> its SHA-256


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """`override`, else `$XDG_CACHE_HOME/tracekit`, else `~/.cache/tracekit`."""
    if override is not None:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "tracekit"


@lru_cache(maxsize=1)
def code_version() -> str:
    """LOADER_VERSION plus a hash of the loader package's, the model's and the number
    formatting's source (the warnings' wording; the native scanner's C source and the Arrow
    header it includes too, in tracekit/native/, where they are shipped)."""
    here = Path(__file__).resolve().parent
    scanner = [f for f in (here.parent / "native" / n for n in ("_scan.c", "_arrow.h")) if f.exists()]
    files = [*sorted(here.glob("*.py")), *scanner, here.parent / "model.py", here.parent / "format.py"]
    return files_digest(LOADER_VERSION, files, here.parent)


def files_digest(seed: str, files: Iterable[Path], root: Path) -> str:
    """A short hash of `seed` and of each file's path (relative to `root`) and bytes: the
    version of the code an entry was made by."""
    h = hashlib.sha256(seed.encode())
    for f in files:
        h.update(str(f.relative_to(root)).encode())
        h.update(b"\0")
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


class CorruptEntry(Exception):
    """An entry file whose bytes differ from those its index recorded."""


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def index_bytes(body: bytes) -> bytes:
    """An entry's index file: `INDEX_MAGIC`, the digest of `body`, a newline, `body`."""
    return INDEX_MAGIC + digest(body).encode() + b"\n" + body


def read_index(file: Path) -> bytes:
    """The body of an index file written by `index_bytes`, once its digest is checked
    (OSError when there is none; `CorruptEntry` when it does not match)."""
    raw = file.read_bytes()
    head, _, body = raw.partition(b"\n")
    if head != INDEX_MAGIC + digest(body).encode():
        raise CorruptEntry(f"{file.name} fails its checksum")
    return body


def read_checked(entry: Path, names: list[str], digests: Any) -> list[bytes]:
    """The bytes of each named file of `entry`, each checked against `digests` (from the
    index) before anyone parses them; read and hashed on a few threads (hashlib lets go
    of the GIL)."""
    if not isinstance(digests, dict):
        raise CorruptEntry("the index lists no checksums")

    def one(name: str) -> bytes:
        data = (entry / name).read_bytes()
        if digests.get(name) != digest(data):
            raise CorruptEntry(f"{name} fails its checksum")
        return data

    if len(names) < 2:
        return [one(name) for name in names]
    with ThreadPoolExecutor(min(4, len(names))) as pool:
        return list(pool.map(one, names))


def drop(entry: Path, why: str) -> None:
    """Delete an entry that failed its checks, and say so (the caller reads the trace again)."""
    warnings.warn(f"cache entry {entry.name} is damaged ({why}): deleted, read again from the source",
                  CacheWarning, stacklevel=3)
    shutil.rmtree(entry, ignore_errors=True)


def _meta_frames() -> dict[str, dict[str, pl.DataType]]:
    """TraceMeta's frames and their schemas: each is stored as meta_<name>.parquet."""
    from tracekit.model import DEVICES_SCHEMA, PROCESSES_SCHEMA, THREADS_SCHEMA

    return {"devices": DEVICES_SCHEMA, "processes": PROCESSES_SCHEMA, "threads": THREADS_SCHEMA}


def _read_frame(data: dict[str, bytes], name: str, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    import polars as pl

    # one chunk, as a fresh load gives: Parquet reads back one per row group (11 for the 1 GB
    # trace's ops), and gathering text across chunks copies it (an analysis of the cached
    # 1 GB trace took 23.9 s with the chunks, 20.8 s without)
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


def publish(tmp: Path, final: Path, directory: Path) -> None:
    """Put a finished entry written in `tmp` in place as `final` (replacing an older one),
    then prune the cache `directory` down to its limit, `final` kept."""
    if final.exists():
        shutil.rmtree(final, ignore_errors=True)
    try:
        os.rename(tmp, final)
    except OSError:  # another process stored it first
        shutil.rmtree(tmp, ignore_errors=True)
    prune(directory, keep=final)


def size_limit() -> int | None:
    """The cache folder's size limit in bytes: `$TRACEKIT_CACHE_MAX` (`20G`, `512M`, ...;
    `0` or `none`: no limit), else `DEFAULT_LIMIT` (also when the variable cannot be read
    as a size)."""
    text = os.environ.get(LIMIT_ENV, "").strip()
    if not text:
        return DEFAULT_LIMIT
    if text.lower() in ("0", "none", "off"):
        return None
    try:
        return parse_size(text) or None
    except ValueError:
        return DEFAULT_LIMIT


def touch(entry: Path) -> None:
    """Mark an entry as just used (its folder's modification time): pruning goes by it."""
    try:
        os.utime(entry)
    except OSError:  # a read-only cache still serves
        pass


def prune(directory: Path, *, keep: Path | None = None, limit: int | None | bool = True) -> int:
    """Delete the least recently used entries of both caches until the rest take at most
    `limit` bytes (True: `size_limit()`; None: no limit), never `keep`; and temporary
    folders older than `STALE_TMP_S`. Returns the bytes freed."""
    limit = size_limit() if limit is True else limit
    entries, freed, now = [], 0, time.time()
    for folder in (directory, directory / ANALYSES):
        try:
            items = list(os.scandir(folder))
        except OSError:
            continue
        for item in items:
            if not item.is_dir(follow_symlinks=False):
                continue
            path = Path(item.path)
            try:
                mtime = item.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if item.name.startswith(".tmp-"):
                if now - mtime > STALE_TMP_S:
                    freed += _remove(path, _size(path))
            elif _is_entry(path):
                entries.append((mtime, _size(path), path))
    if limit is None:
        return freed
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries, key=lambda e: e[0]):  # the least recently used first
        if total <= limit:
            break
        if keep is not None and path == keep:
            continue
        freed += _remove(path, size)
        total -= size
    return freed


def _is_entry(path: Path) -> bool:
    """A folder named by a key that holds an entry's index file (never anything else)."""
    name = path.name
    if len(name) != KEY_LENGTH or any(c not in "0123456789abcdef" for c in name):
        return False
    return (path / "meta.json").is_file() or (path / "analysis.json").is_file()


def _size(path: Path) -> int:
    total = 0
    try:
        for item in os.scandir(path):
            if item.is_file(follow_symlinks=False):
                total += item.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return total


def _remove(path: Path, size: int) -> int:
    """Delete a folder of `size` bytes; the bytes freed (0 when it could not go)."""
    shutil.rmtree(path, ignore_errors=True)
    return size if not path.exists() else 0


def clear(directory: str | os.PathLike[str] | None = None) -> None:
    """Delete every cache entry."""
    shutil.rmtree(cache_dir(directory), ignore_errors=True)
