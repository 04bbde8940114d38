"""Annotation windows: `record_function` ranges and `ProfilerStep#N`, on the CPU and the GPU.

An *annotation* is a CPU `user_annotation` slice (old traces write `ProfilerStep#N` as a
`cpu_op`: those count too). The GPU twins newer traces write (`gpu_user_annotation`, the
same range widened by 1 ns each side) are never used, so no window is counted twice, and
the last step is kept (HTA drops it).

Per instance (`windows(trace).instances`):
- `cpu_ns`: the annotation's own duration on its thread.
- the work it launched: GPU activities (kernels, memcpys, memsets) whose launch call
  (linked by correlation) started inside the annotation on the same thread. For
  `ProfilerStep#N` every thread of the process counts, because the autograd engine runs
  the backward pass of a training step on its own thread.
- `gpu_start_ns`, `gpu_end_ns`: first start and last end of that work (the GPU
  projection); `gpu_ns` = end - start (null when it launched nothing).
- `gpu_busy_ns`: the union of that work's intervals (its own busy time, overlap between
  streams counted once; other work running meanwhile is not counted).
- `kernels`, `gpu_events`: how many kernels / activities it launched.

Per kind (`stats`, a long frame: one row per kind and metric): a kind is the name with a
trailing `#<digits>` removed, so `ProfilerStep#3` is of kind `ProfilerStep`. Count, mean,
median, min, max and coefficient of variation (population std / mean) of `cpu_ns`,
`gpu_ns` and `gpu_busy_ns` over the instances not flagged as warm-up.

Warm-up: the first instance of a kind (by start) is flagged when its `cpu_ns` is more than
1.5 times the median `cpu_ns` of the other instances (needs at least two instances). When
the kind launches GPU work, only the others that launched some count: the last
`ProfilerStep#N` of many captures is opened as the profiler stops and holds nothing, and
the one real step before it is no warm-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.analysis.intervals import stab_rows, union_ns_plan
from tracekit.analysis.links import gpu_links
from tracekit.model import ENGINE, TEXT, Trace

I64, F64, STR, BOOL = pl.Int64, pl.Float64, pl.String, pl.Boolean
STEP_NAME = r"^ProfilerStep#\d+$"
WARMUP_FACTOR = 1.5

STEP_SCHEMA: dict[str, pl.DataType] = {
    "eid": I64, "name": STR, "step": I64, "pid": TEXT, "tid": TEXT, "start_ns": I64, "end_ns": I64,
    "dur_ns": I64,
}
BOUNDS_SCHEMA: dict[str, pl.DataType] = {
    "window_eid": I64, "window_name": STR, "window_start_ns": I64, "window_end_ns": I64,
}
INSTANCE_SCHEMA: dict[str, pl.DataType] = {
    "eid": I64, "name": STR, "kind": STR, "pid": TEXT, "tid": TEXT, "start_ns": I64, "end_ns": I64,
    "cpu_ns": I64, "gpu_start_ns": I64, "gpu_end_ns": I64, "gpu_ns": I64, "gpu_busy_ns": I64,
    "kernels": I64, "gpu_events": I64, "warmup": BOOL,
}
STATS_SCHEMA: dict[str, pl.DataType] = {
    "kind": STR, "metric": STR, "instances": I64, "warmup": I64, "count": I64, "mean_ns": F64,
    "median_ns": F64, "min_ns": I64, "max_ns": I64, "cv": F64,
}
METRICS = ("cpu_ns", "gpu_ns", "gpu_busy_ns")


def annotations(trace: Trace) -> pl.DataFrame:
    """The CPU annotation slices: `user_annotation` rows and `ProfilerStep#N` `cpu_op` rows."""
    ops = trace.ops
    is_step = pl.col("name").str.contains(STEP_NAME)
    return ops.filter((pl.col("cat") == "user_annotation") | ((pl.col("cat") == "cpu_op") & is_step))


def steps(trace: Trace) -> pl.DataFrame:
    """The `ProfilerStep#N` ranges on the CPU, sorted by start (STEP_SCHEMA); all of them."""
    rows = annotations(trace).filter(pl.col("name").str.contains(STEP_NAME))
    return rows.select(
        "eid", "name", pl.col("name").str.extract(r"#(\d+)$").cast(I64).alias("step"), "pid", "tid",
        pl.col("ts_ns").alias("start_ns"), pl.col("end_ns"), pl.col("dur_ns"),
    ).cast(STEP_SCHEMA).sort("start_ns", "eid")


def window_bounds(trace: Trace, name_or_pattern: str) -> pl.DataFrame:
    """Time windows `[window_start_ns, window_end_ns)` of the annotations matching a name.

    Matching, first rule that finds something: the exact name (`ProfilerStep#3`); the kind
    (`ProfilerStep`: every `ProfilerStep#N`); a regular expression searched in the name.
    Returns BOUNDS_SCHEMA (`window_eid` is the annotation's eid), sorted by start.
    """
    rows = annotations(trace).with_columns(kind=_kind(pl.col("name")))
    for rule in (pl.col("name") == name_or_pattern, pl.col("kind") == name_or_pattern):
        chosen = rows.filter(rule)
        if chosen.height:
            break
    else:
        try:
            chosen = rows.filter(pl.col("name").str.contains(name_or_pattern))
        except pl.exceptions.ComputeError:
            chosen = rows.clear()
    return chosen.select(
        pl.col("eid").alias("window_eid"), pl.col("name").alias("window_name"),
        pl.col("ts_ns").alias("window_start_ns"), pl.col("end_ns").alias("window_end_ns"),
    ).cast(BOUNDS_SCHEMA).sort("window_start_ns", "window_eid")


@dataclass(frozen=True)
class Windows:
    """Result of `windows`. Frames are typed even when empty."""

    instances: pl.DataFrame  # INSTANCE_SCHEMA: one row per annotation instance, by start
    stats: pl.DataFrame  # STATS_SCHEMA: per kind and metric, over the non-warm-up instances
    steps: int  # ProfilerStep instances
    warmup_steps: int  # of which flagged as warm-up (0 or 1)

    def to_dict(self, *, limit: int = 50) -> dict[str, Any]:
        """JSON-ready: counts, the per-kind statistics and the step instances."""
        step_rows = self.instances.filter(pl.col("kind") == "ProfilerStep")
        return {
            "annotations": self.instances.height,
            "kinds": self.instances["kind"].n_unique() if self.instances.height else 0,
            "steps": self.steps,
            "warmup_steps": self.warmup_steps,
            "step_instances": step_rows.head(limit).to_dicts(),
            "stats": self.stats.head(limit * len(METRICS)).to_dicts(),
        }


def windows(trace: Trace, *, name: str | None = None, links: pl.DataFrame | None = None) -> Windows:
    """Every annotation instance (or those matching `name`, as in `window_bounds`)."""
    rows = annotations(trace)
    if name is not None:
        rows = rows.join(window_bounds(trace, name).select(eid="window_eid"), on="eid", how="semi")
    links = gpu_links(trace) if links is None else links
    work = _launched_work(rows, links)
    inst = _instances(rows, work)
    n_steps = inst.filter(pl.col("kind") == "ProfilerStep")
    return Windows(instances=inst, stats=_stats(inst), steps=n_steps.height,
                   warmup_steps=int(n_steps["warmup"].sum() or 0))


def _kind(name: pl.Expr) -> pl.Expr:
    return name.str.replace(r"#\d+$", "")


def _launched_work(rows: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """(eid of the annotation, GPU work row) for work whose launch call started inside it."""
    calls = links.lazy().filter(pl.col("launch_eid").is_not_null()).select(
        pl.col("eid").alias("gpu_eid"), "cat", pl.col("ts_ns").alias("g_ts_ns"),
        pl.col("end_ns").alias("g_end_ns"), pl.col("launch_ts_ns").alias("t"),
        pl.col("launch_pid").alias("c_pid"), pl.col("launch_tid").alias("c_tid"),
    ).collect(engine=ENGINE)
    spans = rows.select("eid", "pid", "tid", "ts_ns", "end_ns", _step=pl.col("name").str.contains(STEP_NAME))
    # the pairs' rows first; the thread test reads the keys alone, and only the pairs kept
    # gather the columns the instances read (every column of both sides gathered, then
    # deduplicated, peaks far higher). Each
    # (annotation, activity) pair comes once: an activity is one row of the links
    p, s = stab_rows(calls, spans, at="t")
    keys = pl.concat([calls.select("c_pid", "c_tid").gather(p), spans.select("pid", "tid", "_step").gather(s)],
                     how="horizontal")
    kept = keys.select((pl.col("c_pid") == pl.col("pid")) & ((pl.col("c_tid") == pl.col("tid")) | pl.col("_step"))
                       ).to_series().fill_null(False)
    del keys
    p, s = p.filter(kept), s.filter(kept)
    return pl.concat([spans.select("eid").gather(s), calls.select("gpu_eid", "cat", "g_ts_ns", "g_end_ns").gather(p)],
                     how="horizontal")


def _instances(rows: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    work_ = work.lazy()
    per = work_.group_by("eid").agg(
        gpu_start_ns=pl.col("g_ts_ns").min(), gpu_end_ns=pl.col("g_end_ns").max(),
        kernels=(pl.col("cat") == "kernel").sum().cast(I64), gpu_events=pl.len().cast(I64),
    )
    busy = union_ns_plan(work_, ["eid"], "g_ts_ns", "g_end_ns", name="gpu_busy_ns")
    out = rows.lazy().select("eid", "name", "pid", "tid", pl.col("ts_ns").alias("start_ns"), "end_ns",
                             pl.col("dur_ns").alias("cpu_ns"), kind=_kind(pl.col("name")))
    out = out.join(per, on="eid", how="left").join(busy, on="eid", how="left").with_columns(
        gpu_ns=pl.col("gpu_end_ns") - pl.col("gpu_start_ns"),
        gpu_busy_ns=pl.col("gpu_busy_ns").fill_null(0), kernels=pl.col("kernels").fill_null(0),
        gpu_events=pl.col("gpu_events").fill_null(0),
    ).sort("start_ns", "eid")
    order = pl.int_range(pl.len()).over("kind")
    # of a kind that launches GPU work, an instance that launched none (the empty
    # `ProfilerStep#N` the profiler opens as it stops) is no measure of a normal step
    gpu_kind = (pl.col("gpu_events") > 0).any().over("kind")
    others = pl.col("cpu_ns").filter((order > 0) & ((pl.col("gpu_events") > 0) | ~gpu_kind)).median().over("kind")
    first_slow = (order == 0) & (pl.len().over("kind") >= 2) & (pl.col("cpu_ns") > WARMUP_FACTOR * others)
    out = out.with_columns(warmup=first_slow.fill_null(False))
    return out.select(list(INSTANCE_SCHEMA)).cast(INSTANCE_SCHEMA).collect(engine=ENGINE)


def _stats(inst: pl.DataFrame) -> pl.DataFrame:
    if inst.is_empty():
        return pl.DataFrame(schema=STATS_SCHEMA)
    inst_ = inst.lazy()
    counts = inst_.group_by("kind").agg(instances=pl.len(), warmup=pl.col("warmup").sum())
    long = inst_.filter(~pl.col("warmup")).unpivot(index="kind", on=list(METRICS), variable_name="metric")
    value = pl.col("value").drop_nulls()
    stats = long.group_by("kind", "metric").agg(
        count=value.count(), mean_ns=value.mean(), median_ns=value.median(), min_ns=value.min(),
        max_ns=value.max(), _std=value.std(ddof=0),
    ).with_columns(cv=pl.when(pl.col("mean_ns") > 0).then(pl.col("_std") / pl.col("mean_ns"))
                   .when(pl.col("mean_ns").is_not_null()).then(0.0))
    out = stats.join(counts, on="kind", how="left").select(list(STATS_SCHEMA)).cast(STATS_SCHEMA)
    first = inst_.group_by("kind").agg(_first=pl.col("start_ns").min())
    metric_order = pl.col("metric").replace_strict({m: i for i, m in enumerate(METRICS)}, return_dtype=I64)
    return out.join(first, on="kind").sort("_first", "kind", metric_order).drop("_first").collect(engine=ENGINE)
