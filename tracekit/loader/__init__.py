"""`load(path) -> Trace` and `load_ranks(paths) -> dict[int, Trace]`.

The loader streams: the file is decompressed in pieces by a reading thread, the event
array is decoded in chunks of whole events (by the native scanner in C where it is built
and the chunk is in the common shape, else by msgspec), and each chunk becomes columns at
once, so memory follows the size of the frames rather than of the JSON text.
`docs/loader.md` describes the design, the cache and the figures.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import TraceError, TraceTooLargeError, UsageError
from tracekit.loader.read import CHUNK_BYTES, ReadResult, read_trace
from tracekit.loader.source import DEFAULT_MAX_BYTES, GZIP_MAGIC, Stream, bytes_stream
from tracekit.loader.workers import json_bytes, decoding_thread

if TYPE_CHECKING:
    from tracekit.model import Trace

# Polars is imported by the first chunk's columns (`read.Ingest`) or the build, not here: a
# command that imports the loader first starts reading while Polars loads (about 0.15 s)

MAX_CHUNK_BYTES = 16 * 1024 * 1024
TRUNCATED_GZIP = "the gzip stream ends early (an interrupted write); read what was there"
TRACE_GLOBS = ("*.json", "*.json.gz", "*.json.tmp", "*.pt.trace.json", "*.pt.trace.json.gz")


def load(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    workers: int | None = None,
    progress: Progress | None = None,
    lean: bool = False,
) -> Trace:
    """Load one trace file (JSON or gzip JSON; object or bare-array form) into a `Trace`.

    Broken input raises `TraceError` with a one-line message, or, where events could be
    recovered, returns a partial `Trace` whose `warnings` frame says what was lost.

    workers: decoding threads beside the main thread, for the native scanner (the Python
        path decodes on the main thread alone: it holds the GIL). None = decide: a thread
        from 512 MB of JSON on (below it the reading and Polars threads use the second
        core); 0 = none; 1 = one whatever the size.
    progress: called as `progress(done, total)` with the bytes of the file read so far and
        its size, as the reading goes.
    lean: leave out what no analysis reads (`lean.lean_trace`: the flows, the ops' and most
        GPU rows' args), for a trace that is only analysed.

    `load` writes nothing: `tracekit.cache.Cache().load(path)` reuses a trace loaded before.
    """
    trace = load_file(path, max_bytes=max_bytes, workers=workers, progress=progress)
    if lean:
        from tracekit.loader.lean import lean_trace

        return lean_trace(trace)
    return trace


Progress = Callable[[int, int], None]


def load_file(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    workers: int | None = None,
    chunk_bytes: int | None = None,
    progress: Progress | None = None,
) -> Trace:
    """`load` without `lean`; `chunk_bytes` sets how much JSON text one chunk holds
    (default: 4 MB, more for very large traces)."""
    stream = Stream(path, max_bytes=max_bytes)
    if chunk_bytes is None:
        chunk_bytes = chunk_size(json_bytes(stream.size_bytes, stream.compressed))
    pieces = stream if progress is None else _reporting(stream, progress)
    read_into = None
    if stream.direct:  # a plain file: read straight into the chunks' buffers
        read_into = stream.read_into if progress is None else _reporting_into(stream, progress)
    try:
        result = _read(pieces, path=stream.path, size_bytes=stream.size_bytes, compressed=stream.compressed,
                       workers=workers, chunk_bytes=chunk_bytes, read_into=read_into)
    finally:
        stream.close()
    return build_trace(result, path=stream.path, size_bytes=stream.size_bytes, truncated_gzip=stream.truncated_gzip)


def _reporting(stream: Stream, progress: Progress) -> Iterator[bytes]:
    """The stream's pieces, with `progress(bytes of the file read, its size)` after each: the
    text handed on so far for a plain file; for gzip, the compressed bytes the reading
    thread has read (a few pieces ahead)."""
    handed = 0
    for piece in stream:
        yield piece
        handed += len(piece)
        progress(stream.position if stream.compressed else handed, stream.size_bytes)


def _reporting_into(stream: Stream, progress: Progress) -> Callable[[memoryview], int]:
    """`stream.read_into`, with `progress(bytes of the file read, its size)` after each read."""

    def read_into(view: memoryview) -> int:
        got = stream.read_into(view)
        progress(stream.position, stream.size_bytes)
        return got

    return read_into


def _read(pieces: Iterable[bytes], *, path: str, size_bytes: int, compressed: bool, workers: int | None,
          chunk_bytes: int, read_into: Callable[[memoryview], int] | None = None) -> ReadResult:
    """Read the decompressed pieces with the decoding thread `workers` asks for."""
    helper = decoding_thread(workers, size_bytes, compressed)
    try:
        result = read_trace(iter(pieces), path=path, chunk_bytes=chunk_bytes, helper=helper, read_into=read_into)
    finally:
        if helper is not None:
            helper.close()
    return result


def chunk_size(json_bytes: int) -> int:
    """4 MB, growing for very large traces to keep about 64 chunks (at most 16 MB each):
    larger chunks load no faster and hold more at once."""
    return min(MAX_CHUNK_BYTES, max(CHUNK_BYTES, json_bytes // 64))


def loads(data: bytes, *, path: str = "<bytes>", max_bytes: int = DEFAULT_MAX_BYTES,
          workers: int | None = 0, chunk_bytes: int = CHUNK_BYTES) -> Trace:
    """Load a trace from bytes already in memory: JSON text, or gzip-compressed JSON."""
    read = {"path": path, "size_bytes": len(data), "workers": workers, "chunk_bytes": chunk_bytes}
    if data[:2] == GZIP_MAGIC:
        stream = Stream(path, max_bytes=max_bytes, data=data)
        try:
            result = _read(stream, compressed=True, **read)
        finally:
            stream.close()
        return build_trace(result, path=path, size_bytes=len(data), truncated_gzip=stream.truncated_gzip)
    if len(data) > max_bytes:
        raise TraceTooLargeError(f"file is {len(data):,} bytes, over the limit of {max_bytes:,}", path=path)
    return build_trace(_read(bytes_stream(data), compressed=False, **read), path=path, size_bytes=len(data),
                       truncated_gzip=False)


def build_trace(result: ReadResult, *, path: str = "<bytes>", size_bytes: int = 0,
                truncated_gzip: bool = False) -> Trace:
    """The Trace of a read."""
    import polars as pl

    from tracekit.loader.clocks import clock_note, no_gpu_note
    from tracekit.loader.frames import Frames, Notes, build_frames, duplicate_notes, skew_note, vendor
    from tracekit.loader.meta import BAD_METADATA, name_metadata, top_fields
    from tracekit.model import ENGINE, WARNINGS_SCHEMA, Trace, TraceMeta

    frames = Frames(result.parts)
    notes = Notes()
    if result.recovery is not None:
        notes.add("truncated", 1, result.recovery.message(frames.events))
    elif result.not_closed:
        notes.add("truncated", 1, "the JSON object is not closed after the event array; keys after it were lost")
    bad_types, dropped = frames.lenient
    wrong, first = frames.stat("bad_field_type")
    args, first_args = frames.stat("bad_args_type")
    firsts = [f for f in (first, first_args) if f is not None]
    notes.add("bad_field_type", bad_types + wrong + args,
              "{n:,} [events|event] had fields of the wrong type; the fields were coerced or ignored"
              + (" ('args' that is not an object is kept as text, its keys unread)" if args else ""),
              min(firsts, default=None))
    if result.skipped.count:
        notes.add("invalid_json", result.skipped.count,
                  "{n:,} [events were|event was] not valid JSON (NaN, Infinity, a raw control character, a "
                  f"number or escape out of range...) and [were|was] skipped (the first starts at byte "
                  f"{result.skipped.first_at:,}); the events around [them|it] were kept")
    notes.add("not_an_event", dropped, "{n:,} array [items were not JSON objects and were|item was not a JSON object and was] dropped")
    frames.note_stat(notes, "invalid_utf8")
    frames.note_stat(notes, "deep_nesting", result.deep)
    frames.note_stat(notes, "arg_out_of_range")
    frames.note_stat(notes, "time_overflow")
    if truncated_gzip:
        notes.add("truncated_gzip", 1, TRUNCATED_GZIP)
    built = build_frames(frames, notes)
    processes, threads, conflicts = name_metadata(frames.take("meta").collect(engine=ENGINE))
    notes.add("duplicate_metadata", conflicts, "{n:,} process/thread metadata [events repeat|event repeats] with a different value; the last one is used")
    skew_note(notes, built["runtime"], built["gpu"])
    no_gpu_note(notes, built["runtime"], built["gpu"])
    clock_note(notes, built["runtime"], built["gpu"])
    duplicate_notes(notes, built["runtime"], built["gpu"], built["flows"])
    if isinstance(result.top, dict) and result.top.pop("traceEvents", None) is not None:
        notes.add("duplicate_events_key", 1, "the object has a second 'traceEvents' key; the first array was "
                  "read and the second ignored")
    fields, bad_metadata = top_fields(result.top)
    notes.add("bad_metadata_type", bad_metadata, BAD_METADATA)
    fmt = ("kineto" if frames.kineto else "chrome") + ("" if result.form == "object" else "-array")
    meta = TraceMeta(
        path=path,
        size_bytes=size_bytes,
        format=fmt,
        vendor=vendor(built["runtime"], built["gpu"]),
        processes=processes,
        threads=threads,
        event_count=frames.events,
        recovered=result.recovery is not None or result.not_closed or truncated_gzip,
        **fields,
    )
    warnings = pl.DataFrame(notes.rows, schema=WARNINGS_SCHEMA, orient="row")
    return Trace(**built, warnings=warnings, meta=meta)


INDEX_NAME = "index.json"  # capture's sweep index: a list of traces, not a trace


def trace_files(source: str | os.PathLike[str]) -> list[Path]:
    """The trace files under a directory (recursive), sorted; a file is returned as itself.

    Capture sweep indexes (`index.json`, written beside the traces they list) are skipped.
    """
    p = Path(source)
    if p.is_dir():
        found = {f for pattern in TRACE_GLOBS for f in p.rglob(pattern) if f.is_file() and f.name != INDEX_NAME}
        return sorted(found)
    return [p]


def load_ranks(sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
               max_bytes: int = DEFAULT_MAX_BYTES, lean: bool = False) -> dict[int, Trace]:
    """Load the traces of one distributed job, keyed by rank.

    The rank comes from the trace's `distributedInfo`; a file without it takes the last
    number in its file name (`rank-3.json.gz`, `worker3...`). Two files claiming one rank
    raise `UsageError`: they are never merged silently. `max_bytes`, `lean`: as for `load`,
    for each file.
    """
    if isinstance(sources, (str, os.PathLike)):
        paths = trace_files(sources)
    else:
        paths = [f for s in sources for f in trace_files(s)]
    if not paths:
        raise UsageError(f"no trace files found in {sources}")
    ranks: dict[int, Trace] = {}
    origin: dict[int, str] = {}
    for path in paths:
        trace = load(path, max_bytes=max_bytes, lean=lean)
        rank = trace.meta.rank if trace.meta.rank is not None else _rank_from_name(path)
        if rank is None:
            raise UsageError(f"{path}: no rank in distributedInfo or in the file name")
        if rank in ranks:
            raise UsageError(f"rank {rank} appears twice: {origin[rank]} and {path}")
        ranks[rank] = trace
        origin[rank] = str(path)
    return dict(sorted(ranks.items()))


def _rank_from_name(path: Path) -> int | None:
    stem = path.name.split(".")[0]
    numbers = re.findall(r"\d+", stem)
    return int(numbers[-1]) if numbers else None


__all__ = ["TraceError", "load", "load_file", "load_ranks", "loads", "trace_files"]
