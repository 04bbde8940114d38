"""A distributed job's ranks side by side, the straggler, and the job's one summary row.

Per rank: step time, GPU busy/idle, compute, exposed and total communication, and how
much communication hides under compute (`breakdown`), and its work: compute + memory time
per step when every rank has the same number of steps > 0, else over the whole trace
(`lag_ns` = work - median work).

The straggler is judged by *arrival* at the collectives (`batch.arrivals`): a synchronous
step is decided by the last rank to enter each collective, not by who does the most work.
`wait_ns` is a rank's total wait for the last arrival, `straggler` marks the ranks the job
lost at least 5 % of its lost time to, and the job's `straggler_lag_ns` is that lost time.
When no collective is found on every rank, the work rule stands in: wait_ns = max work -
work, a straggler's lag exceeds STRAGGLER_MIN_LAG of the median work, and straggler_lag_ns
= max work - median work.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.pipeline import Analysis
from tracekit.batch.arrivals import Skew, window_text
from tracekit.batch.schema import IDLE_CAUSES, SEVERITIES

STRAGGLER_MIN_LAG = 0.05
SUM = (
    "events",
    "span_ns",
    "busy_ns",
    "idle_ns",
    *(f"idle_{c}_ns" for c in IDLE_CAUSES),
    "compute_ns",
    "communication_ns",
    "memory_ns",
    "communication_total_ns",
    "kernels",
    "attention_calls",
    *(f"findings_{s}" for s in SEVERITIES),
    "load_warnings",
    "device_count",
)
MAX = ("steps", "warmup_steps", "step_median_ns", "step_cv")
FIRST = (
    "format",
    "trace_name",
    "vendor",
    "model",
    "workload",
    "attn_implementation",
    "dtype",
    "world_size",
    "captured_at_source",
    "tracekit_version",
    "pytorch",
)


def rank_row(a: Analysis, rank: int, values: dict[str, Any]) -> dict[str, Any]:
    """One rank's side-by-side figures (before the straggler columns are added)."""
    keys = (
        "steps",
        "step_median_ns",
        "span_ns",
        "busy_ns",
        "idle_ns",
        "gpu_utilisation",
        "compute_ns",
        "memory_ns",
        "communication_ns",
        "communication_total_ns",
        "critical_path_verdict",
    )
    return {
        "file": Path(a.trace.meta.path).name,
        "rank": rank,
        **{k: values[k] for k in keys},
        "overlap_ns": a.breakdown.overlap_ns,
        "overlap_share": a.breakdown.overlap_share,
    }


def stragglers(ranks: list[dict[str, Any]], skew: Skew | None = None) -> list[dict[str, Any]]:
    """Add work_per_step_ns, lag_ns, wait_ns and straggler to each rank row, and with a
    measured `skew` its arrival columns (wait_ns and straggler then come from arrivals)."""
    if not ranks:
        return ranks
    steps = {r["steps"] for r in ranks}
    per_step = len(steps) == 1 and (next(iter(steps)) or 0) > 0
    frame = pl.DataFrame(ranks).with_columns(
        work_per_step_ns=(pl.col("compute_ns") + pl.col("memory_ns")) // (pl.col("steps") if per_step else 1)
    )
    median, top = frame["work_per_step_ns"].median(), frame["work_per_step_ns"].max()
    frame = frame.with_columns(
        lag_ns=(pl.col("work_per_step_ns") - median).round().cast(pl.Int64),
        wait_ns=(top - pl.col("work_per_step_ns")).cast(pl.Int64),
        straggler=(pl.col("work_per_step_ns") - median) > STRAGGLER_MIN_LAG * median,
    )
    if skew is not None and skew.ranks.height:
        arrivals = skew.ranks.rename({"arrival_wait_ns": "wait_ns", "late": "straggler"})
        frame = frame.drop("wait_ns", "straggler").join(arrivals, on="rank", how="left")
    return frame.to_dicts()


def combine(
    values: list[dict[str, Any]], ranks: list[dict[str, Any]], kernels: pl.DataFrame, skew: Skew | None = None
) -> dict[str, Any]:
    """The job's summary values from its ranks' (see docs/batch.md for each rule)."""
    out: dict[str, Any] = {"kind": "ranks", "rank": None, "ranks": len(values)}
    for key in SUM:
        present = [v[key] for v in values if v.get(key) is not None]
        out[key] = sum(present) if present else None
    for key in MAX:
        present = [v[key] for v in values if v.get(key) is not None]
        out[key] = max(present) if present else None
    for key in FIRST:
        out[key] = next((v[key] for v in values if v.get(key) is not None), None)
    out |= _derived(values, ranks) | _kernel_values(kernels) | _straggler_values(ranks, skew)
    return out


def _derived(values: list[dict[str, Any]], ranks: list[dict[str, Any]]) -> dict[str, Any]:
    span, busy = sum(v["span_ns"] for v in values), sum(v["busy_ns"] for v in values)
    comm = sum(r["communication_total_ns"] for r in ranks)
    overlap = sum(r["overlap_ns"] for r in ranks)
    names = sorted({n for v in values if v.get("devices") for n in v["devices"].split("; ")})
    times = [v["captured_at"] for v in values if v.get("captured_at") is not None]
    found = [v for v in values if v.get("top_finding")]
    notes = sorted({n for v in values if v.get("analysis_notes") for n in v["analysis_notes"].split("; ")})
    return {
        "gpu_utilisation": busy / span if span else None,
        "communication_overlap_share": overlap / comm if comm else None,
        "devices": "; ".join(names) or None,
        "captured_at": min(times) if times else None,
        "attention_backend": _most_common(v.get("attention_backend") for v in values),
        "critical_path_verdict": _most_common(v.get("critical_path_verdict") for v in values),
        "critical_path_share": None,
        "top_finding": found[0]["top_finding"] if found else None,
        "recovered": any(bool(v.get("recovered")) for v in values),
        "analysis_notes": "; ".join(notes) or None,
    }


def _kernel_values(kernels: pl.DataFrame) -> dict[str, Any]:
    """Top kernel and tensor-core share over the kernels of every rank."""
    if kernels.is_empty():
        return {
            "top_kernel": None,
            "top_kernel_class": None,
            "top_kernel_share": None,
            "tensor_core_share": None,
        }
    per = (
        kernels.group_by("name")
        .agg(pl.col("kernel_class").first(), pl.col("tensor_cores").first(), pl.col("total_ns").sum())
        .sort(["total_ns", "name"], descending=[True, False])
    )
    total = per["total_ns"].sum()
    top = per.row(0, named=True)
    mm = per.filter(pl.col("kernel_class").is_in(["gemm", "conv"]))
    mm_total = mm["total_ns"].sum()
    on_tc = mm.filter(pl.col("tensor_cores").fill_null(False))["total_ns"].sum()
    return {
        "top_kernel": top["name"],
        "top_kernel_class": top["kernel_class"],
        "top_kernel_share": top["total_ns"] / total if total else 0.0,
        "tensor_core_share": on_tc / mm_total if mm_total else None,
    }


def _straggler_values(ranks: list[dict[str, Any]], skew: Skew | None) -> dict[str, Any]:
    slow = sorted(r["rank"] for r in ranks if r.get("straggler"))
    measured = skew is not None and skew.collectives.height > 0
    if measured:
        lag: int | None = skew.lost_ns
    else:
        lag = max((r["lag_ns"] for r in ranks if r.get("lag_ns") is not None), default=None)
    return {
        "straggler_ranks": ",".join(map(str, slow)) or None,
        "straggler_lag_ns": lag,
        "arrival_skew_ns": int(skew.collectives["skew_ns"].max()) if measured else None,
        "late_window": window_text(skew.window) if measured else None,
    }


def combine_classes(per_rank: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = [r for rank_rows in per_rank for r in rank_rows]
    if not rows:
        return []
    frame = pl.DataFrame(rows).group_by("kernel_class").agg(pl.col("count").sum(), pl.col("total_ns").sum())
    total = frame["total_ns"].sum()
    frame = frame.with_columns(share=pl.col("total_ns") / total if total else pl.lit(0.0))
    return frame.sort(["total_ns", "kernel_class"], descending=[True, False]).to_dicts()


def _most_common(values: Any) -> Any:
    counts = Counter(v for v in values if v is not None)
    return min(counts, key=lambda v: (-counts[v], str(v))) if counts else None


__all__ = ["rank_row", "stragglers", "combine", "combine_classes"]
