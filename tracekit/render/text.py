"""Terminal text: the `tracekit summary` and `tracekit gaps` pages, and the plain aligned
tables every command prints. Formats values it is given; computes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracekit import format as fmt
from tracekit.report.headline import attention_line


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Sequence[int] = ()) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def clip(text: str | None, width: int = 70) -> str:
    if text is None:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"


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
