"""The dependency graph's vocabularies and frame schemas (`graph`, `graph_cpu`, `graph_gpu`),
and the lane of a CPU row: what its parts share."""

from __future__ import annotations

import polars as pl

from tracekit.model import TEXT

I64, STR, BOOL = pl.Int64, pl.String, pl.Boolean
CLASSES = ("cpu_compute", "python_overhead", "launch_overhead", "gpu_compute", "gpu_memory",
           "communication", "sync_wait", "idle")
EDGE_KINDS = ("cpu", "gpu", "stream", "launch", "cross_stream", "sync")
ROLES = ("op", "python", "runtime")
# closed vocabularies as Enums: one byte a row where a string takes a 16-byte view
CLASS = pl.Enum(CLASSES)
KIND = pl.Enum(EDGE_KINDS)
ROLE = pl.Enum(ROLES)
# names and lanes, which repeat a few dozen values over millions of edges and pieces, are
# `TEXT` (the model's Categorical): four bytes a row where text takes a 16-byte view (a
# graph and its path carry millions of pieces each)
EVENT_RECORD_CALL = r"^(cuda|cu|hip)EventRecord"
DEFAULT_SYNC_TOLERANCE_NS = 20_000
DEFAULT_MIN_BLOCKING_NS = 10_000
DEFAULT_IDLE_GAP_NS = 200_000
GPU_CLASS = {"compute": "gpu_compute", "memory": "gpu_memory", "communication": "communication"}

EDGE_SCHEMA: dict[str, pl.DataType] = {
    "src": I64, "dst": I64, "kind": KIND, "weight_ns": I64, "start_ns": I64, "end_ns": I64,
    "cls": CLASS, "eid": I64, "name": TEXT, "lane": TEXT, "inferred": BOOL, "src_eid": I64,
}
SEGMENT_SCHEMA: dict[str, pl.DataType] = {
    "src": I64, "lane": TEXT, "start_ns": I64, "end_ns": I64, "cls": CLASS, "weight_ns": I64,
    "eid": I64, "name": TEXT, "role": ROLE,
}
SYNC_SCHEMA: dict[str, pl.DataType] = {"eid": I64, "gpu_eid": I64, "tail_ns": I64, "inferred": BOOL, "source": STR}
WORK_SCHEMA: dict[str, pl.DataType] = {
    "eid": I64, "name": TEXT, "device": I64, "stream": I64, "ts_ns": I64, "end_ns": I64,
    "launch_eid": I64, "launch_ts_ns": I64, "launch_pid": TEXT, "launch_tid": TEXT, "cls": CLASS,
}


def lane_of(lanes: pl.Series) -> pl.Expr:
    """The lane text of each row's `_thread` (the threads' ranks index `lanes`)."""
    return pl.lit(lanes).gather(pl.col("_thread"))
