"""The attention report section: plain data the report builder turns into its model.

`attention_section(result, findings=None) -> dict` with `id`, `title`, `paragraphs` (strings),
`tables` (each `title`, `headers`, `rows`: lists of strings, already formatted) and
`findings` (id, severity, title, time lost as text, advice: from the registered `attention_*`
rules' `Finding`s the caller ran). No arithmetic is left for the renderers; numbers become
text here through `tracekit.format`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tracekit import format as fmt
from tracekit.analysis.attention.result import AttentionResult
from tracekit.findings.model import Finding


def attention_section(
    result: AttentionResult,
    findings: Sequence[Finding] = (),
    *,
    path_share: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Plain data for the report: title, paragraphs, tables (headers, rows of strings), findings.

    `path_share` is `attention.critical_path_share(result, path)` when the caller has a
    critical path; it adds one paragraph.
    """
    paragraphs = _paragraphs(result)
    if path_share and path_share.get("share") is not None and result.call_count:
        paragraphs.append(
            f"On the critical path: {fmt.ns(path_share['attention_ns'])} "
            f"of {fmt.ns(path_share['window_ns'])} "
            f"({fmt.pct(path_share['share'])}; GPU {fmt.ns(path_share['gpu_ns'])}, "
            f"host {fmt.ns(path_share['host_ns'])})."
        )
    return {
        "id": "attention",
        "title": "Attention",
        "paragraphs": paragraphs,
        "tables": [t for t in (_backend_table(result), _phase_table(result), _layer_table(result)) if t],
        "findings": [
            {
                "id": f.rule,
                "severity": f.severity,
                "title": f.title,
                "time_lost": fmt.ns(f.time_lost_ns) if result.has_gpu else "–",  # not timed without GPU work
                "advice": f.advice,
            }
            for f in findings
        ],
    }


def _paragraphs(result: AttentionResult) -> list[str]:
    if result.call_count == 0:
        text = "No attention call was found (no attention ranges, modules, SDPA/flex ops or eager pattern)."
        if result.orphan_kernels:
            ran = fmt.ns(result.orphan_ns)
            text += f" {fmt.counted(result.orphan_kernels, 'attention kernel')} ran ({ran}) with no CPU op."
        return [text]
    evidence = ", ".join(
        f"{e} ({n})" for e, n in result.calls["evidence"].value_counts(sort=True).iter_rows()
    )
    per_layer = (
        f", {result.calls_per_layer:g} per layer over {fmt.counted(result.layers, 'layer')}"
        if result.calls_per_layer is not None
        else ""
    )
    backends = ", ".join(f"{b} ({n})" for b, n in result.backends.items())
    out = [
        f"{fmt.counted(result.call_count, 'attention call')}{per_layer}; evidence: {evidence}.",
        f"Backend that ran: {backends}.",
    ]
    if result.has_gpu:
        text = (
            f"Attention kernels: {fmt.ns(result.attention_gpu_ns)} of {fmt.ns(result.gpu_total_ns)} summed "
            f"GPU work ({fmt.pct(result.gpu_share)})"
        )
        if result.range_gpu_ns != result.attention_gpu_ns:
            text += (
                f"; whole attention calls (projections, rotary, ...): {fmt.ns(result.range_gpu_ns)} "
                f"({fmt.pct(result.range_gpu_share)})"
            )
        out.append(text + ".")
    if result.orphan_kernels:
        out.append(
            fmt.agree("{kernels} ({ns}) [were|was] launched outside every call found (e.g. before the profiled "
                      "window); they are not in the per-call figures.", result.orphan_kernels).format(
                kernels=fmt.counted(result.orphan_kernels, "attention kernel"), ns=fmt.ns(result.orphan_ns))
        )
    out += [f"Warning: {w}." for w in result.warnings]
    return out


def _time(value: Any) -> str:
    return fmt.ns(value) if value is not None else "–"


def _gpu_time(result: AttentionResult) -> Callable[[Any], str]:
    """How a GPU column's value reads: `_time`, or "–" in every row of a trace without GPU
    work (its GPU columns are not measured: docs/attention.md)."""
    return _time if result.has_gpu else (lambda _: "–")


def _backend_table(result: AttentionResult) -> dict[str, Any] | None:
    if result.by_backend.is_empty():
        return None
    gpu = _gpu_time(result)
    rows = [
        [
            r["backend"],
            fmt.count(r["calls"]),
            f"{r['gpu_events_median']:g}",
            gpu(r["gpu_ns_median"]),
            _time(r["cpu_ns_median"]),
        ]
        for r in result.by_backend.iter_rows(named=True)
    ]
    return {
        "title": "Per backend (median per call)",
        "headers": ["backend", "calls", "kernels", "GPU time", "CPU time"],
        "rows": rows,
    }


def _phase_table(result: AttentionResult) -> dict[str, Any] | None:
    if result.by_phase.height < 1 or result.by_phase["phase"].to_list() == ["unknown"]:
        return None
    gpu = _gpu_time(result)
    rows = [
        [
            r["phase"],
            fmt.count(r["calls"]),
            f"{r['gpu_events_median']:g}",
            gpu(r["gpu_ns_median"]),
            _time(r["cpu_ns_median"]),
            gpu(r["launch_api_ns_median"]),
            gpu(r["gpu_ns_total"]),
        ]
        for r in result.by_phase.iter_rows(named=True)
    ]
    return {
        "title": "Per phase (median per call; total GPU)",
        "headers": ["phase", "calls", "kernels", "GPU time", "CPU time", "launch API", "GPU total"],
        "rows": rows,
    }


def _layer_table(result: AttentionResult) -> dict[str, Any] | None:
    if result.by_layer.is_empty():
        return None
    gpu = _gpu_time(result)
    rows = [
        [
            str(r["layer"]),
            fmt.count(r["calls"]),
            r["backend"],
            f"{r['gpu_events_median']:g}",
            gpu(r["gpu_ns_median"]),
            _time(r["cpu_ns_median"]),
        ]
        for r in result.by_layer.iter_rows(named=True)
    ]
    return {
        "title": "Per layer (median per call)",
        "headers": ["layer", "calls", "backend", "kernels", "GPU time", "CPU time"],
        "rows": rows,
    }
