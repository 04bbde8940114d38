"""What a person wants to know first about a trace file: `trace_info(trace)`."""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.model import GPU_WORK_CATS, NOT_CPU_CATS, Trace


def trace_info(trace: Trace) -> dict[str, Any]:
    """A plain, JSON-ready description of a loaded trace (no analysis beyond counting)."""
    m = trace.meta
    return {
        "file": m.path,
        "size_bytes": m.size_bytes,
        "format": m.format,
        "schema_version": m.schema_version,
        "vendor": m.vendor,
        "rank": m.rank,
        "world_size": m.world_size,
        "events": m.event_count,
        "recovered": m.recovered,
        "span": _span(trace),
        "devices": _devices(trace),
        "categories": _categories(trace),
        "streams": _streams(trace),
        "threads": _threads(trace),
        "steps": _steps(trace),
        "profiler_flags": m.profiler_flags,
        "versions": m.versions,
        "warnings": trace.warnings.select("level", "code", "count", "message", "first_eid").to_dicts(),
    }


def _span(trace: Trace) -> dict[str, int | None]:
    starts, ends = [], []
    for frame in (trace.ops, trace.runtime, trace.gpu):
        body = frame.filter(pl.col("cat") != "trace") if "cat" in frame.columns else frame
        if body.height:
            starts.append(body["ts_ns"].min())
            ends.append(body["end_ns"].max())
    if not starts:
        return {"start_ns": None, "end_ns": None, "duration_ns": None}
    start, end = min(starts), max(ends)
    return {"start_ns": start, "end_ns": end, "duration_ns": end - start}


def _devices(trace: Trace) -> list[dict[str, Any]]:
    """Every device with GPU rows; its activities and streams are those of its work (kernels,
    memcpys, memsets), as in the streams table: sync records and GPU annotations are not."""
    work = pl.col("cat").is_in(GPU_WORK_CATS)
    used = trace.gpu.group_by("device").agg(
        activities=work.sum().cast(pl.Int64), streams=pl.col("stream").filter(work).n_unique()
    )
    props = trace.meta.devices.select("id", "name", "num_sms", "total_global_mem", "compute_major", "compute_minor")
    joined = used.join(props, left_on="device", right_on="id", how="left").sort("device")
    return joined.to_dicts()


def _categories(trace: Trace) -> dict[str, int]:
    counts: dict[str, int] = {}
    for frame in (trace.ops, trace.runtime, trace.gpu, trace.flows, trace.instants):
        if frame.height:
            for cat, n in frame.group_by("cat").len().rows():
                counts[cat or "(none)"] = counts.get(cat or "(none)", 0) + n
    if trace.memory.height:
        counts["[memory]"] = trace.memory.height
    if trace.counters.height:
        counts["counters"] = trace.counters.height
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))  # ties by name: the same order every run


def _streams(trace: Trace) -> list[dict[str, Any]]:
    work = trace.gpu_work
    if work.is_empty():
        return []
    return (
        work.group_by("device", "stream")
        .agg(activities=pl.len(), kernels=(pl.col("cat") == "kernel").sum())
        .sort("device", "stream")
        .to_dicts()
    )


def _threads(trace: Trace) -> int:
    """Threads with CPU work: any CPU slice (ops, annotations, Python frames, a generic
    trace's own categories) or runtime call; not the profiler's own rows."""
    cpu = pl.concat([trace.ops.filter(~pl.col("cat").is_in(NOT_CPU_CATS)).select("pid", "tid"),
                     trace.runtime.select("pid", "tid")])
    return cpu.select(pl.struct("pid", "tid").n_unique()).item() if cpu.height else 0


def _steps(trace: Trace) -> dict[str, Any]:
    steps = trace.ops.filter(
        (pl.col("cat") == "user_annotation") & pl.col("name").str.starts_with("ProfilerStep#")
    )
    if steps.is_empty():
        return {"count": 0, "names": []}
    names = steps.sort("ts_ns")["name"].to_list()
    return {"count": len(names), "names": names[:20]}
