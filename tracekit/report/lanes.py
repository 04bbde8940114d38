"""Intervals for the timeline lanes: GPU streams by kernel class, CPU threads by what they do."""

from __future__ import annotations

import polars as pl

from tracekit.analysis.syncs import blocking_runtime
from tracekit.analysis.taxonomy import classify_names
from tracekit.model import ENGINE, Trace

MAX_GPU_LANES = 32  # streams drawn per timeline: the busiest (a trace may have tens of thousands)
IV_SCHEMA = {"start_ns": pl.Int64, "end_ns": pl.Int64, "cls": pl.String, "prio": pl.Int64}


def gpu_lanes(trace: Trace, *, t0: int, t1: int, classes: pl.DataFrame | None = None,
              max_lanes: int = MAX_GPU_LANES) -> tuple[list[tuple[str, str, pl.DataFrame]], int]:
    """One lane per (device, stream) that has work in [t0, t1], kernels coloured by class,
    for the `max_lanes` streams with the most GPU time in the window; and how many streams
    with work there are left out (each lane costs a row of the page and a pass of drawing).

    classes: `name`, `kernel_class` of the kernels, when known already (an analysis'
    kernel table); else the names are classified here.
    """
    work = trace.gpu_work.select("name", "cat", "device", "stream", "ts_ns", "end_ns").filter(
        (pl.col("end_ns") >= t0) & (pl.col("ts_ns") <= t1))
    if work.is_empty():
        return [], 0
    busy = (work.group_by("device", "stream").agg(total=(pl.col("end_ns") - pl.col("ts_ns")).sum())
            .sort(["total", "device", "stream"], descending=[True, False, False], nulls_last=True))
    hidden = max(busy.height - max_lanes, 0)
    if hidden:
        work = work.join(busy.head(max_lanes).select("device", "stream"), on=["device", "stream"], how="semi",
                         nulls_equal=True)
    if classes is None:
        classes = classify_names(work.filter(pl.col("cat") == "kernel")["name"].unique())
    classes = classes.select("name", "kernel_class")
    work = work.join(classes, on="name", how="left").with_columns(
        cls=pl.when(pl.col("cat") == "gpu_memcpy").then(pl.lit("memcpy"))
        .when(pl.col("cat") == "gpu_memset").then(pl.lit("memset"))
        .otherwise(pl.col("kernel_class").fill_null("other"))
    )
    names = dict(trace.meta.devices.select("id", "name").iter_rows())
    lanes = []
    for (device, stream), rows in sorted(work.group_by("device", "stream"), key=lambda kv: (kv[0][0] or 0, kv[0][1] or 0)):
        iv = rows.select(pl.col("ts_ns").alias("start_ns"), "end_ns", "cls", prio=pl.lit(1, pl.Int64))
        dev = names.get(device) or "GPU"
        lanes.append((f"GPU {device} · stream {stream}", f"{dev}, device {device}, stream {stream}", iv))
    return lanes, hidden


def cpu_lanes(trace: Trace, *, t0: int, t1: int, max_lanes: int = 4) -> list[tuple[str, str, pl.DataFrame]]:
    """The busiest CPU threads: ops (cpu), launch calls (launch) and blocking syncs (sync).

    The threads are ranked on their durations alone; only the chosen threads' rows become
    intervals (lazily filtered: every op and call as one frame of intervals, filtered per
    lane afterwards, is large at once)."""
    window = (pl.col("end_ns") >= t0) & (pl.col("ts_ns") <= t1)
    ops = trace.ops.lazy().filter(
        pl.col("cat").is_in(["cpu_op", "user_annotation"]) & ~pl.col("name").str.starts_with("ProfilerStep#") & window
    ).select("pid", "tid", "ts_ns", "end_ns")
    rt = trace.runtime.lazy().filter(window).select("eid", "name", "pid", "tid", "ts_ns", "end_ns")
    dur = (pl.col("end_ns") - pl.col("ts_ns")).alias("dur")
    busiest = (pl.concat([ops.select("pid", "tid", dur), rt.select("pid", "tid", dur)])
               .group_by("pid", "tid").agg(total=pl.col("dur").sum())
               .sort(["total", "pid", "tid"], descending=[True, False, False]).head(max_lanes).collect(engine=ENGINE))
    if busiest.is_empty():
        return []
    sync = blocking_runtime(trace)  # runtime calls are launches unless they block
    calls = rt.select("pid", "tid", pl.col("ts_ns").alias("start_ns"), "end_ns",
                      cls=pl.when(sync).then(pl.lit("sync")).otherwise(pl.lit("launch")),
                      prio=pl.when(sync).then(3).otherwise(2).cast(pl.Int64))
    work = ops.select("pid", "tid", pl.col("ts_ns").alias("start_ns"), "end_ns", cls=pl.lit("cpu"), prio=pl.lit(1, pl.Int64))
    names = {(p, t): n for p, t, n in trace.meta.threads.select("pid", "tid", "name").iter_rows()}
    plans, labels = [], []
    for pid, tid, _ in busiest.iter_rows():
        mine = (pl.col("pid") == pid) & (pl.col("tid") == tid)
        plans.append(pl.concat([work.filter(mine), calls.filter(mine)]).select(list(IV_SCHEMA)))
        name = names.get((pid, tid)) or f"thread {tid}"
        labels.append((f"CPU {_short(name)}", f"process {pid}, thread {tid} ({name})"))
    return [(*label, rows) for label, rows in zip(labels, pl.collect_all(plans, engine=ENGINE))]


def _short(name: str, n: int = 16) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"
