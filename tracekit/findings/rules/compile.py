"""torch.compile rules, from `analysis.compile.compile_stats` (`Context.compile`, once per
trace, or handed over by `analyse()`): recompiles and compilation inside the trace, and the
compiled regions' own host time where the critical path runs through it."""

from __future__ import annotations

import polars as pl

from tracekit import format as fmt
from tracekit.findings.context import Context
from tracekit.findings.registry import Hit, Params, rule

HOST_CLASSES = ("python_overhead", "cpu_compute")  # the path's host time that is not launching
_RECOMPILED = r"^Torch-Compiled Region: \d+/[1-9]\d*"


@rule(id="compile_recompiles", severity="medium",
      title="torch.compile recompiled a frame, or compiled inside the profiled window",
      advice="Find what changes between calls (torch._logging.set_logs(recompiles=True)): shapes "
             "(mark_dynamic, or pad to a few sizes), Python scalars or globals read in the frame, "
             "requires_grad or dtype changes; warm up before profiling so compilation stays out of the steps.",
      nothing_found="No torch.compile frame recompiled (compile id 0 only) and no compilation inside the trace.")
def compile_recompiles(ctx: Context, p: Params) -> Hit | None:
    c = ctx.compile
    if not c.recompiled_frames and not c.compile_events:
        return None
    parts = []
    if c.recompiled_frames:
        parts.append(fmt.agree("{frames} of {compiled} [were|was] recompiled (a compile id of 1 or more)",
                               c.recompiled_frames).format(frames=fmt.counted(c.recompiled_frames, "compiled frame"),
                                                           compiled=c.compiled_frames))
    if c.compile_events:
        parts.append(f"{fmt.counted(c.compile_events, 'compilation step')} ran inside the trace "
                     f"({fmt.ns(c.compile_ns)})")
    rows = c.regions.filter(pl.col("name").str.contains(_RECOMPILED)).select("eid", "name", "pid", "tid",
                                                                             "ts_ns", "dur_ns")
    return Hit(title="torch.compile: " + "; ".join(parts), time_lost_ns=c.compile_ns,
               evidence=ctx.evidence(rows.sort("ts_ns")))


@rule(id="compile_wrapper_on_path", severity="low",
      title="The host time of torch.compile's regions (guards, wrapper Python) is on the critical path",
      advice="The GPU waits while the compiled region runs its guards and wrapper code: CUDA graphs "
             "(torch.compile(mode='reduce-overhead')) replay the region's kernels in one launch; larger "
             "batches give the GPU more work per call.",
      nothing_found="The critical path spends under {min_share} of the window in compiled regions' host code "
                    "(or the trace has no compiled region).",
      min_share=0.005)
def compile_wrapper_on_path(ctx: Context, p: Params) -> Hit | None:
    c = ctx.compile
    outer = c.regions.filter(pl.col("parent_eid").is_null())
    if outer.is_empty():
        return None
    segs = getattr(ctx.critical_path, "segments", None)
    if segs is None or segs.is_empty():
        return None
    host = segs.lazy().filter(pl.col("cls").cast(pl.String).is_in(HOST_CLASSES)).select(
        "start_ns", "end_ns").collect()
    lost = _overlap_ns(host, _union(outer.select(start_ns="ts_ns", end_ns="end_ns")))
    if lost <= 0 or lost < p.min_share * ctx.window_ns:
        return None
    title = (f"{fmt.ns(lost)} of the critical path is host code inside "
             f"{fmt.counted(outer.height, 'torch.compile region')} ({fmt.ns(c.wrapper_ns)} of their "
             f"{fmt.ns(c.region_cpu_ns)} is not launching)")
    rows = outer.sort("wrapper_ns", "eid", descending=[True, False]).select(
        "eid", "name", "pid", "tid", "ts_ns", "dur_ns", "wrapper_ns")
    return Hit(title=title, time_lost_ns=lost,
               evidence=ctx.evidence(rows, note=lambda r: f"{fmt.ns(r['wrapper_ns'])} not in launch calls"))


def _union(iv: pl.DataFrame) -> pl.DataFrame:
    """The intervals (`start_ns`, `end_ns`) merged where they overlap."""
    iv = iv.sort("start_ns")
    run = (pl.col("start_ns") > pl.col("end_ns").cum_max().shift(1)).fill_null(True).cum_sum()
    return iv.with_columns(_run=run).group_by("_run").agg(pl.col("start_ns").min(), pl.col("end_ns").max())


def _overlap_ns(a: pl.DataFrame, b: pl.DataFrame) -> int:
    """The time the intervals of `a` (disjoint) share with those of `b` (disjoint)."""
    if a.is_empty() or b.is_empty():
        return 0
    both = a.join_where(b.rename({"start_ns": "b0", "end_ns": "b1"}),
                        pl.col("start_ns") < pl.col("b1"), pl.col("end_ns") > pl.col("b0"))
    return int(both.select((pl.min_horizontal("end_ns", "b1") - pl.max_horizontal("start_ns", "b0")).sum()).item() or 0)
