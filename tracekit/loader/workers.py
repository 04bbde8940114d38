"""A helper that decodes chunks while the main thread decodes others: a thread when the
native scanner is built (it releases the GIL while it reads), else a process.

msgspec holds the GIL while it decodes, so the second core is used by a process: forked
(Linux only), it inherits the loaded modules and starts in a millisecond. It runs only
plain Python and msgspec (`batch.piece_batch`), never Polars, so the state of Polars'
thread pool in the parent does not matter.

Chunks and batches travel as files in a private folder on tmpfs (`/dev/shm`), written and
read in one system call each (the GIL is released for the copy); the pipes carry only
their names. (Through a pipe, a multi-MB batch needs dozens of reads by a parent thread
that must take the GIL between reads, which the main thread holds for a whole decode:
the helper stalled on a full pipe.) The files exist only while a chunk is in flight.

If the helper dies, its chunks are simply decoded again by the main process.
"""

from __future__ import annotations

import os
import queue
import shutil
import sys
import tempfile
import threading
import warnings
from typing import TYPE_CHECKING, Any

from tracekit.loader.batch import bracketed, encode_error, pack, piece_batch, unpack
from tracekit.loader.events import PieceError

if TYPE_CHECKING:  # (imported where a helper starts: 17-20 ms that most loads never need)
    from multiprocessing.connection import Connection

MIN_BYTES_FOR_HELPER = 24 * 1024 * 1024  # below this, forking costs more than it saves
THREAD_HELPER_BYTES = 512 * 1024 * 1024  # from this much JSON on, the native scanner gets a decoding thread
GZIP_RATIO = 12  # a guess at decompressed/compressed size, to decide before reading


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def helper_available() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork") and _cpus() >= 2


def idle_cpu() -> bool:
    """Is a CPU likely free? (the 1-minute load average leaves at least half a CPU)"""
    try:
        return os.getloadavg()[0] <= _cpus() - 0.5
    except OSError:
        return True


def make_helper(workers: int | None, size_bytes: int, compressed: bool) -> ThreadHelper | Helper | None:
    """The helper for a load of `size_bytes` (None: the main thread decodes everything).

    With the native scanner, a thread when asked (`workers` >= 1) or when the trace holds
    `THREAD_HELPER_BYTES` of JSON or more (on two CPUs or more). Below that the reading
    thread and the Polars plans already keep the second core busy, and a third decoding
    thread measured slower (the 54 MB trace: 0.35-0.46 s against 0.33-0.42 s) or the same
    (120 and 250 MB). Above it the chunks (16 MB on 1 GB) outgrow what the reading thread
    holds ready, and the main thread waited for text between chunks: the 1 GB trace
    loaded in 5.0-7.2 s with the thread against 7.3-9.0 s, with less CPU time (seven
    alternating pairs). Without the scanner, a forked process when the trace is large
    (the Python path holds the GIL)."""
    from tracekit.loader.native import available

    if workers == 0:
        return None
    if available():
        if workers is None and not want_thread(size_bytes, compressed):
            return None
        return ThreadHelper()
    return Helper() if want_helper(workers, size_bytes, compressed) else None


def json_bytes(size_bytes: int, compressed: bool) -> int:
    """The JSON text a file of `size_bytes` holds, as guessed before reading it (a gzip
    file counted `GZIP_RATIO` times its size)."""
    return size_bytes * (GZIP_RATIO if compressed else 1)


def want_thread(size_bytes: int, compressed: bool) -> bool:
    """A trace large enough for a decoding thread beside the native scanner (`make_helper`)."""
    return _cpus() >= 2 and json_bytes(size_bytes, compressed) >= THREAD_HELPER_BYTES


def want_helper(workers: int | None, size_bytes: int, compressed: bool) -> bool:
    """`workers`: None = decide (a large trace, a fork possible, a CPU idle), 0 = never,
    1 = always where a fork is possible."""
    if workers == 0 or not helper_available():
        return False
    if workers is not None:
        return True
    return json_bytes(size_bytes, compressed) >= MIN_BYTES_FOR_HELPER and idle_cpu()


def _scratch_dir() -> str:
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix="tracekit-", dir=base)


def _write(path: str, data: bytes | memoryview) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _take(path: str) -> bytes:
    """Read a file whole and delete it."""
    with open(path, "rb", buffering=0) as fh:
        data = fh.read()
    os.unlink(path)
    return data


class _Results:
    results: queue.Queue
    outstanding: set[int]

    def poll(self, block: bool = False) -> list[tuple[int, dict[str, Any] | None]]:
        """Results that arrived: (index, batch); batch None means the helper is gone."""
        out = []
        try:
            item = self.results.get(block=block)
            while True:
                out.append(item)
                item = self.results.get_nowait()
        except queue.Empty:
            pass
        for index, _ in out:
            self.outstanding.discard(index)
        return out


class ThreadHelper(_Results):
    """Decodes chunks on a thread of this process, in the order they are submitted."""

    def __init__(self) -> None:
        self.results = queue.Queue()
        self.outstanding = set()
        self.alive = True
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="tracekit-decode", daemon=True)
        self._thread.start()

    def submit(self, index: int, piece: bytes | memoryview, bare: bool = False) -> None:
        self.outstanding.add(index)
        self._jobs.put((index, piece, bare))

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            index, piece, bare = job
            try:
                batch = piece_batch(piece, bare)
            except PieceError as exc:
                batch = encode_error(exc)
            except BaseException:  # noqa: BLE001  (e.g. MemoryError: the main thread redoes what is left)
                self.alive = False
                self.results.put((index, None))
                return
            self.results.put((index, batch))

    def stop(self) -> None:
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()

    def close(self) -> None:
        self.stop()


class Helper(_Results):
    """The parent's handle on the helper process."""

    def __init__(self) -> None:
        self.dir = _scratch_dir()
        from multiprocessing.connection import Pipe

        to_child_r, to_child_w = Pipe(duplex=False)
        from_child_r, from_child_w = Pipe(duplex=False)
        with warnings.catch_warnings():  # Python >= 3.12 warns about fork in threaded processes
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the helper: never returns
            code = 1
            try:
                to_child_w.close()
                from_child_r.close()
                _serve(self.dir, to_child_r, from_child_w)
                code = 0
            finally:
                os._exit(code)
        to_child_r.close()
        from_child_w.close()
        self.pid = pid
        self._out: Connection = to_child_w
        self._in: Connection = from_child_r
        self.results: queue.Queue = queue.Queue()
        self.outstanding: set[int] = set()
        self.alive = True
        self._receiver = threading.Thread(target=self._receive_loop, name="tracekit-receive", daemon=True)
        self._receiver.start()

    def submit(self, index: int, piece: bytes | memoryview, bare: bool = False) -> None:
        if bare:
            piece = bracketed(piece)
        try:
            _write(os.path.join(self.dir, f"in-{index}"), piece)
            self._out.send_bytes(index.to_bytes(8, "little"))
        except OSError:  # no room on tmpfs, or the helper is gone: decode it here
            self.alive = False
            self.results.put((index, None))
        self.outstanding.add(index)

    def _receive_loop(self) -> None:
        """Results are passed on as file names; they are read (and the file deleted) by
        whoever consumes them (`read_batch`), so the big buffers are allocated by the
        thread that frees them."""
        try:
            while True:
                message = self._in.recv_bytes()
                index = int.from_bytes(message[:8], "little")
                path = os.path.join(self.dir, f"out-{index}")
                result = {"file": path} if message[8:] == b"ok" else unpack(_take(path))
                self.results.put((index, result))
        except (EOFError, OSError, ValueError):
            self.alive = False
            self.results.put((-1, None))

    def stop(self) -> None:
        """Stop the helper and reap it (its peak memory then counts in RUSAGE_CHILDREN).
        Results not read yet stay in the folder until close()."""
        if self._out.closed:
            return
        self._out.close()
        self._receiver.join()
        self._in.close()
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass

    def close(self) -> None:
        """stop(), and remove the folder (once every result has been read)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _serve(folder: str, inp: Connection, out: Connection) -> None:
    while True:
        try:
            message = inp.recv_bytes()
        except EOFError:
            return
        index = int.from_bytes(message, "little")
        piece = _take(os.path.join(folder, f"in-{index}"))
        try:
            batch = piece_batch(piece)
        except PieceError as exc:
            batch = encode_error(exc)
        del piece
        status = b"error" if "error" in batch else b"ok"
        _write(os.path.join(folder, f"out-{index}"), pack(batch))
        del batch
        out.send_bytes(index.to_bytes(8, "little") + status)


def read_batch(item: dict[str, Any]) -> dict[str, Any]:
    """A batch as received: read from its file (and the file deleted), or already here."""
    return unpack(_take(item["file"])) if "file" in item else item
