"""Critical path of a window: the heaviest chain of dependent work, classified and attributed.

The path is the longest path of `graph.build_graph` (edge weight = work in ns; waiting
weighs 0, so the path is the chain that explains the window with the most work and the
least waiting), the one `nx.dag_longest_path` returns, computed on the edge arrays
(`longest`). It is returned as segments, one per piece of time on the path:
`start_ns`, `end_ns`, `cls` (`graph.CLASSES`), the slice or activity it belongs to
(`name`, `eid`), the CPU op or module it is attributed to (`context`: for host time the
nearest enclosing module (`nn.Module: …`, `## … ##`, a record_function range other than
`ProfilerStep#N`), else the outermost cpu_op; for GPU work the op that launched it) and
its `lane` (`cpu:<pid>:<tid>` or `gpu:<device>:<stream>`). Time of the window before the
path starts or after it ends is an `idle` segment with no lane.

Verdict: the largest of five groups of the window's time, as a share of the window:
gpu (gpu_compute + gpu_memory + communication) -> `gpu-bound`; host (python_overhead +
launch_overhead) -> `launch-bound`; cpu_compute -> `cpu-bound`; sync_wait ->
`sync-bound`; idle -> `idle`. A window with no GPU work is `no-gpu` (never "CPU-bound":
there was nothing for the host to feed), an empty one `empty`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.graph import CLASS, CLASSES, DepGraph, build_graph
from tracekit.analysis.links import gpu_links
from tracekit.analysis.path_segments import (
    EDGE,
    MODULE,
    PATH_SCHEMA,
    longest_path,
    path_nodes,
    path_segments,
    path_steps,
    steps_to_segments,
    to_segments,
    with_context,
)
from tracekit.analysis.path_verdict import GROUPS, sentence_of, verdict_of
from tracekit.analysis.windows import window_bounds
from tracekit.errors import UsageError
from tracekit.model import GROUPING_ENGINE, Trace

# the names other modules import from here (the path's segments live in path_segments,
# its verdict in path_verdict)
__all__ = [
    "CLASS_SCHEMA", "EDGE", "GROUPS", "MODULE", "PATH_SCHEMA", "CriticalPath", "GraphShape", "critical_path",
    "longest_path", "path_nodes", "path_segments", "path_steps", "resolve_window", "steps_to_segments", "summarise",
]

I64, F64, STR = pl.Int64, pl.Float64, pl.String
CLASS_SCHEMA: dict[str, pl.DataType] = {"cls": STR, "ns": I64, "share": F64}


@dataclass(frozen=True)
class CriticalPath:
    """Result of `critical_path`. `segments` tile the window in time order (zero-length
    pieces at one instant in the order the path takes them)."""

    segments: pl.DataFrame  # PATH_SCHEMA
    by_class: pl.DataFrame  # CLASS_SCHEMA: every class, share of the window
    by_context: pl.DataFrame  # cls, context, ns, share: who the time belongs to
    window: str
    start_ns: int
    end_ns: int
    weight_ns: int  # the path's weight: its work (waiting weighs 0)
    shares: dict[str, float]  # per class, of the window
    verdict: str  # gpu-bound | launch-bound | cpu-bound | sync-bound | idle | no-gpu | empty
    verdict_share: float
    sentence: str
    nodes: int
    edges: int
    edge_counts: dict[str, int] = field(default_factory=dict)
    inferred_edges: int = 0
    graph: DepGraph | None = field(default=None, repr=False, compare=False)

    @property
    def window_ns(self) -> int:
        return self.end_ns - self.start_ns

    def to_dict(self, *, limit: int = 200) -> dict[str, Any]:
        return {
            "window": self.window, "start_ns": self.start_ns, "end_ns": self.end_ns,
            "window_ns": self.window_ns, "weight_ns": self.weight_ns, "verdict": self.verdict,
            "verdict_share": self.verdict_share, "sentence": self.sentence, "shares": self.shares,
            "nodes": self.nodes, "edges": self.edges, "edge_counts": self.edge_counts,
            "inferred_edges": self.inferred_edges, "by_context": self.by_context.head(20).to_dicts(),
            "segments": self.segments.head(limit).to_dicts(), "segment_count": self.segments.height,
        }


def resolve_window(trace: Trace, window: str | None = None, *, index: int | None = None) -> tuple[str, int | None, int | None]:
    """(label, start_ns, end_ns) of a window: None/'all' = the whole trace; else the
    annotations matching `window` (exact name, kind such as `ProfilerStep`, or a regular
    expression): instance `index` (0-based, negative from the end), or all of them from the
    first start to the last end."""
    if window is None or window == "all":
        if index is not None:
            raise UsageError("an instance index needs a window: name one (e.g. --window ProfilerStep), not all")
        return "whole trace", None, None
    bounds = window_bounds(trace, window)
    if bounds.is_empty():
        raise UsageError(f"no annotation matches window {window!r}")
    if index is not None:
        if not -bounds.height <= index < bounds.height:
            raise UsageError(f"window {window!r} has {fmt.counted(bounds.height, 'instance')}; index {index} is out of range")
        row = bounds.row(index, named=True)
        return row["window_name"], row["window_start_ns"], row["window_end_ns"]
    if bounds.height == 1:
        row = bounds.row(0, named=True)
        return row["window_name"], row["window_start_ns"], row["window_end_ns"]
    label = f"{window} ({fmt.count(bounds.height)} instances)"
    return label, int(bounds["window_start_ns"].min()), int(bounds["window_end_ns"].max())  # type: ignore[arg-type]


def critical_path(trace: Trace, *, window: str | None = None, index: int | None = None,
                  graph: DepGraph | None = None, links: pl.DataFrame | None = None, keep_graph: bool = True,
                  handed_over: bool = False, classes: pl.DataFrame | None = None,
                  **graph_options: int) -> CriticalPath:
    """The critical path of the whole trace or of one window (see `resolve_window`).

    keep_graph: keep the graph in the result (`CriticalPath.graph`). Without it, a graph
        this call built (or one `handed_over`: given, with no other reference kept) is let
        go before the segments get their contexts: the graph is the largest intermediate
        of all, and the contexts and the summary would otherwise add to it.
    """
    label, start, end = resolve_window(trace, window, index=index)
    links = gpu_links(trace) if links is None else links
    owned = graph is None or handed_over
    dep = graph if graph is not None else build_graph(trace, start_ns=start, end_ns=end, links=links, **graph_options)
    del graph
    nodes = path_nodes(dep)
    if owned and not keep_graph:  # the orders the path read
        dep.forget_orders()
    steps = path_steps(dep, nodes)
    shape, slices, pieces, kept = GraphShape.of(dep), dep.slices, dep.segments, dep if keep_graph else None
    del dep  # the edges go before the segments are gathered (a graph the caller holds stays alive)
    held = [pieces]  # (handed over: each piece column goes once gathered, unless the graph is kept)
    del pieces
    segs = to_segments(steps, held, shape.start_ns, shape.end_ns)
    del steps
    segments = with_context(segs, slices, links)
    del segs, slices
    return summarise(segments, shape, label=label, graph=kept, classes=classes)


@dataclass(frozen=True)
class GraphShape:
    """What the summary reads of a dependency graph (which it need not keep)."""

    start_ns: int
    end_ns: int
    nodes: int
    edges: int
    edge_counts: dict[str, int]
    inferred_edges: int

    @classmethod
    def of(cls, dep: DepGraph) -> GraphShape:
        return cls(start_ns=dep.start_ns, end_ns=dep.end_ns, nodes=len(dep.order), edges=dep.edges.height,
                   edge_counts=dep.edge_counts, inferred_edges=dep.inferred_edges)

    @property
    def window_ns(self) -> int:
        return self.end_ns - self.start_ns


def summarise(segs: pl.DataFrame, shape: GraphShape, *, label: str, graph: DepGraph | None = None,
              classes: pl.DataFrame | None = None) -> CriticalPath:
    window_ns = shape.window_ns
    has_gpu = shape.edge_counts.get("gpu", 0) > 0
    per = segs.group_by("cls").agg(ns=pl.col("dur_ns").sum())
    by_class = pl.DataFrame({"cls": list(CLASSES)}, schema={"cls": CLASS}).join(per, on="cls", how="left").with_columns(
        pl.col("ns").fill_null(0)).with_columns(share=pl.col("ns") / window_ns if window_ns else pl.lit(0.0))
    by_class = by_class.cast(CLASS_SCHEMA)
    shares = dict(zip(by_class["cls"].to_list(), by_class["share"].to_list()))
    # grouped on the class codes, which become text once summed (a cast of every row cost
    # more), by the streaming engine (`model.GROUPING_ENGINE`)
    by_context = (segs.lazy().group_by("cls", "context").agg(ns=pl.col("dur_ns").sum())
                  .with_columns(pl.col("cls", "context").cast(STR),
                                share=pl.col("ns") / window_ns if window_ns else pl.lit(0.0))
                  .sort(["ns", "cls", "context"], descending=[True, False, False], nulls_last=True)
                  .collect(engine=GROUPING_ENGINE))
    verdict, share = verdict_of(shares, has_gpu=has_gpu, window_ns=window_ns)
    return CriticalPath(
        segments=segs, by_class=by_class, by_context=by_context, window=label, start_ns=shape.start_ns,
        end_ns=shape.end_ns, weight_ns=int(segs["weight_ns"].sum() or 0), shares=shares, verdict=verdict,
        verdict_share=share, sentence=sentence_of(verdict, share, shares, segs, classes=classes),
        nodes=shape.nodes, edges=shape.edges, edge_counts=shape.edge_counts,
        inferred_edges=shape.inferred_edges, graph=graph)
