"""The critical path's verdict (`critical_path`): which group of classes holds most of the
window, and the sentence that says so, naming the kernels, context or call that lead it."""

from __future__ import annotations

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.taxonomy import classify_names
from tracekit.model import GROUPING_ENGINE, TEXT

GROUPS: dict[str, tuple[str, ...]] = {
    "gpu-bound": ("gpu_compute", "gpu_memory", "communication"),
    "launch-bound": ("python_overhead", "launch_overhead"),
    "cpu-bound": ("cpu_compute",),
    "sync-bound": ("sync_wait",),
    "idle": ("idle",),
}


def verdict_of(shares: dict[str, float], *, has_gpu: bool, window_ns: int) -> tuple[str, float]:
    if window_ns <= 0:
        return "empty", 0.0
    if not has_gpu:
        return "no-gpu", 1.0 - shares.get("idle", 0.0)
    totals = {v: sum(shares.get(c, 0.0) for c in classes) for v, classes in GROUPS.items()}
    verdict = max(totals, key=lambda v: totals[v])  # ties: the order of GROUPS (GPU first)
    return verdict, totals[verdict]


def _top(segs: pl.DataFrame, classes: tuple[str, ...], col: str = "context") -> str:
    # (one plan: the rows kept are summed as they are found, never copied out first)
    rows = (segs.lazy().filter(pl.col("cls").is_in(classes) & pl.col(col).is_not_null())
            .group_by(col).agg(ns=pl.col("dur_ns").sum()).sort(["ns", col], descending=[True, False])
            .collect(engine=GROUPING_ENGINE))
    return rows[col][0] if rows.height else "(unknown)"


def sentence_of(verdict: str, share: float, shares: dict[str, float], segs: pl.DataFrame, *,
                classes: pl.DataFrame | None = None) -> str:
    p = fmt.pct(share, 0)
    if verdict == "empty":
        return "empty window: nothing to analyse"
    if verdict == "no-gpu":
        return (f"no GPU work in this window: the critical path is host-only (host work {fmt.pct(shares['cpu_compute'], 0)}, "
                f"Python and calls {fmt.pct(shares['python_overhead'] + shares['launch_overhead'], 0)})")
    if verdict == "gpu-bound":
        gpu = segs.select("cls", "name", "dur_ns").filter(pl.col("cls").is_in(GROUPS["gpu-bound"]))
        classes = classify_names(gpu["name"], classes=classes).select(pl.col("name").cast(TEXT), "kernel_class")
        kinds = gpu.join(classes, on="name", how="left").with_columns(pl.col("kernel_class").fill_null("other"))
        lead = _top(kinds, GROUPS[verdict], "kernel_class")
        top = _top(kinds.filter(pl.col("kernel_class") == lead), GROUPS[verdict], "name")
        parts = ", ".join(f"{c.replace('gpu_', '')} {fmt.pct(shares[c], 0)}" for c in GROUPS[verdict] if shares[c] > 0)
        return f"GPU-bound: {p} of the critical path is GPU work ({parts}), led by {lead} kernels (`{_short(top)}`)"
    where = _top(segs, GROUPS[verdict])
    if verdict == "launch-bound":
        return (f"this window is {p} launch-bound: the GPU waits on the host (Python {fmt.pct(shares['python_overhead'], 0)}, "
                f"dispatch and launch calls {fmt.pct(shares['launch_overhead'], 0)}), most of it in `{_short(where)}`")
    if verdict == "cpu-bound":
        return f"this window is {p} CPU-bound: the critical path runs CPU ops that launch no GPU work, most of it in `{_short(where)}`"
    if verdict == "sync-bound":
        call = _top(segs, GROUPS[verdict], "name")
        return (f"this window is {p} sync-bound: the critical path sits in blocking calls (`{_short(call)}`, "
                f"in `{_short(where)}`) after the GPU work they waited for had finished")
    return f"this window is {p} idle: the critical path waits on something the trace does not record"


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"
