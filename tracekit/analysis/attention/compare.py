"""Attention variants side by side: the closing table of the HF article, from traces.

`compare_attention([(label, result), ...])` gives one row per variant: the backend that
ran, the median kernels (GPU events: kernels, memcpys, memsets, as the article counts
them) per attention call, the median GPU and CPU time per call, the speed-up against the
first variant and short notes ("FP32 sgemm", "hidden memcpy", "mask rebuilt per call",
"CPU time above GPU time", ...).

Speed-up = first variant's median time / this variant's median time, on GPU time when
every variant has GPU work, else on CPU time (`basis` says which). Like is compared with
like (`scope`): the attention core's time (SDPA/flex/library op, eager chain, compiled
region) when every call of every variant has a core, else the whole call's (range or
module) for every variant.

Spread: per repeat (the calls of one `ProfilerStep#N`; each call where there are no steps)
the median time per call, then min / median / max over repeats. Where the larger spread
(max / min) of the row and the baseline is at least the speed-up (or its inverse), the row
says the difference is within the noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.attention.result import AttentionResult
from tracekit.model import Trace

I64, F64, STR = pl.Int64, pl.Float64, pl.String
ROW_SCHEMA: dict[str, pl.DataType] = {
    "variant": STR,
    "backend": STR,
    "calls": I64,
    "kernels_median": F64,
    "gpu_ns_median": F64,
    "cpu_ns_median": F64,
    "repeats": I64,
    "time_min_ns": F64,
    "time_max_ns": F64,
    "spread": F64,
    "speedup": F64,
    "notes": pl.List(STR),
    "path": STR,
}
HEADERS = (
    "variant", "backend", "calls", "kernels/fwd", "GPU/fwd", "CPU/fwd", "min–max (n)", "speed-up", "notes"
)
SCOPES = {"core": "the attention core", "call": "the whole call (range or module)"}


@dataclass(frozen=True)
class AttentionComparison:
    """Result of `compare_attention`: `rows` (ROW_SCHEMA), in the order given."""

    rows: pl.DataFrame
    basis: str  # "gpu" or "cpu": the time the speed-up is computed on
    baseline: str | None  # the first variant
    scope: str = "core"  # "core" or "call": the part of each call that is timed (SCOPES)

    def to_dict(self) -> dict[str, Any]:
        return {
            "basis": self.basis,
            "baseline": self.baseline,
            "scope": self.scope,
            "rows": self.rows.to_dicts(),
        }

    def table_rows(self) -> list[list[str]]:
        """Rows of strings under `HEADERS`."""
        out = []
        for r in self.rows.iter_rows(named=True):
            speed = (
                "–"
                if r["speedup"] is None
                else (
                    "1.00× (baseline)"
                    if r["variant"] == self.baseline and r["speedup"] == 1.0
                    else f"{r['speedup']:.2f}×"
                )
            )
            out.append(
                [
                    r["variant"],
                    r["backend"] or "–",
                    fmt.count(r["calls"]),
                    "–" if r["kernels_median"] is None else f"{r['kernels_median']:g}",
                    fmt.ns(r["gpu_ns_median"]),
                    fmt.ns(r["cpu_ns_median"]),
                    _spread_text(r),
                    speed,
                    "; ".join(_clip(n) for n in r["notes"]),
                ]
            )
        return out


def _spread_text(row: Mapping[str, Any]) -> str:
    if row["time_min_ns"] is None:
        return "–"
    return f"{fmt.ns(row['time_min_ns'])}–{fmt.ns(row['time_max_ns'])} ({row['repeats']})"


def _clip(note: str, width: int = 72) -> str:
    return note if len(note) <= width else note[: width - 1] + "…"


def variant_label(trace: Trace, path: str | None = None, entry: Mapping[str, Any] | None = None) -> str:
    """The variant's name: capture metadata, else the index entry, else the file name."""
    meta = trace.meta.extra.get("tracekit_capture") or {}
    if isinstance(meta, dict):
        for key in ("variant", "attn_implementation_requested"):
            if meta.get(key):
                return str(meta[key])
    if entry and entry.get("variant"):
        return str(entry["variant"])
    name = Path(path or trace.meta.path or "trace").name
    for suffix in (".gz", ".json", ".pt.trace", ".trace"):
        name = name.removesuffix(suffix)
    return name


def notes(result: AttentionResult) -> list[str]:
    """Short notes for the comparison table."""
    calls = result.calls
    if calls.is_empty():
        return ["no attention call found"]
    out = []
    if int(calls["gemm_simt"].sum() or 0) > 0:
        out.append("FP32 sgemm")
    if int(calls["masked_fill_copies"].sum() or 0) > 0:
        out.append("hidden memcpy")
    elif int(calls["memcpys"].sum() or 0) > 0:
        out.append("memcpy inside")
    if calls.filter(pl.col("mask_build_ops") > 0).height * 2 >= calls.height:
        out.append("mask rebuilt per call")
    if "_safe_softmax" in calls["softmax"].drop_nulls().to_list():
        out.append("_safe_softmax")
    gpu, cpu = result.median("gpu_ns"), result.median("cpu_ns")
    if result.has_gpu and gpu is not None and cpu is not None and cpu > gpu:
        out.append("CPU time above GPU time")
    zero = result.occupancy.filter(
        (pl.col("kineto_occupancy_pct") == 0) & (pl.col("theoretical_occupancy") > 0)
    )
    if zero.height:
        out.append(f"Kineto 0 % occupancy (recomputed {fmt.pct(zero['theoretical_occupancy'][0], 0)})")
    if not result.has_gpu:
        out.append("CPU only")
    return out + list(result.warnings)


def compare_attention(
    items: Sequence[tuple[str, AttentionResult]], *, paths: Sequence[str | None] | None = None
) -> AttentionComparison:
    """One row per (label, result), in order; speed-up against the first (see the module doc)."""
    if not items:
        return AttentionComparison(pl.DataFrame(schema=ROW_SCHEMA), "gpu", None)
    basis = "gpu" if all(r.has_gpu for _, r in items) else "cpu"
    scope = "core" if all(_all_cored(r) for _, r in items) else "call"
    prefix = "" if scope == "core" else "range_"
    paths = list(paths) if paths is not None else [None] * len(items)
    rows = []
    for (label, r), path in zip(items, paths, strict=True):
        low, high, repeats = spread(r.calls, f"{prefix}{basis}_ns")
        rows.append(
            {
                "variant": label,
                "backend": r.backend,
                "calls": r.call_count,
                "kernels_median": r.median("gpu_events") if r.has_gpu else None,
                "gpu_ns_median": _median(r.calls, f"{prefix}gpu_ns"),
                "cpu_ns_median": _median(r.calls, f"{prefix}cpu_ns"),
                "repeats": repeats,
                "time_min_ns": low,
                "time_max_ns": high,
                "spread": high / low if low and high else None,
                "notes": notes(r),
                "path": path,
            }
        )
    base = rows[0]
    for row in rows:
        mine, theirs = row[f"{basis}_ns_median"], base[f"{basis}_ns_median"]
        row["speedup"] = theirs / mine if theirs and mine else None
        if row is not base and row["speedup"]:
            row["notes"] = _noise_note(row, base) + row["notes"]
    return AttentionComparison(pl.DataFrame(rows, schema=ROW_SCHEMA), basis, items[0][0], scope)


def _all_cored(result: AttentionResult) -> bool:
    calls = result.calls
    return calls.height > 0 and bool((calls["core_kind"] != "none").all())


def _median(calls: pl.DataFrame, column: str) -> float | None:
    if calls.is_empty() or column not in calls.columns:
        return None
    value = calls[column].drop_nulls().cast(F64).median()
    return float(value) if value is not None else None  # type: ignore[arg-type]


def spread(calls: pl.DataFrame, column: str) -> tuple[float | None, float | None, int]:
    """(min, max, repeats) of the per-repeat median of `column` (a repeat: one profiler step's
    calls; each call is its own repeat where the trace has no steps)."""
    if calls.is_empty() or column not in calls.columns:
        return None, None, 0
    rows = calls.select(
        pl.coalesce(pl.col("step").cast(I64), -1 - pl.col("call_id")).alias("_rep") if "step" in calls.columns
        else (-1 - pl.col("call_id")).alias("_rep"),
        pl.col(column).cast(F64).alias("_t"),
    ).drop_nulls("_t")
    per = rows.group_by("_rep").agg(pl.col("_t").median())
    if per.is_empty():
        return None, None, 0
    return float(per["_t"].min()), float(per["_t"].max()), per.height  # type: ignore[arg-type]


def _noise_note(row: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    """A note where the spread of the row or of the baseline is as large as the speed-up."""
    worst = max(row["spread"] or 1.0, base["spread"] or 1.0)
    gap = max(row["speedup"], 1 / row["speedup"])
    if worst < gap:
        return []
    return [f"within noise: spread ×{worst:.2f} ≥ the ×{gap:.2f} difference"]


def skipped_row(label: str, note: str | None, path: str | None = None) -> dict[str, Any]:
    """A row for a variant the capture skipped (no trace)."""
    return {
        "variant": label,
        "backend": None,
        "calls": 0,
        "kernels_median": None,
        "gpu_ns_median": None,
        "cpu_ns_median": None,
        "repeats": 0,
        "time_min_ns": None,
        "time_max_ns": None,
        "spread": None,
        "speedup": None,
        "notes": [f"skipped: {note}" if note else "skipped"],
        "path": path,
    }


def with_skipped(comparison: AttentionComparison, skipped: Sequence[dict[str, Any]]) -> AttentionComparison:
    """The comparison with rows for skipped variants appended."""
    if not skipped:
        return comparison
    extra = pl.DataFrame(list(skipped), schema=ROW_SCHEMA)
    return AttentionComparison(
        pl.concat([comparison.rows, extra]), comparison.basis, comparison.baseline, comparison.scope
    )
