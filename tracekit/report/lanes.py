"""Intervals for the timeline lanes: GPU streams by kernel class, CPU threads by what they do."""

from __future__ import annotations

import polars as pl

from tracekit.analysis.gaps import BLOCKING_CALL
from tracekit.analysis.taxonomy import classify_names
from tracekit.model import Trace

IV_SCHEMA = {"start_ns": pl.Int64, "end_ns": pl.Int64, "cls": pl.String, "prio": pl.Int64}


def gpu_lanes(trace: Trace, *, t0: int, t1: int, classes: pl.DataFrame | None = None) -> list[tuple[str, str, pl.DataFrame]]:
    """One lane per (device, stream) that has work in [t0, t1], kernels coloured by class.

    classes: `name`, `kernel_class` of the kernels, when known already (an analysis'
    kernel table); else the names are classified here.
    """
    work = trace.gpu_work.select("name", "cat", "device", "stream", "ts_ns", "end_ns").filter(
        (pl.col("end_ns") >= t0) & (pl.col("ts_ns") <= t1))
    if work.is_empty():
        return []
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
    return lanes


def cpu_lanes(trace: Trace, *, t0: int, t1: int, max_lanes: int = 4) -> list[tuple[str, str, pl.DataFrame]]:
    """The busiest CPU threads: ops (cpu), launch calls (launch) and blocking syncs (sync)."""
    ops = trace.ops.select("name", "cat", "pid", "tid", "ts_ns", "end_ns").filter(
        pl.col("cat").is_in(["cpu_op", "user_annotation"]) & ~pl.col("name").str.starts_with("ProfilerStep#")
        & (pl.col("end_ns") >= t0) & (pl.col("ts_ns") <= t1))
    rt = trace.runtime.select("name", "pid", "tid", "ts_ns", "end_ns").filter(
        (pl.col("end_ns") >= t0) & (pl.col("ts_ns") <= t1))
    # runtime calls are launches unless they block; the patterns run on the distinct names
    name = pl.col("name")
    blocking = rt.select(name.unique()).filter(name.str.contains(BLOCKING_CALL) & ~name.str.contains("Async"))["name"]
    sync = name.is_in(blocking.implode())
    rt = rt.with_columns(cls=pl.when(sync).then(pl.lit("sync")).otherwise(pl.lit("launch")),
                         prio=pl.when(sync).then(3).otherwise(2))
    frames = [
        ops.select("pid", "tid", pl.col("ts_ns").alias("start_ns"), "end_ns", cls=pl.lit("cpu"), prio=pl.lit(1, pl.Int64)),
        rt.select("pid", "tid", pl.col("ts_ns").alias("start_ns"), "end_ns", "cls", pl.col("prio").cast(pl.Int64)),
    ]
    iv = pl.concat(frames)
    if iv.is_empty():
        return []
    busiest = (iv.group_by("pid", "tid").agg(total=(pl.col("end_ns") - pl.col("start_ns")).sum())
               .sort(["total", "pid", "tid"], descending=[True, False, False]).head(max_lanes))
    names = {(p, t): n for p, t, n in trace.meta.threads.select("pid", "tid", "name").iter_rows()}
    lanes = []
    for pid, tid, _ in busiest.iter_rows():
        rows = iv.filter((pl.col("pid") == pid) & (pl.col("tid") == tid)).select(list(IV_SCHEMA))
        name = names.get((pid, tid)) or f"thread {tid}"
        lanes.append((f"CPU {_short(name)}", f"process {pid}, thread {tid} ({name})", rows))
    return lanes


def _short(name: str, n: int = 16) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"
