"""The parts of a diff that come from the optional analyses (attention, critical path,
findings) and the notes on what is comparable between the two traces.

The optional results are read by attribute, so a side whose analysis did not run (None)
simply contributes no row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.pipeline import Analysis
from tracekit.model import TraceMeta

I64, F64, STR = pl.Int64, pl.Float64, pl.String
SIDES = ("before", "after")
ATTENTION_SCHEMA = {"side": STR, "backend": STR, "calls": I64, "kernels_per_call": F64, "gpu_per_call_ns": F64,
                    "cpu_per_call_ns": F64}
CRITICAL_SCHEMA = {"side": STR, "verdict": STR, "verdict_share": F64, "sentence": STR}
FINDINGS_SCHEMA = {"rule": STR, "title": STR, "severity": STR, "status": STR, "count_before": I64,
                   "count_after": I64, "time_lost_before_ns": I64, "time_lost_after_ns": I64, "advice": STR,
                   "evidence": pl.List(STR)}
EVIDENCE = 3  # evidence lines carried per rule
HARDWARE_NOTE = "absolute times differ by hardware; compare shapes of the profile"


@dataclass(frozen=True)
class Side:
    """What one trace is: the facts the comparability notes and the report header need."""

    label: str  # file name
    path: str
    devices: tuple[str, ...]  # distinct device names (deviceProperties)
    format: str
    schema_version: int | None
    rank: int | None
    world_size: int | None
    steps: int  # counted windows (steps after warm-up, or 1 for the GPU span)
    warmup_steps: int
    warnings: tuple[str, ...] = ()  # what the loader noticed, and analyses that could not run
    meta: TraceMeta | None = field(default=None, repr=False, compare=False)  # for the report's metadata

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "meta"} | {"devices": list(self.devices),
                                                                        "warnings": list(self.warnings)}


def attention(before: Analysis, after: Analysis) -> pl.DataFrame:
    """Backend and kernels per call on each side (ATTENTION_SCHEMA; no row for a side
    without attention calls or without the attention analysis)."""
    rows = [r for r in (_attention_row(x, s) for x, s in zip((before, after), SIDES)) if r]
    return pl.DataFrame(rows, schema=ATTENTION_SCHEMA, orient="row") if rows else pl.DataFrame(schema=ATTENTION_SCHEMA)


def _attention_row(a: Analysis, side: str) -> dict[str, Any] | None:
    r = a.attention
    if r is None or not getattr(r, "call_count", 0):
        return None
    med = getattr(r, "median", lambda _m: None)
    return {"side": side, "backend": getattr(r, "backend", None), "calls": int(r.call_count),
            "kernels_per_call": _float(med("gpu_events")), "gpu_per_call_ns": _float(med("gpu_ns")),
            "cpu_per_call_ns": _float(med("cpu_ns"))}


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def critical_path(before: Analysis, after: Analysis) -> pl.DataFrame:
    """The critical-path verdict of each side (CRITICAL_SCHEMA)."""
    rows = []
    for a, side in zip((before, after), SIDES):
        cp = a.critical_path
        if cp is not None and getattr(cp, "verdict", None):
            rows.append({"side": side, "verdict": str(cp.verdict), "verdict_share": _float(getattr(cp, "verdict_share", None)),
                         "sentence": str(getattr(cp, "sentence", ""))})
    return pl.DataFrame(rows, schema=CRITICAL_SCHEMA, orient="row") if rows else pl.DataFrame(schema=CRITICAL_SCHEMA)


# a persisting finding is `worse` when the time it loses grew this many times, and by this
# much at least (totals over each trace: under a millisecond is left to the table)
WORSE_FACTOR = 2.0
WORSE_MIN_NS = 1_000_000


def findings(before: Analysis, after: Analysis) -> pl.DataFrame:
    """Findings by rule id: `introduced` (after only), `worse` (both, and the time it loses
    grew at least WORSE_FACTOR times and by WORSE_MIN_NS), `resolved` (before only, and the
    rule ran on after), `persisting` (both otherwise), `not checked` (before only; the rule
    did not run on after). Empty when either side has no findings result."""
    if before.findings is None or after.findings is None:
        return pl.DataFrame(schema=FINDINGS_SCHEMA)
    b = _finding_rows(before.findings).rename(
        {"count": "count_before", "ns": "time_lost_before_ns", "title": "title_b", "severity": "severity_b",
         "advice": "advice_b", "evidence": "evidence_b"})
    a = _finding_rows(after.findings).rename({"count": "count_after", "ns": "time_lost_after_ns"})
    j = b.join(a, on="rule", how="full", coalesce=True)
    ran = list(getattr(after.findings, "ran", ()) or ())
    in_b, in_a = pl.col("count_before").fill_null(0) > 0, pl.col("count_after").fill_null(0) > 0
    grew = ((pl.col("time_lost_after_ns") >= WORSE_FACTOR * pl.col("time_lost_before_ns"))
            & (pl.col("time_lost_after_ns") - pl.col("time_lost_before_ns") >= WORSE_MIN_NS))
    status = (pl.when(in_b & in_a & grew).then(pl.lit("worse"))
              .when(in_b & in_a).then(pl.lit("persisting")).when(in_a).then(pl.lit("introduced"))
              .when(pl.lit(bool(ran)) & ~pl.col("rule").is_in(ran)).then(pl.lit("not checked"))
              .otherwise(pl.lit("resolved")))
    out = j.with_columns(title=pl.coalesce("title", "title_b"), severity=pl.coalesce("severity", "severity_b"),
                         advice=pl.coalesce("advice", "advice_b"), evidence=pl.coalesce("evidence", "evidence_b"),
                         status=status)
    out = out.with_columns(pl.col(c).fill_null(0) for c in ("count_before", "count_after", "time_lost_before_ns",
                                                            "time_lost_after_ns"))
    order = {"introduced": 0, "worse": 1, "resolved": 2, "persisting": 3, "not checked": 4}
    return out.select(list(FINDINGS_SCHEMA)).cast(FINDINGS_SCHEMA).sort(
        pl.col("status").replace_strict(order, return_dtype=I64), "rule")


def evidence_text(e: Any) -> str:
    """One evidence event as a line to find it by: name, time on Perfetto's axis, lane."""
    at = f" at {float(e.rel_us) / 1000:,.3f} ms" if getattr(e, "rel_us", None) is not None else ""
    lane = f" on {e.lane}" if getattr(e, "lane", "") else ""
    note = f" ({e.note})" if getattr(e, "note", "") else ""
    return f"{e.name}{at}{lane}{note}"


def _finding_rows(result: Any) -> pl.DataFrame:
    """Per rule id: title, severity, advice and evidence of its first (costliest) finding, how
    many, time lost summed."""
    items = [{"rule": str(getattr(f, "rule", "")), "title": str(getattr(f, "title", "")),
              "severity": str(getattr(f, "severity", "info")), "ns": int(getattr(f, "time_lost_ns", 0) or 0),
              "advice": str(getattr(f, "advice", "") or ""),
              "evidence": [evidence_text(e) for e in tuple(getattr(f, "evidence", ()) or ())[:EVIDENCE]]}
             for f in (getattr(result, "findings", None) or ())]
    schema = {"rule": STR, "title": STR, "severity": STR, "ns": I64, "advice": STR, "evidence": pl.List(STR)}
    rows = pl.DataFrame(items, schema=schema, orient="row") if items else pl.DataFrame(schema=schema)
    return rows.group_by("rule", maintain_order=True).agg(
        title=pl.col("title").first(), severity=pl.col("severity").first(), count=pl.len().cast(I64),
        ns=pl.col("ns").sum(), advice=pl.col("advice").first(), evidence=pl.col("evidence").first())


def comparability(before: Side, after: Side, *, scope: str) -> tuple[bool, list[str]]:
    """(same hardware, notes on what is and is not comparable)."""
    notes: list[str] = []
    same = before.devices == after.devices
    if not same:
        names = " vs ".join(", ".join(s.devices) or "unknown device" for s in (before, after))
        notes.append(f"Different hardware ({names}): {HARDWARE_NOTE} (which kernels and ops take the time, "
                     "idle causes, kernels per step).")
    if (before.format, before.schema_version) != (after.format, after.schema_version):
        notes.append(f"Different trace schemas ({_schema(before)} vs {_schema(after)}): figures are computed the "
                     "same way, but older Kineto versions record less (no cuda_sync records, no GPU step "
                     "annotations), so counts of those events are not comparable.")
    if (before.world_size or 1) != (after.world_size or 1):
        notes.append(f"Different job sizes ({_rank(before)} vs {_rank(after)}): communication time depends on "
                     "the number of ranks.")
    if scope != "steps":
        notes.append("At least one trace has no profiler steps after warm-up: each trace is compared as one "
                     "window over its whole GPU span, so per-step figures are whole-trace figures and no "
                     "spread is available (significance unknown).")
    return same, notes


def _schema(s: Side) -> str:
    return s.format + (f" schema {s.schema_version}" if s.schema_version is not None else "")


def _rank(s: Side) -> str:
    return f"rank {s.rank} of {s.world_size}" if s.world_size else "single process"


def side(a: Analysis, *, steps: int) -> Side:
    m = a.trace.meta
    names = tuple(sorted({n for n in m.devices["name"].to_list() if n}))
    warnings = [f"[{w['level']}] {w['message']}" for w in a.trace.warnings.iter_rows(named=True)] + list(a.notes)
    return Side(label=Path(m.path).name or "trace", path=m.path, devices=names, format=m.format,
                schema_version=m.schema_version, rank=m.rank, world_size=m.world_size, steps=steps,
                warmup_steps=int(a.windows.warmup_steps), warnings=tuple(warnings), meta=m)
