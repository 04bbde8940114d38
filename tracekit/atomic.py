"""Files written whole or not at all: a temporary file beside the target, renamed over it.

A reader never sees half a file, and a failed write (disk full, no permission) leaves the
old one as it was. The file gets the permissions `open()` would give it (0666 less the
umask), not the 0600 of a temporary file.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """An OSError while writing `path` as the `OutputError` a command reports (exit 2, one line)."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or re.sub(r"^\[Errno \d+\] ", "", str(exc))  # (Polars re-raises it as text)
        raise OutputError(f"cannot write {path}: {reason}") from None


def write_output(path: str | os.PathLike[str], content: bytes | str, *,
                 inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Write `content` to a path the user named: `OutputError` (exit 2, one line) when it
    cannot be written, the old file then unchanged.

    A regular file (or a new one) is written atomically; a symbolic link is followed and
    its target written, the link kept; anything else (a character device such as
    `/dev/null` or `/dev/stdout`, a FIFO) is written through, never replaced. An output
    that is one of `inputs` is refused before anything is written."""
    shown = os.fspath(path)
    target = Path(os.path.realpath(path))
    check_output(path, inputs)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"cannot write {shown}: {exc.strerror or exc}") from None
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):
            if stat.S_ISDIR(st.st_mode):
                raise OutputError(f"cannot write {shown}: it is a folder")
            with open(target, "wb") as fh:  # a device or a FIFO: written through, never replaced
                fh.write(content.encode("utf-8") if isinstance(content, str) else content)
        else:
            write_file(target, content)
    except OSError as exc:
        raise OutputError(f"cannot write {shown}: {exc.strerror or exc}") from None


def check_output(path: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]]) -> None:
    """`OutputError` when `path` (a link followed) is one of `inputs`: a command checks
    this before its work, so that `report T -o T` never overwrites the trace it read."""
    target = Path(os.path.realpath(path))
    for source in inputs:
        if _same_file(target, source):
            raise OutputError(f"cannot write {os.fspath(path)}: it is the input trace {os.fspath(source)}")


def _same_file(target: Path, source: str | os.PathLike[str]) -> bool:
    """`target` names the same file as `source` (both exist and share device and inode)."""
    try:
        return os.path.samefile(target, source)
    except OSError:
        return False
