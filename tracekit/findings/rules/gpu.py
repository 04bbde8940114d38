"""Rules about how the GPU spends the window: utilisation, gaps, streams, grids, outliers, FP32."""

from __future__ import annotations

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.gaps import CAUSE_LABELS, CAUSES, LISTED
from tracekit.analysis.intervals import union_ns
from tracekit.analysis.nesting import rows_of
from tracekit.analysis.order import longest_gaps
from tracekit.analysis.taxonomy import TILED_CLASSES, classify_names, is_communication
from tracekit.analysis.timeline import work_rows
from tracekit.findings.context import EVIDENCE_ROWS, Context
from tracekit.findings.registry import Hit, Params, rule
from tracekit.model import ENGINE, TEXT

I64 = pl.Int64


def _device_gaps(ctx: Context) -> pl.DataFrame:
    g = ctx.gaps.gaps.filter(LISTED)
    return g.with_columns(lane=pl.format("device {}", "device"), ts_ns=pl.col("start_ns"), dur_ns=pl.col("gap_ns"),
                          eid=pl.col("next_eid"))


@rule(id="low_gpu_utilisation", severity="medium", loses="gpu_idle",
      title="The GPU is busy less than half of the window (TensorBoard profiler threshold)",
      advice="Find what the GPU waits for (the `gpu_gaps`, `launch_bound` and `sync_in_loop` findings, "
             "`tracekit gaps`): larger batches, fewer host syncs, CUDA graphs or torch.compile for "
             "launch-bound loops, and overlapping data loading with compute.",
      nothing_found="The GPU is busy at least {max_utilisation:.0%} of the window, or the trace has no GPU work.",
      max_utilisation=0.5)
def low_gpu_utilisation(ctx: Context, p: Params) -> Hit | None:
    tl = ctx.step_timeline
    if ctx.trace.gpu_work.is_empty() or tl.utilisation is None or tl.utilisation >= p.max_utilisation:
        return None
    where = "the profiler steps" if tl.window == "ProfilerStep" else "the span of GPU work"
    gaps = longest_gaps(_device_gaps(ctx), head=EVIDENCE_ROWS).with_columns(
        name=pl.format("GPU idle ({}) before {}", "cause", pl.col("next_name").fill_null("the window end")))
    return Hit(title=f"GPU busy only {fmt.pct(tl.utilisation)} of {where} ({fmt.ns(tl.span_ns)}; threshold "
                     f"{fmt.pct(p.max_utilisation, 0)})",
               time_lost_ns=min(tl.idle_ns, ctx.window_ns), evidence=ctx.evidence(gaps))


@rule(id="gpu_gaps", severity="medium", loses="gpu_idle", title="Long stretches with the GPU idle (nsys `gpu_gaps`)",
      advice="Each gap names its cause and the op on the CPU when it opened: remove the sync, move CPU work "
             "(data preparation, logging, checkpointing) off the critical loop, or overlap it with GPU work.",
      nothing_found="No GPU gap of {min_gap} or more (profiler overhead and the first/last gaps excluded).",
      min_gap_ns=1_000_000)
def gpu_gaps(ctx: Context, p: Params) -> Hit | None:
    gaps = _device_gaps(ctx).filter((pl.col("position") == "between") & (pl.col("cause") != "profiler_overhead")
                                    & (pl.col("gap_ns") >= p.min_gap_ns))
    if gaps.is_empty():
        return None
    top = longest_gaps(gaps, head=EVIDENCE_ROWS).with_columns(
        name=pl.format("GPU idle ({}), {}", "cause", pl.coalesce(
            pl.format("blamed on {}", pl.coalesce("blame_op", "annotation")), pl.lit("no CPU op running when it opened"))))
    lost = int(gaps["gap_ns"].sum())
    # the cause with the most of the gaps' time (ties: the first in the order of CAUSES)
    by_cause = dict(gaps.group_by("cause").agg(pl.col("gap_ns").sum()).iter_rows())
    main = max(CAUSES, key=lambda c: (by_cause.get(c, 0), -CAUSES.index(c)))
    head = f"{fmt.counted(gaps.height, 'GPU gap')} of {fmt.ns(p.min_gap_ns)} or more"
    if gaps.height == 1:
        title = f"{head}: {fmt.ns(lost)}, {CAUSE_LABELS[main]}"
    else:
        title = (f"{head}, {fmt.ns(lost)} in all (longest {fmt.ns(int(gaps['gap_ns'].max()))}, "
                 f"mostly {CAUSE_LABELS[main]})")
    return Hit(title=title, time_lost_ns=lost, evidence=ctx.evidence(top))


@rule(id="stream_serialisation", severity="low", loses="gpu_work", title="Work on several streams of a device never overlaps",
      advice="Streams only help when their work can run at the same time: check the events and "
             "`cudaStreamWaitEvent`s that order them (a wait on the wrong event, or a sync in between).",
      nothing_found="No device with busy streams that never overlap (communication kernels are left to "
                    "low_comm_overlap).",
      min_stream_busy_ns=100_000, max_overlap_share=0.01)
def stream_serialisation(ctx: Context, p: Params) -> list[Hit]:
    work = work_rows(ctx.trace)
    work = work.filter(~is_communication(work["name"], classes=ctx.taxonomy))  # see low_comm_overlap
    if work.is_empty():
        return []
    per = union_ns(work, by=["device", "stream"]).filter(pl.col("union_ns") >= p.min_stream_busy_ns)
    busy = per.group_by("device").agg(streams=pl.len(), total=pl.col("union_ns").sum(),
                                      smallest=pl.col("union_ns").min(), largest=pl.col("union_ns").max())
    kept = work.join(per.select("device", "stream"), on=["device", "stream"], how="semi")
    merged = union_ns(kept, by=["device"]).rename({"union_ns": "merged"})
    rows = busy.filter(pl.col("streams") >= 2).join(merged, on="device").with_columns(
        overlap=pl.col("total") - pl.col("merged"))
    rows = rows.filter(pl.col("overlap") <= p.max_overlap_share * pl.col("smallest"))
    hits = []
    for r in rows.iter_rows(named=True):
        first = kept.filter(pl.col("device") == r["device"]).sort("ts_ns").unique("stream", keep="first")
        hits.append(Hit(title=f"Device {r['device']}: {r['streams']} busy streams never overlap "
                              f"({fmt.ns(r['total'])} of work, {fmt.ns(r['overlap'])} overlapped)",
                        time_lost_ns=int(r["total"] - r["largest"]),
                        evidence=ctx.evidence(first.with_columns(dur_ns=pl.col("end_ns") - pl.col("ts_ns")))))
    return hits


@rule(id="tiny_grids", severity="medium", loses="gpu_work", title="Kernels launch fewer blocks than the GPU has SMs",
      advice="A grid smaller than the SM count leaves SMs idle: batch more work per launch (larger batch, "
             "fused or horizontally batched kernels, split-K GEMMs) or run small kernels concurrently.",
      nothing_found="Kernels with fewer blocks than SMs (collectives and persistent kernels aside) take under "
                    "{min_share:.0%} of kernel time.",
      min_share=0.1, persistent_min_sm_share=0.9)
def tiny_grids(ctx: Context, p: Params) -> Hit | None:
    occ = ctx.occupancy.filter(pl.col("sm_efficiency").is_not_null())
    total = int(occ["dur_ns"].sum() or 0)
    small = occ.filter(pl.col("sm_efficiency") < 1)
    if total == 0 or small.is_empty():
        return None
    # collectives use few blocks on purpose, and a persistent kernel's grid is what the
    # device holds at once (`_persistent`): neither is charged, both are named in the title
    comm = small.filter(is_communication(small["name"], classes=ctx.taxonomy))
    rest = small.join(comm.select("eid"), on="eid", how="anti")
    persistent = rest.join(_persistent(ctx, occ, rest, p.persistent_min_sm_share), on=["device", "name"], how="semi")
    tiny = rest.join(persistent.select("eid"), on="eid", how="anti")
    left_out = [f"{fmt.counted(f.height, 'launch', 'launches')} of {what} ({fmt.ns(int(f['dur_ns'].sum()))})"
                for f, what in ((comm, "communication kernels"), (persistent, "persistent kernels")) if f.height]
    if tiny.is_empty() or tiny["dur_ns"].sum() < p.min_share * total:
        return None
    lost = int((tiny["dur_ns"] * (1 - tiny["sm_efficiency"])).sum())
    names = tiny.group_by("name").agg(ns=pl.col("dur_ns").sum(), blocks=pl.col("grid_blocks").median(),
                                      first=pl.col("eid").first()).sort(["ns", "name"], descending=[True, False])
    rows = tiny.join(names.select(eid="first", ns="ns", blocks="blocks"), on="eid").sort(
        ["ns", "eid"], descending=[True, False])
    title = (f"{fmt.pct(tiny['dur_ns'].sum() / total, 0)} of kernel time is in grids smaller than the SM count "
             f"({fmt.counted(tiny.height, 'launch', 'launches')}, {fmt.counted(names.height, 'kernel')})")
    if left_out:
        title += "; not counted: " + " and ".join(left_out)
    return Hit(title=title, time_lost_ns=lost,
               evidence=ctx.evidence(rows, note=lambda r: f"median {fmt.counted(r['blocks'], 'block')}"))


def _persistent(ctx: Context, occ: pl.DataFrame, small: pl.DataFrame, min_sm_share: float) -> pl.DataFrame:
    """(device, name) of the kernels among `small`'s that are persistent: their grid is sized
    to the device, not to the problem, and each block loops over work tiles. Either
    - a launch of the kernel on that device has exactly k x the SM count blocks, k from 1 to
      the kernel's own blocks per SM at once (occupancy's `active_blocks_per_sm`; 1 where not
      known): every block resident at once (Hopper cuBLAS's sm90 GEMMs launch (132,1,1) on
      132 SMs, and (30,4,1) in other launches), or
    - a GEMM, conv or attention kernel keeps one grid of at least `min_sm_share` of the SMs
      while the ops launching it have two or more input shapes (a tiled kernel's grid grows
      with the output: cuBLAS's (30,4,1), 120 blocks on 132 SMs, for six Linear shapes). A
      tiled kernel whose shapes differ in K alone keeps its grid too; at 90 % of the SMs or
      more, leaving one out forgoes under a tenth of its time (CUTLASS 2.x GEMMs of 64 blocks
      on 108 SMs for DLRM's layers stay charged)."""
    keys = small.select("device", "name").unique()
    cand = occ.join(keys, on=["device", "name"], how="semi")
    per_sm = pl.col("grid_blocks_per_sm")
    sized = cand.filter((per_sm >= 1) & (per_sm == per_sm.floor())
                        & (per_sm <= pl.col("active_blocks_per_sm").fill_null(1))).select("device", "name").unique()
    tiled = classify_names(keys["name"], classes=ctx.taxonomy).filter(pl.col("kernel_class").is_in(TILED_CLASSES)).select("name")
    cand = cand.join(tiled, on="name", how="semi").join(sized, on=["device", "name"], how="anti")
    if cand.is_empty():
        return sized
    op = cand.select("eid").join(ctx.links.select("eid", "op_eid"), on="eid", how="left",
                                 maintain_order="left")["op_eid"]
    at = rows_of(ctx.trace.ops, op)
    shape = ctx.trace.ops.select(pl.col("input_dims").gather(at.set(at < 0, None))).to_series()
    fixed = cand.with_columns(_shape=shape.cast(pl.String)).group_by("device", "name").agg(
        grids=pl.col("grid_blocks").n_unique(), shapes=pl.col("_shape").drop_nulls().n_unique(),
        per_sm=pl.col("grid_blocks_per_sm").min(),
    ).filter((pl.col("grids") == 1) & (pl.col("shapes") >= 2) & (pl.col("per_sm") >= min_sm_share))
    return pl.concat([sized, fixed.select("device", "name")])


@rule(id="kernel_outliers", severity="low", loses="gpu_work", title="Calls of the same kernel, grid and shapes much slower than their median",
      advice="Same kernel, same launch grid and input shapes, different time: look at what ran beside the slow "
             "calls (other streams, communication, clock throttling, the profiler), or at shapes the trace does not "
             "record (capture with record_shapes=True).",
      nothing_found="No kernel with calls over median + {mad_k} x MAD among the calls with its grid and shapes (at "
                    "least {min_calls} calls).",
      min_calls=10, mad_k=5.0, min_excess_ratio=0.5, min_share=0.001)
def kernel_outliers(ctx: Context, p: Params) -> Hit | None:
    # calls are compared with those of the same kernel, launch grid and (when the trace has
    # them) input shapes of the op that launched it: one kernel name serves several shapes (a
    # GEMM in every Linear, prefill and decode), each with its own time
    k = ctx.links.lazy().filter(pl.col("cat") == "kernel").select(
        "eid", "name", "device", "stream", "ts_ns", "dur_ns", "grid_x", "grid_y", "grid_z", "op_eid").collect(
        engine=ENGINE)
    at = rows_of(ctx.trace.ops, k["op_eid"])  # (a lookup by eid, not a join with every op)
    # (a gather in a plan: reading the column as a Series would give a constant one its rows
    # for as long as the trace lives, `loader.constants`)
    shape = ctx.trace.ops.select(pl.col("input_dims").gather(at.set(at < 0, None))).to_series()
    k = k.with_columns(_shape=shape)
    # the calls alike as one number: the texts as their codes' numbers (`model.TEXT`), ranked
    # once (three windows over the five columns, names and shapes as text, take about four
    # times the memory)
    same = [pl.col("name").cast(TEXT).to_physical(), "grid_x", "grid_y", "grid_z",
            pl.col("_shape").cast(TEXT).to_physical()]
    k = k.with_columns(_g=pl.struct(same).rank("dense"))
    med = pl.col("dur_ns").median().over("_g")
    k = k.with_columns(_n=pl.len().over("_g"), _med=med).with_columns(
        _mad=(pl.col("dur_ns") - pl.col("_med")).abs().median().over("_g"))
    limit = pl.col("_med") + pl.max_horizontal(p.mad_k * pl.col("_mad"), p.min_excess_ratio * pl.col("_med"))
    out = k.filter((pl.col("_n") >= p.min_calls) & (pl.col("dur_ns") > limit)).with_columns(
        excess=(pl.col("dur_ns") - pl.col("_med")).cast(I64))
    lost = int(out["excess"].sum() or 0)
    if out.is_empty() or ctx.share(lost) < p.min_share:
        return None
    top = out.sort(["excess", "eid"], descending=[True, False])
    title = fmt.agree("{calls} of {kernels} [run|runs] far over [their|its] median, {lost} over[ in all|]", out.height)
    return Hit(title=title.format(calls=fmt.counted(out.height, "kernel call"), lost=fmt.ns(lost),
                                  kernels=fmt.counted(out["name"].n_unique(), "kernel")),
               time_lost_ns=lost, evidence=ctx.evidence(top, note=lambda r: f"median {fmt.ns(int(r['_med']))}"))


@rule(id="fp32_gemm", severity="medium", loses="gpu_work", title="GEMM/conv kernels run in FP32 on CUDA cores",
      advice="Use bf16/fp16 (torch.autocast) or at least TF32 (torch.backends.cuda.matmul.allow_tf32 = True, "
             "torch.set_float32_matmul_precision('high')) so these run on tensor cores.",
      nothing_found="No FP32 (non-tensor-core) GEMM or conv kernels where tensor cores are available, or they "
                    "take under {min_share:.0%} of the window.",
      expected_speedup=4.0, min_share=0.01)
def fp32_gemm(ctx: Context, p: Params) -> Hit | None:
    simt = (pl.col("kernel_class").is_in(["gemm", "conv"]) & (pl.col("tensor_cores") == False)
            & ~pl.col("precision").is_in(["tf32", "fp16", "bf16", "fp8", "int8"]).fill_null(False))
    rows = ctx.links.filter((pl.col("cat") == "kernel") & simt)  # one filter: every column of the few it keeps
    devices = ctx.trace.meta.devices
    has_tc = bool((devices["compute_major"] >= 7).any()) if devices.height else False
    half_inputs = ctx.nested.filter(pl.col("input_types").str.contains("BFloat16|Half").fill_null(False))
    rows = rows if has_tc else rows.join(half_inputs.select(op_eid="eid"), on="op_eid", how="semi")
    gpu_ns = int(rows["dur_ns"].sum() or 0)
    lost = int(gpu_ns * (1 - 1 / p.expected_speedup))
    if rows.is_empty() or ctx.share(gpu_ns) < p.min_share:
        return None
    top = rows.group_by("name").agg(pl.all().first(), ns=pl.col("dur_ns").sum()).sort(
        ["ns", "name"], descending=[True, False])
    return Hit(title=f"FP32 GEMM/conv kernels on CUDA cores take {fmt.ns(gpu_ns)} over "
                     f"{fmt.counted(rows.height, 'launch', 'launches')} "
                     f"({fmt.pct(ctx.share(gpu_ns))} of the window)",
               time_lost_ns=lost, evidence=ctx.evidence(top, note=pl.format("launched by {}", "op_name")))
