"""Allocator memory over time, the peak, and the op at the peak.

Read from the `[memory]` samples `profile_memory=True` writes: one per allocation or free,
carrying the change (`bytes`, negative for a free) and the caching allocator's totals after
it (`total_allocated`: bytes in live tensors; `total_reserved`: bytes the allocator holds
from the driver, allocated or cached). Each sample is tied to the innermost `cpu_op` on its
thread whose span contains the sample time (the op that allocated or freed).

Per device (`device_type` 0 = CPU, 1 = CUDA, also used for ROCm/HIP builds):
- peak allocated: the largest `total_allocated`; its time is the first sample reaching it,
  and the op there is "the op at the peak" (with its path from the outermost op).
- peak fraction: peak allocated / the device's `totalGlobalMem` from `deviceProperties`
  (null for the CPU or when the trace does not say).
Totals are the allocator's, as written: memory allocated before the trace began is in them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

import polars as pl

from tracekit.analysis.attribution import enclosing_ops, op_paths
from tracekit.analysis.links import op_tree
from tracekit.analysis.nesting import OpTree, tree_of
from tracekit.model import DERIVED_FROM_TRACE, ENGINE, GROUPING_ENGINE, TEXT, Trace

I64, F64, STR = pl.Int64, pl.Float64, pl.String
KEYS = ["device_type", "device_id"]

# the timeline's text columns are codes (`model.TEXT`): four bytes a sample where text took
# a 16-byte view, for the rest of a report
TIMELINE_SCHEMA: dict[str, pl.DataType] = {
    "eid": I64, "device_type": I64, "device_id": I64, "device": TEXT, "pid": TEXT, "tid": TEXT,
    "ts_ns": I64, "bytes": I64, "total_allocated": I64, "total_reserved": I64, "op_eid": I64, "op_name": TEXT,
}
DEVICE_SCHEMA: dict[str, pl.DataType] = {
    "device_type": I64, "device_id": I64, "device": STR, "samples": I64, "peak_allocated_bytes": I64,
    "peak_ts_ns": I64, "peak_eid": I64, "peak_op_eid": I64, "peak_op_name": STR, "peak_op_path": STR,
    "peak_reserved_bytes": I64, "final_allocated_bytes": I64, "capacity_bytes": I64, "peak_fraction": F64,
}
BY_OP_SCHEMA: dict[str, pl.DataType] = {
    "device": STR, "op_name": STR, "allocations": I64, "allocated_bytes": I64, "frees": I64,
    "freed_bytes": I64,
}


@dataclass(frozen=True)
class MemoryStats:
    """Result of `memory_stats`. Frames are typed even when empty.

    `timeline` (TIMELINE_SCHEMA: every sample, per device in time order) is made from the
    trace when first read, and kept from then on: a report reads the devices and the ops
    alone, so a report need not hold the timeline."""

    devices: pl.DataFrame  # DEVICE_SCHEMA: peak and op at the peak per device
    by_op: pl.DataFrame  # BY_OP_SCHEMA: allocations and frees per op name, by bytes
    peak_allocated_bytes: int | None  # largest over the GPU devices (device_type != 0)
    peak_device: str | None
    peak_op_name: str | None
    peak_op_path: str | None
    # the trace the timeline is made from (not stored by the analysis cache, which gives
    # the trace it reads an analysis for: `DERIVED_FROM_TRACE`)
    trace: Trace | None = field(default=None, repr=False, compare=False, metadata={DERIVED_FROM_TRACE: True})
    DERIVED: ClassVar[tuple[str, ...]] = ("timeline",)  # what is made on first reading

    @cached_property
    def timeline(self) -> pl.DataFrame:
        if self.trace is None:
            return pl.DataFrame(schema=TIMELINE_SCHEMA)
        return _timeline(self.trace.memory, op_tree(self.trace))


def device_label(device_type: pl.Expr, device_id: pl.Expr) -> pl.Expr:
    """'cpu', 'cuda:0', or 'type<N>:<id>' for other device types."""
    kind = pl.when(device_type == 1).then(pl.lit("cuda")).otherwise(pl.format("type{}", device_type))
    return pl.when(device_type == 0).then(pl.lit("cpu")).otherwise(pl.format("{}:{}", kind, device_id))


def memory_stats(trace: Trace, *, ops: pl.DataFrame | OpTree | None = None) -> MemoryStats:
    """Allocated/reserved over time per device, the peak and the op at the peak; `ops` (the op
    tree, `links.op_tree`) computed when not given."""
    nested = op_tree(trace) if ops is None else tree_of(ops)
    timeline = _timeline(trace.memory, nested)
    devices = _devices(timeline, nested, trace.meta.devices)
    by_op = timeline.lazy().group_by("device", "op_name").agg(
        allocations=(pl.col("bytes") > 0).sum(), allocated_bytes=pl.col("bytes").clip(lower_bound=0).sum(),
        frees=(pl.col("bytes") < 0).sum(), freed_bytes=-pl.col("bytes").clip(upper_bound=0).sum(),
    ).collect(engine=GROUPING_ENGINE)  # (summed as read: `model.GROUPING_ENGINE`)
    by_op = by_op.select(list(BY_OP_SCHEMA)).cast(BY_OP_SCHEMA)
    by_op = by_op.sort(["allocated_bytes", "device", "op_name"], descending=[True, False, False],
                       nulls_last=True)  # ties in name order: the same table every run
    gpus = devices.filter(pl.col("device_type") != 0).sort(["peak_allocated_bytes", "device"], descending=[True, False])
    top = gpus.row(0, named=True) if gpus.height else None
    return MemoryStats(
        devices=devices,
        by_op=by_op,
        peak_allocated_bytes=top["peak_allocated_bytes"] if top else None,
        peak_device=top["device"] if top else None,
        peak_op_name=top["peak_op_name"] if top else None,
        peak_op_path=top["peak_op_path"] if top else None,
        trace=trace,
    )


def _timeline(memory: pl.DataFrame, nested: OpTree) -> pl.DataFrame:
    if memory.is_empty():
        return pl.DataFrame(schema=TIMELINE_SCHEMA)
    points = memory.select("eid", "pid", "tid", "ts_ns", end_ns=pl.col("ts_ns"))
    names = nested.frame.select(pl.col("eid").alias("op_eid"), pl.col("name").alias("op_name"))
    ops = enclosing_ops(points, nested).join(names, on="op_eid", how="left")
    # lazy: the join and the sort carry only the timeline's columns (eager, both copied
    # every column of the memory events)
    out = memory.lazy().join(ops.lazy(), on="eid", how="left").with_columns(
        pl.col(KEYS).fill_null(-1),
    ).with_columns(device=device_label(pl.col("device_type"), pl.col("device_id")))
    return out.select(list(TIMELINE_SCHEMA)).cast(TIMELINE_SCHEMA).sort([*KEYS, "ts_ns", "eid"]).collect(
        engine=ENGINE)


def _devices(timeline: pl.DataFrame, nested: OpTree, props: pl.DataFrame) -> pl.DataFrame:
    if timeline.is_empty():
        return pl.DataFrame(schema=DEVICE_SCHEMA)
    at_peak = (timeline.filter(pl.col("total_allocated") == pl.col("total_allocated").max().over(KEYS))
               .group_by(KEYS, maintain_order=True).first()
               .select(*KEYS, "device", peak_allocated_bytes="total_allocated", peak_ts_ns="ts_ns",
                       peak_eid="eid", peak_op_eid="op_eid", peak_op_name="op_name"))
    summary = timeline.group_by(KEYS).agg(
        samples=pl.len(), peak_reserved_bytes=pl.col("total_reserved").max(),
        final_allocated_bytes=pl.col("total_allocated").last(),
    )
    paths = op_paths(nested, at_peak["peak_op_eid"]).rename({"eid": "peak_op_eid", "op_path": "peak_op_path"})
    capacity = props.select(device_id="id", capacity_bytes="total_global_mem")
    out = (at_peak.join(summary, on=KEYS).join(paths, on="peak_op_eid", how="left")
           .join(capacity, on="device_id", how="left")
           .with_columns(capacity_bytes=pl.when(pl.col("device_type") != 0).then("capacity_bytes")))
    out = out.with_columns(peak_fraction=pl.when(pl.col("capacity_bytes") > 0)
                           .then(pl.col("peak_allocated_bytes") / pl.col("capacity_bytes")))
    return out.select(list(DEVICE_SCHEMA)).cast(DEVICE_SCHEMA).sort(KEYS)
