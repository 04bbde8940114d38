"""`tracekit summary` and `tracekit gaps`: the headline figures of a trace, and its idle gaps.

Commands only turn arguments into API calls and write the result; the figures are
defined in `docs/metrics.md` and computed in `tracekit.analysis`.
"""

from __future__ import annotations

from typing import Any

import click

from tracekit import format as fmt
from tracekit.analysis.defaults import DEFAULT_MIN_GAP_NS
from tracekit.cli.common import Loading, clip, emit_json, json_opt, table, trace_arg
from tracekit.cli.options import Finite, full_path_opt, no_redact_opt, shown_path
from tracekit.errors import UsageError
from tracekit.report.headline import attention_line
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
    from tracekit.analysis.windows import windows
    from tracekit.cli.common import analyse_trace
    from tracekit.loader.clocks import LIMIT_CODES
    from tracekit.report.build import verdict
    from tracekit.report.headline import attention_facts

    t = loading.result()
    a = analyse_trace(t, trace)
    steps = windows(t, name="ProfilerStep")
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
        "steps": steps.to_dict(),
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


# -- text ---------------------------------------------------------------------------------

def render_summary(d: dict[str, Any]) -> str:
    tl = d["timeline"]
    lines = [f"file        {d['file']}",
             f"window      {tl['window']} (each device: first to last GPU activity)"]
    lines += [f"warning     {w['message']}" for w in d.get("warnings", ())]
    if not tl["devices"]:
        lines[1] = "window      whole trace (no GPU activity)"
        return "\n".join([*lines, *_host_text(d), *_steps_text(d["steps"], gpu=False)])
    busy = f"{fmt.ns(tl['busy_ns'])} of {fmt.ns(tl['span_ns'])} ({fmt.pct(tl['utilisation'])})"
    lines += [f"GPU busy    {busy}", *_headline_text(d)]
    lines += [*_devices_text(tl), *_breakdown_text(d["breakdown"])]
    lines += ["", f"idle by cause (device gaps; under {fmt.ns(d['gaps']['min_gap_ns'])} = short)",
              _indent(_cause_table(d["gaps"]))]
    return "\n".join([*lines, *_kernels_text(d["kernels"]), *_ops_text(d["ops"]), *_steps_text(d["steps"])])


def render_gaps(d: dict[str, Any]) -> str:
    lines = [f"file        {d['file']}", f"window      {d['window']}",
             f"idle        {fmt.ns(d['idle_ns'])} (device gaps; under {fmt.ns(d['min_gap_ns'])} = short)", "",
             "idle by cause",
             _indent(_cause_table(d) if d["gpu_activities"] else "none: no GPU activity in this trace")]
    if d["longest"]:
        rows = [[g["device"], "+" + fmt.ns(g["offset_ns"]), fmt.ns(g["gap_ns"]), g["cause"],
                 clip(g["blame_op"] or "(outside ops)", 34), clip(g["annotation"], 30),
                 clip(_next_work(g), 50)]
                for g in d["longest"]]
        headers = ["device", "from window start", "length", "cause", "CPU op at gap start", "annotation",
                   "next GPU work"]
        lines += ["", "longest gaps", _indent(table(headers, rows, right=(0, 1, 2)))]
    return "\n".join(lines)


def _next_work(gap: dict[str, Any]) -> str:
    """`op -> activity` for the work that ended the gap; `-` after the last one."""
    if gap["next_name"] is None:
        return "-"
    return f"{gap['next_op'] or '(no op)'} -> {gap['next_name']}"


def _host_text(d: dict[str, Any]) -> list[str]:
    """A trace without GPU work: CPU time in ops, the headline, hot paths and ops by CPU time."""
    host = d["host"]
    lines = ["GPU         none: no GPU work in this trace (host-side figures below)",
             f"CPU in ops  {fmt.ns(host['ops_ns'])} ({fmt.counted(host['op_calls'], 'op call')} on "
             f"{fmt.counted(host['threads'], 'thread')})" if host["op_calls"] else "CPU in ops  none: no cpu_op events",
             *_headline_text(d)]
    if host["hot_paths"]:
        rows = [[clip(p["op_path"], 70), fmt.count(p["calls"]), fmt.ns(p["self_ns"]), fmt.pct(p["share"])]
                for p in host["hot_paths"]]
        lines += ["", "hot paths (CPU self time at the end of each chain of ops)",
                  _indent(table(["op path", "calls", "CPU self", "share"], rows, right=(1, 2, 3)))]
    if d["ops"]:
        rows = [[clip(o["name"], 50), fmt.count(o["calls"]), fmt.ns(o["cpu_total_ns"]), fmt.ns(o["cpu_self_ns"]),
                 fmt.ns(o["cpu_mean_ns"])] for o in d["ops"]]
        lines += ["", "top ops by CPU time",
                  _indent(table(["op", "calls", "CPU total", "CPU self", "CPU per call"], rows, right=(1, 2, 3, 4)))]
    return lines


def _headline_text(d: dict[str, Any]) -> list[str]:
    """The verdict, the attention backend and the top findings, under the utilisation."""
    lines = [f"verdict     {d['verdict']}", f"attention   {attention_line(d['attention'])}"]
    found, total = d["findings"], d["findings_total"]
    if total is None:
        return [*lines, "findings    – (the findings did not run: see the notes of 'tracekit report')"]
    if not found:
        return [*lines, "findings    none"]
    lines.append(f"findings    {fmt.count(total)}" + (f" (the top {len(found)} by time lost)" if total > len(found) else ""))
    host_only = not d["timeline"]["devices"]  # (rules that time GPU work have nothing to time: "–", not "0 ns")
    return lines + [f"  {'[' + f['severity'] + ']':<8}  {_lost(f['time_lost_ns'], host_only):>7}  {clip(f['title'], 100)}"
                    for f in found]


def _lost(ns: int, host_only: bool) -> str:
    return "–" if host_only and not ns else fmt.ns(ns)


def _devices_text(tl: dict[str, Any]) -> list[str]:
    rows = [[r["device"], fmt.ns(r["span_ns"]), fmt.ns(r["busy_ns"]), fmt.ns(r["idle_ns"]),
             fmt.pct(r["utilisation"])] for r in tl["devices"]]
    return ["", "devices", _indent(table(["device", "span", "busy", "idle", "utilisation"], rows,
                                          right=(0, 1, 2, 3, 4)))]


def _breakdown_text(bd: dict[str, Any]) -> list[str]:
    parts = ("compute_ns", "communication_ns", "memory_ns", "idle_ns")
    rows = [[r["device"], *(_share(r[c], r["span_ns"]) for c in parts), fmt.pct(r["overlap_share"])]
            for r in bd["devices"]]
    headers = ["device", "compute", "communication", "memory", "idle", "comm. overlapped"]
    return ["", "time breakdown (overlap counted once: compute > communication > memory)",
            _indent(table(headers, rows, right=(0, 1, 2, 3, 4, 5)))]


def _kernels_text(kernels: list[dict[str, Any]]) -> list[str]:
    if not kernels:
        return []
    rows = [[clip(k["name"], 60), k.get("kernel_class", ""), fmt.count(k["count"]), fmt.ns(k["total_ns"])]
            for k in kernels]
    return ["", "top kernels by total time",
            _indent(table(["kernel", "class", "calls", "total"], rows, right=(2, 3)))]


def _ops_text(ops: list[dict[str, Any]]) -> list[str]:
    if not ops:
        return []
    rows = [[clip(o["name"], 50), fmt.count(o["calls"]), fmt.ns(o.get("cpu_total_ns")),
             fmt.ns(o.get("gpu_incl_ns"))] for o in ops]
    return ["", "top ops", _indent(table(["op", "calls", "CPU total", "GPU (incl.)"], rows, right=(1, 2, 3)))]


def _steps_text(steps: dict[str, Any], *, gpu: bool = True) -> list[str]:
    if not steps["steps"]:
        return []
    if not gpu:
        rows = [[s["name"], fmt.ns(s["cpu_ns"]), "warm-up" if s["warmup"] else ""] for s in steps["step_instances"]]
        return ["", "steps", _indent(table(["step", "CPU", "note"], rows, right=(1,)))]
    rows = [[s["name"], fmt.ns(s["cpu_ns"]), fmt.ns(s["gpu_ns"]), fmt.ns(s["gpu_busy_ns"]),
             fmt.count(s["kernels"]), "warm-up" if s["warmup"] else ""] for s in steps["step_instances"]]
    headers = ["step", "CPU", "GPU span", "GPU busy", "kernels", "note"]
    return ["", "steps (GPU: the work launched inside the step)",
            _indent(table(headers, rows, right=(1, 2, 3, 4)))]


def _cause_table(g: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for row in g["totals"]:
        if row["scope"] == "device":
            counts[row["cause"]] = counts.get(row["cause"], 0) + row["gaps"]
    rows = [[cause, fmt.ns(ns), _share(ns, g["idle_ns"]), fmt.count(counts.get(cause, 0))]
            for cause, ns in sorted(g["by_cause"].items(), key=lambda kv: -kv[1]) if ns]
    if not rows:
        return "none: the GPU was never idle in the window"
    return table(["cause", "time", "of idle", "gaps"], rows, right=(1, 2, 3))


def _share(part: int | None, whole: int | None) -> str:
    return fmt.pct(part / whole) if part is not None and whole else "–"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
