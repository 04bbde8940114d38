"""The streaming read: decompressed pieces -> chunks -> batches -> Polars parts.

The main thread cuts the event array into chunks and decodes them; with a decoding
thread (`workers.DecodingThread`, the native scanner's), chunks are cut *speculatively* and
shared out (up to `HELPER_QUEUE` at a time go to the thread, the rest are decoded here). A thread turns each batch into Polars parts
as it arrives, so Polars' work overlaps the decoding. At most a few chunks of text and
one chunk of Python objects are alive at any time: peak memory follows the size of the
frames, not of the JSON.

A speculative chunk that fails (cut in the wrong place, or broken input) is not trusted:
the results from it on are dropped, its text is put back, and the rest is read by the
main thread alone, checking each cut before the next (`_verified`). The final piece
(the end of the array and anything after it) is always read here; that is where
truncated or malformed input is recovered.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracekit.errors import TraceFormatError
from tracekit.loader.batch import Batch, empty_batch, piece_batch
from tracekit.loader.events import PieceError
from tracekit.loader.final import Recovery, read_final
from tracekit.loader.scan import Chunk, Final, Reader
from tracekit.loader.skip import Skipped, drop_bad_events
from tracekit.loader.workers import DecodingThread

if TYPE_CHECKING:
    from tracekit.loader.columns import Parts

CHUNK_BYTES = 4 * 1024 * 1024
HELPER_QUEUE = 3  # chunks handed to the decoding thread ahead of its work
INGEST_QUEUE = 2  # batches waiting for Polars (each holds about a chunk's worth of columns)
WARMUP_QUEUE = 8  # the same while the ingest thread imports Polars
RECUT_TRIES = 6  # a chunk cut in the wrong place is cut again this often, then read whole


@dataclass
class ReadResult:
    form: str  # object | array
    top: dict[str, Any]  # top-level keys other than traceEvents, in file order
    parts: list[Parts]  # per chunk, in file order
    recovery: Recovery | None = None
    not_closed: bool = False
    events: int = 0
    stats: dict[str, Any] = field(default_factory=dict)
    deep: int = 0  # containers outside the chunks (head, final piece) nested too deep, emptied
    skipped: Skipped = field(default_factory=Skipped)  # events not valid JSON, skipped


class Ingest:
    """Turns batches into parts in a background thread, keyed by chunk index.

    The thread imports Polars (through `columns`) itself. Until that import is done, up to
    `WARMUP_QUEUE` batches may wait instead of `INGEST_QUEUE`: a command that starts a load
    before anything imported Polars decodes its first chunks while Polars loads."""

    def __init__(self) -> None:
        self.parts: dict[int, Parts] = {}
        self._q: queue.Queue = queue.Queue()  # `put` bounds it
        self._room = threading.Condition()
        self._waiting = 0  # batches put and not yet turned into parts
        self._ready = False  # Polars is imported: the queue's bound is INGEST_QUEUE
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tracekit-ingest", daemon=True)
        self._thread.start()

    @staticmethod
    def _columns() -> Callable[[Batch], Parts]:
        """`columns.chunk_parts`, imported here (with Polars, the first time) by the thread."""
        from tracekit.loader.columns import chunk_parts

        return chunk_parts

    def _run(self) -> None:
        chunk_parts: Callable[[Batch], Parts] | None = None
        try:
            chunk_parts = self._columns()
        except BaseException as exc:  # noqa: BLE001 (re-raised in the main thread)
            self._error = exc
        with self._room:
            self._ready = True
            self._room.notify_all()
        while True:
            item = self._q.get()
            try:
                if item is None:
                    return
                if self._error is None and chunk_parts is not None:
                    index, batch = item
                    self.parts[index] = chunk_parts(batch)
            except Exception as exc:  # noqa: BLE001 (re-raised in the main thread)
                self._error = exc
            finally:
                if item is not None:
                    with self._room:
                        self._waiting -= 1
                        self._room.notify_all()
                self._q.task_done()

    def put(self, index: int, batch: Batch) -> None:
        self._raise()
        with self._room:
            while self._waiting >= (INGEST_QUEUE if self._ready else WARMUP_QUEUE):
                self._room.wait()
            self._waiting += 1
        self._q.put((index, batch))

    def drop_from(self, index: int) -> None:
        self._q.join()
        for i in [i for i in self.parts if i >= index]:
            del self.parts[i]

    def finish(self) -> list[Parts]:
        self._q.put(None)
        self._thread.join()
        self._raise()
        return [self.parts[i] for i in sorted(self.parts)]

    def close(self) -> None:
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error


def read_trace(pieces: Iterator[bytes], *, path: str, chunk_bytes: int = CHUNK_BYTES,
               helper: DecodingThread | None = None, read_into: Callable[[memoryview], int] | None = None) -> ReadResult:
    """The trace's text as `pieces`, or, with `read_into`, read straight into the chunks'
    buffers (`scan.Reader`; the pieces are then not read)."""
    reader = Reader(pieces, chunk_bytes=chunk_bytes, path=path, read_into=read_into)
    ingest = Ingest()
    try:
        head = reader.read_head()
        final: Final | None = head.final
        prev_end = None
        if final is None:
            if helper is not None:
                prev_end = _speculate(reader, ingest, helper)
            prev_end = _verified(reader, ingest, prev_end)
            final = reader.final("object" if head.form == "object" else "array")
        out, batches = read_final(final, prev_end, path, piece_batch)
        for batch in batches or [empty_batch()]:
            ingest.put(reader.index, batch)
            reader.index += 1
        parts = ingest.finish()
    except RecursionError:  # a decode this module does not expect to nest (the others flatten first)
        raise TraceFormatError("JSON nested too deeply to read", path=path) from None
    finally:
        ingest.close()
    top = {**head.top, **out.tail}
    skipped = reader.skipped
    if out.skipped.count:
        skipped.add(out.skipped.first_at or 0, out.skipped.count)  # type: ignore[arg-type]
    return ReadResult(head.form, top, parts, out.recovery, out.not_closed, sum(p.n for p in parts),
                      deep=reader.deep + out.deep, skipped=skipped)


def _speculate(reader: Reader, ingest: Ingest, helper: DecodingThread) -> int | None:
    """Cut without checking and share the chunks out; on any failure, rewind to it.

    Returns where the last chunk that was kept ends (None: none was).
    """
    held: dict[int, Any] = {}  # chunk text kept until every chunk up to it is known good
    ends: dict[int, int] = {}
    good: set[int] = set()
    failed: int | None = None
    first_open = reader.index

    def record(index: int, batch: Batch | None) -> None:
        nonlocal failed
        if batch is None:  # the thread failed on this chunk: it and the ones after are redone here
            lost = min(helper.outstanding | {index})
            failed = lost if failed is None else min(failed, lost)
            return
        if failed is not None and index >= failed:
            return
        if "error" in batch:
            failed = index if failed is None else min(failed, index)
            return
        ingest.put(index, batch)
        good.add(index)

    while failed is None:
        for index, batch in helper.poll():
            record(index, batch)
        while first_open in good:
            held.pop(first_open)
            first_open += 1
        if failed is not None:
            break
        chunk = reader.next_chunk()
        if chunk is None:
            break
        held[chunk.index] = chunk
        ends[chunk.index] = chunk.start + chunk.cut
        if helper.alive and len(helper.outstanding) < HELPER_QUEUE:
            helper.submit(chunk.index, chunk.body, bare=True)
            continue
        try:
            batch = piece_batch(chunk.body, bare=True)
        except PieceError:
            failed = chunk.index
            break
        record(chunk.index, batch)
    while helper.outstanding and helper.alive:
        for index, batch in helper.poll(block=True):
            record(index, batch)
    if helper.outstanding:  # died with chunks in hand
        lost = min(helper.outstanding)
        failed = lost if failed is None else min(failed, lost)
    helper.stop()
    if failed is None:
        return max(ends.values(), default=None)
    ingest.drop_from(failed)
    rest = b"".join(bytes(held[i].span) for i in sorted(held) if i >= failed)
    reader.unread(rest, held[failed].start, failed)
    return ends.get(failed - 1)


def _verified(reader: Reader, ingest: Ingest, prev_end: int | None) -> int | None:
    """Cut, decode, and only then cut the next chunk; re-cut a chunk that failed at its end.

    A chunk that fails in its middle has its events checked one by one: those that are not
    valid JSON (NaN, a raw control character...) are skipped and counted, the rest decoded."""
    tries = 0
    while (chunk := reader.next_chunk()) is not None:
        try:
            batch = piece_batch(chunk.body, bare=True)
        except PieceError as exc:
            if exc.at_end and tries < RECUT_TRIES:
                tries += 1
                reader.recut(chunk, tries)
                continue
            kept = None if exc.at_end else _without_bad_events(reader, chunk)
            if kept is None:
                reader.unread(bytes(chunk.span), chunk.start, chunk.index)  # broken: the rest is the final piece
                return prev_end
            batch = kept
        tries = 0
        ingest.put(chunk.index, batch)
        prev_end = chunk.start + chunk.cut
        del chunk, batch  # this chunk's text and columns are not kept while the next is cut
    return prev_end


def _without_bad_events(reader: Reader, chunk: Chunk) -> Batch | None:
    """The chunk's batch without its events that are not valid JSON (counted in
    `reader.skipped`), or None when no single event is to blame."""
    text, bad = drop_bad_events(chunk.body)
    if not bad:
        return None
    try:
        batch = piece_batch(text, bare=True) if text else empty_batch()
    except PieceError:
        return None
    reader.skipped.add(chunk.start + bad[0], len(bad))
    return batch
