"""Report sections for the core analyses: GPU time, kernels, ops, idle, steps, launches, syncs."""

from __future__ import annotations

import polars as pl

from tracekit import format as fmt
from tracekit.pipeline import Analysis
from tracekit.analysis.gaps import CAUSE_LABELS, LISTED
from tracekit.analysis.hostside import host_time
from tracekit.analysis.order import longest, longest_gaps
from tracekit.model import ENGINE
from tracekit.report.model import Bar, BarChart, Section
from tracekit.report.tables import frame_table


def _bars(id: str, title: str, items: list[tuple[str, int, str]], *, total: int, stacked: bool = False,
          note: str | None = None) -> BarChart:
    bars, x = [], 0.0
    for label, value, css in items:
        frac = value / total if total else 0.0
        bars.append(Bar(label=label, value_text=f"{fmt.ns(value)} ({fmt.pct(frac)})", fraction=frac, css_class=css, x=x))
        x += frac
    return BarChart(id=id, title=title, bars=bars, stacked=stacked, note=note)


def gpu_section(a: Analysis, *, top: int) -> Section | None:
    if a.timeline.devices.is_empty():
        return None
    bd = a.breakdown
    charts = []
    if bd.span_ns:
        items = [("compute", bd.compute_ns, "c-gemm"), ("communication", bd.communication_ns, "c-communication"),
                 ("memory", bd.memory_ns, "c-memcpy"), ("idle", bd.idle_ns, "c-gap-before_first")]
        charts.append(_bars("breakdown", "Temporal breakdown (all devices)", items, total=bd.span_ns, stacked=True,
                            note="Overlap counted once: compute over communication over memory. "
                                 f"Communication hidden under compute: {fmt.pct(bd.overlap_share)}."))
    if a.classes.height:
        total = int(a.classes["total_ns"].sum())
        items = [(r["kernel_class"], int(r["total_ns"]), f"c-{r['kernel_class']}") for r in a.classes.iter_rows(named=True)]
        charts.append(_bars("classes", "GPU time by kernel class (summed, overlap counted twice)", items, total=total))
    devices = a.timeline.devices.join(
        a.trace.meta.devices.select(pl.col("id").alias("device"), pl.col("name").alias("device_name")), on="device", how="left")
    tables = [
        frame_table("devices", "Devices", devices, [
            ("device", "device", "count"), ("device_name", "name", "text"), ("span_ns", "span", "ns"),
            ("busy_ns", "busy", "ns"), ("idle_ns", "idle", "ns"), ("utilisation", "utilisation", "pct"),
            ("streams", "streams", "count"), ("activities", "activities", "count")]),
        frame_table("streams", "Streams", a.timeline.streams, [
            ("device", "device", "count"), ("stream", "stream", "count"), ("busy_ns", "busy", "ns"),
            ("idle_ns", "idle in device span", "ns"), ("utilisation", "utilisation", "pct"), ("activities", "activities", "count")]),
        frame_table("kernels", "Top kernels", a.kernels, [
            ("name", "kernel", "text"), ("kernel_class", "class", "label"), ("precision", "precision", "label"),
            ("tensor_cores", "tensor cores", "bool"), ("count", "count", "count"), ("total_ns", "total", "ns"),
            ("mean_ns", "mean", "ns"), ("median_ns", "median", "ns"), ("max_ns", "max", "ns"), ("cv", "CV", "float"),
            ("share", "share of kernel time", "pct")], limit=top),
    ]
    tc = a.tensor_core_share
    paras = [f"Tensor-core share of GEMM and convolution time: {fmt.pct(tc)}."] if tc is not None else []
    return Section(id="gpu", title="GPU time", charts=charts, tables=tables, paragraphs=paras,
                   intro="Busy time is the union of kernels, memcpys and memsets (profiler overhead and "
                         "sync records are not work). A device's span runs from its first activity to its last.")


def ops_section(a: Analysis, *, top: int) -> Section | None:
    at = a.attribution
    if at.ops.is_empty() and not at.gpu_events:
        return None
    if not at.gpu_events:
        return _host_ops_section(a, top=top)
    ops = at.ops.sort("gpu_incl_ns", descending=True, nulls_last=True)
    t = frame_table("ops", "Top ops by GPU time", ops, [
        ("name", "op", "text"), ("calls", "calls", "count"), ("cpu_total_ns", "CPU total", "ns"),
        ("cpu_self_ns", "CPU self", "ns"), ("gpu_incl_ns", "GPU (inclusive)", "ns", "GPU time of work launched by the op and its children"),
        ("gpu_self_ns", "GPU (self)", "ns"), ("kernels_per_call", "kernels/call", "float"), ("gpu_share", "share of GPU work", "pct")],
        limit=top)
    launch_nothing = at.ops.filter(pl.col("launches_nothing")).sort(["calls", "name"], descending=[True, False])
    silent_names = launch_nothing["name"].to_list()
    silent = ", ".join(silent_names[:12]) + (" …" if len(silent_names) > 12 else "") if silent_names else "none"
    paras = [f"{fmt.count(at.gpu_events)} GPU activities, {fmt.count(at.linked_events)} tied to an op; "
             f"{fmt.count(at.unlinked_events)} ({fmt.ns(at.unlinked_ns)}) not tied to any op "
             "(usually launched before the profiler started).",
             f"Ops that never launch GPU work (metadata ops): {silent}."]
    return Section(id="ops", title="CPU ops and what they launched", tables=[t], paragraphs=paras,
                   intro="Each kernel is tied to its launch call by correlation id and to the CPU op by External id "
                         "(or by time containment on older traces). Inclusive GPU time counts work launched by children.")


def _host_ops_section(a: Analysis, *, top: int) -> Section:
    """Without GPU work: the ops by CPU time, and the op tree's hot paths by self time."""
    host = host_time(a.trace, top=top)
    ops = a.attribution.ops.sort(["cpu_total_ns", "name"], descending=[True, False], nulls_last=True)
    t = frame_table("ops", "Top ops by CPU time", ops, [
        ("name", "op", "text"), ("calls", "calls", "count"), ("cpu_total_ns", "CPU total", "ns"),
        ("cpu_self_ns", "CPU self", "ns"), ("cpu_mean_ns", "CPU per call", "ns")], limit=top)
    hot = frame_table("hot-paths", "Hot paths (CPU self time at the end of each chain of ops)", host.hot_paths, [
        ("op_path", "op path (outermost first)", "text"), ("calls", "calls", "count"), ("self_ns", "CPU self", "ns"),
        ("share", "share of CPU time in ops", "pct")], limit=top)
    paras = [(f"No GPU work in this trace: ops are ranked by CPU time. {fmt.ns(host.ops_ns)} in "
              f"{fmt.counted(host.op_calls, 'op call')} on {fmt.counted(host.threads, 'thread')}.")]
    return Section(id="ops", title="CPU ops and where their time goes", tables=[t, hot], paragraphs=paras,
                   intro="CPU total is an op's wall time, its child ops included; CPU self leaves them out. A hot path "
                         "is a chain of op names from a top-level op down, with the self time of the ops at its end.")


def gaps_section(a: Analysis, *, top: int) -> Section | None:
    if a.timeline.devices.is_empty():
        return None
    g = a.gaps
    items = [(CAUSE_LABELS.get(c, c), ns, f"c-gap-{c}") for c, ns in sorted(g.by_cause.items(), key=lambda kv: -kv[1]) if ns]
    charts = [_bars("idle", "Idle time by cause (device scope)", items, total=g.idle_ns)] if g.idle_ns else []
    # the columns the table shows and orders by (a filter of every column copied them all)
    shown = g.gaps.lazy().filter(LISTED).select(
        "cause", "gap_ns", "start_ns", "device", "stream", "blame_op", "annotation", "module", "next_name",
        "next_op").collect(engine=ENGINE)
    dev = longest_gaps(shown, head=top)
    # times from the trace start, as the findings' evidence counts them
    dev = dev.with_columns(cause_label=pl.col("cause").replace(CAUSE_LABELS),
                           at=pl.col("start_ns") - a.trace.start_ns)
    t = frame_table("gaps", "Longest idle gaps", dev, [
        ("cause_label", "cause", "label"), ("gap_ns", "length", "ns"), ("at", "at (from trace start)", "ns"),
        ("device", "device", "count"), ("blame_op", "CPU op at the time", "text"), ("annotation", "annotation", "text"),
        ("module", "module", "text"), ("next_name", "next GPU activity", "text"), ("next_op", "launched by", "text")],
        limit=top, total_rows=shown.height)
    return Section(id="gaps", title="Idle gaps and why", charts=charts, tables=[t],
                   intro=f"Every gap in a device's busy time longer than {fmt.ns(g.min_gap_ns)} gets a cause; shorter "
                         "ones are summed as short gaps, so the causes add up to the idle time exactly.")


METRIC_LABELS = {"cpu_ns": "CPU", "gpu_ns": "GPU projection", "gpu_busy_ns": "GPU busy"}


def windows_section(a: Analysis, *, top: int) -> Section | None:
    if a.windows.instances.is_empty():
        return None
    inst = a.windows.instances.with_columns(warm=pl.when(pl.col("warmup")).then(pl.lit("warm-up")).otherwise(pl.lit("")))
    t = frame_table("windows", "Steps and annotation windows", inst, [
        ("name", "window", "text"), ("cpu_ns", "CPU", "ns"), ("gpu_ns", "GPU projection", "ns"),
        ("gpu_busy_ns", "GPU busy", "ns"), ("kernels", "kernels", "count"), ("warm", "note", "text")], limit=top * 4)
    figures = pl.col("metric").replace(METRIC_LABELS)  # the figures as the table above names them
    stats = frame_table("window-stats", "Across instances", a.windows.stats.with_columns(metric=figures), [
        ("kind", "window", "text"), ("metric", "figure", "text"), ("count", "instances", "count"),
        ("median_ns", "median", "ns"), ("mean_ns", "mean", "ns"), ("min_ns", "min", "ns"), ("max_ns", "max", "ns"), ("cv", "CV", "float")])
    return Section(id="windows", title="Steps and annotations", tables=[t, stats],
                   intro="Each record_function range and ProfilerStep: its CPU time, the GPU projection (first start to "
                         "last end of the work its launches caused) and the GPU busy time inside that projection.")


def launch_section(a: Analysis, *, top: int) -> Section | None:
    ls = a.launches
    if not ls.launch_calls:
        return None
    paras = [f"{fmt.counted(ls.launch_calls, 'launch call')} took {fmt.ns(ls.launch_api_ns)} of CPU time; median launch "
             f"latency (kernel start − call end) {fmt.ns(ls.median_latency_ns)}; deepest queue {fmt.count(ls.max_queue_depth)}; "
             f"CUDA-graph replays: {fmt.count(ls.graph_launches)} launching {fmt.counted(ls.graph_events, 'kernel')}."]
    t = frame_table("apis", "Launch APIs", ls.apis, [
        ("name", "API", "text"), ("family", "family", "text"), ("calls", "calls", "count"), ("total_ns", "CPU time", "ns"),
        ("gpu_events", "GPU activities", "count"), ("median_latency_ns", "median latency", "ns")], limit=top)
    return Section(id="launches", title="Launches", paragraphs=paras, tables=[t])


def sync_section(a: Analysis, *, top: int) -> Section | None:
    if a.syncs.syncs.is_empty() and a.copies.copies.is_empty():
        return None
    s, c = a.syncs, a.copies
    syncs = frame_table("syncs", "Blocking host↔device syncs", longest(s.syncs, head=top), [
        ("name", "call", "text"), ("dur_ns", "blocked", "ns"), ("gpu_wait_ns", "GPU work waited for", "ns"),
        ("op_path", "caused by", "text"), ("waited_name", "last GPU work", "text")], limit=top,
        total_rows=s.syncs.height)
    copies = frame_table("copies", "Copies", longest(c.copies, head=top), [
        ("name", "copy", "text"), ("direction", "direction", "text"), ("host_memory", "host memory", "text"),
        ("bytes", "bytes", "bytes"), ("dur_ns", "time", "ns"), ("bandwidth_gbps", "bandwidth", "gbps"),
        ("api", "API", "text"), ("op_path", "issued by", "text")], limit=top, total_rows=c.copies.height)
    paras = [f"{fmt.counted(s.sync_calls, 'blocking sync')} held the CPU for {fmt.ns(s.sync_ns)}; "
             f"{fmt.counted(c.memcpys, 'memcpy')} moved {fmt.size(c.memcpy_bytes)} in {fmt.ns(c.memcpy_ns)} "
             f"({fmt.count(c.pageable)} from pageable memory, {fmt.count(c.dtod)} device-to-device)."]
    return Section(id="syncs", title="Syncs and copies", paragraphs=paras, tables=[syncs, copies],
                   intro="A device-to-device copy issued by an out-of-place op (masked_fill, to, contiguous) is a hidden "
                         "copy: the 'issued by' column names the op path that caused it.")


def occupancy_section(a: Analysis, *, top: int) -> Section | None:
    occ = a.occupancy.filter(pl.col("theoretical_occupancy").is_not_null())
    if occ.is_empty():
        return None
    t = frame_table("occupancy", "Occupancy of the heaviest kernels", occ, [
        ("name", "kernel", "text"), ("count", "count", "count"), ("total_ns", "total", "ns"),
        ("theoretical_occupancy", "theoretical occupancy", "pct"), ("limiting_factor", "limited by", "label"),
        ("kineto_occupancy_pct", "Kineto's figure (%)", "float1"), ("sm_efficiency", "SM efficiency", "pct")], limit=top)
    return Section(id="occupancy", title="Occupancy", tables=[t],
                   intro="Recomputed from the device properties and each launch's registers, shared memory and block "
                         "size. Kineto's own figure assumes the default 48 KB of shared memory and reads 0 % for kernels "
                         "that opt into more.")


def memory_section(a: Analysis, *, top: int) -> Section | None:
    m = a.memory
    if m.devices.is_empty():
        return None
    t = frame_table("memory", "Allocator peaks", m.devices, [
        ("device", "device", "text"), ("peak_allocated_bytes", "peak allocated", "bytes"),
        ("peak_reserved_bytes", "peak reserved", "bytes"), ("peak_fraction", "of device memory", "pct"),
        ("peak_op_path", "op at the peak", "text"), ("samples", "samples", "count")])
    return Section(id="memory", title="Memory", tables=[t])
