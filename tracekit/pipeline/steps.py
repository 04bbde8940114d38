"""The analysis pipeline's steps, in the order the default runner takes them.

Intermediates first (op tree, launch calls, GPU links, the dependency graph), each handed
to the steps that name it; the critical path and its what-ifs next, so that the graph, the
largest intermediate, is let go before any other analysis starts; the findings last, on
every result before them. Each function is `(trace, options, inputs) -> result`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from tracekit.analysis import taxonomy
from tracekit.analysis.attribution import attribute
from tracekit.analysis.breakdown import breakdown
from tracekit.analysis.compile import compile_stats
from tracekit.analysis.gaps import gaps
from tracekit.analysis.launches import launch_stats
from tracekit.analysis.links import gpu_links, launch_ops, op_tree
from tracekit.analysis.memory import memory_stats
from tracekit.analysis.occupancy import occupancy, occupancy_table
from tracekit.analysis.syncs import blocking_copies, copy_stats, sync_stats
from tracekit.analysis.timeline import timeline
from tracekit.analysis.windows import windows
from tracekit.findings.context import step_bounds, step_timeline
from tracekit.model import Trace
from tracekit.pipeline.result import AnalysisOptions
from tracekit.pipeline.run import Step

In = dict[str, Any]


def _graph(trace: Trace, opts: AnalysisOptions, i: In) -> Any:
    from tracekit.analysis.graph import build_graph

    return build_graph(trace, links=i["links"], classes=i["taxonomy"])


def _whatifs(trace: Trace, opts: AnalysisOptions, i: In) -> list[Any]:
    from tracekit.analysis.whatif import standard

    if i["graph"] is None or trace.gpu_work.is_empty():
        return []
    return standard(i["graph"], classes=i["taxonomy"])


def _critical_path(trace: Trace, opts: AnalysisOptions, i: In) -> Any:
    from tracekit.analysis.critical_path import critical_path

    if i["graph"] is None:  # (the graph's failure is the critical path's note already)
        return None
    return critical_path(trace, graph=i.pop("graph"), handed_over=True, links=i["links"], keep_graph=opts.keep_graph,
                         classes=i["taxonomy"])


def _attention(trace: Trace, opts: AnalysisOptions, i: In) -> Any:
    from tracekit.analysis.attention import analyze_attention

    return analyze_attention(trace, ops=i["ops"], launches=i["launch_calls"], links=i["links"], classes=i["taxonomy"])


def _roofline(trace: Trace, opts: AnalysisOptions, i: In) -> Any:
    from tracekit.analysis.roofline import roofline

    return roofline(trace, peak_tflops=opts.peak_tflops, peak_gbps=opts.peak_gbps, ops=i["ops"], links=i["links"],
                    classes=i["taxonomy"])


def _findings(trace: Trace, opts: AnalysisOptions, i: In) -> Any:
    from tracekit.findings import run_findings
    from tracekit.findings.context import OCCUPANCY_COLUMNS

    scenarios = {w.scenario: w for w in i["whatifs"]}
    # the pipeline's names for the Context's attributes (`run_findings` refuses any other key)
    seed = {"tree": i["ops"], "launches": i["launch_calls"], "gpu_links": i["links"], "taxonomy": i["taxonomy"],
            "occupancy": i["per_launch"].select(OCCUPANCY_COLUMNS),
            "no_launch_overhead": scenarios.get("no_launch_overhead"),
            "step_bounds": i["step_bounds"],
            "step_timeline": i["timeline"] if i["step_timeline"] is None else i["step_timeline"],
            **{name: i[name] for name in ("critical_path", "timeline", "breakdown", "attention", "roofline", "gaps",
                                          "syncs", "copies", "compile")}}
    i.clear()
    return run_findings(trace, config=opts.findings_config or None, seed=seed)


def _no_whatifs() -> list[Any]:
    return []


def concat_rows(parts: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """The merge of a step whose result has one row per event of the window it saw (the
    per-launch occupancy): over windows that split the events, the rows of each, in order."""
    return pl.concat(list(parts))


STEPS: tuple[Step, ...] = (
    Step("ops", lambda t, o, i: op_tree(t), kept=False),
    Step("launch_calls", lambda t, o, i: launch_ops(t, ops=i["ops"]), ("ops",), kept=False),
    Step("links", lambda t, o, i: gpu_links(t, launches=i["launch_calls"], ops=i["ops"]), ("launch_calls", "ops"),
         kept=False),
    Step("taxonomy", lambda t, o, i: taxonomy.classify_names(t.gpu["name"]), kept=False),
    Step("graph", _graph, ("links", "taxonomy"), kept=False, optional=True, note_as="critical_path"),
    Step("whatifs", _whatifs, ("graph", "taxonomy"), optional=True, fallback=_no_whatifs),
    # (after the what-ifs, which read the graph it consumes: on any runner)
    Step("critical_path", _critical_path, ("graph", "links", "taxonomy", "whatifs"), optional=True),
    Step("timeline", lambda t, o, i: timeline(t)),
    Step("breakdown", lambda t, o, i: breakdown(t, classes=i["taxonomy"]), ("taxonomy",)),
    Step("kernels", lambda t, o, i: taxonomy.kernel_table(t.gpu, classes=i["taxonomy"]), ("taxonomy",)),
    Step("classes", lambda t, o, i: taxonomy.class_table(t.gpu, include_memory=True, classes=i["taxonomy"]),
         ("taxonomy",)),
    Step("tensor_core_share", lambda t, o, i: taxonomy.tensor_core_share(t.gpu, classes=i["taxonomy"]), ("taxonomy",)),
    Step("per_launch", lambda t, o, i: occupancy(t.gpu, t.meta.devices), kept=False, merge=concat_rows),
    Step("occupancy", lambda t, o, i: occupancy_table(t.gpu, t.meta.devices, per_launch=i["per_launch"]),
         ("per_launch",)),
    Step("step_bounds", lambda t, o, i: step_bounds(t), kept=False),
    Step("step_timeline", lambda t, o, i: step_timeline(t, i["step_bounds"]), ("step_bounds",), kept=False),
    Step("memory", lambda t, o, i: memory_stats(t, ops=i["ops"]), ("ops",)),
    Step("attention", _attention, ("ops", "launch_calls", "links", "taxonomy"), optional=True),
    Step("roofline", _roofline, ("ops", "links", "taxonomy"), optional=True),
    Step("blocking", lambda t, o, i: blocking_copies(t), kept=False),
    Step("gaps", lambda t, o, i: gaps(t, min_gap_ns=o.min_gap_ns, links=i["links"], ops=i["ops"],
                                      blocking=i["blocking"]), ("links", "ops", "blocking")),
    Step("attribution", lambda t, o, i: attribute(t, instances=False, ops=i["ops"], launches=i["launch_calls"],
                                                  links=i["links"]), ("ops", "launch_calls", "links")),
    Step("windows", lambda t, o, i: windows(t, links=i["links"]), ("links",)),
    Step("steps", lambda t, o, i: windows(t, name="ProfilerStep", links=i["links"]), ("links",)),
    Step("syncs", lambda t, o, i: sync_stats(t, ops=i["ops"], launches=i["launch_calls"], blocking=i["blocking"]),
         ("ops", "launch_calls", "blocking")),
    Step("copies", lambda t, o, i: copy_stats(t, ops=i["ops"], links=i["links"]), ("ops", "links")),
    Step("launches", lambda t, o, i: launch_stats(t, calls=i["launch_calls"], gpu=i["links"]),
         ("launch_calls", "links")),
    Step("compile", lambda t, o, i: compile_stats(t, launches=i["launches"], calls=i["launch_calls"], gpu=i["links"]),
         ("launches", "launch_calls", "links")),
    Step("findings", _findings,
         ("ops", "launch_calls", "links", "taxonomy", "per_launch", "whatifs", "critical_path", "timeline",
          "breakdown", "step_bounds", "step_timeline", "attention", "roofline", "gaps", "syncs", "copies", "compile"),
         optional=True),
)
