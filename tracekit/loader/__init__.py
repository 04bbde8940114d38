"""`load(path) -> Trace` and `load_ranks(paths) -> dict[int, Trace]`."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from tracekit.errors import TraceError, UsageError
from tracekit.loader.columns import base_frame
from tracekit.loader.decode import Decoded, decode_trace
from tracekit.loader.frames import Builder
from tracekit.loader.meta import name_metadata, top_fields
from tracekit.loader.source import DEFAULT_MAX_BYTES, Source, read_source
from tracekit.model import WARNINGS_SCHEMA, Trace, TraceMeta

TRACE_GLOBS = ("*.json", "*.json.gz", "*.json.tmp", "*.pt.trace.json", "*.pt.trace.json.gz")


def load(path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES) -> Trace:
    """Load one trace file (JSON or gzip JSON; object or bare-array form) into a `Trace`.

    Broken input raises `TraceError` with a one-line message, or, where events could be
    recovered, returns a partial `Trace` whose `warnings` frame says what was lost.
    """
    src = read_source(path, max_bytes=max_bytes)
    decoded = decode_trace(src.data, path=src.path)
    return build_trace(decoded, src)


def loads(data: bytes, *, path: str = "<bytes>") -> Trace:
    """Load a trace from bytes already in memory (plain JSON text)."""
    src = Source(path=path, size_bytes=len(data), data=data, compressed=False, truncated_gzip=False)
    return build_trace(decode_trace(data, path=path), src)


def build_trace(decoded: Decoded, src: Source) -> Trace:
    events = decoded.events
    base = base_frame(events)
    b = Builder(events, base)
    for code, count, message in decoded.notes:
        b.notes.append(("warning", code, count, message, None))
    if src.truncated_gzip:
        b.notes.append(("warning", "truncated_gzip", 1, "the gzip stream ends early (an interrupted write); read what was there", None))
    slices = b.slices()
    ops, runtime, gpu = b.ops(slices), b.runtime(slices), b.gpu(slices)
    instants, memory = b.instants()
    flows, counters = b.flows(), b.counters()
    b.phase_notes()
    _order_notes(b, slices)
    meta_eids = base.filter(pl.col("ph") == "M")["eid"].to_list()
    processes, threads, conflicts = name_metadata(events, meta_eids)
    b.note("duplicate_metadata", conflicts, "{n:,} process/thread metadata events repeat with a different value; the last one is used")
    _skew_note(b, runtime, gpu)
    fields = top_fields(decoded.top)
    fmt = ("kineto" if _is_kineto(base) else "chrome") + ("" if decoded.form == "object" else "-array")
    meta = TraceMeta(
        path=src.path,
        size_bytes=src.size_bytes,
        format=fmt,
        vendor=_vendor(runtime, gpu),
        processes=processes,
        threads=threads,
        event_count=len(events),
        recovered=decoded.recovered or src.truncated_gzip,
        **fields,
    )
    warnings = pl.DataFrame(b.notes, schema=WARNINGS_SCHEMA, orient="row")
    return Trace(ops=ops, runtime=runtime, gpu=gpu, flows=flows, counters=counters,
                 instants=instants, memory=memory, warnings=warnings, meta=meta)


def _order_notes(b: Builder, slices: pl.DataFrame) -> None:
    back = slices.sort("eid").with_columns(
        _back=(pl.col("ts_ns").diff().over(["pid", "tid"]) < 0)
    ).filter(pl.col("_back"))
    b.note("out_of_order", back, "{n:,} events appear earlier in time than the event before them on their thread; frames are sorted by time")
    neg = slices.filter(pl.col("ts_ns") < 0)
    b.note("negative_ts", neg, "{n:,} events have a negative timestamp (kept as is)")


def _skew_note(b: Builder, runtime: pl.DataFrame, gpu: pl.DataFrame) -> None:
    if runtime.is_empty() or gpu.is_empty():
        return
    launches = runtime.filter(pl.col("correlation").is_not_null()).select("correlation", launch_ts=pl.col("ts_ns"))
    early = (
        gpu.filter(pl.col("cat").is_in(["kernel", "gpu_memcpy", "gpu_memset"]))
        .join(launches.unique("correlation", keep="first"), on="correlation", how="inner")
        .filter(pl.col("ts_ns") < pl.col("launch_ts"))
    )
    b.note("gpu_before_launch", early, "{n:,} GPU activities start before the host call that launched them (clock skew between host and device)")


def _is_kineto(base: pl.DataFrame) -> bool:
    kineto = ["cpu_op", "kernel", "cuda_runtime", "user_annotation", "python_function", "gpu_memcpy", "trace"]
    return bool(base["cat"].is_in(kineto).any())


def _vendor(runtime: pl.DataFrame, gpu: pl.DataFrame) -> str | None:
    if runtime["name"].str.starts_with("hip").any():
        return "amd"
    if not gpu.is_empty() or not runtime.is_empty():
        return "nvidia"
    return None


def trace_files(source: str | os.PathLike[str]) -> list[Path]:
    """The trace files under a directory (recursive), sorted; a file is returned as itself."""
    p = Path(source)
    if p.is_dir():
        found = {f for pattern in TRACE_GLOBS for f in p.rglob(pattern) if f.is_file()}
        return sorted(found)
    return [p]


def load_ranks(sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> dict[int, Trace]:
    """Load the traces of one distributed job, keyed by rank.

    The rank comes from the trace's `distributedInfo`; a file without it takes the last
    number in its file name (`rank-3.json.gz`, `worker3...`). Two files claiming one rank
    raise `UsageError`: they are never merged silently.
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
        trace = load(path)
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


__all__ = ["load", "loads", "load_ranks", "trace_files", "TraceError"]
