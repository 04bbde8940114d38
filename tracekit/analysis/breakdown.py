"""Temporal breakdown per device: compute, communication, memory and idle time.

Classes of GPU work (each activity is in exactly one):
- communication: kernels whose taxonomy class is `communication` (`taxonomy.is_communication`,
  the one definition the kernel table, the critical path and the findings share): NCCL/RCCL
  collectives and send/recv, NVSHMEM, DeepEP dispatch/combine, custom and symmetric-memory
  all-reduce. Never "any kernel named `hip…`" (HTA's mistake).
- memory: `gpu_memcpy` and `gpu_memset` activities (copy *kernels* are compute).
- compute: every other kernel.

Where classes overlap in time the instant is counted once, by priority
compute > communication > memory: communication time is then the *exposed*
communication (not hidden under compute), the figure that limits scaling, and copies
count only when nothing else runs. (The TB plugin uses Kernel > Memcpy > Memset >
Communication, which hides all communication under its own kernels' time.)

    compute_ns       = |C|
    communication_ns = |C ∪ N| - |C|
    memory_ns        = |C ∪ N ∪ M| - |C ∪ N|
    idle_ns          = span_ns - |C ∪ N ∪ M|

so the four sum to the window's span exactly. Overlap of communication with compute:
`overlap_ns` = |C ∩ N| = |C| + |N| - |C ∪ N|, `overlap_share` = overlap_ns / |N| (null without
communication). Windows are those of `timeline` (default: the device span).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.analysis.intervals import union_ns_plan
from tracekit.analysis.taxonomy import is_communication
from tracekit.analysis.timeline import WINDOW_KEYS, device_bounds, windowed, work_rows
from tracekit.model import ENGINE, Trace

I64, F64, STR = pl.Int64, pl.Float64, pl.String
CLASSES = ("compute", "communication", "memory")

BREAKDOWN_SCHEMA: dict[str, pl.DataType] = {
    "window_eid": I64, "window_name": STR, "device": I64, "span_ns": I64, "compute_ns": I64,
    "communication_ns": I64, "memory_ns": I64, "idle_ns": I64, "communication_total_ns": I64,
    "overlap_ns": I64, "overlap_share": F64,
}


def work_class(rows: pl.DataFrame, *, classes: pl.DataFrame | None = None) -> pl.Expr:
    """'memory' | 'communication' | 'compute' for the GPU work rows `rows` (columns `cat`, `name`):
    copies and sets are memory, kernels of taxonomy class `communication` communication
    (`classes`: `taxonomy.classify_names` of the GPU names, when the caller has it)."""
    return (
        pl.when(pl.col("cat").is_in(["gpu_memcpy", "gpu_memset"])).then(pl.lit("memory"))
        .when(is_communication(rows["name"], classes=classes)).then(pl.lit("communication"))
        .otherwise(pl.lit("compute"))
    )


@dataclass(frozen=True)
class Breakdown:
    """Result of `breakdown`. Frames are typed even when empty; totals sum the rows."""

    devices: pl.DataFrame  # BREAKDOWN_SCHEMA: one row per (window, device)
    span_ns: int
    compute_ns: int
    communication_ns: int
    memory_ns: int
    idle_ns: int
    communication_total_ns: int  # |N|: communication time whether hidden or not
    overlap_ns: int
    overlap_share: float | None  # overlap_ns / communication_total_ns

    def to_dict(self) -> dict[str, Any]:
        share = {c: (getattr(self, f"{c}_ns") / self.span_ns if self.span_ns else None)
                 for c in (*CLASSES, "idle")}
        return {
            "span_ns": self.span_ns, "compute_ns": self.compute_ns,
            "communication_ns": self.communication_ns, "memory_ns": self.memory_ns,
            "idle_ns": self.idle_ns, "shares": share,
            "communication_total_ns": self.communication_total_ns, "overlap_ns": self.overlap_ns,
            "overlap_share": self.overlap_share, "devices": self.devices.to_dicts(),
        }


def breakdown(trace: Trace, *, windows: pl.DataFrame | None = None,
              classes: pl.DataFrame | None = None) -> Breakdown:
    """Compute / communication / memory / idle per device; see the module docstring. `classes`:
    `taxonomy.classify_names` of the GPU names, computed (for the kernels') when not given."""
    work = work_rows(trace)
    bounds = device_bounds(work, windows)
    rows = windowed(work, bounds)
    rows = rows.lazy().with_columns(cls=work_class(rows, classes=classes))
    parts = {
        "c": rows.filter(pl.col("cls") == "compute"),
        "n": rows.filter(pl.col("cls") == "communication"),
        "cn": rows.filter(pl.col("cls") != "memory"),
        "all": rows,
    }
    out = bounds.lazy().with_columns(span_ns=pl.col("window_end_ns") - pl.col("window_start_ns"))
    for key, part in parts.items():
        size = union_ns_plan(part, WINDOW_KEYS, name=f"_{key}")
        out = out.join(size, on=WINDOW_KEYS, how="left", nulls_equal=True, maintain_order="left")
    out = out.with_columns(pl.col("_c", "_n", "_cn", "_all").fill_null(0)).with_columns(
        compute_ns=pl.col("_c"), communication_ns=pl.col("_cn") - pl.col("_c"),
        memory_ns=pl.col("_all") - pl.col("_cn"), idle_ns=pl.col("span_ns") - pl.col("_all"),
        communication_total_ns=pl.col("_n"), overlap_ns=pl.col("_c") + pl.col("_n") - pl.col("_cn"),
    ).with_columns(
        overlap_share=pl.when(pl.col("_n") > 0).then(pl.col("overlap_ns") / pl.col("_n")),
    )
    devices = out.select(list(BREAKDOWN_SCHEMA)).cast(BREAKDOWN_SCHEMA).sort("device", "window_eid").collect(
        engine=ENGINE)
    total = {c: int(devices[c].sum() or 0) for c in BREAKDOWN_SCHEMA if c.endswith("_ns")}
    n_total = total["communication_total_ns"]
    share = total["overlap_ns"] / n_total if n_total else None
    return Breakdown(**total, overlap_share=share, devices=devices)
