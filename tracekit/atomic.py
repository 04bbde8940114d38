"""Files written whole or not at all: a temporary file beside the target, renamed over it.

A reader never sees half a file, and a failed write (disk full, no permission) leaves the
old one as it was. The file gets the permissions `open()` would give it (0666 less the
umask), not the 0600 of a temporary file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tracekit.errors import OutputError

PREFIX = ".tracekit-"
SUFFIX = ".tmp"


def file_mode() -> int:
    """The permissions `open()` gives a new file in this process (0666 less the umask).

    Read from `/proc/self/status` where there is one: setting the umask to read it back
    would change it for a moment for every thread of the process."""
    try:
        with open("/proc/self/status") as fh:
            umask = next(int(line.split()[1], 8) for line in fh if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0)
        os.umask(umask)
    return 0o666 & ~umask


def write_file(path: str | os.PathLike[str], content: bytes | str | Callable[[IO[bytes]], Any], *,
               prefix: str = PREFIX, mode: int | None = None, sync: bool = False) -> Path:
    """Write `content` (bytes, text as UTF-8, or a function given the open binary file) to
    `path` atomically; `sync` flushes it to the disk before the rename. Raises OSError."""
    target = Path(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            try:
                os.fchmod(fh.fileno(), file_mode() if mode is None else mode)
            except OSError:  # a file system without modes (vfat, some network mounts)
                pass
            if callable(content):
                content(fh)
            else:
                fh.write(content.encode("utf-8") if isinstance(content, str) else content)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_output(path: str | os.PathLike[str], content: bytes | str) -> None:
    """`write_file` for a file the user named: `OutputError` (exit 2, one line) when it
    cannot be written; the old file is then unchanged."""
    try:
        write_file(path, content)
    except OSError as exc:
        raise OutputError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}") from None
