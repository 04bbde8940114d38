"""The decoding thread beside the main thread, for the native scanner only.

The scanner releases the GIL while it reads a chunk, so a second thread decoding chunks
uses a second core. The Python path (msgspec) holds the GIL for a whole decode: it runs
on the main thread alone, a thread beside it would only take turns with it.

If the thread fails (e.g. out of memory), its chunks are decoded again by the main thread.
"""

from __future__ import annotations

import queue
import threading

from tracekit.loader.batch import Batch, encode_error, piece_batch
from tracekit.loader.events import PieceError
from tracekit.sizes import usable_cpus

DECODING_THREAD_BYTES = 512 * 1024 * 1024  # from this much JSON on, the native scanner gets a decoding thread
GZIP_RATIO = 12  # a guess at decompressed/compressed size, to decide before reading


def decoding_thread(workers: int | None, size_bytes: int, compressed: bool) -> DecodingThread | None:
    """The decoding thread for a load of `size_bytes` (None: the main thread decodes everything).

    Only with the native scanner: when asked (`workers` >= 1), or, with `workers` None, when
    the trace holds `DECODING_THREAD_BYTES` of JSON or more on two CPUs or more. Below that the
    reading thread and the Polars plans already keep the second core busy; above it the
    chunks outgrow what the reading thread holds ready, and a second decoder keeps the main
    thread from waiting for text (`docs/loader.md` has the figures)."""
    from tracekit.loader.native import available

    if workers == 0 or not available():
        return None
    if workers is None and not want_thread(size_bytes, compressed):
        return None
    return DecodingThread()


def json_bytes(size_bytes: int, compressed: bool) -> int:
    """The JSON text a file of `size_bytes` holds, as guessed before reading it (a gzip
    file counted `GZIP_RATIO` times its size)."""
    return size_bytes * (GZIP_RATIO if compressed else 1)


def want_thread(size_bytes: int, compressed: bool) -> bool:
    """A trace large enough for a decoding thread beside the native scanner (`decoding_thread`)."""
    return usable_cpus() >= 2 and json_bytes(size_bytes, compressed) >= DECODING_THREAD_BYTES


class DecodingThread:
    """Decodes chunks on a thread of this process, in the order they are submitted.

    `poll` hands back (index, batch) pairs; a batch of None means the thread is gone (its
    `outstanding` chunks are to be decoded again)."""

    def __init__(self) -> None:
        self.results: queue.Queue[tuple[int, Batch | None]] = queue.Queue()
        self.outstanding: set[int] = set()
        self.alive = True
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="tracekit-decode", daemon=True)
        self._thread.start()

    def submit(self, index: int, piece: bytes | memoryview, bare: bool = False) -> None:
        self.outstanding.add(index)
        self._jobs.put((index, piece, bare))

    def poll(self, block: bool = False) -> list[tuple[int, Batch | None]]:
        """The results that arrived (with `block`, at least one)."""
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
