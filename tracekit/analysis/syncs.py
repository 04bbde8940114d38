"""Host<->device syncs and copies: where the CPU blocks on the GPU, and every memcpy named.

Blocking syncs are runtime/driver calls that do not return until GPU work is done
(recognised by family and prefix, CUDA, driver and HIP alike):

| kind   | calls                                                                |
|--------|----------------------------------------------------------------------|
| device | `cudaDeviceSynchronize`, `hipDeviceSynchronize`, `cuCtxSynchronize`   |
| stream | `(cuda|cu|hip)StreamSynchronize`                                     |
| event  | `(cuda|cu|hip)EventSynchronize`                                      |
| memcpy | `(cuda|cu|hip)Memcpy*` without `Async`: `cudaMemcpy`, `hipMemcpyWithStream`...|
|        | and any memcpy call whose copy goes from the device to pageable host memory  |

An async memcpy to pageable host memory returns only once the copy is done, as CUDA and HIP
document: the call is named `…Async`, but the host waits in it for the stream's earlier
work and the copy (`blocking_copies`; the copy's activity says so:
`Memcpy DtoH (Device -> Pageable)`).

`cudaStreamWaitEvent` is not a host sync (it makes one stream wait for another, the host
goes on): it is counted apart (`stream_waits`). `cudaMemset` is asynchronous for device
memory and is not listed. The GPU-side `cuda_sync` records newer traces write are joined to
their call by correlation: they name the stream a stream sync waited on.

For each sync: the op that caused it (innermost `cpu_op` and its path from the outermost
op, e.g. `aten::item > aten::_local_scalar_dense`), and the GPU work it waited for: the
GPU activity (on the synced stream when known, else any) whose end is the latest at or
before the sync's end, kept only if it was still running when the sync began.
`gpu_wait_ns` = that end - sync start; `tail_ns` = sync end - that end (the whole sync
when nothing was waited for).

Every memcpy and memset gets its direction and memory kinds parsed from the activity
name (`Memcpy DtoH (Device -> Pageable)`), bytes, bandwidth = bytes / duration (GB/s,
1 GB = 1e9 bytes), the API that issued it and whether it was async, and the op path, so a
hidden copy (`aten::masked_fill > aten::clone > aten::copy_` -> DtoD) is named.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.analysis.attribution import op_paths
from tracekit.analysis.links import gpu_links, launch_ops, op_tree
from tracekit.analysis.nesting import OpTree, tree_of
from tracekit.model import ENGINE, TEXT, Trace

I64, F64, STR, BOOL = pl.Int64, pl.Float64, pl.String, pl.Boolean

SYNC_RULES: tuple[tuple[str, str], ...] = (
    ("device", r"^(cudaDeviceSynchronize|hipDeviceSynchronize|cuCtxSynchronize)"),
    ("stream", r"^(cuda|cu|hip)StreamSynchronize"),
    ("event", r"^(cuda|cu|hip)EventSynchronize"),
)
MEMCPY_CALL = r"^(cuda|cu|hip)Memcpy"
PAGEABLE_DTOH = r"^Memcpy DtoH \(\w+ -> Pageable\)"  # a copy to pageable host memory: its call blocks
STREAM_WAIT_CALL = r"^(cuda|cu|hip)StreamWaitEvent"
# host calls that block until GPU work is done (the sync families, and `Memcpy` calls unless
# named `…Async…`), and the ops that do (`gaps`' `sync_stall`)
BLOCKING_CALL = "|".join(pattern for _, pattern in SYNC_RULES) + "|" + MEMCPY_CALL
BLOCKING_OP = r"^aten::(item|_local_scalar_dense|nonzero)$"

SYNC_SCHEMA: dict[str, pl.DataType] = {
    "eid": I64, "name": STR, "kind": STR, "pid": TEXT, "tid": TEXT, "ts_ns": I64, "dur_ns": I64,
    "end_ns": I64, "op_eid": I64, "op_name": STR, "op_path": STR, "record": STR, "device": I64,
    "stream": I64, "waited_eid": I64, "waited_name": STR, "waited_stream": I64,
    "waited_end_ns": I64,
    "gpu_wait_ns": I64, "tail_ns": I64,
}
SYNC_BY_OP_SCHEMA: dict[str, pl.DataType] = {
    "op_path": STR, "kind": STR, "count": I64, "sync_ns": I64, "gpu_wait_ns": I64,
}
COPY_SCHEMA: dict[str, pl.DataType] = {
    "eid": I64, "kind": STR, "name": STR, "direction": STR, "src": STR, "dst": STR, "host_memory": STR,
    "device": I64, "stream": I64, "ts_ns": I64, "dur_ns": I64, "end_ns": I64, "bytes": I64,
    "bandwidth_gbps": F64, "api": STR, "api_async": BOOL, "host_blocking": BOOL, "op_eid": I64,
    "op_name": STR, "op_path": STR,
}
COPY_KINDS_SCHEMA: dict[str, pl.DataType] = {
    "kind": STR, "direction": STR, "host_memory": STR, "api_async": BOOL, "count": I64, "bytes": I64,
    "dur_ns": I64, "bandwidth_gbps": F64,
}


@dataclass(frozen=True)
class SyncStats:
    """Result of `sync_stats`. Frames are typed even when empty."""

    syncs: pl.DataFrame  # SYNC_SCHEMA: one row per blocking sync call
    by_op: pl.DataFrame  # SYNC_BY_OP_SCHEMA: per (op_path, kind), by blocked time
    sync_calls: int
    sync_ns: int  # summed duration of the blocking calls
    gpu_wait_ns: int  # of which the GPU was still running the work waited for
    tail_ns: int  # of which nothing waited for was running any more
    stream_waits: int  # cudaStreamWaitEvent-like calls (not host-blocking)
    gpu_sync_records: int  # GPU-side cuda_sync rows in the trace


@dataclass(frozen=True)
class CopyStats:
    """Result of `copy_stats`. Frames are typed even when empty."""

    copies: pl.DataFrame  # COPY_SCHEMA: one row per memcpy or memset activity
    kinds: pl.DataFrame  # COPY_KINDS_SCHEMA: per (kind, direction, host memory, async)
    memcpys: int
    memcpy_bytes: int
    memcpy_ns: int
    memsets: int
    pageable: int  # memcpys to or from pageable host memory
    dtod: int  # device-to-device memcpys (often a hidden out-of-place copy)
    sync_api: int  # memcpys issued by a non-async API
    host_blocking: int  # memcpys the host waited for (non-async API or pageable DtoH)


def sync_kind(name: pl.Expr) -> pl.Expr:
    """'device' | 'stream' | 'event' | 'memcpy' for blocking sync calls, else null."""
    expr = pl.when(name.str.contains(SYNC_RULES[0][1])).then(pl.lit(SYNC_RULES[0][0]))
    for kind, pattern in SYNC_RULES[1:]:
        expr = expr.when(name.str.contains(pattern)).then(pl.lit(kind))
    memcpy = name.str.contains(MEMCPY_CALL) & ~name.str.contains("Async")
    return expr.when(memcpy).then(pl.lit("memcpy")).otherwise(pl.lit(None, STR)).alias("kind")


def blocking_copies(trace: Trace) -> pl.Series:
    """The eids of memcpy calls that block although named `…Async`: their copy goes from the
    device to pageable host memory (PAGEABLE_DTOH), which returns only when it is done.
    Call and copy are matched by correlation id."""
    copies = trace.gpu.lazy().filter(
        (pl.col("cat") == "gpu_memcpy") & pl.col("name").str.contains(PAGEABLE_DTOH) & pl.col("correlation").is_not_null()
    ).select("correlation").unique()
    calls = trace.runtime.lazy().filter(pl.col("name").str.contains(MEMCPY_CALL) & pl.col("name").str.contains("Async"))
    return calls.join(copies, on="correlation", how="semi").select("eid").collect(engine=ENGINE)["eid"]


def blocking_call(name: pl.Expr) -> pl.Expr:
    """Host calls, by name, that block until GPU work is done: BLOCKING_CALL, not `…Async…`."""
    return name.str.contains(BLOCKING_CALL) & ~name.str.contains("Async")


def blocking_runtime(trace: Trace, *, blocking: pl.Series | None = None) -> pl.Expr:
    """Runtime rows (`name`, `eid`) that block until GPU work is done: `blocking_call` by
    name (the patterns run on the trace's distinct call names), and the async copies to
    pageable memory (`blocking_copies`: `blocking`, computed when not given)."""
    name = pl.col("name")
    names = trace.runtime.lazy().select(name.unique()).filter(blocking_call(name)).collect(engine=ENGINE)["name"]
    blocking = blocking_copies(trace) if blocking is None else blocking
    return name.is_in(names.implode()) | pl.col("eid").is_in(blocking.implode())


def blocking_intervals(trace: Trace, *, blocking: pl.Series | None = None) -> pl.DataFrame:
    """(pid, tid, ts_ns, end_ns): CPU intervals that block on the GPU: sync API calls,
    synchronous copies (async ones to pageable memory too: `blocking_copies`, given as
    `blocking` or computed), item/nonzero."""
    name = pl.col("name")
    calls = trace.runtime.filter(blocking_runtime(trace, blocking=blocking))
    ops = trace.ops.filter((pl.col("cat") == "cpu_op") & name.str.contains(BLOCKING_OP))
    cols = ["pid", "tid", "ts_ns", "end_ns"]
    return pl.concat([calls.select(cols), ops.select(cols)])


def blocking_kind(trace: Trace, *, blocking: pl.Series | None = None) -> pl.Expr:
    """`sync_kind` of runtime rows, with `blocking_copies` (`blocking`, computed when not
    given) as 'memcpy' too (the rows need `eid`)."""
    blocking = blocking_copies(trace) if blocking is None else blocking
    return pl.coalesce(sync_kind(pl.col("name")),
                       pl.when(pl.col("eid").is_in(blocking.implode())).then(pl.lit("memcpy"))).alias("kind")


def sync_stats(trace: Trace, *, ops: pl.DataFrame | OpTree | None = None, launches: pl.DataFrame | None = None,
               blocking: pl.Series | None = None) -> SyncStats:
    """Every blocking host<->device sync, the op that caused it and the GPU work it waited for.

    ops (`links.op_tree`), launches (`links.launch_ops`), blocking (`blocking_copies`):
    computed when not given."""
    nested = op_tree(trace) if ops is None else tree_of(ops)
    calls = launch_ops(trace, ops=nested) if launches is None else launches
    # one plan to the waited work (the paths need its rows), one after them
    rows = calls.lazy().with_columns(blocking_kind(trace, blocking=blocking)).filter(pl.col("kind").is_not_null())
    rows = _with_waited(_with_records(rows, trace.gpu), trace.gpu_work).collect(engine=ENGINE)
    syncs = rows.lazy().join(_paths(nested, rows).lazy(), on="op_eid", how="left", maintain_order="left").select(
        list(SYNC_SCHEMA)).cast(SYNC_SCHEMA).sort("ts_ns", "eid").collect(engine=ENGINE)
    by_op = syncs.lazy().group_by("op_path", "kind").agg(
        count=pl.len(), sync_ns=pl.col("dur_ns").sum(), gpu_wait_ns=pl.col("gpu_wait_ns").sum(),
    ).cast(SYNC_BY_OP_SCHEMA).sort(["sync_ns", "count", "op_path", "kind"], descending=[True, True, False, False],
                                   nulls_last=True)  # ties in name order: the same table every run
    by_op = by_op.collect(engine=ENGINE)
    return SyncStats(
        syncs=syncs,
        by_op=by_op,
        sync_calls=syncs.height,
        sync_ns=int(syncs["dur_ns"].sum() or 0),
        gpu_wait_ns=int(syncs["gpu_wait_ns"].sum() or 0),
        tail_ns=int(syncs["tail_ns"].sum() or 0),
        stream_waits=int(trace.runtime.select(pl.col("name").str.contains(STREAM_WAIT_CALL).sum()).item() or 0),
        gpu_sync_records=int(trace.gpu.select((pl.col("cat") == "cuda_sync").sum()).item() or 0),
    )


def _paths(nested: OpTree, rows: pl.DataFrame) -> pl.DataFrame:
    return op_paths(nested, rows["op_eid"]).rename({"eid": "op_eid"})


def _with_records(rows: pl.LazyFrame, gpu: pl.DataFrame) -> pl.LazyFrame:
    """Join the GPU-side cuda_sync record (kind, device, stream) by correlation."""
    return rows.join(sync_records(gpu), on="correlation", how="left", maintain_order="left")


def sync_records(gpu: pl.DataFrame) -> pl.LazyFrame:
    """The GPU-side `cuda_sync` record of each correlation id (the first, if it repeats):
    `correlation, record` (its kind: `sync_kind`, else the name), `device, stream`."""
    return (gpu.lazy().filter((pl.col("cat") == "cuda_sync") & pl.col("correlation").is_not_null())
            .unique("correlation", keep="first", maintain_order=True)
            .select("correlation", pl.coalesce("sync_kind", "name").alias("record"), "device", "stream"))


def _with_waited(rows: pl.LazyFrame, work: pl.DataFrame) -> pl.LazyFrame:
    """The latest-ending GPU activity at or before each sync's end (on its stream when known)."""
    right = work.lazy().select(
        "device", pl.col("end_ns").alias("_t"), pl.col("eid").alias("waited_eid"),
        pl.col("name").alias("waited_name"), pl.col("stream").alias("waited_stream"),
        pl.col("end_ns").alias("waited_end_ns"),
    ).sort("_t", "waited_eid")
    left = rows.with_columns(_t=pl.col("end_ns")).sort("_t")
    anywhere = left.join_asof(right.drop("device"), on="_t", strategy="backward", check_sortedness=False)
    known = left.filter((pl.col("kind") == "stream") & pl.col("stream").is_not_null())
    on_stream = known.select("eid", "_t", "device", "stream").join_asof(
        right.with_columns(stream=pl.col("waited_stream")), on="_t", by=["device", "stream"],
        strategy="backward", check_sortedness=False,
    )
    cols = ["waited_eid", "waited_name", "waited_stream", "waited_end_ns"]
    picked = anywhere.join(on_stream.select("eid", *(pl.col(c).alias(f"_s_{c}") for c in cols)),
                           on="eid", how="left", maintain_order="left")
    use_stream = pl.col("_s_waited_eid").is_not_null()
    picked = picked.with_columns(*(pl.when(use_stream).then(f"_s_{c}").otherwise(c).alias(c) for c in cols))
    running = pl.col("waited_end_ns") >= pl.col("ts_ns")
    picked = picked.with_columns(*(pl.when(running).then(c).alias(c) for c in cols))
    return picked.with_columns(
        gpu_wait_ns=(pl.col("waited_end_ns") - pl.col("ts_ns")).fill_null(0),
        tail_ns=(pl.col("end_ns") - pl.col("waited_end_ns")).fill_null(pl.col("dur_ns")),
    ).drop("_t", *(f"_s_{c}" for c in cols))


_COPY_NAME = r"^Memcpy (\w+) \((\w+) -> (\w+)\)"
_SET_NAME = r"^Memset \((\w+)\)"


def copy_stats(trace: Trace, *, ops: pl.DataFrame | OpTree | None = None,
               links: pl.DataFrame | None = None) -> CopyStats:
    """Every memcpy and memset: direction, memory kinds, bytes, bandwidth, API, op path.

    ops (`links.op_tree`), links (`links.gpu_links`): computed when not given."""
    nested = op_tree(trace) if ops is None else tree_of(ops)
    gpu = gpu_links(trace, ops=nested) if links is None else links
    rows = gpu.filter(pl.col("cat").is_in(["gpu_memcpy", "gpu_memset"]))
    rows = _copy_columns(rows)
    rows = rows.join(_paths(nested, rows), on="op_eid", how="left")
    copies = rows.select(list(COPY_SCHEMA)).cast(COPY_SCHEMA).sort("ts_ns", "eid")
    mem = copies.filter(pl.col("kind") == "memcpy")
    return CopyStats(
        copies=copies,
        kinds=_copy_kinds(copies),
        memcpys=mem.height,
        memcpy_bytes=int(mem["bytes"].sum() or 0),
        memcpy_ns=int(mem["dur_ns"].sum() or 0),
        memsets=copies.height - mem.height,
        pageable=int((mem["host_memory"] == "pageable").sum() or 0),
        dtod=int((mem["direction"] == "DtoD").sum() or 0),
        sync_api=int(mem["api_async"].not_().sum() or 0),  # null (no linked call) counts as unknown
        host_blocking=int(mem["host_blocking"].sum() or 0),
    )


def _copy_kinds(copies: pl.DataFrame) -> pl.DataFrame:
    kinds = copies.group_by("kind", "direction", "host_memory", "api_async").agg(
        count=pl.len(), bytes=pl.col("bytes").sum(), dur_ns=pl.col("dur_ns").sum(),
        _known=pl.col("bytes").count(),
    )
    known = (pl.col("dur_ns") > 0) & (pl.col("_known") > 0)
    kinds = kinds.with_columns(bandwidth_gbps=pl.when(known).then(pl.col("bytes") / pl.col("dur_ns")))
    return kinds.select(list(COPY_KINDS_SCHEMA)).cast(COPY_KINDS_SCHEMA).sort(
        ["dur_ns", "kind", "direction", "host_memory", "api_async"], descending=[True, False, False, False, False],
        nulls_last=True)


def _copy_columns(rows: pl.DataFrame) -> pl.DataFrame:
    name = pl.col("name")
    src = name.str.extract(_COPY_NAME, 2)
    dst = pl.coalesce(name.str.extract(_COPY_NAME, 3), name.str.extract(_SET_NAME, 1))
    host = (pl.when(src.is_not_null() & (src != "Device")).then(src)
            .when(dst.is_not_null() & (dst != "Device") & (pl.col("cat") == "gpu_memcpy")).then(dst))
    call = pl.col("launch_name").cast(STR)  # (codes in the GPU links)
    api_async = pl.when(call.is_not_null()).then(call.str.contains("Async"))
    out = rows.with_columns(
        kind=pl.when(pl.col("cat") == "gpu_memset").then(pl.lit("memset")).otherwise(pl.lit("memcpy")),
        direction=name.str.extract(_COPY_NAME, 1), src=src, dst=dst, host_memory=host.str.to_lowercase(),
        bandwidth_gbps=pl.when(pl.col("dur_ns") > 0).then(pl.col("bytes") / pl.col("dur_ns")),
        api=call, api_async=api_async,
    )
    pageable_dtoh = (pl.col("direction") == "DtoH") & (pl.col("host_memory") == "pageable")
    blocking = (pl.col("kind") == "memcpy") & (pl.col("api_async").not_() | pageable_dtoh)
    return out.with_columns(host_blocking=blocking.fill_null(False))
