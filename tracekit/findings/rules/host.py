"""Rules about the host side: launch-bound loops, the critical path, warm-up, profiler overhead."""

from __future__ import annotations

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.intervals import total_union_ns
from tracekit.analysis.order import longest, longest_gaps
from tracekit.findings.context import EVIDENCE_ROWS, Context
from tracekit.findings.registry import Hit, Params, rule
from tracekit.model import ENGINE, clocks_disagree


@rule(id="launch_bound", severity="high", loses="gpu_idle", title="Short kernels wait on the CPU to launch them",
      advice="The GPU finishes each kernel before the CPU has launched the next: capture the loop in a CUDA "
             "graph (torch.compile(mode='reduce-overhead'), torch.cuda.graphs), fuse small ops "
             "(torch.compile), or give each launch more work (larger batch).",
      nothing_found="No launch-bound stretch: at most {min_kernels} short kernels wait on their launch, or it "
                    "costs under {min_share:.0%} of the window.",
      max_kernel_ns=20_000, min_kernels=20, min_share=0.05)
def launch_bound(ctx: Context, p: Params) -> Hit | None:
    # one plan: the gaps' rows are copied once, those kept (filtered, then joined, they
    # would be copied twice)
    gaps = ctx.gaps.gaps.lazy().filter((pl.col("scope") == "device") & (pl.col("cause") == "launch_bound"))
    kernels = ctx.trace.gpu.lazy().filter(pl.col("cat") == "kernel").select(next_eid="eid", _dur="dur_ns")
    short = gaps.join(kernels, on="next_eid", how="inner", maintain_order="left").filter(
        pl.col("_dur") < p.max_kernel_ns).collect(engine=ENGINE)
    lost = int(short["gap_ns"].sum() or 0)
    if short.height < p.min_kernels or ctx.share(lost) < p.min_share:
        return None
    where = (short.with_columns(_w=pl.coalesce("module", "next_op", "blame_op")).group_by("_w")
             .agg(ns=pl.col("gap_ns").sum()).sort(["ns", "_w"], descending=[True, False], nulls_last=True))
    top = longest_gaps(short, head=EVIDENCE_ROWS).with_columns(
        name=pl.format("GPU waits for the launch of {}", pl.col("next_name")), ts_ns=pl.col("start_ns"),
        dur_ns=pl.col("gap_ns"), lane=pl.format("device {}", "device"), eid=pl.col("next_eid"))
    title = fmt.agree("Launch-bound: {kernels} ([median |]{median}) [wait|waits] on the CPU; the GPU idles {lost} "
                      "[between them, most|before it] in `{where}`", short.height)
    return Hit(title=title.format(kernels=fmt.counted(short.height, "short kernel"), lost=fmt.ns(lost),
                                  median=fmt.ns(short["_dur"].median()), where=where["_w"][0]),
               time_lost_ns=lost, evidence=ctx.evidence(top, note=pl.format("launched by {}", "next_op")))


@rule(id="host_bound_path", severity="high", title="The critical path is mostly host overhead",
      advice="The window's longest chain of dependent work is Python, dispatch and launch calls: CUDA graphs "
             "(torch.compile(mode='reduce-overhead')) remove it; fewer, larger ops shorten it.",
      nothing_found="The critical path is not launch-bound (host overhead under {min_share:.0%}, or another "
                    "class dominates).",
      min_share=0.3)
def host_bound_path(ctx: Context, p: Params) -> Hit | None:
    if clocks_disagree(ctx.trace):  # the path's launch edges span the clocks' offset, not overhead
        return None
    cp = ctx.critical_path
    host = cp.shares["python_overhead"] + cp.shares["launch_overhead"]
    if cp.verdict != "launch-bound" or host < p.min_share:
        return None
    saved = ctx.no_launch_overhead
    if saved is None:
        return None
    host_cls = pl.col("cls").is_in(["python_overhead", "launch_overhead"])
    # host time per context from the path's summary, and the first host piece of the
    # contexts shown (grouping the path's millions of pieces by context is slow)
    top = (cp.by_context.filter(host_cls).group_by("context").agg(ns=pl.col("ns").sum())
           .filter(pl.col("ns") > 0)  # (zero-length pieces of the path hold no host time)
           .sort(["ns", "context"], descending=[True, False]).head(EVIDENCE_ROWS))
    shown = pl.col("context").is_in(top["context"].implode(), nulls_equal=True)
    first = cp.segments.lazy().filter(host_cls & shown).group_by("context").agg(
        ts_ns=pl.col("start_ns").first(), lane=pl.col("lane").first()).cast(
        {"context": pl.String, "lane": pl.String})
    top = top.lazy().join(first, on="context", how="left", nulls_equal=True, maintain_order="left").with_columns(
        name=pl.col("context"), dur_ns=pl.col("ns")).collect()
    return Hit(title=f"Critical path {fmt.pct(host, 0)} host overhead ({cp.sentence}); without launch overhead the "
                     f"window would be ~{fmt.ns(saved.estimate_ns)} instead of {fmt.ns(cp.window_ns)}",
               time_lost_ns=saved.saved_ns,
               evidence=ctx.evidence(top, note=lambda r: f"{fmt.ns(r['ns'])} of host time on the path"))


@rule(id="cold_first_step", severity="low", title="The first profiled step is much slower than the others",
      advice="Warm-up work (CUDA context, cuDNN/cuBLAS autotuning, lazy module loading, compilation, the "
             "caching allocator growing) is in the capture: profile with a warm-up phase "
             "(torch.profiler.schedule(wait=1, warmup=1, active=N)) and leave that step out of comparisons.",
      nothing_found="The first step is within {factor}x of the median step (or fewer than {min_steps} steps).",
      factor=1.5, min_steps=3)
def cold_first_step(ctx: Context, p: Params) -> Hit | None:
    steps = ctx.steps
    if steps.height < p.min_steps:
        return None
    first = int(steps["dur_ns"][0])
    median = float(steps["dur_ns"].slice(1).median())  # type: ignore[arg-type]
    if median <= 0 or first <= p.factor * median:
        return None
    return Hit(title=f"First step {steps['name'][0]} takes {fmt.ns(first)}, {first / median:.1f}x the median "
                     f"step ({fmt.ns(median)})",
               time_lost_ns=int(first - median), evidence=ctx.evidence(steps.head(1).rename({"start_ns": "ts_ns"})))


@rule(id="profiler_overhead", severity="low", title="Profiler overhead distorts the window",
      advice="The profiler's own work (`Activity Buffer Request`, `Buffer Flush`, ...) is in the timeline: "
             "shorten the active window, turn off with_stack/profile_memory/record_shapes when not needed, "
             "and do not read the gaps it causes as the program's.",
      nothing_found="Profiler overhead rows take under {min_share:.0%} of the window.", min_share=0.01)
def profiler_overhead(ctx: Context, p: Params) -> Hit | None:
    rows = ctx.trace.ops.filter(pl.col("cat") == "overhead")
    lost = total_union_ns(rows)
    if rows.is_empty() or ctx.share(lost) < p.min_share:
        return None
    names = rows.group_by("name").agg(ns=pl.col("dur_ns").sum()).sort(["ns", "name"], descending=[True, False])
    title = fmt.agree("{events} ({names}) [cover|covers] {lost} ({share} of the window)", rows.height)
    return Hit(title=title.format(events=fmt.counted(rows.height, "profiler overhead event"), lost=fmt.ns(lost),
                                  names=", ".join(names["name"].head(3)), share=fmt.pct(ctx.share(lost))),
               time_lost_ns=lost, evidence=ctx.evidence(longest(rows)))
