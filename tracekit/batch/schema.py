"""Column names and types of the batch tables (`docs/batch.md` documents each column).

The names are a stable interface: scripts read `summary.parquet` by them. Add columns at
the end of a group; never rename one. A figure whose analysis is not available in the
running tracekit is null, never invented.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.analysis.gaps import CAUSES

I64, F64, STR, BOOL = pl.Int64, pl.Float64, pl.String, pl.Boolean
TIME = pl.Datetime("us", "UTC")

# Bump when a figure's meaning changes: cached results of another version are re-analysed.
BATCH_SCHEMA_VERSION = 3

# Idle causes of `tracekit.analysis.gaps` (device scope), one column each: idle_<cause>_ns.
IDLE_CAUSES = CAUSES
SEVERITIES = ("high", "medium", "low", "info")

SUMMARY_SCHEMA: dict[str, pl.DataType] = {
    # identity
    "name": STR,
    "source": STR,
    "kind": STR,
    "file_bytes": I64,
    "content_hash": STR,
    "error": STR,
    "path": STR,
    # what the trace is
    "format": STR,
    "events": I64,
    "trace_name": STR,
    "vendor": STR,
    "devices": STR,
    "device_count": I64,
    "model": STR,
    "workload": STR,
    "attn_implementation": STR,
    "dtype": STR,
    "captured_at": TIME,
    "captured_at_source": STR,
    "rank": I64,
    "world_size": I64,
    "ranks": I64,
    "pytorch": BOOL,
    # steps
    "steps": I64,
    "warmup_steps": I64,
    "step_median_ns": I64,
    "step_cv": F64,
    # GPU time over each device's span, summed over devices
    "span_ns": I64,
    "busy_ns": I64,
    "idle_ns": I64,
    "gpu_utilisation": F64,
    **{f"idle_{cause}_ns": I64 for cause in IDLE_CAUSES},
    "compute_ns": I64,
    "communication_ns": I64,
    "memory_ns": I64,
    "communication_total_ns": I64,
    "communication_overlap_share": F64,
    # kernels
    "kernels": I64,
    "top_kernel": STR,
    "top_kernel_class": STR,
    "top_kernel_share": F64,
    "tensor_core_share": F64,
    # attention, findings, critical path
    "attention_backend": STR,
    "attention_calls": I64,
    **{f"findings_{sev}": I64 for sev in SEVERITIES},
    "top_finding": STR,
    "critical_path_verdict": STR,
    "critical_path_share": F64,
    # rank groups
    "straggler_ranks": STR,
    "straggler_lag_ns": I64,
    "arrival_skew_ns": I64,
    "late_window": STR,
    # loading and provenance
    "load_warnings": I64,
    "recovered": BOOL,
    "analysis_notes": STR,
    "tracekit_version": STR,
    "analysed_at": TIME,
    "analysis_s": F64,
    "report": STR,
}

CLASSES_SCHEMA: dict[str, pl.DataType] = {
    "name": STR,
    "source": STR,
    "content_hash": STR,
    "kernel_class": STR,
    "count": I64,
    "total_ns": I64,
    "share": F64,
}

FINDINGS_SCHEMA: dict[str, pl.DataType] = {
    "name": STR,
    "source": STR,
    "content_hash": STR,
    "rank": I64,
    "rule": STR,
    "severity": STR,
    "title": STR,
    "time_lost_ns": I64,
    "share": F64,
    "advice": STR,
}

RANKS_SCHEMA: dict[str, pl.DataType] = {
    "name": STR,
    "source": STR,
    "content_hash": STR,
    "file": STR,
    "rank": I64,
    "steps": I64,
    "step_median_ns": I64,
    "span_ns": I64,
    "busy_ns": I64,
    "idle_ns": I64,
    "gpu_utilisation": F64,
    "compute_ns": I64,
    "memory_ns": I64,
    "communication_ns": I64,
    "communication_total_ns": I64,
    "overlap_ns": I64,
    "overlap_share": F64,
    "work_per_step_ns": I64,
    "lag_ns": I64,
    "wait_ns": I64,
    "straggler": BOOL,
    "critical_path_verdict": STR,
    # arrival at the collectives (batch.arrivals)
    "clock_offset_ns": I64,
    "collectives": I64,
    "late_ns": I64,
    "times_last": I64,
    "lost_to_rank_ns": I64,
}

COLLECTIVES_SCHEMA: dict[str, pl.DataType] = {
    "stream_index": I64,
    "k": I64,
    "family": STR,
    "name": STR,
    "first_arrival_ns": I64,
    "median_arrival_ns": I64,
    "last_arrival_ns": I64,
    "end_spread_ns": I64,
    "latest_ranks": STR,
    "late_rank": I64,
    "skew_ns": I64,
    "lost_ns": I64,
    "late_launched_late": BOOL,
}

# Columns that differ between two runs over the same bytes (wall clock, machine speed, outputs).
RUN_COLUMNS = ("analysed_at", "analysis_s", "report")
# Columns that describe where the bytes were found rather than what they hold.
SOURCE_COLUMNS = ("name", "source", "path", "file_bytes", "report")
TIME_COLUMNS = ("captured_at", "analysed_at")


def frame(rows: list[dict[str, Any]], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Rows (plain dicts; times as integer µs since the epoch) -> a typed frame in schema order."""
    raw = {c: (I64 if t == TIME else t) for c, t in schema.items()}
    data = [{c: r.get(c) for c in raw} for r in rows]
    out = pl.DataFrame(data, schema=raw, orient="row") if data else pl.DataFrame(schema=raw)
    times = [pl.col(c).cast(TIME) for c, t in schema.items() if t == TIME]
    return out.with_columns(times) if times else out


def empty_summary_row() -> dict[str, Any]:
    return dict.fromkeys(SUMMARY_SCHEMA)
