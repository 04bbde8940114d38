"""`build_diff_report(diff) -> Report`: a `TraceDiff` as the report model the shared templates
and renderers read (HTML via `report.html.j2`, Markdown, JSON). Every number is formatted
here; the renderers only lay the values out."""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit import __version__
from tracekit import format as fmt
from tracekit.analysis.gaps import CAUSE_LABELS
from tracekit.diff import markdown, stats
from tracekit.diff.cells import SUMMARY_COLUMNS, delta_table, sig_text, summary_rows, value
from tracekit.diff.core import TraceDiff
from tracekit.diff.extras import Side
from tracekit.render.html import render_page
from tracekit.render.json import render_json
from tracekit.report.model import Bar, BarChart, Card, Finding, Report, Section, Table, for_display
from tracekit.report.redact import flatten, redact, scrub

NOISE_RULE = (f"A change counts as beyond the noise when the spreads of the two sides do not overlap (spread: the "
              f"interquartile range with at least {stats.IQR_MIN_SAMPLES} steps, else min–max); with one sample "
              "per side it is unknown.")
KERNEL_COLUMNS = [
    ("label", "kernel", "text"), ("status", "status", "text"), ("count", "calls/step", "pair:count"),
    ("total_ns_before", "time/step before", "ns"), ("total_ns_after", "time/step after", "ns"),
    ("total_ns_delta", "Δ time/step", "dns"), ("total_ns_delta_pct", "Δ %", "dpct"), ("mean_ns", "mean/call", "pair:ns"),
]
ONE_SIDE_COLUMNS = {side: [
    ("label", "kernel", "text"), ("kernel_class", "class", "text"), (f"count_{side}", "calls/step", "count"),
    (f"total_ns_{side}", "time/step", "ns"), (f"mean_ns_{side}", "mean/call", "ns"),
] for side in ("before", "after")}
SIG = ("total_ns_significant", "total_ns_delta")


def build_diff_report(d: TraceDiff, *, top: int = 30, redact_metadata: bool = True, full_path: bool = False) -> Report:
    """The report model of a diff (see the module docstring): every string redacted
    (`redact.scrub`) unless `redact_metadata` is False; the traces named by file name
    unless `full_path`."""
    secs = [
        _summary_section(d), _kernel_section(d, top), _idle_section(d), _ops_section(d, top),
        _launch_section(d, top), _windows_section(d, top), _attention_section(d), _critical_section(d),
        _findings_section(d), _comparable_section(d),
    ]
    b, a = d.before, d.after
    model = Report(
        title=f"tracekit diff: {b.label} → {a.label}",
        subtitle=f"{_devices(b)} → {_devices(a)} · {_scope(d)}",
        verdict=d.verdict, facts=_facts(d, full_path), cards=_cards(d), findings=_introduced(d),
        sections=[s for s in secs if s is not None],
        metadata=_metadata(b, "before", redact_metadata) + _metadata(a, "after", redact_metadata),
        warnings=[f"before: {w}" for w in b.warnings] + [f"after: {w}" for w in a.warnings],
        perfetto=[(f"Open https://ui.perfetto.dev in two browser tabs and load {b.label} in one and {a.label} in "
                   "the other (the traces stay on your machine)."),
                  "Use the step and kernel names in the tables above to find the same place in both traces."],
        generator=f"tracekit {__version__}",
        extra={"kind": "diff", "verdict_parts": list(d.verdict_parts), "headline": d.headline.to_dict(), "comparable": d.comparable,
               "comparable_reason": d.comparable_reason, "same_hardware": d.same_hardware,
               "similarity": d.similarity.to_dict() if d.similarity else None,
               "configuration_changes": [vars(c) for c in d.changes], "scope": d.scope,
               "findings_title": "New and worse findings (after against before)",
               "findings_empty": "No new or worse findings: the after trace shows no problem the before trace did "
                                 "not, and none it shares loses twice the time it did."},
    )
    return scrub(model, redact_metadata)


def render_diff(model: Report, kind: str) -> str:
    """`kind`: html | md | json; the pages' strings clipped for display (`for_display`)."""
    if kind == "html":
        return render_page("report.html.j2", report=for_display(model))
    if kind == "md":
        return markdown.render(for_display(model))
    return render_json(model)


def _devices(s: Side) -> str:
    return ", ".join(s.devices) or "no device properties"


def _scope(d: TraceDiff) -> str:
    if d.scope == "steps":
        return f"median per step over {d.before.steps} vs {d.after.steps} profiler steps"
    return "whole GPU span of each trace (no profiler steps)"


def _facts(d: TraceDiff, full_path: bool = False) -> list[tuple[str, str]]:
    out = []
    for name, s in (("before", d.before), ("after", d.after)):
        warm = f" (+{s.warmup_steps} warm-up left out)" if s.warmup_steps else ""
        steps = f"{fmt.counted(s.steps, 'step')}{warm}" if d.scope == "steps" else "no profiler steps compared"
        rank = f", rank {s.rank} of {s.world_size}" if s.world_size else ""
        out.append((name, f"{s.path if full_path else s.label} · {_devices(s)}{rank} · {s.format} · {steps}"))
    out += [("aligned by", _scope(d)), ("metric", d.headline.label), ("noise rule", NOISE_RULE),
            ("hardware", "same device names" if d.same_hardware else "different: absolute times differ by hardware; "
             "compare shapes of the profile")]
    if d.similarity is not None and d.similarity.score is not None:
        sim = d.similarity
        out.append(("similarity", f"{sim.score:.2f} ({sim.basis} time in families both sides run; below "
                                  f"{sim.threshold:g} the workloads count as unrelated)"))
    return out


def _figure(d: TraceDiff, figure: str) -> dict[str, Any]:
    return d.summary.filter(pl.col("figure") == figure).row(0, named=True)


def _tone(r: dict[str, Any]) -> str:
    if not r["significant"] or not r["delta"]:
        return "neutral"
    return "bad" if r["delta"] > 0 else "good"


def _card(label: str, r: dict[str, Any], kind: str = "ns") -> Card:
    detail = f"{value('d' + kind, r['delta'])} ({value('dpct', r['delta_pct'])}; {sig_text(r['significant'], r['delta'])})"
    return Card(label, f"{value(kind, r['before'])} → {value(kind, r['after'])}", detail,
                _tone(r) if kind == "ns" else "neutral")


def _cards(d: TraceDiff) -> list[Card]:
    cards = []
    h = d.headline
    if h.metric != "step":
        r = {"before": h.before_ns, "after": h.after_ns, "delta": h.delta_ns, "delta_pct": h.delta_pct,
             "significant": h.significant}
        cards.append(_card(h.label, r))
    step_label = "Step time" if d.scope == "steps" else "GPU span"
    if _host_only(d):
        ops = d.ops
        host = {"before": float(ops["cpu_self_ns_before"].sum()), "after": float(ops["cpu_self_ns_after"].sum())}
        calls = {"before": float(ops["calls_before"].sum()), "after": float(ops["calls_after"].sum())}
        rows = [(f"CPU op time {'per step' if d.scope == 'steps' else 'in all'}", host, "ns"),
                ("Op calls", calls, "count")]
        cards.append(_card("Step time" if d.scope == "steps" else "Span", _figure(d, "step_ns")))
        for label, r, kind in rows:
            delta = r["after"] - r["before"]
            cards.append(_card(label, {**r, "delta": delta, "delta_pct": delta / r["before"] if r["before"] else None,
                                       "significant": None}, kind=kind))
        return cards
    cards += [_card(step_label, _figure(d, "step_ns")), _card("GPU busy per step", _figure(d, "gpu_busy_ns")),
              _card("GPU idle per step", _figure(d, "gpu_idle_ns")),
              _card("Kernels per step", _figure(d, "kernels"), kind="count")]
    return cards


def _host_only(d: TraceDiff) -> bool:
    """No GPU work on either side: GPU figures are all zero and host figures stand in."""
    return bool(d.kernels.is_empty() and d.copies.is_empty())


def _introduced(d: TraceDiff) -> list[Finding]:
    """The findings after brought in, then those it made worse (`extras.findings`)."""
    rows = d.findings.filter(pl.col("status").is_in(["introduced", "worse"]))
    return [Finding(id=r["rule"], severity=r["severity"],
                    title=f"{'new' if r['status'] == 'introduced' else 'worse'}: {r['title']}",
                    time_lost=fmt.ns(r["time_lost_after_ns"]), time_lost_ns=int(r["time_lost_after_ns"]),
                    share="introduced by after" if r["status"] == "introduced"
                    else f"was {fmt.ns(r['time_lost_before_ns'])} before", evidence=list(r["evidence"] or []),
                    advice=r["advice"] or "The after trace's own report (tracekit report) has the evidence.")
            for r in rows.iter_rows(named=True)]


def _summary_section(d: TraceDiff) -> Section:
    seen = d.summary.filter((pl.col("before") != 0) | (pl.col("after") != 0) | (pl.col("figure") == "step_ns"))
    seen = seen.filter(~pl.col("figure").str.starts_with("idle_"))  # the idle table has those
    t = Table(id="diff-summary", title="Per-step figures", columns=SUMMARY_COLUMNS,
              rows=summary_rows(seen, seen["figure"].to_list()))
    charts = [] if _host_only(d) else [_breakdown_chart(d, side) for side in ("before", "after")]
    return Section(id="summary", title="Step by step", tables=[t], charts=charts,
                   intro=f"Each figure is measured in every counted step of each trace; the table compares the "
                         f"medians. {NOISE_RULE} GPU figures are summed over devices.")


def _breakdown_chart(d: TraceDiff, side: str) -> BarChart:
    parts = [("compute", "compute_ns", "c-gemm"), ("exposed communication", "communication_ns", "c-communication"),
             ("memory", "memory_ns", "c-memcpy"), ("idle", "gpu_idle_ns", "c-gap-before_first")]
    rows = {r["figure"]: r for r in d.summary.iter_rows(named=True)}
    totals = [sum(rows[f][s] or 0 for _, f, _ in parts) for s in ("before", "after")]
    scale = max(totals) or 1.0
    bars, x = [], 0.0
    for label, figure, css in parts:
        v = rows[figure][side] or 0.0
        bars.append(Bar(label=label, value_text=fmt.ns(v), fraction=v / scale, css_class=css, x=x))
        x += v / scale
    return BarChart(id=f"breakdown-{side}", title=f"Temporal breakdown per step, {side}", bars=bars, stacked=True,
                    note="Both bars share one scale (the longer side fills the width).")


def _kernel_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """Kernel rows with a display name: both names where the match ignored template arguments
    or an architecture prefix."""
    renamed = pl.concat_str("name_before", pl.lit(" → "), "name_after")
    return frame.with_columns(label=pl.when(pl.col("match") == "base").then(renamed)
                              .otherwise(pl.coalesce("name_after", "name_before")))


def _kernel_section(d: TraceDiff, top: int) -> Section:
    k = _kernel_rows(d.kernels)
    tables = [
        delta_table("kernel-deltas", "Biggest kernel deltas (time per step)", k, KERNEL_COLUMNS, limit=top, sig=SIG),
        delta_table("kernels-appeared", "Kernels that appeared (after only)", _kernel_rows(d.appeared),
                    ONE_SIDE_COLUMNS["after"], limit=top),
        delta_table("kernels-disappeared", "Kernels that disappeared (before only)", _kernel_rows(d.disappeared),
                    ONE_SIDE_COLUMNS["before"], limit=top),
        delta_table("kernel-classes", "Kernel classes", d.kernel_classes, [
            ("kernel_class", "class", "text"), ("count_before", "kernels/step before", "count"),
            ("count_after", "kernels/step after", "count"), ("total_ns_before", "time/step before", "ns"),
            ("total_ns_after", "time/step after", "ns"), ("total_ns_delta", "Δ time/step", "dns"),
            ("total_ns_delta_pct", "Δ %", "dpct")], limit=None, sig=SIG),
    ]
    matched = int((d.kernels["match"] == "base").sum())
    paras = [(f"{fmt.count(d.kernels.height)} kernel names: {fmt.count(d.appeared.height)} appeared, "
              f"{fmt.count(d.disappeared.height)} disappeared, {fmt.count(matched)} matched only after removing "
              "template arguments or an architecture prefix (one-to-one).")]
    return Section(id="kernels", title="Kernels", tables=tables, paragraphs=paras,
                   intro="Kernels are matched by name with run-specific tokens removed (a leading `void`, a trailing "
                         "parameter list, addresses, hashes, Triton's numeric suffix); template arguments are kept. "
                         "Times are per step (medians); mean/call is over all calls in the counted steps.")


def _idle_section(d: TraceDiff) -> Section:
    idle = d.idle.filter((pl.col("before") != 0) | (pl.col("after") != 0))
    figures = ["gpu_idle_ns", *idle["figure"].to_list()]
    t = Table(id="idle-causes", title="Idle per step by cause", columns=SUMMARY_COLUMNS,
              rows=summary_rows(d.summary, figures))
    charts = [] if _host_only(d) else [_idle_chart(d, side) for side in ("before", "after")]
    return Section(id="idle", title="Idle time by cause", tables=[t], charts=charts,
                   intro="GPU idle inside each step, split by the cause `tracekit gaps` gives every gap.")


def _idle_chart(d: TraceDiff, side: str) -> BarChart:
    idle = d.idle
    scale = max(float(idle["before"].sum()), float(idle["after"].sum())) or 1.0
    bars = [Bar(label=CAUSE_LABELS.get(r["cause"], r["cause"]), value_text=fmt.ns(r[side]), fraction=r[side] / scale,
                css_class=f"c-gap-{r['cause']}") for r in idle.iter_rows(named=True) if r["before"] or r["after"]]
    return BarChart(id=f"idle-{side}", title=f"Idle per step by cause, {side}", bars=bars)


def _ops_section(d: TraceDiff, top: int) -> Section:
    t = delta_table("op-deltas", "Biggest op deltas", d.ops, [
        ("name", "op", "text"), ("status", "status", "text"), ("calls_before", "calls/step before", "count"),
        ("calls_after", "calls/step after", "count"), ("cpu_ns_before", "CPU/step before", "ns"),
        ("cpu_ns_after", "CPU/step after", "ns"), ("cpu_ns_delta", "Δ CPU", "dns"),
        ("gpu_incl_ns_before", "GPU/step before", "ns"), ("gpu_incl_ns_after", "GPU/step after", "ns"),
        ("gpu_incl_ns_delta", "Δ GPU", "dns")], limit=top, sig=("significant", "change_ns"))
    return Section(id="ops", title="CPU ops", tables=[t],
                   intro="Per op name and step: calls, CPU time (wall time of the op) and the GPU time of the work it "
                         "and its children launched (inclusive). Sorted by the larger of the two changes.")


def _launch_section(d: TraceDiff, top: int) -> Section:
    tables = [
        delta_table("launch-deltas", "Launch calls", d.launches, [
            ("api", "API", "text"), ("calls_before", "calls/step before", "count"), ("calls_after", "calls/step after", "count"),
            ("api_ns_before", "CPU/step before", "ns"), ("api_ns_after", "CPU/step after", "ns"),
            ("api_ns_delta", "Δ CPU", "dns")], limit=top, sig=("api_ns_significant", "api_ns_delta")),
        delta_table("sync-deltas", "Blocking syncs", d.syncs, [
            ("call", "call", "text"), ("status", "status", "text"), ("calls_before", "calls/step before", "count"),
            ("calls_after", "calls/step after", "count"), ("blocked_ns_before", "blocked/step before", "ns"),
            ("blocked_ns_after", "blocked/step after", "ns"), ("blocked_ns_delta", "Δ blocked", "dns")],
            limit=top, sig=("blocked_ns_significant", "blocked_ns_delta")),
        delta_table("copy-deltas", "Copies", d.copies, [
            ("activity", "activity", "text"), ("count_before", "count/step before", "count"),
            ("count_after", "count/step after", "count"), ("bytes_before", "bytes/step before", "bytes"),
            ("bytes_after", "bytes/step after", "bytes"), ("dur_ns_before", "time/step before", "ns"),
            ("dur_ns_after", "time/step after", "ns"), ("dur_ns_delta", "Δ time", "dns")],
            limit=top, sig=("dur_ns_significant", "dur_ns_delta")),
    ]
    return Section(id="launches", title="Launches, syncs and copies", tables=tables)


def _windows_section(d: TraceDiff, top: int) -> Section | None:
    if d.windows.is_empty():
        return None
    t = delta_table("window-deltas", "Annotation windows (median per instance)", d.windows, [
        ("kind", "window", "text"), ("n_before", "instances before", "count"), ("n_after", "instances after", "count"),
        ("cpu_ns_before", "CPU before", "ns"), ("cpu_ns_after", "CPU after", "ns"), ("cpu_ns_delta", "Δ CPU", "dns"),
        ("gpu_busy_ns_before", "GPU work launched before", "ns"),
        ("gpu_busy_ns_after", "GPU work launched after", "ns")],
        limit=top, sig=("cpu_ns_significant", "cpu_ns_delta"))
    return Section(id="windows", title="Steps and annotations", tables=[t],
                   intro="Each record_function name and ProfilerStep, one sample per instance (warm-up excluded). "
                         "GPU work launched: the busy time of the work an instance launched, wherever it ran; "
                         "GPU busy elsewhere on this page is clipped to the step.")


def _attention_section(d: TraceDiff) -> Section | None:
    if d.attention.is_empty():
        return None
    t = delta_table("attention-diff", "Attention per side", d.attention, [
        ("side", "side", "text"), ("backend", "backend", "text"), ("calls", "calls", "count"),
        ("kernels_per_call", "kernels per call", "count"), ("gpu_per_call_ns", "GPU per call", "ns"),
        ("cpu_per_call_ns", "CPU per call", "ns")], limit=None)
    return Section(id="attention", title="Attention", tables=[t])


def _critical_section(d: TraceDiff) -> Section | None:
    cp = d.critical_path
    if cp.is_empty():
        return None
    paras = [f"{r['side']}: {r['verdict']} ({fmt.pct(r['verdict_share'])}) — {r['sentence']}" for r in cp.iter_rows(named=True)]
    return Section(id="critical-path", title="Critical path", paragraphs=paras,
                   intro="The verdict of each trace's critical path (whole trace).")


def _findings_section(d: TraceDiff) -> Section:
    t = delta_table("findings-diff", "Findings resolved and introduced", d.findings, [
        ("rule", "rule", "text"), ("status", "status", "text"), ("title", "title", "text"),
        ("severity", "severity", "text"), ("time_lost_before_ns", "time lost before", "ns"),
        ("time_lost_after_ns", "time lost after", "ns")], limit=None)
    paras = [] if d.findings.height else ["No findings on either side (or the findings engine did not run)."]
    return Section(id="findings-diff", title="Findings resolved and introduced", tables=[t], paragraphs=paras,
                   intro="Findings matched by rule id: introduced (after only), worse (both, losing at least "
                         "twice the time and 1 ms more after), resolved (before only), persisting (both).")


def _comparable_section(d: TraceDiff) -> Section:
    paras = list(d.notes) or ["Both traces come from the same hardware and trace schema: absolute times compare."]
    return Section(id="comparable", title="What is comparable", paragraphs=paras)


def _metadata(s: Side, prefix: str, do_redact: bool) -> list[tuple[str, str]]:
    m = s.meta
    if m is None:
        return []
    data: dict[str, Any] = {"devices": m.devices.to_dicts(), "distributed": m.distributed_info, "versions": m.versions,
                            "profiler": m.profiler_flags, "metadata": m.metadata, "other": m.extra}
    return flatten(redact(data) if do_redact else data, prefix, limit=200)
