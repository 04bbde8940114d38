"""`tracekit summary` and `tracekit gaps`: the headline figures of a trace, and its idle gaps.

Commands only turn arguments into API calls and write the result; the figures are
defined in `docs/metrics.md` and computed in `tracekit.analysis`.
"""

from __future__ import annotations

from typing import Any

import click

from tracekit.analysis.defaults import DEFAULT_MIN_GAP_NS
from tracekit.cli.common import Loading, emit_json, json_opt, trace_arg
from tracekit.cli.options import Finite, full_path_opt, no_redact_opt, shown_path
from tracekit.errors import UsageError
from tracekit.render.text import render_gaps, render_summary
from tracekit.report.redact import scrub


@click.command()
@trace_arg
@json_opt
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Rows in the kernel and op tables.")
@no_redact_opt
@full_path_opt
def summary(trace: str, as_json: bool, top: int, no_redact: bool, full_path: bool) -> None:
    """Headline figures: GPU utilisation, the verdict, the attention backend, the top findings;
    then GPU busy/idle per device, time breakdown, idle by cause, top kernels and ops, steps.
    Windows: each device from its first to its last GPU activity."""
    loading = Loading(trace)  # read while the analyses (and Polars) are imported
    from tracekit.analysis.hostside import host_time
    from tracekit.cli.common import analyse_trace
    from tracekit.loader.clocks import LIMIT_CODES
    from tracekit.report.build import verdict
    from tracekit.report.headline import attention_facts

    t = loading.result()
    a = analyse_trace(t, trace)
    host = host_time(t, top=top) if a.timeline.devices.is_empty() else None
    ops = a.attribution.ops
    if host is not None:  # no GPU work: the ops by CPU time
        ops = ops.sort(["cpu_total_ns", "name"], descending=[True, False], nulls_last=True)
    result = {
        "file": shown_path(t.meta.path, full_path),
        "warnings": [w for w in t.warnings.select("code", "message").to_dicts() if w["code"] in LIMIT_CODES],
        "timeline": a.timeline.to_dict(),
        "verdict": verdict(a),
        "attention": attention_facts(a.attention),
        "findings": _findings(a.findings, HEADLINE_FINDINGS),
        "findings_total": len(a.findings.findings) if a.findings is not None else None,
        "breakdown": a.breakdown.to_dict(),
        "gaps": a.gaps.to_dict(limit=top),
        "kernels": a.kernels.head(top).to_dicts(),
        "ops": ops.head(top).to_dicts(),
        "host": host.to_dict(limit=top) if host is not None else None,
        "steps": a.steps.to_dict(),
        "notes": a.notes,
    }
    result = scrub(result, not no_redact)
    if as_json:
        emit_json(result)
        return
    click.echo(render_summary(result))


@click.command()
@trace_arg
@click.option("--min-gap-us", type=Finite(min=0), default=DEFAULT_MIN_GAP_NS / 1000, show_default=True,
              help="Gaps shorter than this (µs) go to the 'short' bucket.")
@click.option("--window", "window", default=None, metavar="NAME",
              help="Analyse inside each annotation matching NAME (exact, kind like ProfilerStep, or regex).")
@click.option("--limit", "--top", "limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many of the longest gaps to list.")
@json_opt
@no_redact_opt
@full_path_opt
def gaps(trace: str, min_gap_us: float, window: str | None, limit: int, as_json: bool, no_redact: bool,
         full_path: bool) -> None:
    """Idle gaps per device and stream, each with a cause and the CPU op to blame."""
    loading = Loading(trace)
    from tracekit.analysis.gaps import gaps as find_gaps
    from tracekit.analysis.windows import window_bounds

    t = loading.result()
    bounds = window_bounds(t, window) if window else None
    if bounds is not None and bounds.is_empty():
        raise UsageError(f"no annotation matches --window {window!r}")
    result = find_gaps(t, min_gap_ns=round(min_gap_us * 1000), windows=bounds)
    data = scrub({"file": shown_path(t.meta.path, full_path), "window": window or "device span",
                  "gpu_activities": t.gpu_work.height, **result.to_dict(limit=limit)}, not no_redact)
    if as_json:
        emit_json(data)
        return
    click.echo(render_gaps(data))


HEADLINE_FINDINGS = 3  # findings named in the headline


def _findings(result: Any, limit: int) -> list[dict[str, Any]]:
    """The first `limit` findings (ranked by time lost): rule, severity, title, time lost."""
    items = result.findings[:limit] if result is not None else ()
    return [{"rule": f.rule, "severity": f.severity, "title": f.title, "time_lost_ns": f.time_lost_ns}
            for f in items]
