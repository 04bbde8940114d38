"""One trace's `Analysis` -> the plain values of its batch rows (no I/O, no formatting).

`summary_values` gives the analysis columns of `schema.SUMMARY_SCHEMA` (the source columns
are filled in by the runner); `class_rows` and `finding_rows` the long tables. A figure
whose analysis did not run is None, and `analysis_notes` says why.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
from typing import Any

import polars as pl

from tracekit import __version__
from tracekit.findings.model import Finding
from tracekit.pipeline import Analysis
from tracekit.batch.schema import IDLE_CAUSES, SEVERITIES
from tracekit.model import Trace
from tracekit.report import redact

OPTIONAL = {
    "findings": "tracekit.findings",
    "critical_path": "tracekit.analysis.critical_path",
    "attention": "tracekit.analysis.attention",
}


def summary_values(a: Analysis) -> dict[str, Any]:
    """The analysis columns of one trace's summary row."""
    attention, notes = attention_result(a)
    return {
        "kind": "trace",
        **trace_values(a.trace),
        **step_values(a),
        **time_values(a),
        **kernel_values(a),
        "attention_backend": getattr(attention, "backend", None),
        "attention_calls": getattr(attention, "call_count", None),
        **finding_values(a),
        **critical_path_values(a),
        "analysis_notes": "; ".join([*a.notes, *notes, *rule_errors(a), *missing(a, attention)]) or None,
        "tracekit_version": __version__,
    }


def trace_values(trace: Trace) -> dict[str, Any]:
    m = trace.meta
    cap = m.extra.get("tracekit_capture")
    cap = cap if isinstance(cap, dict) else {}
    model = cap.get("model")
    captured, how = captured_at_us(trace, cap)
    return {
        "format": m.format,
        "events": m.event_count,
        "trace_name": m.trace_name,
        "vendor": m.vendor,
        **device_values(trace, cap),
        "model": str(model.get("id"))
        if isinstance(model, dict) and model.get("id")
        else (str(model) if model else None),
        "workload": workload(cap),
        "attn_implementation": _text(cap.get("attn_implementation")),
        "dtype": _text(cap.get("dtype")),
        "captured_at": captured,
        "captured_at_source": how,
        "rank": m.rank,
        "world_size": m.world_size,
        "ranks": 1,
        "pytorch": is_pytorch(trace),
        "load_warnings": trace.warnings.filter(pl.col("level") == "warning").height,
        "recovered": m.recovered,
    }


def device_values(trace: Trace, cap: dict[str, Any]) -> dict[str, Any]:
    """Names of the devices that ran GPU work (all listed devices when none matches)."""
    used = trace.gpu_work["device"].drop_nulls().unique()
    props = trace.meta.devices
    names = props.filter(pl.col("id").is_in(used.implode()))["name"].drop_nulls().unique().sort().to_list()
    if not names:
        names = props["name"].drop_nulls().unique().sort().to_list()
    gpu = cap.get("gpu")
    if not names and isinstance(gpu, dict) and gpu.get("name"):
        names = [str(gpu["name"])]
    return {"devices": "; ".join(names) or None, "device_count": used.len()}


def is_pytorch(trace: Trace) -> bool:
    """Whether the trace carries Kineto's markers (`schemaVersion`, `deviceProperties`, or
    `cpu_op` / `kernel` events, old capitalised spellings included): a generic Chrome trace
    loads too, but the GPU and step figures of a PyTorch trace do not apply to it."""
    m = trace.meta
    if m.schema_version is not None or m.devices.height:
        return True
    return bool(
        trace.ops.select((pl.col("cat") == "cpu_op").any()).item()
        or trace.gpu.select((pl.col("cat") == "kernel").any()).item()
    )


def workload(cap: dict[str, Any]) -> str | None:
    """`model generate batch=1 prompt_len=32 new_tokens=8`: what the capture ran, in one line."""
    shapes = cap.get("shapes") if isinstance(cap.get("shapes"), dict) else {}
    words = [cap.get("scenario") or cap.get("kind"), cap.get("mode"), cap.get("variant")]
    words += [f"{k}={v}" for k, v in shapes.items()]
    text = " ".join(str(w) for w in words if w not in (None, ""))
    return text or None


# A first timestamp above this many µs (2001-09-09 in epoch µs) is calendar time: older Kineto
# and other tools write absolute epoch µs; offsets from a process or boot start stay far below.
CALENDAR_MIN_US = 10**15


def captured_at_us(trace: Trace, cap: dict[str, Any]) -> tuple[int | None, str | None]:
    """When the trace was taken (µs since the epoch): the capture's `created`, else Kineto's
    `baseTimeNanoseconds` plus the first event's offset, else the first event's `ts` when it
    is calendar time (`CALENDAR_MIN_US`); (None, None) when none of these is there."""
    created = cap.get("created")
    if isinstance(created, str):
        try:
            stamp = dt.datetime.fromisoformat(created)
            stamp = stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)
            return int(stamp.timestamp() * 1_000_000), "capture"
        except ValueError:
            pass
    firsts = [f["ts_ns"].min() for f in (trace.ops, trace.gpu, trace.runtime) if f.height]
    first = min((int(x) for x in firsts if x is not None), default=None)
    base = trace.meta.base_time_ns
    if base > 0:
        return (base + (first or 0)) // 1000, "base_time"
    if first is not None and first // 1000 > CALENDAR_MIN_US:
        return first // 1000, "timestamps"
    return None, None


def step_values(a: Analysis) -> dict[str, Any]:
    stats = a.windows.stats.filter((pl.col("kind") == "ProfilerStep") & (pl.col("metric") == "cpu_ns"))
    median = stats["median_ns"][0] if stats.height else None
    return {
        "steps": a.windows.steps,
        "warmup_steps": a.windows.warmup_steps,
        "step_median_ns": round(median) if median is not None else None,
        "step_cv": stats["cv"][0] if stats.height else None,
    }


def time_values(a: Analysis) -> dict[str, Any]:
    tl, bd = a.timeline, a.breakdown
    out: dict[str, Any] = {
        "span_ns": tl.span_ns,
        "busy_ns": tl.busy_ns,
        "idle_ns": tl.idle_ns,
        "gpu_utilisation": tl.utilisation,
    }
    out |= {f"idle_{c}_ns": int(a.gaps.by_cause.get(c, 0)) for c in IDLE_CAUSES}
    out |= {
        "compute_ns": bd.compute_ns,
        "communication_ns": bd.communication_ns,
        "memory_ns": bd.memory_ns,
        "communication_total_ns": bd.communication_total_ns,
        "communication_overlap_share": bd.overlap_share,
    }
    return out


def kernel_values(a: Analysis) -> dict[str, Any]:
    k = a.kernels
    top = k.row(0, named=True) if k.height else {}
    return {
        "kernels": int(k["count"].sum() or 0),
        "top_kernel": top.get("name"),
        "top_kernel_class": top.get("kernel_class"),
        "top_kernel_share": top.get("share"),
        "tensor_core_share": a.tensor_core_share,
    }


def attention_result(a: Analysis) -> tuple[Any, list[str]]:
    """The attention analysis of the bundle, or run here when the bundle did not run it."""
    if a.attention is not None:
        return a.attention, []
    try:
        from tracekit.analysis.attention import analyze_attention
    except ImportError:
        return None, []
    try:
        return analyze_attention(a.trace), []
    except Exception as exc:  # noqa: BLE001  (one analysis failing must not lose the row)
        return None, [f"attention analysis failed: {type(exc).__name__}: {_one_line(str(exc))}"]


def findings_list(a: Analysis) -> list[Finding] | None:
    """The ranked findings, or None when the findings engine did not run."""
    if a.findings is None:
        return None
    return list(a.findings.findings)


def finding_values(a: Analysis) -> dict[str, Any]:
    items = findings_list(a)
    if items is None:
        return {**{f"findings_{s}": None for s in SEVERITIES}, "top_finding": None}
    severities = [f.severity for f in items]
    counts = {f"findings_{s}": severities.count(s) for s in SEVERITIES}
    return {**counts, "top_finding": items[0].title if items else None}


def critical_path_values(a: Analysis) -> dict[str, Any]:
    cp = a.critical_path
    return {
        "critical_path_verdict": cp.verdict if cp is not None else None,
        "critical_path_share": cp.verdict_share if cp is not None else None,
    }


def rule_errors(a: Analysis) -> list[str]:
    """Findings rules that raised on this trace (the others still ran)."""
    return [
        f"finding rule {rule} failed: {_one_line(str(msg))}"
        for rule, msg in (a.findings.errors if a.findings is not None else ())
    ]


def missing(a: Analysis, attention: Any) -> list[str]:
    """Notes for the optional analyses this tracekit does not have (their columns are null)."""
    results = {"findings": a.findings, "critical_path": a.critical_path, "attention": attention}
    return [
        f"{name}: not available in this tracekit"
        for name, module in OPTIONAL.items()
        if results[name] is None and importlib.util.find_spec(module) is None
    ]


def class_rows(a: Analysis) -> list[dict[str, Any]]:
    """Per kernel class (memcpy and memset included): count, total ns, share of the summed time."""
    return a.classes.select("kernel_class", "count", "total_ns", "share").to_dicts()


def finding_rows(a: Analysis, *, rank: int | None = None) -> list[dict[str, Any]]:
    rows = []
    for f in findings_list(a) or []:
        rows.append(
            {
                "rank": rank,
                "rule": f.rule,
                "severity": f.severity,
                "title": f.title,
                "time_lost_ns": f.time_lost_ns,
                "share": _float(f.share),
                "advice": f.advice,
            }
        )
    return rows


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def scrub_frame(df: pl.DataFrame, secrets: bool = True) -> pl.DataFrame:
    """`df` with `redact.text` (or only `redact.clean`, without `secrets`) applied to every
    string column: once per distinct value, as a table repeats its names."""
    fn = redact.text if secrets else redact.clean
    cols = []
    for name, dtype in df.schema.items():
        if dtype == pl.String:
            values = df[name].drop_nulls().unique().to_list()
            changed = {v: fn(v) for v in values if fn(v) != v}
            if changed:
                cols.append(pl.col(name).replace(changed))
    return df.with_columns(cols) if cols else df
