"""One side of a diff: the windows it is aligned by, and one sample per window of everything.

Windows (the alignment unit, `scope`):
- `steps`: every `ProfilerStep#N` CPU range except the warm-up step `windows.windows` flags
  (a first step more than 1.5× slower than the median of the others). Used when *both*
  traces have counted steps.
- `gpu-span`: otherwise each trace is one window: from the first start to the last end of
  its GPU work on any device (one sample per side, so no spread).

What belongs to a window:
- time figures (GPU busy, idle and its causes, the temporal breakdown) are measured inside
  the window by `timeline`, `gaps` and `breakdown` (work clipped to the window), summed over
  devices; `step_ns` is the window's own length (the CPU step: steps tile the wall time);
- GPU activities (kernels, copies) belong to the window in which their launch call started:
  the work the step caused, even when it ran after the step's CPU range ended. Activities
  with no launch call in the trace go by their own start;
- CPU rows (ops, launch calls, blocking syncs) go by their start.
Rows outside every window are not counted (with `gpu-span` everything counts).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.pipeline import Analysis
from tracekit.analysis.attribution import op_instances
from tracekit.analysis.breakdown import breakdown
from tracekit.analysis.gaps import CAUSES, gaps
from tracekit.analysis.intervals import stab
from tracekit.analysis.links import op_tree
from tracekit.analysis.nesting import OpTree
from tracekit.analysis.taxonomy import classify_names
from tracekit.analysis.timeline import timeline
from tracekit.analysis.windows import STEP_NAME, window_bounds
from tracekit.diff.names import kernel_base, kernel_key, op_key

I64, STR = pl.Int64, pl.String
SPAN_EID = -1
WINDOW_SCHEMA = {"window_eid": I64, "window_name": STR, "window_start_ns": I64, "window_end_ns": I64}
IDLE_COLUMNS = tuple(f"idle_{c}_ns" for c in CAUSES)
STEP_VALUES: tuple[str, ...] = (
    "step_ns", "gpu_busy_ns", "gpu_idle_ns", *IDLE_COLUMNS, "compute_ns", "communication_ns", "memory_ns",
    "kernels", "kernel_ns", "gpu_events", "launches", "launch_api_ns", "syncs", "sync_ns",
    "memcpys", "memcpy_bytes", "memcpy_ns", "memsets",
)
KERNEL_VALUES = ("count", "total_ns")
OP_VALUES = ("calls", "cpu_ns", "cpu_self_ns", "gpu_self_ns", "gpu_incl_ns", "kernels_incl")
LAUNCH_VALUES = ("calls", "api_ns")
SYNC_VALUES = ("calls", "blocked_ns", "gpu_wait_ns")
COPY_VALUES = ("count", "bytes", "dur_ns")


@dataclass(frozen=True)
class Profile:
    """Per-window samples of one trace. Long frames: `window_eid`, `key`, values."""

    analysis: Analysis
    scope: str  # steps | gpu-span
    windows: pl.DataFrame  # WINDOW_SCHEMA: the counted windows
    warmup_steps: int  # ProfilerSteps left out as warm-up
    steps: pl.DataFrame  # window_eid + STEP_VALUES, one row per window
    kernels: pl.DataFrame  # window_eid, key, count, total_ns
    kernel_names: pl.DataFrame  # key, base, name (the heaviest raw name), kernel_class
    ops: pl.DataFrame  # window_eid, key, OP_VALUES
    op_names: pl.DataFrame  # key, name
    launches: pl.DataFrame  # window_eid, key (API name), LAUNCH_VALUES
    syncs: pl.DataFrame  # window_eid, key (call name), SYNC_VALUES
    copies: pl.DataFrame  # window_eid, key (activity name), COPY_VALUES

    @property
    def window_ids(self) -> list[int]:
        return self.windows["window_eid"].to_list()


def has_steps(a: Analysis) -> bool:
    return not counted_steps(a).is_empty()


def counted_steps(a: Analysis) -> pl.DataFrame:
    """The ProfilerStep windows minus the warm-up step (WINDOW_SCHEMA)."""
    bounds = window_bounds(a.trace, "ProfilerStep").filter(pl.col("window_name").str.contains(STEP_NAME))
    warm = a.windows.instances.filter(pl.col("warmup")).select(window_eid="eid")
    return bounds.join(warm, on="window_eid", how="anti").unique("window_start_ns", keep="first", maintain_order=True)


def span_window(a: Analysis) -> pl.DataFrame:
    """The whole GPU span as one window (empty trace: a zero-length window at 0)."""
    work = a.trace.gpu_work
    start = work["ts_ns"].min() if work.height else 0
    end = work.select(pl.max_horizontal("ts_ns", "end_ns")).to_series().max() if work.height else 0
    return pl.DataFrame({"window_eid": [SPAN_EID], "window_name": ["GPU span"], "window_start_ns": [start],
                         "window_end_ns": [end]}, schema=WINDOW_SCHEMA)


def profile(a: Analysis, *, scope: str) -> Profile:
    """Samples of every figure per counted window (`scope`: steps | gpu-span)."""
    win = counted_steps(a) if scope == "steps" else span_window(a)
    whole = scope != "steps"
    # what the per-window figures start from, made once: the op tree, and the GPU links and
    # their names' taxonomy (the analysis's attribution keeps the links)
    shared = _Shared(op_tree(a.trace), a.attribution.gpu, classify_names(a.trace.gpu["name"]))
    gpu = shared.links.with_columns(t=pl.coalesce("launch_ts_ns", "ts_ns"))
    work = _assign(gpu, win, at="t", whole=whole)
    kernels, kernel_names = _kernels(work, shared.classes)
    ops, op_names = _ops(a, win, whole, shared)
    launches = _by_name(_assign(a.launches.launches.with_columns(t=pl.col("ts_ns")), win, at="t", whole=whole),
                        calls=pl.len(), api_ns=pl.col("dur_ns").sum())
    syncs = _by_name(_assign(a.syncs.syncs.with_columns(t=pl.col("ts_ns")), win, at="t", whole=whole),
                     calls=pl.len(), blocked_ns=pl.col("dur_ns").sum(), gpu_wait_ns=pl.col("gpu_wait_ns").sum())
    copies = _by_name(work.filter(pl.col("cat").is_in(["gpu_memcpy", "gpu_memset"])),
                      count=pl.len(), bytes=pl.col("bytes").sum(), dur_ns=pl.col("dur_ns").sum())
    steps = _steps(a, win, whole, work, launches, syncs, shared)
    return Profile(analysis=a, scope=scope, windows=win, warmup_steps=int(a.windows.warmup_steps),
                   steps=steps, kernels=kernels, kernel_names=kernel_names, ops=ops, op_names=op_names,
                   launches=launches, syncs=syncs, copies=copies)


def _assign(rows: pl.DataFrame, win: pl.DataFrame, *, at: str, whole: bool) -> pl.DataFrame:
    """`rows` with the `window_eid` their `at` time falls in (dropped when in none)."""
    if whole:
        return rows.with_columns(window_eid=pl.lit(SPAN_EID, I64))
    slices = win.select("window_eid", "window_start_ns", "window_end_ns")
    pairs = stab(rows.filter(pl.col(at).is_not_null()), slices, at=at, start="window_start_ns", end="window_end_ns")
    return pairs.drop("window_start_ns", "window_end_ns")


def _by_name(rows: pl.DataFrame, **aggs: pl.Expr) -> pl.DataFrame:
    out = rows.group_by("window_eid", pl.col("name").alias("key")).agg(**aggs)
    return out.cast({name: I64 for name in aggs}).sort("window_eid", "key")


@dataclass(frozen=True)
class _Shared:
    tree: OpTree
    links: pl.DataFrame
    classes: pl.DataFrame


def _kernels(work: pl.DataFrame, known: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    rows = work.filter(pl.col("cat") == "kernel").with_columns(key=kernel_key(pl.col("name")))
    long = rows.group_by("window_eid", "key").agg(count=pl.len().cast(I64), total_ns=pl.col("dur_ns").sum().cast(I64))
    per_name = rows.group_by("key", "name").agg(_ns=pl.col("dur_ns").sum()).sort("_ns", "name", descending=[True, False])
    names = per_name.unique("key", keep="first").select("key", "name").with_columns(base=kernel_base(pl.col("key")))
    classes = classify_names(names["name"], classes=known).select("name", "kernel_class")
    names = names.join(classes, on="name", how="left").select("key", "base", "name", "kernel_class").sort("key")
    return long.sort("window_eid", "key"), names


def _ops(a: Analysis, win: pl.DataFrame, whole: bool, shared: _Shared) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per window and op key; an instance inside a same-name parent (recursion) adds its call
    and self times but not its total or inclusive GPU time, which the parent already holds."""
    inst = op_instances(a.attribution, a.trace, ops=shared.tree, links=shared.links)
    parents = inst.select(pl.col("eid").alias("parent_eid"), pl.col("name").alias("_parent"))
    inst = inst.join(parents, on="parent_eid", how="left").with_columns(
        _outer=(pl.col("_parent") != pl.col("name")).fill_null(True), key=op_key(pl.col("name")), t=pl.col("ts_ns"))
    rows = _assign(inst, win, at="t", whole=whole)
    outer = pl.col("_outer")
    long = rows.group_by("window_eid", "key").agg(
        calls=pl.len(), cpu_ns=pl.col("dur_ns").filter(outer).sum(), cpu_self_ns=pl.col("self_ns").sum(),
        gpu_self_ns=pl.col("gpu_self_ns").sum(), gpu_incl_ns=pl.col("gpu_incl_ns").filter(outer).sum(),
        kernels_incl=pl.col("kernels_incl").filter(outer).sum(),
    ).cast({v: I64 for v in OP_VALUES})
    names = rows.group_by("key").agg(name=pl.col("name").first()).sort("key")
    return long.sort("window_eid", "key"), names


def _steps(a: Analysis, win: pl.DataFrame, whole: bool, work: pl.DataFrame, launches: pl.DataFrame,
           syncs: pl.DataFrame, shared: _Shared) -> pl.DataFrame:
    out = win.select("window_eid", step_ns=pl.col("window_end_ns") - pl.col("window_start_ns"))
    parts = [
        _time_rows(a, win, whole, shared),
        work.group_by("window_eid").agg(
            kernels=(pl.col("cat") == "kernel").sum(), kernel_ns=pl.col("dur_ns").filter(pl.col("cat") == "kernel").sum(),
            gpu_events=pl.len(), memcpys=(pl.col("cat") == "gpu_memcpy").sum(),
            memcpy_bytes=pl.col("bytes").filter(pl.col("cat") == "gpu_memcpy").sum(),
            memcpy_ns=pl.col("dur_ns").filter(pl.col("cat") == "gpu_memcpy").sum(),
            memsets=(pl.col("cat") == "gpu_memset").sum()),
        launches.group_by("window_eid").agg(launches=pl.col("calls").sum(), launch_api_ns=pl.col("api_ns").sum()),
        syncs.group_by("window_eid").agg(syncs=pl.col("calls").sum(), sync_ns=pl.col("blocked_ns").sum()),
    ]
    for part in parts:
        out = out.join(part, on="window_eid", how="left")
    return out.select("window_eid", *(pl.col(c).fill_null(0).cast(I64) for c in STEP_VALUES))


def _time_rows(a: Analysis, win: pl.DataFrame, whole: bool, shared: _Shared) -> pl.DataFrame:
    """GPU busy, idle by cause and the temporal breakdown per window, summed over devices."""
    if whole:
        tl, g, bd = a.timeline, a.gaps, a.breakdown
    else:
        tl = timeline(a.trace, windows=win)
        g = gaps(a.trace, windows=win, min_gap_ns=a.options.min_gap_ns, links=shared.links, ops=shared.tree)
        bd = breakdown(a.trace, windows=win, classes=shared.classes)
    eid = pl.col("window_eid").fill_null(SPAN_EID)
    busy = tl.devices.group_by(eid).agg(gpu_busy_ns=pl.col("busy_ns").sum(), gpu_idle_ns=pl.col("idle_ns").sum())
    dev = g.totals.filter(pl.col("scope") == "device")
    causes = dev.group_by(eid).agg(
        pl.col("total_ns").filter(pl.col("cause") == c).sum().alias(f"idle_{c}_ns") for c in CAUSES)
    split = bd.devices.group_by(eid).agg(pl.col(c).sum() for c in ("compute_ns", "communication_ns", "memory_ns"))
    out = win.select("window_eid")
    for part in (busy, causes, split):
        out = out.join(part, on="window_eid", how="left")
    return out
