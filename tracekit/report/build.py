"""`build_report(trace) -> Report`: analyses in, ready-to-print report model out."""

from __future__ import annotations

import re
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Self

import polars as pl

from tracekit import __version__
from tracekit import format as fmt
from tracekit.pipeline import Analysis, AnalysisOptions, analyse
from tracekit.analysis.gaps import CAUSE_LABELS
from tracekit.analysis.hostside import host_time
from tracekit.errors import UsageError
from tracekit.model import ENGINE, Trace
from tracekit.report import extras, sections
from tracekit.report.lanes import cpu_lanes, gpu_lanes
from tracekit.report.headline import attention_facts, attention_line
from tracekit.report.model import Card, Finding, Report, Section
from tracekit.report.redact import flatten, redact, scrub
from tracekit.report.timeline import CPU_CLASSES, GPU_CLASSES, build_timeline

MD_TABLES = ("kernels", "ops", "gaps", "windows", "attention-calls")


@dataclass(frozen=True)
class ReportOptions:
    redact: bool = True  # credentials in every string replaced (`redact.scrub`)
    full_path: bool = False  # the trace's path as given, else its file name only
    top: int = 30
    zoom: str | None = None  # a window name (e.g. "ProfilerStep#3") for the detail timeline
    width_px: int = 1100
    analysis: AnalysisOptions = AnalysisOptions()


def build_report(trace: Trace, *, options: ReportOptions | None = None, analysis: Analysis | None = None) -> Report:
    """The report of `trace`, from `analysis` (else analysed here)."""
    with Builder(options) as builder:
        a = analysis or analyse(trace, options=builder.options.analysis)
        return builder.finish(trace, a)


class Builder:
    """Builds reports on two threads of its own besides the caller's: the timelines (most of
    the build's time; Polars and the pixel runs release the GIL) while the calling thread
    makes the other sections. Use it as a context manager: its threads end with the block."""

    def __init__(self, options: ReportOptions | None = None) -> None:
        self.options = options or ReportOptions()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tracekit-report")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # on an error (an interrupt, say) the drawing still under way is not waited for
        self._pool.shutdown(wait=exc_type is None, cancel_futures=True)

    def finish(self, trace: Trace, a: Analysis) -> Report:
        timelines = self._pool.submit(timeline_section, a, self.options, self._pool)
        rest = _sections(a, self.options)
        secs = [timelines.result(), *rest]
        # one pass over every string of the model, whichever section made it
        return scrub(_assemble(trace, self.options, a, secs), self.options.redact)


def _assemble(trace: Trace, opts: ReportOptions, a: Analysis, secs: list[Section | None]) -> Report:
    name = Path(trace.meta.path).name or "trace"
    return Report(
        title=f"tracekit report: {name}",
        subtitle=_subtitle(trace),
        verdict=verdict(a),
        facts=_facts(a, opts.full_path),
        cards=_cards(a),
        findings=_findings(a),
        sections=[s for s in secs if s is not None],
        metadata=_metadata(trace, opts.redact),
        warnings=[f"[{w['level']}] {w['message']}" for w in trace.warnings.iter_rows(named=True)]
        + [f"[{w['level']}] {w['message']}" for w in a.attribution.warnings.iter_rows(named=True)] + a.notes,
        perfetto=_perfetto(name),
        generator=f"tracekit {__version__}",
    )


def _sections(a: Analysis, opts: ReportOptions) -> list[Section | None]:
    """Every section after the timeline, in page order."""
    return [
        sections.gpu_section(a, top=opts.top),
        sections.gaps_section(a, top=opts.top),
        extras.critical_path_section(a),
        extras.attention_section(a, top=opts.top),
        sections.ops_section(a, top=opts.top),
        sections.windows_section(a, top=opts.top),
        sections.launch_section(a, top=opts.top),
        sections.sync_section(a, top=opts.top),
        sections.occupancy_section(a, top=opts.top),
        extras.roofline_section(a, top=opts.top),
        extras.compile_section(a),
        sections.memory_section(a, top=opts.top),
    ]


def _subtitle(trace: Trace) -> str:
    m = trace.meta
    workload = _workload(trace)
    devices = ", ".join(sorted(set(n for n in m.devices["name"].to_list() if n))) or "no device properties"
    return " · ".join(x for x in (workload, devices, f"{m.format} trace") if x)


def _workload(trace: Trace) -> str:
    cap = trace.meta.extra.get("tracekit_capture")
    if isinstance(cap, dict):
        model = cap.get("model") or cap.get("preset") or cap.get("scenario")
        attn = cap.get("attn_implementation") or cap.get("variant")
        parts = [str(x) for x in (model if not isinstance(model, dict) else model.get("name"), attn, cap.get("dtype")) if x]
        return " · ".join(parts)
    return _recorded_as(trace.meta.trace_name, trace.meta.path)


# where a profiler writes a file it is about to move (HF's benchmarks, `tempfile`): its
# name says nothing about the run
_TEMPORARY = re.compile(r"(^|[/\\])(tmp[\w-]*|temp|var[/\\]folders)[/\\]", re.IGNORECASE)


def _recorded_as(trace_name: str | None, path: str) -> str:
    """`recorded as NAME`: the file name the profiler wrote (its `traceName`), when it is
    not the file's own name and not a temporary file's (the folders of another machine are
    left out)."""
    if not trace_name or _TEMPORARY.search(trace_name):
        return ""
    name = PurePath(trace_name.replace("\\", "/")).name
    own = PurePath(path).name if path else ""
    if not name or own in (name, name + ".gz"):
        return ""
    return f"recorded as {name}"


def verdict(a: Analysis) -> str:
    """The report's one-sentence answer (also `tracekit summary`'s): the critical path's
    verdict, else utilisation and the largest idle cause."""
    cp = a.critical_path
    if cp is not None and cp.sentence:
        return cp.sentence
    tl = a.timeline
    if tl.utilisation is None:
        return "No GPU activity in this trace: only CPU-side figures are available."
    cause, ns = max(a.gaps.by_cause.items(), key=lambda kv: kv[1], default=("", 0))
    label = CAUSE_LABELS.get(cause, cause)
    return (f"The GPU was busy {fmt.pct(tl.utilisation)} of its span; the largest share of idle time "
            f"({fmt.ns(ns)}) is {label}.")


def _facts(a: Analysis, full_path: bool = False) -> list[tuple[str, str]]:
    m = a.trace.meta
    span = a.timeline.span_ns
    facts = [("trace", m.path if full_path else Path(m.path).name), ("size", f"{fmt.size(m.size_bytes)}, {fmt.counted(m.event_count, 'event')}"),
             ("format", m.format + (f", schema {m.schema_version}" if m.schema_version is not None else ""))]
    if m.rank is not None:
        facts.append(("rank", f"{m.rank}" + (f" of {m.world_size}" if m.world_size else "")))
    facts.append(("GPU span", fmt.ns(span) if span else "no GPU activity"))
    steps = a.windows.steps
    if steps:
        facts.append(("steps", fmt.counted(steps, "ProfilerStep window") + (f" ({a.windows.warmup_steps} warm-up)" if a.windows.warmup_steps else "")))
    if a.attention is not None and a.attention.call_count:
        facts.append(("attention", attention_line(attention_facts(a.attention))))
    return facts


def _cards(a: Analysis) -> list[Card]:
    tl, g = a.timeline, a.gaps
    util = tl.utilisation
    if tl.devices.is_empty():
        cards = _host_cards(a)
    else:
        tone = "neutral" if util is None else "good" if util >= 0.8 else "warn" if util >= 0.5 else "bad"
        cards = [Card("GPU utilisation", fmt.pct(util), f"busy {fmt.ns(tl.busy_ns)} of {fmt.ns(tl.span_ns)}", tone),
                 Card("GPU idle", fmt.ns(g.idle_ns), _top_cause(g.by_cause), "neutral")]
    top = [f for f in _findings(a) if f.time_lost_ns][:1]
    if top:
        title = top[0].title if len(top[0].title) <= 90 else top[0].title[:89] + "…"
        cards.append(Card("Top bottleneck", top[0].time_lost, f"{title} ({top[0].share})",
                          "bad" if top[0].severity == "high" else "warn"))
    cards += _recoverable_cards(a)
    return cards


def _recoverable_cards(a: Analysis) -> list[Card]:
    """The time recoverable (`findings.recoverable`: the findings' losses, overlaps removed)
    and how it relates to the top finding; none when no finding loses time."""
    result = a.findings
    if result is None:
        return []
    r = result.recoverable()
    if not r.count:
        return []
    return [Card("Time recoverable", fmt.ns(r.ns), f"{fmt.pct(r.ns / result.window_ns if result.window_ns else None)} "
                 f"of the window: {r.sentence()}", "neutral")]


def _host_cards(a: Analysis) -> list[Card]:
    """Without GPU work: the CPU time in ops, the op with the most self time, and the CPU
    time per attention call, in place of the GPU figures."""
    host = host_time(a.trace)
    if not host.op_calls:
        return [Card("CPU time in ops", "none", "no cpu_op events and no GPU work in this trace", "neutral")]
    cards = [Card("CPU time in ops", fmt.ns(host.ops_ns), f"{fmt.counted(host.op_calls, 'op call')} on "
                  f"{fmt.counted(host.threads, 'thread')}; no GPU work in this trace", "neutral")]
    ops = a.attribution.ops.sort("cpu_self_ns", descending=True, nulls_last=True)
    if ops.height:
        r = ops.row(0, named=True)
        cards.append(Card("Most CPU self time", fmt.ns(r["cpu_self_ns"]),
                          f"{r['name']} ({fmt.counted(r['calls'], 'call')}, {fmt.pct(_share(r['cpu_self_ns'], host.ops_ns))})",
                          "neutral"))
    att = a.attention
    if att is not None and att.call_count:
        per_call = att.median("cpu_ns")
        cards.append(Card("Attention (CPU)", f"{fmt.ns(per_call)} per call",
                          f"{att.backend}, {fmt.counted(att.call_count, 'call')} (median CPU time)", "neutral"))
    return cards


def _share(part: int | None, whole: int) -> float | None:
    return part / whole if part is not None and whole else None


def _top_cause(by_cause: dict[str, int]) -> str:
    cause, ns = max(by_cause.items(), key=lambda kv: kv[1], default=("", 0))
    return f"mostly {CAUSE_LABELS.get(cause, cause)} ({fmt.ns(ns)})" if ns else "none"


def _findings(a: Analysis) -> list[Finding]:
    items = a.findings.findings if a.findings is not None else ()
    host_only = a.timeline.devices.is_empty()
    out = []
    for f in items:
        lost = f.time_lost_ns
        untimed = host_only and not lost  # (a rule that times GPU work has nothing to time here)
        out.append(Finding(
            id=f.rule, severity=f.severity, title=f.title,
            time_lost="–" if untimed else fmt.ns(lost), time_lost_ns=lost,
            share="not timed: no GPU work in this trace" if untimed else fmt.pct(f.share) + " of the window",
            evidence=[extras.evidence_text(e) for e in f.evidence][:8],
            advice=f.advice,
        ))
    return out


def timeline_section(a: Analysis, opts: ReportOptions, pool: Executor | None = None) -> Section | None:
    """The whole trace's timeline and the zoomed one (drawn on `pool` meanwhile, if given)."""
    trace = a.trace
    dev = a.timeline.devices
    if dev.is_empty():
        cpu = trace.ops.filter(pl.col("cat").is_in(["cpu_op", "user_annotation"]))
        if cpu.is_empty():
            return None
        t0, t1 = int(cpu["ts_ns"].min()), int(cpu["end_ns"].max())
    else:
        t0, t1 = int(dev["start_ns"].min()), int(dev["end_ns"].max())
    idle_and_path = _idle_and_path_lanes(a)  # the same for both timelines: made once
    zoom = _zoom_window(a, opts.zoom)
    zoomed = None
    if zoom is not None:
        name, z0, z1 = zoom
        args = (a, "timeline-zoom", f"Zoom: {name}", z0, z1, opts, idle_and_path)
        zoomed = pool.submit(_timeline, *args) if pool is not None else _timeline(*args)
    tls = [_timeline(a, "timeline-all", "Whole trace", t0, t1, opts, idle_and_path)]
    if zoomed is not None:
        tls.append(zoomed.result() if isinstance(zoomed, Future) else zoomed)
    return Section(id="timeline", title="Timeline", timelines=tls,
                   intro="GPU streams coloured by kernel class, each device's idle time coloured by cause, the busiest "
                         "CPU threads (ops, launch calls, blocking syncs) and the critical path. Each pixel column shows "
                         "what covered most of it; hover for counts. Bands are profiler steps.")


def _idle_and_path_lanes(a: Analysis) -> list[tuple[str, str, pl.DataFrame]]:
    """Each device's idle time by cause, and the critical path (whole-trace lanes: a
    timeline draws the part inside its window)."""
    lanes = []
    # the four columns read, filtered lazily: an eager filter would copy every column of the
    # gaps first, at once with the path's lane below
    gaps = a.gaps.gaps.lazy().filter(pl.col("scope") == "device").select(
        "device", "start_ns", "end_ns", "cause").collect(engine=ENGINE)
    for device, rows in sorted(gaps.group_by("device"), key=lambda kv: kv[0][0] or 0):
        iv = rows.select("start_ns", "end_ns", cls=pl.format("gap-{}", pl.col("cause")), prio=pl.lit(1, pl.Int64))
        lanes.append((f"GPU {device[0]} idle", f"idle time of device {device[0]} by cause", iv))
    return lanes + extras.critical_path_lanes(a)


def _timeline(a: Analysis, id: str, title: str, t0: int, t1: int, opts: ReportOptions,
              idle_and_path: list[tuple[str, str, pl.DataFrame]]):
    trace = a.trace
    lanes, hidden = gpu_lanes(trace, t0=t0, t1=t1, classes=a.kernels)
    drawn = len(lanes)
    lanes += idle_and_path
    lanes += cpu_lanes(trace, t0=t0, t1=t1)
    steps = trace.ops.filter(pl.col("name").str.starts_with("ProfilerStep#") & (pl.col("cat") != "gpu_user_annotation"))
    bands = steps.select("name", pl.col("ts_ns").alias("start_ns"), "end_ns").unique("start_ns", keep="first").sort("start_ns")
    legend = [(f"c-{k}", v) for k, v in GPU_CLASSES.items()] + [(f"c-{k}", v) for k, v in CPU_CLASSES.items()] \
        + [(f"c-gap-{k}", f"idle: {v}") for k, v in CAUSE_LABELS.items()] \
        + [(f"c-{css}", f"path: {label}") for label, css in extras.PATH_CLASSES.values()]
    return build_timeline(id=id, title=title, lanes=lanes, t0=t0, t1=t1, width=opts.width_px, bands=bands,
                          legend=legend, origin=trace.start_ns, note=fmt.agree(
                              "+{n} more GPU [streams|stream] with work in this window, not drawn (the busiest "
                              f"{drawn} are)", hidden).format(n=fmt.count(hidden))
                          if hidden else "",
                          window=f"{fmt.ns(t1 - t0)} from {fmt.ns(t0 - trace.start_ns)} (times from the trace's start)")


def zoom_rows(annotations: pl.DataFrame, wanted: str) -> pl.DataFrame:
    """The annotations `--zoom` names: the exact name, else those whose name contains it."""
    match = annotations.filter(pl.col("name") == wanted)
    return match if not match.is_empty() else annotations.filter(pl.col("name").str.contains(wanted, literal=True))


def check_zoom(trace: Trace, wanted: str | None) -> None:
    """Raise `UsageError` when `wanted` names no annotation of the trace (before any analysis)."""
    from tracekit.analysis.windows import annotations

    if wanted and zoom_rows(annotations(trace).select("name"), wanted).is_empty():
        raise UsageError(f"no annotation matches --zoom {wanted!r} (names of record_function ranges or "
                         "ProfilerStep#N; 'tracekit info' lists the steps)")


def _zoom_window(a: Analysis, wanted: str | None) -> tuple[str, int, int] | None:
    inst = a.windows.instances
    if inst.is_empty():
        return None
    if wanted:
        match = zoom_rows(inst, wanted)
    else:
        steps = inst.filter(pl.col("kind") == "ProfilerStep").sort("cpu_ns")
        if steps.height < 2:
            return None
        match = steps.slice(steps.height // 2, 1)  # the median step
    if match.is_empty():
        return None
    r = match.row(0, named=True)
    start = min(x for x in (r["start_ns"], r["gpu_start_ns"]) if x is not None)
    end = max(x for x in (r["end_ns"], r["gpu_end_ns"]) if x is not None)
    return r["name"], int(start), int(end)


def _metadata(trace: Trace, do_redact: bool) -> list[tuple[str, str]]:
    m = trace.meta
    data: dict[str, Any] = {"devices": m.devices.to_dicts(), "distributed": m.distributed_info, "versions": m.versions,
                            "profiler": m.profiler_flags, "metadata": m.metadata, "other": m.extra}
    return flatten(redact(data) if do_redact else data)


def _perfetto(name: str) -> list[str]:
    return [
        "Open https://ui.perfetto.dev in a browser (the trace stays on your machine: Perfetto loads it locally).",
        f"Choose 'Open trace file' and pick {name} (gzip is fine).",
        "Times in this report are offsets from the first event; press '/' in Perfetto and search a kernel or op name "
        "from a finding to jump to it.",
        "For the critical path and findings as tracks, run: tracekit annotate TRACE -o annotated.json.gz",
    ]
