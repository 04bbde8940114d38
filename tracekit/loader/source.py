"""Reading a trace file into bytes: plain or gzip, with a decompression limit."""

from __future__ import annotations

import os
import zlib

try:  # ISA-L inflates gzip about twice as fast as zlib; same API
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover
    _inflate = zlib  # type: ignore[assignment]
from dataclasses import dataclass
from pathlib import Path

from tracekit.errors import TraceError, TraceFormatError, TraceTooLargeError

GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_MAX_BYTES = 64 * 1024**3  # decompressed size refused past this (gzip bomb guard)
_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class Source:
    path: str
    size_bytes: int  # size on disk
    data: bytes  # decompressed JSON text
    compressed: bool
    truncated_gzip: bool  # the gzip stream ended early; data holds what could be read


def read_source(path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES) -> Source:
    """Read a trace file (never writes to it). Gzip is recognised by its magic bytes."""
    p = Path(path)
    name = str(path)
    try:
        if p.is_dir():
            raise TraceError("is a directory, not a trace file", path=name)
        with open(p, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(2)
            fh.seek(0)
            if head == GZIP_MAGIC:
                data, truncated = _gunzip(fh, max_bytes, name)
                return Source(name, size, data, True, truncated)
            if size > max_bytes:
                raise TraceTooLargeError(f"file is {size:,} bytes, over the limit of {max_bytes:,}", path=name)
            return Source(name, size, fh.read(), False, False)
    except TraceError:
        raise
    except FileNotFoundError:
        raise TraceError("no such file", path=name) from None
    except IsADirectoryError:
        raise TraceError("is a directory, not a trace file", path=name) from None
    except PermissionError:
        raise TraceError("permission denied", path=name) from None
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror or exc}", path=name) from None


def _gunzip(fh, max_bytes: int, name: str) -> tuple[bytes, bool]:
    """Decompress a gzip stream (several members allowed) up to max_bytes."""
    out = bytearray()
    d = _inflate.decompressobj(wbits=31)
    fed = False  # has the current gzip member received any input?
    while True:
        chunk = fh.read(_CHUNK)
        if not chunk:
            return bytes(out), fed and not d.eof
        while chunk:
            fed = True
            try:
                piece = d.decompress(chunk, max(1, max_bytes - len(out) + 1))
            except (zlib.error, _inflate.error) as exc:
                if not out:
                    raise TraceFormatError(f"corrupt gzip data: {exc}", path=name) from None
                return bytes(out), True
            out += piece
            if len(out) > max_bytes:
                raise TraceTooLargeError(
                    f"decompresses to more than {max_bytes:,} bytes (limit); refusing", path=name
                )
            chunk = d.unconsumed_tail
            if d.eof:
                rest = d.unused_data
                d = _inflate.decompressobj(wbits=31)
                fed = False
                chunk = rest if rest.startswith(GZIP_MAGIC) else b""
