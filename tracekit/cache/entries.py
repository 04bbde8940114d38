"""What every entry of the cache folder shares: its index and checksums, putting it in place,
and the folder's size limit.

An entry is a folder named by a key (`KEY_LENGTH` hex digits): a loaded trace
(`cache.traces`, its index `meta.json`) or a finished analysis (`cache.analyses`, under
`analyses/`, its index `analysis.json`). It is written into a temporary folder and renamed
into place, so a reader never sees half of one.

Every file of an entry is checked before any of it is parsed: the index (written last)
starts with a SHA-256 of the rest of it, and lists one of each data file, which is read
into memory, checked, and parsed from those same bytes. Parquet's own page checksums are
optional and Polars does not check them; a flipped byte gave wrong numbers, a panic or an
abort. An entry that fails the check is deleted with a `CacheWarning` and made again.

The folder has a size limit, shared by both kinds of entry: after each write, the least
recently used entries (by the folder's modification time, which a read refreshes) are
deleted until the rest fit (`size_limit`: 4 GiB, or `$TRACEKIT_CACHE_MAX`, e.g. `20G`;
`0` for no limit). The entry just written is never deleted, and nothing but entries is:
folders named by a key holding an entry's index, and temporary folders that crashed
writers left behind (after an hour).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import warnings
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tracekit.errors import CacheWarning
from tracekit.format import parse_size

ANALYSES = "analyses"  # the analysis cache's entries (`cache.analyses`)
INDEXES = ("meta.json", "analysis.json")  # the index file of a trace entry, of an analysis entry
LIMIT_ENV = "TRACEKIT_CACHE_MAX"
DEFAULT_LIMIT = 4 * 1024**3
STALE_TMP_S = 3600  # a writer's temporary folder this old is left over from a crash
KEY_LENGTH = 32
INDEX_MAGIC = b"tracekit-entry sha256:"  # the index's first line: this, the digest of the rest
DIGESTS = "digests"  # the index's field: data file name -> its SHA-256


def default_folder() -> Path:
    """`$XDG_CACHE_HOME/tracekit`, else `~/.cache/tracekit`."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "tracekit"


def files_digest(seed: str, files: Iterable[Path], root: Path) -> str:
    """A short hash of `seed` and of each file's path (relative to `root`) and bytes: the
    version of the code an entry was made by."""
    h = hashlib.sha256(seed.encode())
    for f in files:
        h.update(str(f.relative_to(root)).encode())
        h.update(b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


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
    """Delete an entry that failed its checks, and say so (the caller makes it again)."""
    warnings.warn(f"cache entry {entry.name} is damaged ({why}): deleted, read again from the source",
                  CacheWarning, stacklevel=3)
    shutil.rmtree(entry, ignore_errors=True)


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
    return any((path / index).is_file() for index in INDEXES)


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
