"""The `Trace` model: what every analysis reads.

A `Trace` is a frozen bundle of typed Polars frames plus a `TraceMeta`. All times are
integer nanoseconds (`Int64`): `ts_ns` is the start as written in the file (microseconds
times 1000, parsed exactly from the JSON text), `dur_ns` the duration, `end_ns` =
`ts_ns + dur_ns`. `meta.base_time_ns` (Kineto's `baseTimeNanoseconds`, 0 when absent)
added to `ts_ns` gives the absolute time.

Every row carries `eid`, the index of its event in the file's event array, so evidence
can point back at the original event.

Frames and columns (`docs/trace-model.md` has the long form):

ops          CPU-side slices: `cpu_op`, `user_annotation` (record_function ranges and
             `ProfilerStep#N`), `python_function`, `overhead`, `trace`, and slices of any
             other category from generic Chrome traces (B/E pairs and async b/e pairs
             become slices too; `ph` keeps the original phase).
runtime      host API calls: `cuda_runtime` and `cuda_driver` (HIP calls of ROCm traces
             are `cuda_runtime`, as Kineto writes them).
gpu          device activity: `kernel`, `gpu_memcpy`, `gpu_memset`, `cuda_sync`,
             `gpu_user_annotation`; `device` and `stream` are integers.
flows        flow events (`s`, `t`, `f`), `cat` normalised (`ac2g`, `fwdbwd`, ...).
counters     one row per counter series sample (`C` events).
instants     instant events (`i`, `I`, `n`, `R`, `T`, `p`) other than memory samples.
memory       `[memory]` instants: allocator samples.
warnings     every problem met while loading: `level`, `code`, `count`, `message`, `first_eid`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias, cast

import polars as pl

I64 = pl.Int64
I64_MIN, I64_MAX = -(2**63), 2**63 - 1  # the bounds of an Int64
F64 = pl.Float64
STR = pl.String
# a column's dtype as the schemas write it: a class (`pl.Int64`) or an instance (`pl.List(I64)`)
DType: TypeAlias = pl.DataType | type[pl.DataType]
Schema: TypeAlias = dict[str, DType]
# Text held as codes (a Categorical): four bytes a row where a string takes a 16-byte view,
# for columns of few distinct values over many rows that the analyses do not match patterns
# on: `ph`, `cat`, `pid` and `tid` of every frame (and the frames the analyses derive carry
# them), all the flows' text (a trace holds more flow events than of any other kind, one
# pair per launch), and the critical path's names and lanes. Names stay text: the analyses
# match patterns on them.
TEXT = pl.Categorical()
# The Polars engine of the lazy plans that build these frames (the loader) and read them
# (the analyses). Polars 2's default picks the streaming engine, whose start costs more than
# these plans' work (a load peaks higher and takes as long or longer: benchmarks/ab.py),
# and every eager step of an analysis pays Polars' planning and its thread pool's
# hand-over again.
ENGINE: Final = "in-memory"
# The engine of the plans that group millions of rows by several keys: the streaming engine
# sums them as it reads them, where the in-memory one first gathers every row's keys and
# indices (an eager group-by is the in-memory one).
GROUPING_ENGINE: Final = "streaming"

OPS_SCHEMA: Schema = {
    "eid": I64,
    "ph": TEXT,
    "cat": TEXT,
    "name": STR,
    "pid": TEXT,
    "tid": TEXT,
    "ts_ns": I64,
    "dur_ns": I64,
    "end_ns": I64,
    "external_id": I64,
    "sequence_nr": I64,
    "fwd_tid": I64,
    "python_id": I64,
    "python_parent_id": I64,
    "input_dims": STR,
    "input_types": STR,
    "input_strides": STR,
    "concrete_inputs": STR,
    "flops": F64,
    "args": STR,
}

RUNTIME_SCHEMA: Schema = {
    "eid": I64,
    "cat": TEXT,
    "name": STR,
    "pid": TEXT,
    "tid": TEXT,
    "ts_ns": I64,
    "dur_ns": I64,
    "end_ns": I64,
    "correlation": I64,
    "external_id": I64,
    "cbid": I64,
    "args": STR,
}

GPU_SCHEMA: Schema = {
    "eid": I64,
    "cat": TEXT,
    "name": STR,
    "device": I64,
    "stream": I64,
    "ts_ns": I64,
    "dur_ns": I64,
    "end_ns": I64,
    "correlation": I64,
    "external_id": I64,
    "grid_x": I64,
    "grid_y": I64,
    "grid_z": I64,
    "block_x": I64,
    "block_y": I64,
    "block_z": I64,
    "registers_per_thread": I64,
    "shared_memory": I64,
    "blocks_per_sm": F64,
    "warps_per_sm": F64,
    "est_occupancy_pct": F64,
    "bytes": I64,
    "bandwidth_gbps": F64,
    "sync_kind": STR,
    "args": STR,
}

FLOWS_SCHEMA: Schema = {
    "eid": I64,
    "cat": TEXT,
    "name": TEXT,
    "flow_id": I64,
    "ph": TEXT,
    "pid": TEXT,
    "tid": TEXT,
    "ts_ns": I64,
    "binding_point": TEXT,
}

COUNTERS_SCHEMA: Schema = {
    "eid": I64,
    "cat": TEXT,
    "name": STR,
    "pid": TEXT,
    "tid": TEXT,
    "ts_ns": I64,
    "series": STR,
    "value": F64,
}

INSTANTS_SCHEMA: Schema = {
    "eid": I64,
    "ph": TEXT,
    "cat": TEXT,
    "name": STR,
    "pid": TEXT,
    "tid": TEXT,
    "ts_ns": I64,
    "scope": STR,
    "args": STR,
}

MEMORY_SCHEMA: Schema = {
    "eid": I64,
    "pid": TEXT,
    "tid": TEXT,
    "ts_ns": I64,
    "device_type": I64,
    "device_id": I64,
    "addr": I64,
    "bytes": I64,
    "total_allocated": I64,
    "total_reserved": I64,
}

WARNINGS_SCHEMA: Schema = {
    "level": STR,  # warning (something was lost or repaired) | info (noted, nothing lost)
    "code": STR,
    "count": I64,
    "message": STR,
    "first_eid": I64,
}

DEVICES_SCHEMA: Schema = {
    "id": I64,
    "name": STR,
    "total_global_mem": I64,
    "compute_major": I64,
    "compute_minor": I64,
    "num_sms": I64,
    "max_threads_per_block": I64,
    "max_threads_per_sm": I64,
    "regs_per_block": I64,
    "regs_per_sm": I64,
    "warp_size": I64,
    "shared_mem_per_block": I64,
    "shared_mem_per_block_optin": I64,
    "shared_mem_per_sm": I64,
}

# pid and tid as the frames hold them (`TEXT`): a thread's or a process's name joins on them
THREADS_SCHEMA: Schema = {
    "pid": TEXT,
    "tid": TEXT,
    "name": STR,
    "sort_index": I64,
}

PROCESSES_SCHEMA: Schema = {
    "pid": TEXT,
    "name": STR,
    "labels": STR,
    "sort_index": I64,
}

SCHEMAS: dict[str, Schema] = {
    "ops": OPS_SCHEMA,
    "runtime": RUNTIME_SCHEMA,
    "gpu": GPU_SCHEMA,
    "flows": FLOWS_SCHEMA,
    "counters": COUNTERS_SCHEMA,
    "instants": INSTANTS_SCHEMA,
    "memory": MEMORY_SCHEMA,
    "warnings": WARNINGS_SCHEMA,
}

FRAME_NAMES: tuple[str, ...] = tuple(SCHEMAS)
# A result's field holding the trace it was computed from, to make on first reading what a
# report does not read (`memory.MemoryStats.timeline`): marked with this key in the field's
# metadata, it is not stored by the analysis cache, which gives it the trace it reads the
# analysis for.
DERIVED_FROM_TRACE = "derived_from_trace"
# the ops' columns no analysis reads: the op tree (`links.cpu_ops`) leaves them out, and a
# lean trace (`loader.lean`) holds nulls there
UNREAD_OP_COLUMNS = ("args", "sequence_nr", "fwd_tid", "python_id", "python_parent_id")
# and the GPU rows': the GPU links (`links.gpu_links`) leave them out, and a lean trace keeps
# them on the `cuda_sync` records alone (the dependency graph reads the stream a wait was on)
UNREAD_GPU_COLUMNS = ("args",)
# and the runtime calls': the CUPTI callback id (a lean trace holds nulls there)
UNREAD_RUNTIME_COLUMNS = ("cbid",)

# GPU activity categories that make a device busy. `cuda_sync` rows and
# `gpu_user_annotation` ranges are GPU-side records but not work.
GPU_WORK_CATS: tuple[str, ...] = ("kernel", "gpu_memcpy", "gpu_memset")
# `ops` rows that are not the host's work: the profiler's own (`trace` spans, `overhead`
# buffer flushes) and the GPU-side twins of annotations.
NOT_CPU_CATS: tuple[str, ...] = ("trace", "overhead", "gpu_user_annotation")


def empty_frame(schema: Schema) -> pl.DataFrame:
    """An empty frame with the given schema."""
    return pl.DataFrame(schema=schema)


# dtypes whose equality is plain equality (floats are left out: NaN and -0.0 compare oddly)
_EXACT = (pl.String, pl.Categorical, pl.Boolean, pl.Int8, pl.Int16, pl.Int32, pl.Int64,
          pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64)


def constant_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with each column that holds only nulls (of any dtype), or one value and no
    null (text, integers, booleans), as a constant column.

    Polars holds such a column as one value and a length: no memory, and filters, gathers,
    sorts and joins copy nothing for it. Traces are full of them (shape columns without
    `record_shapes`, one process on every call, the flows' fixed category), so the load, the
    caches reading a frame back and the analyses' large results all go through this."""
    if frame.height < 2:
        return frame
    fixed = []
    for name, dtype in frame.schema.items():
        column = frame.get_column(name)
        if column.null_count() == frame.height:
            fixed.append(pl.lit(None, dtype).alias(name))
        elif dtype in _EXACT and not column.null_count() and _one_value(column):
            fixed.append(pl.lit(column[0], dtype).alias(name))
    return frame.with_columns(fixed) if fixed else frame


def _one_value(column: pl.Series) -> bool:
    first = column[0]
    return bool(column[-1] == first) and bool((column == first).all())


@dataclass(frozen=True)
class TraceMeta:
    """What the file says about itself, beside its events."""

    path: str = ""
    size_bytes: int = 0
    format: str = "kineto"  # kineto | kineto-array | chrome | chrome-array
    schema_version: int | None = None
    base_time_ns: int = 0
    display_time_unit: str | None = None
    trace_name: str | None = None
    vendor: str | None = None  # nvidia | amd | None (no GPU activity)
    rank: int | None = None
    world_size: int | None = None
    distributed_info: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    profiler_flags: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    devices: pl.DataFrame = field(default_factory=lambda: empty_frame(DEVICES_SCHEMA))
    processes: pl.DataFrame = field(default_factory=lambda: empty_frame(PROCESSES_SCHEMA))
    threads: pl.DataFrame = field(default_factory=lambda: empty_frame(THREADS_SCHEMA))
    event_count: int = 0
    recovered: bool = False
    lean: bool = False  # loaded without what no analysis reads (`loader.lean`: the flows, the unread columns)


@dataclass(frozen=True)
class Trace:
    """One loaded trace: typed frames plus metadata. Treat it as read-only."""

    ops: pl.DataFrame
    runtime: pl.DataFrame
    gpu: pl.DataFrame
    flows: pl.DataFrame
    counters: pl.DataFrame
    instants: pl.DataFrame
    memory: pl.DataFrame
    warnings: pl.DataFrame
    meta: TraceMeta = field(default_factory=TraceMeta)

    @classmethod
    def empty(cls, meta: TraceMeta | None = None) -> Trace:
        frames = {name: empty_frame(schema) for name, schema in SCHEMAS.items()}
        return cls(**frames, meta=meta or TraceMeta())

    @property
    def gpu_work(self) -> pl.DataFrame:
        """Kernels, memcpys and memsets: the GPU rows that count as busy."""
        return self.gpu.filter(pl.col("cat").is_in(GPU_WORK_CATS))

    @property
    def kernels(self) -> pl.DataFrame:
        return self.gpu.filter(pl.col("cat") == "kernel")

    @property
    def start_ns(self) -> int:
        """The earliest start of any slice, call, GPU row or instant (0 for an empty trace):
        where reports and findings count "from the trace start"."""
        starts = [cast("int | None", f["ts_ns"].min()) for f in (self.ops, self.runtime, self.gpu, self.instants)
                  if f.height]  # (Int64 columns)
        known = [s for s in starts if s is not None]
        return int(min(known)) if known else 0

    def frames(self) -> dict[str, pl.DataFrame]:
        return {name: getattr(self, name) for name in FRAME_NAMES}

    def replace(self, **changes: Any) -> Trace:
        """A copy with some frames or the meta replaced."""
        data = {name: getattr(self, name) for name in FRAME_NAMES}
        data["meta"] = self.meta
        data.update(changes)
        return Trace(**data)


def clocks_disagree(trace: Trace) -> bool:
    """The trace carries a `clock_offset` note (`loader.clocks`): times on the host and on
    the GPU cannot be compared (launch latency, a gap's late part, a launch edge's length)."""
    return bool((trace.warnings["code"] == "clock_offset").any())
