"""Reading a trace file: plain or gzip, with a decompression limit, whole or in pieces.

`Stream` yields the decompressed text in pieces of 1 MB; a thread reads and inflates
ahead (ISA-L and zlib release the GIL), so decompression overlaps decoding. A plain file
can instead be read straight into a caller's buffer (`Stream.read_into`), as the loader
does: no pieces and no thread.
`read_source` reads the whole file into memory (the benchmarks' baselines use it).
"""

from __future__ import annotations

import io
import math
import os
import queue
import stat
import threading
import zlib
from collections.abc import Iterator

try:  # ISA-L inflates gzip about twice as fast as zlib; same API
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover
    _inflate = zlib  # type: ignore[assignment]
from dataclasses import dataclass

from tracekit.errors import TraceError, TraceFormatError, TraceTooLargeError
from tracekit.sizes import machine_memory

GZIP_MAGIC = b"\x1f\x8b"
GZIP_HEADER_BYTES = 10
def _default_max_bytes() -> int:
    """16 GiB, or 75 % of physical memory where that is less (a trace past it could not be held)."""
    limit, memory = 16 * 1024**3, machine_memory()
    if memory is not None:  # (unknown off POSIX)
        limit = min(limit, memory * 3 // 4)
    return max(limit, 1024**3)


DEFAULT_MAX_BYTES = _default_max_bytes()  # decompressed size refused past this (gzip bomb guard)
# Real Kineto JSON gzips 10-30x (the shared traces: 10x to 27x); 1 GiB of whitespace or
# zeros gzips about 1,000x. Past MAX_RATIO times the file's size (and RATIO_FLOOR bytes,
# so that a small, very repetitive trace still loads) a gzip file is refused as a bomb.
RATIO_ENV = "TRACEKIT_MAX_RATIO"
DEFAULT_MAX_RATIO = 100
RATIO_FLOOR = 64 * 1024 * 1024


def max_ratio() -> float:
    """The decompression ratio refused past (`TRACEKIT_MAX_RATIO`; 0 turns the check off)."""
    raw = os.environ.get(RATIO_ENV, "")
    try:
        value = float(raw) if raw.strip() else DEFAULT_MAX_RATIO
    except ValueError:
        raise TraceError(f"{RATIO_ENV}={raw!r} is not a number") from None
    return value if math.isfinite(value) and value >= 0 else DEFAULT_MAX_RATIO
GZIP_READ_BYTES = 128 * 1024  # compressed bytes read at a time (see Stream._inflate)
PIECE_BYTES = 1024 * 1024  # decompressed piece size handed to the scanner
READ_AHEAD = 6  # pieces the reading thread may hold ready (a chunk and a half)


@dataclass(frozen=True)
class Source:
    path: str
    size_bytes: int  # size on disk
    data: bytes  # decompressed JSON text
    compressed: bool
    truncated_gzip: bool  # the gzip stream ended early; data holds what could be read


def read_source(path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES) -> Source:
    """Read a whole trace file into memory (never writes to it); gzip is recognised by its magic bytes."""
    stream = Stream(path, max_bytes=max_bytes, threaded=False)
    try:
        data = b"".join(stream)
    finally:
        stream.close()
    return Source(stream.path, stream.size_bytes, data, stream.compressed, stream.truncated_gzip)


class Stream:
    """The decompressed text of a trace file, as an iterator of pieces.

    `truncated_gzip` is known once the iterator is exhausted. Errors (unreadable file,
    corrupt gzip at the start, over the size limit) are raised by the iterator.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES,
                 piece_bytes: int = PIECE_BYTES, threaded: bool = True, data: bytes | None = None) -> None:
        self.path = str(path)
        if data is not None:  # bytes already in memory
            self._fh = io.BytesIO(data)
            self.size_bytes = len(data)
        else:
            self._fh = open_regular(path, self.path)
            self.size_bytes = os.fstat(self._fh.fileno()).st_size
        try:  # a "regular file" may still fail to read (/proc/self/mem: EIO)
            self.compressed = self._fh.read(2) == GZIP_MAGIC
            self._fh.seek(0)
        except OSError as exc:
            self._fh.close()
            raise os_error(exc, self.path) from None
        self.max_bytes = max_bytes
        self.piece_bytes = piece_bytes
        self.truncated_gzip = False
        self.total = 0  # decompressed bytes produced so far
        self.position = 0  # bytes of the file read so far (what progress is measured by)
        self._threaded = threaded
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __iter__(self) -> Iterator[bytes]:
        source = self._pieces()
        if not self._threaded:
            yield from source
            return
        q: queue.Queue = queue.Queue(maxsize=READ_AHEAD)
        self._thread = threading.Thread(target=self._produce, args=(source, q), name="tracekit-read", daemon=True)
        self._thread.start()
        while True:
            item = q.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    @property
    def direct(self) -> bool:
        """Whether the text can be read straight into a caller's buffer (`read_into`): a
        plain file, not gzip, nor bytes in memory."""
        return not self.compressed and isinstance(self._fh, io.BufferedReader)

    def read_into(self, view: memoryview) -> int:
        """Read the next bytes of a plain file (`direct`) into `view`; 0 at the end. The
        stream is read this way or as pieces (iterated), not both."""
        self._check_size()
        try:
            got = self._fh.readinto(view)
        except OSError as exc:
            raise os_error(exc, self.path) from None
        self.total += got
        self.position += got
        return got

    def _check_size(self) -> None:
        """A plain file over the size limit is refused before it is read."""
        if self.size_bytes > self.max_bytes:
            raise TraceTooLargeError(f"file is {self.size_bytes:,} bytes, over the limit of {self.max_bytes:,}",
                                     path=self.path)

    def _produce(self, source: Iterator[bytes], q: queue.Queue) -> None:
        try:
            for piece in source:
                if not self._put(q, piece):
                    return
        except Exception as exc:  # noqa: BLE001 (handed to the consuming thread)
            self._put(q, exc)
            return
        self._put(q, None)

    def _put(self, q: queue.Queue, item: object) -> bool:
        while not self._stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _pieces(self) -> Iterator[bytes]:
        try:
            if self.compressed:
                yield from self._inflate()
                return
            self._check_size()
            while piece := self._fh.read(self.piece_bytes):
                self.total += len(piece)
                self.position += len(piece)
                yield piece
        except OSError as exc:
            raise os_error(exc, self.path) from None

    def _inflate(self) -> Iterator[bytes]:
        """Decompress (several gzip members allowed) up to max_bytes."""
        d = _inflate.decompressobj(wbits=31)
        fed = False  # has the current gzip member received any input?
        ratio = max_ratio()
        bomb = max(RATIO_FLOOR, int(ratio * self.size_bytes)) if ratio else None
        limit = self.max_bytes if bomb is None else min(self.max_bytes, bomb)
        while chunk := self._fh.read(GZIP_READ_BYTES):
            self.position += len(chunk)
            while chunk:
                fed = True
                try:
                    piece = d.decompress(chunk, max(1, min(self.piece_bytes, limit - self.total + 1)))
                except (zlib.error, _inflate.error) as exc:
                    if not self.total:
                        raise TraceFormatError(f"corrupt gzip data: {exc}", path=self.path) from None
                    self.truncated_gzip = True
                    return
                self.total += len(piece)
                if self.total > limit:
                    raise TraceTooLargeError(self._over(limit, ratio), path=self.path)
                if piece:
                    yield piece
                chunk = d.unconsumed_tail
                if d.eof:
                    rest = d.unused_data
                    d = _inflate.decompressobj(wbits=31)
                    fed = False
                    chunk = rest if rest.startswith(GZIP_MAGIC) else b""
        self.truncated_gzip = fed and not d.eof
        if self.truncated_gzip and not self.total:
            raise TraceFormatError(_nothing_inflated(self.size_bytes), path=self.path)

    def _over(self, limit: int, ratio: float) -> str:
        if limit == self.max_bytes:
            return f"decompresses to more than {limit:,} bytes (limit); refusing"
        return (f"decompresses to more than {limit:,} bytes from {self.size_bytes:,} on disk, over {ratio:g}x "
                f"(real traces compress 10-30x): a decompression bomb? Refusing; set {RATIO_ENV}=N to allow "
                f"a ratio of N (0: no limit)")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._fh.close()


def bytes_stream(data: bytes, piece_bytes: int = PIECE_BYTES) -> Iterator[bytes]:
    """Bytes already in memory, as pieces (no copy)."""
    view = memoryview(data)
    for i in range(0, len(data), piece_bytes):
        yield view[i : i + piece_bytes]


def open_regular(path: str | os.PathLike[str], name: str) -> io.BufferedReader:
    """Open a regular file for reading (symlinks followed). Anything else is refused before
    it is opened: a FIFO would block, a device (`/dev/zero`) never ends."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise TraceError("is a directory, not a trace file", path=name)
        if not stat.S_ISREG(mode):
            raise TraceError(f"not a regular file (a {_kind(mode)})", path=name)
        fh = open(path, "rb")  # noqa: SIM115 (the caller closes it)
    except TraceError:
        raise
    except OSError as exc:
        raise os_error(exc, name) from None
    if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # replaced between the stat and the open
        fh.close()
        raise TraceError("not a regular file", path=name)
    return fh


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def _nothing_inflated(size: int) -> str:
    if size < GZIP_HEADER_BYTES:
        return f"truncated gzip header: the file ends at byte {size}, inside the gzip header"
    return f"truncated gzip stream: the file ends at byte {size:,} before any data could be decompressed"


def os_error(exc: OSError, name: str) -> TraceError:
    """An OS error while reading `name` as the one-line TraceError the CLI shows."""
    if isinstance(exc, FileNotFoundError):
        return TraceError("no such file", path=name)
    if isinstance(exc, IsADirectoryError):
        return TraceError("is a directory, not a trace file", path=name)
    if isinstance(exc, PermissionError):
        return TraceError("permission denied", path=name)
    return TraceError(f"cannot read: {exc.strerror or exc}", path=name)
