"""Report pieces for the analyses that build on the core ones: critical path, attention,
roofline, what-if estimates. Each returns nothing when its analysis did not run."""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.pipeline import Analysis
from tracekit.model import ENGINE
from tracekit.report.model import Bar, BarChart, Cell, Column, Section, Table
from tracekit.report.tables import frame_table

PATH_CLASSES = {  # a colour each: the path's bar stacks them side by side
    "gpu_compute": ("GPU compute", "cp-gpu"), "gpu_memory": ("GPU memory", "cp-gpu-memory"),
    "communication": ("communication", "cp-comm"), "launch_overhead": ("launch overhead", "cp-launch"),
    "cpu_compute": ("CPU compute", "cp-cpu"), "python_overhead": ("Python overhead", "cp-python"),
    "sync_wait": ("sync wait", "cp-sync"), "idle": ("idle", "cp-idle"),
}

CP_CSS = pl.Enum(sorted({v[1] for v in PATH_CLASSES.values()} | {"cp-other"}))


def evidence_text(e: Any) -> str:
    """One evidence item as a line a person can find in Perfetto."""
    if hasattr(e, "rel_us") and hasattr(e, "name"):
        dur = f", {fmt.ns(e.dur_ns)}" if getattr(e, "dur_ns", None) is not None else ""
        note = f" — {e.note}" if getattr(e, "note", "") else ""
        name = e.name if len(e.name) <= 100 else e.name[:99] + "…"
        return f"{name} on {e.lane} at {e.rel_us:,.1f} µs (ts {e.ts_ns / 1000:.3f} µs){dur}{note}"
    if isinstance(e, dict):
        return ", ".join(f"{k}={v}" for k, v in e.items() if v is not None)
    return str(e)


def _whatifs(a: Analysis) -> list[Any]:
    return list(a.whatifs)


def critical_path_lanes(a: Analysis) -> list[tuple[str, str, pl.DataFrame]]:
    cp = a.critical_path
    if cp is None or cp.segments.is_empty():
        return []
    segs = cp.segments
    # the path's classes -> their colours as an Enum (a code a row, not a string a row)
    css = pl.col("cls").replace_strict(
        {k: v[1] for k, v in PATH_CLASSES.items()}, default="cp-other", return_dtype=CP_CSS)
    iv = segs.lazy().filter(pl.col("end_ns") > pl.col("start_ns")).select(  # (lazy: only these columns are copied)
        "start_ns", "end_ns", cls=css, prio=pl.lit(1, pl.Int64)).collect(engine=ENGINE)
    return [("critical path", f"critical path of {cp.window}: {cp.sentence}", iv)]


def critical_path_section(a: Analysis) -> Section | None:
    cp = a.critical_path
    if cp is None or cp.verdict == "empty":
        return None
    total = max(cp.end_ns - cp.start_ns, 1) if cp.start_ns is not None and cp.end_ns is not None else 1
    bars = []
    x = 0.0
    for cls, ns, share in cp.by_class.sort(["ns", "cls"], descending=[True, False]).iter_rows():
        if not ns:
            continue
        label, css = PATH_CLASSES.get(cls, (cls, "cp-other"))
        bars.append(Bar(label=label, value_text=f"{fmt.ns(ns)} ({fmt.pct(share)})", fraction=ns / total, css_class=f"c-{css}", x=x))
        x += ns / total
    chart = BarChart(id="critical-path", title=f"Critical path of {cp.window}", bars=bars, stacked=True)
    # host time in no op, module or annotation (a trace without ProfilerStep ranges) has no context
    # (by_context comes longest first, ties by class and name)
    ctx = cp.by_context.head(20).with_columns(pl.col("context").fill_null("(outside any op)"),
                                              pl.col("cls").replace({k: v[0] for k, v in PATH_CLASSES.items()}))
    table = frame_table("path-context", "Who the critical path belongs to", ctx, [
        ("context", "op / kernel", "text"), ("cls", "class", "label"), ("ns", "time on the path", "ns"), ("share", "share", "pct")])
    paras = [cp.sentence]
    if cp.inferred_edges:
        paras.append(fmt.agree("{edges} [were|was] inferred from blocking calls that end right after GPU work (the "
                               "trace has no cuda_sync records for them).", cp.inferred_edges).format(
            edges=fmt.counted(cp.inferred_edges, "GPU→CPU sync edge")))
    whatifs = _whatifs(a)
    if whatifs:
        rows = [[Cell(w.description), Cell(fmt.ns(w.saved_ns), w.saved_ns), Cell(fmt.ns(w.estimate_ns), w.estimate_ns)]
                for w in sorted(whatifs, key=lambda w: -w.saved_ns)]
        cols = [Column("scenario", "what if"), Column("saved", "time saved", True), Column("estimate", "window would take", True)]
        tables = [table, Table(id="whatif", title="What-if estimates", columns=cols, rows=rows,
                               note="Longest-path estimates on the dependency graph: an upper bound for each change alone.")]
    else:
        tables = [table]
    return Section(id="critical-path", title="Critical path", paragraphs=paras, charts=[chart], tables=tables,
                   intro="The longest chain of dependent work (CPU ops, launches, kernels, syncs) through the window: "
                         "only shortening work on this path makes the window shorter; work off it has slack.")


GPU_ONLY_HEADERS = {"kernels", "GPU time", "launch API", "GPU total"}  # attention tables' GPU columns


def attention_section(a: Analysis, *, top: int) -> Section | None:
    res = a.attention
    if res is None or not res.call_count:
        return None
    from tracekit.report.attention import attention_section as plain

    data = plain(res)
    tables = []
    for i, t in enumerate(data.get("tables", [])):
        if not res.has_gpu:  # a CPU-only trace: the GPU columns would read 0 and – on every row
            keep = [j for j, h in enumerate(t["headers"]) if h not in GPU_ONLY_HEADERS]
            t = {**t, "title": t["title"].replace("; total GPU", ""), "headers": [t["headers"][j] for j in keep],
                 "rows": [[r[j] for j in keep] for r in t["rows"]]}
        cols = [Column(key=f"c{j}", label=h, numeric=j > 0 and _numeric(t["rows"], j)) for j, h in enumerate(t["headers"])]
        rows = [[Cell(str(v), _sort_value(v)) for v in row] for row in t["rows"][: top * 4]]
        tables.append(Table(id=f"attention-{i}" if i else "attention-calls", title=t["title"], columns=cols, rows=rows,
                            total_rows=len(t["rows"])))
    return Section(id="attention", title=data.get("title", "Attention"), paragraphs=list(data.get("paragraphs", [])),
                   tables=tables, intro="Where attention runs, which backend actually ran, and what each call costs: "
                                        "the Hugging Face 'attention is all you profile' analysis, done for you.")


def _numeric(rows: list[list[Any]], j: int) -> bool:
    return all(_sort_value(r[j]) is not None or r[j] in ("", "–") for r in rows[:20]) if rows else False


def _sort_value(text: Any) -> float | None:
    """A sort key for text such as '1.2 ms', '3,456', '12.5 %'."""
    s = str(text).replace(",", "").strip()
    units = {"ns": 1.0, "µs": 1e3, "ms": 1e6, "s": 1e9, "%": 1.0, "×": 1.0, "x": 1.0}
    parts = s.split()
    try:
        if len(parts) == 2 and parts[1] in units:
            return float(parts[0]) * units[parts[1]]
        return float(s.rstrip("%×x"))
    except ValueError:
        return None


def roofline_section(a: Analysis, *, top: int) -> Section | None:
    rf = a.roofline
    if rf is None or rf.calls.is_empty():
        return None
    from tracekit.report.roofline_chart import roofline_svg

    # the most time left on the table first (ties: the most GPU time, then the name), as the CLI lists them
    ops = rf.ops.sort(["time_lost_ns", "gpu_ns", "name"], descending=[True, True, False], nulls_last=True)
    cols = [("name", "op", "text"), ("input_dims", "shapes", "text"), ("compute_dtype", "dtype", "label"),
            ("calls", "calls", "count"), ("gpu_ns", "GPU time", "ns"), ("achieved_tflops", "achieved", "tflops"),
            ("achieved_gbps", "bandwidth", "gbps"), ("intensity", "FLOP/byte", "float1"), ("bound", "bound", "label"),
            ("efficiency", "of ceiling", "pct"), ("time_lost_ns", "time left", "ns")]
    table = frame_table("roofline", "Ops against the device's ceilings", ops, cols, limit=top)
    paras = [f"Overall efficiency {fmt.pct(rf.efficiency)}; time left on the table "
             f"{fmt.ns(rf.time_lost_ns)} (work known for {fmt.pct(rf.coverage)} of GPU time)."]
    out = ops.filter(pl.col("excluded").is_not_null()) if "excluded" in ops.columns else ops.clear()
    if out.height:  # work unknown (an argument not recorded), or above the ceiling (the model overstates it)
        paras.append(fmt.agree("{n} ({ns}) [are|is] left out of every figure: {why}.", out.height).format(
            n=fmt.counted(out.height, "op shape"), ns=fmt.ns(int(out["gpu_ns"].sum())),
            why="; ".join(dict.fromkeys(f"{x['name']}: {x['reason']}" for x in out.head(3).to_dicts()))))
    paras += [str(n) for n in rf.notes]
    return Section(id="roofline", title="Roofline", svgs=[roofline_svg(rf)], tables=[table], paragraphs=paras,
                   intro="FLOPs and bytes from the recorded shapes against the device's peak throughput and bandwidth: "
                         "how far each op is from what the GPU can do.")


def compile_section(a: Analysis) -> Section | None:
    """torch.compile in the trace (`analysis.compile`): regions, their host cost, Triton
    kernels, recompiles; none without compile markers."""
    c = a.compile
    if c is None or c.regions.is_empty():
        return None
    paras = [
        f"{fmt.counted(c.regions_outer, 'outermost compiled region')} ({fmt.ns(c.region_cpu_ns)} of CPU time, "
        f"{fmt.ns(c.wrapper_ns)} of it not in launch calls: guards, wrapper Python, allocator calls).",
        f"{fmt.counted(c.compiled_frames, 'compiled frame')}, {c.recompiled_frames} recompiled; "
        f"{fmt.counted(c.compile_events, 'compilation step')} inside the trace ({fmt.ns(c.compile_ns)}).",
        f"{fmt.counted(c.triton_events, 'Triton kernel')} ({fmt.ns(c.triton_ns)} of GPU time), "
        f"{c.triton_in_regions} launched inside a compiled region; "
        f"{fmt.counted(c.graph_launches, 'CUDA-graph replay')}.",
    ]
    table = frame_table("compile-kinds", "Compiled regions by kind", c.kinds, [
        ("kind", "kind", "label"), ("regions", "instances", "count"), ("cpu_ns", "CPU time", "ns"),
        ("wrapper_ns", "not launching", "ns"), ("gpu_events", "GPU events", "count"), ("gpu_ns", "GPU time", "ns"),
        ("triton_events", "Triton kernels", "count"), ("triton_ns", "Triton time", "ns")])
    return Section(id="torch-compile", title="torch.compile", paragraphs=paras, tables=[table],
                   intro="Regions torch.compile marks in the trace (Torch-Compiled Region, CompiledFxGraph, "
                         "CompiledFunction, cache lookups), what they cost the host and the kernels they launch.")
