"""Launch statistics: what launching costs the CPU, how long work waits, how deep queues get.

A *launch call* is a runtime or driver API call that enqueues GPU work. Calls are
recognised by name family and prefix, not by a list of four exact names (HTA's mistake,
which finds no launches on AMD or CUDA-graph traces):

| family | names (regex over the call name)                                  |
|--------|-------------------------------------------------------------------|
| graph  | `(cuda|cu|hip)GraphLaunch*`                                       |
| kernel | `(cuda|cu|hip)…Launch…Kernel*` or `…Grid`: `cudaLaunchKernel(ExC)`,        |
|        | `cuLaunchKernel(Ex)` (driver API: cuDNN, Triton), `hipLaunchKernel`,        |
|        | `hip(Ext)ModuleLaunchKernel`, cooperative launches                          |
| memcpy | `(cuda|cu|hip)Memcpy*` (sync and async)                           |
| memset | `(cuda|cu|hip)Memset*`                                            |

Figures (`docs/metrics.md`, "Attribution, launches, syncs and copies", has the long form):
- API time: the call's own duration on the CPU thread.
- latency: first GPU start of the call's work minus the call's end. Negative values are
  counted, never clipped. Work that starts inside the call (a blocking pageable copy, a
  very short queue) is negative without anything being wrong; work that starts before the
  call *began* cannot happen, so those launches are counted apart as clock skew.
- queue depth: per stream, the number of activities launched (call start) and not yet
  finished (GPU end), sampled at each launch, itself included. Work launched before the
  trace began is unknown, so the first depths of a trace are lower bounds.
- graph replays: one `cudaGraphLaunch` correlation id is carried by every kernel of the
  replayed graph; those kernels are counted and attributed to that call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

import polars as pl

from tracekit.analysis.links import gpu_links, launch_ops
from tracekit.analysis.nesting import in_time_order, in_time_order_already
from tracekit.model import ENGINE, GROUPING_ENGINE, TEXT, Trace, constant_columns

I64, F64, STR = pl.Int64, pl.Float64, pl.String

FAMILY_RULES: tuple[tuple[str, str], ...] = (
    ("graph", r"^(cuda|cu|hip)GraphLaunch"),
    ("kernel", r"^(cuda|cu|hip)\w*Launch\w*(Kernel|Grid)|^hipLaunchByPtr"),
    ("memcpy", r"^(cuda|cu|hip)Memcpy"),
    ("memset", r"^(cuda|cu|hip)Memset"),
)
LAUNCH_FAMILIES: tuple[str, ...] = tuple(f for f, _ in FAMILY_RULES)

# the launches' text columns are codes (`model.TEXT`): four bytes a launch where text took a
# 16-byte view, for the rest of a report
LAUNCH_SCHEMA: dict[str, pl.DataType] = {
    "eid": I64, "name": TEXT, "family": TEXT, "pid": TEXT, "tid": TEXT, "ts_ns": I64, "dur_ns": I64,
    "end_ns": I64, "correlation": I64, "op_eid": I64, "op_name": TEXT, "gpu_events": I64, "gpu_ns": I64,
    "device": I64, "stream": I64, "first_gpu_ts_ns": I64, "last_gpu_end_ns": I64, "latency_ns": I64,
}
API_SCHEMA: dict[str, pl.DataType] = {
    "family": STR, "name": STR, "calls": I64, "total_ns": I64, "mean_ns": F64, "median_ns": F64,
    "max_ns": I64, "calls_with_gpu": I64, "gpu_events": I64, "median_latency_ns": F64,
    "negative_latency": I64, "clock_skew": I64,
}
QUEUE_SCHEMA: dict[str, pl.DataType] = {
    "device": I64, "stream": I64, "ts_ns": I64, "eid": I64, "launch_eid": I64, "depth": I64,
}
STREAM_SCHEMA: dict[str, pl.DataType] = {
    "device": I64, "stream": I64, "launched": I64, "max_depth": I64, "mean_depth": F64,
}
GRAPH_SCHEMA: dict[str, pl.DataType] = {
    "eid": I64, "name": STR, "ts_ns": I64, "dur_ns": I64, "op_name": STR, "gpu_events": I64,
    "gpu_ns": I64, "first_gpu_ts_ns": I64, "last_gpu_end_ns": I64, "span_ns": I64, "streams": I64,
}


@dataclass(frozen=True)
class LaunchStats:
    """Result of `launch_stats`. Frames are typed even when empty."""

    launches: pl.DataFrame  # LAUNCH_SCHEMA: one row per launch call
    apis: pl.DataFrame  # API_SCHEMA: one row per launch API name, by total API time
    streams: pl.DataFrame  # STREAM_SCHEMA: queue depth summary per stream
    graphs: pl.DataFrame  # GRAPH_SCHEMA: one row per graph launch
    launch_calls: int
    launch_api_ns: int  # summed API time of the launch calls
    calls_without_gpu: int  # launch calls whose GPU work is not in the trace
    launched_events: int  # GPU work events tied to a launch call
    negative_latency: int  # launch calls whose work starts before the call ends
    clock_skew: int  # launch calls whose work starts before the call starts (clocks disagree)
    median_latency_ns: float | None
    graph_launches: int
    graph_events: int  # GPU events replayed by graph launches
    max_queue_depth: int
    # the GPU links the queue is read from (`links.gpu_links`: the attribution's frame too)
    gpu: pl.DataFrame | None = field(default=None, repr=False, compare=False)
    DERIVED: ClassVar[tuple[str, ...]] = ("queue",)  # what is made on first reading

    @cached_property
    def queue(self) -> pl.DataFrame:
        """QUEUE_SCHEMA: the queue depth per stream at each launched activity, made from the
        GPU links when first read and kept from then on (a report reads `streams` and
        `max_queue_depth` alone, so a report need not hold the queue)."""
        return constant_columns(_queue(self.gpu)) if self.gpu is not None else pl.DataFrame(schema=QUEUE_SCHEMA)


def launch_family(name: pl.Expr) -> pl.Expr:
    """'graph' | 'kernel' | 'memcpy' | 'memset' for launch API names, else null."""
    expr = pl.when(name.str.contains(FAMILY_RULES[0][1])).then(pl.lit(FAMILY_RULES[0][0]))
    for family, pattern in FAMILY_RULES[1:]:
        expr = expr.when(name.str.contains(pattern)).then(pl.lit(family))
    return expr.otherwise(pl.lit(None, STR)).alias("family")


def launch_stats(trace: Trace, *, calls: pl.DataFrame | None = None,
                 gpu: pl.DataFrame | None = None) -> LaunchStats:
    """Launch calls, their API time, latency, queue depth and graph replays.

    `calls` (`links.launch_ops`) and `gpu` (`links.gpu_links`) may be passed when the caller
    already has them; they are computed otherwise. (The compile analysis reads the same
    statistics: `compile_stats(launches=)`.)
    """
    calls = launch_ops(trace) if calls is None else calls
    gpu = gpu_links(trace, launches=calls) if gpu is None else gpu
    return _launch_stats(calls, gpu)


def _launch_stats(calls: pl.DataFrame, gpu: pl.DataFrame) -> LaunchStats:
    # the queue first, read for its summary and let go (`LaunchStats.queue` makes it again
    # when read) before the launches are made: their peaks do not add up
    queue = _queue(gpu)
    streams, max_queue_depth = _streams(queue), int(queue["depth"].max() or 0)  # type: ignore[arg-type]
    del queue
    launches = _launches(calls, gpu)
    graphs = _graphs(launches, gpu)
    lat = launches["latency_ns"].drop_nulls()
    return LaunchStats(
        launches=constant_columns(launches),  # (one process, one device: each held as one value)
        apis=_apis(launches),
        streams=streams,
        graphs=graphs,
        launch_calls=launches.height,
        launch_api_ns=int(launches["dur_ns"].sum() or 0),
        calls_without_gpu=int((launches["gpu_events"] == 0).sum()),
        launched_events=int(gpu["launch_eid"].is_not_null().sum()),
        negative_latency=int((lat < 0).sum()),
        clock_skew=int((launches["first_gpu_ts_ns"] < launches["ts_ns"]).sum()),
        median_latency_ns=float(lat.median()) if lat.len() else None,  # type: ignore[arg-type]
        graph_launches=graphs.height,
        graph_events=int(graphs["gpu_events"].sum() or 0),
        max_queue_depth=max_queue_depth,
        gpu=gpu,
    )


def _launches(calls: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    # lazy: the filters and the sort read only the columns the sums need (eager, each copied
    # every column of the GPU links, and of the calls)
    # each call's first activity in time order: the GPU links come in it (`in_time_order`:
    # sorted only when they do not)
    ordered = gpu.lazy() if in_time_order_already(gpu) else gpu.lazy().sort("ts_ns", "eid")
    work = ordered.filter(pl.col("launch_eid").is_not_null()).group_by("launch_eid").agg(
        gpu_events=pl.len(), gpu_ns=pl.col("dur_ns").sum(), device=pl.col("device").first(),
        stream=pl.col("stream").first(), first_gpu_ts_ns=pl.col("ts_ns").min(),
        last_gpu_end_ns=pl.col("end_ns").max(),
    ).rename({"launch_eid": "eid"})
    # in the calls' order: sorted only when they are not in time order (a sort copies every
    # column of every launch)
    calls_ = calls.lazy().with_columns(family=launch_family(pl.col("name"))).filter(pl.col("family").is_not_null())
    out = calls_.join(work, on="eid", how="left", maintain_order="left").with_columns(
        pl.col("gpu_events", "gpu_ns").fill_null(0),
        latency_ns=pl.col("first_gpu_ts_ns") - pl.col("end_ns"),
    )
    return in_time_order(out.select(list(LAUNCH_SCHEMA)).cast(LAUNCH_SCHEMA).collect(engine=ENGINE))


def _apis(launches: pl.DataFrame) -> pl.DataFrame:
    if launches.is_empty():
        return pl.DataFrame(schema=API_SCHEMA)
    out = launches.lazy().group_by("family", "name").agg(
        calls=pl.len(), total_ns=pl.col("dur_ns").sum(), mean_ns=pl.col("dur_ns").mean(),
        median_ns=pl.col("dur_ns").median(), max_ns=pl.col("dur_ns").max(),
        calls_with_gpu=(pl.col("gpu_events") > 0).sum(), gpu_events=pl.col("gpu_events").sum(),
        median_latency_ns=pl.col("latency_ns").median(), negative_latency=(pl.col("latency_ns") < 0).sum(),
        clock_skew=(pl.col("first_gpu_ts_ns") < pl.col("ts_ns")).sum(),
    ).collect(engine=GROUPING_ENGINE)  # (summed as read: `model.GROUPING_ENGINE`)
    return out.select(list(API_SCHEMA)).cast(API_SCHEMA).sort(["total_ns", "name"], descending=[True, False])


def _queue(gpu: pl.DataFrame) -> pl.DataFrame:
    """Depth per stream at each launched activity: +1 at the call's start, -1 at the GPU end.

    Both ends are inclusive (at equal times a launch is counted before a finish), and an
    activity never finishes before its own launch (skewed ends are moved up to it), so every
    depth is >= 1.
    """
    rows = gpu.select("device", "stream", "eid", "launch_eid", "launch_ts_ns", "end_ns").filter(
        pl.col("launch_ts_ns").is_not_null())
    if rows.is_empty():
        return pl.DataFrame(schema=QUEUE_SCHEMA)
    keys = ["device", "stream"]
    ins = rows.select(*keys, "eid", "launch_eid", t=pl.col("launch_ts_ns"), kind=pl.lit(0), delta=pl.lit(1))
    ends = pl.max_horizontal("end_ns", "launch_ts_ns")
    outs = rows.select(*keys, "eid", "launch_eid", t=ends, kind=pl.lit(1), delta=pl.lit(-1))
    both = pl.concat([ins, outs]).sort([*keys, "t", "kind", "eid"])
    both = both.with_columns(depth=pl.col("delta").cum_sum().over(keys))
    out = both.filter(pl.col("kind") == 0).select(*keys, pl.col("t").alias("ts_ns"), "eid", "launch_eid",
                                                  "depth")
    return out.cast(QUEUE_SCHEMA).sort(["device", "stream", "ts_ns", "eid"])


def _streams(queue: pl.DataFrame) -> pl.DataFrame:
    if queue.is_empty():
        return pl.DataFrame(schema=STREAM_SCHEMA)
    out = queue.group_by("device", "stream").agg(
        launched=pl.len(), max_depth=pl.col("depth").max(), mean_depth=pl.col("depth").mean())
    return out.cast(STREAM_SCHEMA).sort(["device", "stream"])


def _graphs(launches: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    graph = launches.filter(pl.col("family") == "graph")
    if graph.is_empty():
        return pl.DataFrame(schema=GRAPH_SCHEMA)
    streams = gpu.filter(pl.col("launch_eid").is_in(graph["eid"].implode())).group_by("launch_eid").agg(
        streams=pl.struct("device", "stream").n_unique()).rename({"launch_eid": "eid"})
    out = graph.join(streams, on="eid", how="left").with_columns(
        pl.col("streams").fill_null(0), span_ns=pl.col("last_gpu_end_ns") - pl.col("first_gpu_ts_ns"))
    return out.select(list(GRAPH_SCHEMA)).cast(GRAPH_SCHEMA)
