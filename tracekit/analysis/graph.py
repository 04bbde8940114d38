"""Dependency graph of a trace: CPU threads, launches, GPU streams and syncs as one DAG.

Weights are *work*, not elapsed time. An edge weighs the nanoseconds of work it stands
for: a thread running (Python, dispatch, launch calls, CPU ops) or a GPU executing.
Waiting weighs 0: a sync call blocked on the GPU, an idle stream, a kernel queued behind
its launch, a long stretch with nothing running on a thread. Every path between two
points covers the same wall time, so the heaviest path is the chain of dependent work
that explains most of that time with work and least with waiting: the critical path.
(Weighting every edge by elapsed time makes all paths tie; HTA's tie-break stays on the
CPU, hence its "100 % CPU-bound" on traces without `cuda_sync` records.)

Lanes and their edges:
- CPU thread (`cpu`): the start and end points of every slice on the thread (ops,
  annotations, Python frames, runtime and driver calls) in time order, joined one to the
  next. This one chain is same-thread order and op nesting together (into a child, out
  of it, on to the sibling). The piece between two points belongs to the innermost open
  slice (`segments`, one row per piece). Only points with edges to other lanes (launch
  calls, blocking calls a sync edge ends at, the lane's ends) become graph nodes; the
  chain between two of them is one edge weighing the sum of its pieces.
- GPU stream (`gpu`, `stream`): a start and an end node per activity (kernel, memcpy,
  memset), joined by an edge weighing its duration; a 0-weight edge from each end to the
  next start on the stream.
- `launch`: launch call start -> activity start (correlation; a `cudaGraphLaunch` fans out
  to every kernel of the graph). Weight 0: the time is launch latency.
- `cross_stream`: end of the last work enqueued on the recorded stream before the
  `cudaEventRecord` -> start of the first work enqueued on the waiting stream after the
  `cudaStreamWaitEvent`. From `Stream Wait Event` records when the trace has them; else
  inferred on the calling thread (`inferred=True`).
- `sync`: end of the GPU work a blocking call waited for -> end of that call, weighing the
  call's tail (call end - work end); the call's own piece weighs the same tail, so the
  time it spent blocked weighs nothing on either side. Sources, first that applies:
  the call's own work (a synchronous memcpy: correlation); its `cuda_sync` record (the
  stream or device it synced); a sync call by name (`cudaDeviceSynchronize`, ...,
  `inferred=True`); any other call lasting >= `min_blocking_ns` that ends within
  `sync_tolerance_ns` after GPU work ends and spent at least half its time before that end
  (a launch blocked on a full queue, `cudaFree`, ...: `inferred=True`). The work must
  have ended inside the call and have been launched before it.

Classes of the pieces: `CLASSES`. A CPU piece is `launch_overhead` in a runtime call or in
a cpu_op that (itself or below) launches GPU work, `cpu_compute` in other cpu_ops,
`python_overhead` in Python frames, annotations and between slices, `sync_wait` in a
blocking call; a stretch longer than `idle_gap_ns` with no op or call open is `idle`
(weight 0: the thread waited on something the trace does not show, e.g. the main thread
while the autograd thread runs the backward pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import polars as pl

from tracekit.analysis.breakdown import work_class
from tracekit.analysis.graph_columns import (
    BOOL,
    CLASS,
    CLASSES,
    DEFAULT_IDLE_GAP_NS,
    DEFAULT_MIN_BLOCKING_NS,
    DEFAULT_SYNC_TOLERANCE_NS,
    EDGE_KINDS,
    EDGE_SCHEMA,
    EVENT_RECORD_CALL,
    GPU_CLASS,
    I64,
    KIND,
    ROLE,
    ROLES,
    SEGMENT_SCHEMA,
    SYNC_SCHEMA,
    WORK_SCHEMA,
)
from tracekit.analysis.graph_cpu import (
    MAX_PIECE_RUNS,
    chain_edges,
    chain_pieces,
    chain_points,
    piece_runs,
    run_sums,
)
from tracekit.analysis.graph_gpu import cross_stream_edges, launch_edges, stream_edges, sync_edges, sync_waits
from tracekit.analysis.links import gpu_links
from tracekit.analysis.longest import EdgeOrder, longest_path
from tracekit.analysis.nesting import with_parents
from tracekit.analysis.windows import STEP_NAME
from tracekit.model import ENGINE, GPU_WORK_CATS, NOT_CPU_CATS, TEXT, Trace

if TYPE_CHECKING:  # networkx loads only when a DiGraph is asked for (its import is slow)
    import networkx as nx

# the names other modules import from here (the graph's parts live in graph_columns,
# graph_cpu and graph_gpu)
__all__ = [
    "CLASS", "CLASSES", "DEFAULT_IDLE_GAP_NS", "DEFAULT_MIN_BLOCKING_NS", "DEFAULT_SYNC_TOLERANCE_NS", "EDGE_KINDS",
    "EDGE_SCHEMA", "EVENT_RECORD_CALL", "KIND", "MAX_PIECE_RUNS", "ROLE", "ROLES", "SEGMENT_SCHEMA", "SYNC_SCHEMA",
    "TEXT", "DepGraph", "build_graph", "cross_stream_edges", "piece_runs", "run_sums", "sync_waits",
]


@dataclass(frozen=True)
class DepGraph:
    """Result of `build_graph`. The graph's nodes are ints; edge attribute `weight` (ns).

    `graph` (the networkx DiGraph) is built on first use only: the critical path and the
    what-if estimates run on the edge arrays (`longest.EdgeOrder`, shared via `edge_order`).
    """

    edges: pl.DataFrame  # EDGE_SCHEMA: every graph edge (cpu edges are chains of segments)
    segments: pl.DataFrame  # SEGMENT_SCHEMA: the CPU pieces; `src` = the cpu edge they make up
    syncs: pl.DataFrame  # SYNC_SCHEMA: blocking calls and the GPU work each waited for
    slices: pl.DataFrame  # the CPU slices in the window, as a tree: eid, name, role, parent_eid
    start_ns: int  # the window
    end_ns: int
    edge_counts: dict[str, int] = field(default_factory=dict)
    inferred_edges: int = 0
    dropped_edges: int = 0  # edges against the time order (clock skew, equal-time ties), left out
    sync_records: int = 0  # cuda_sync records in the window
    order: pl.Series | list[int] = field(default_factory=list, repr=False)  # a topological order of the nodes (Int64)

    @property
    def window_ns(self) -> int:
        return self.end_ns - self.start_ns

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The edges as a DiGraph: attribute `weight`, and `inferred` on inferred edges."""
        import networkx as nx

        graph = nx.DiGraph()
        graph.add_edges_from(zip(self.edges["src"].to_list(), self.edges["dst"].to_list(),
                                 [{"weight": w} for w in self.edges["weight_ns"].to_list()]))
        inferred = self.edges.filter(pl.col("inferred"))
        marks = dict.fromkeys(zip(inferred["src"].to_list(), inferred["dst"].to_list()), True)
        nx.set_edge_attributes(graph, marks, "inferred")
        return graph

    @cached_property
    def edge_order(self) -> EdgeOrder:
        """The edges in topological positions, computed once for the path and every what-if."""
        return EdgeOrder.of(self)

    @cached_property
    def cpu_runs(self) -> tuple[pl.Series, pl.Series, pl.Series]:
        """(row of each cpu edge in `edges`, start and end of its run of `segments`,
        `piece_runs`), computed once for every what-if."""
        cpu = self.edges.select(row=pl.int_range(pl.len(), dtype=I64), src="src").filter(self.edges["kind"] == "cpu")
        return (cpu["row"], *piece_runs(self.segments["src"], cpu["src"]))

    @cached_property
    def longest(self) -> tuple[pl.Series, int]:
        """The longest path's nodes (Int64) and weight (`longest.longest_path`), computed
        once for the critical path and every what-if."""
        if self.edges.is_empty():
            return pl.Series("node", [], dtype=I64), 0
        order = self.edge_order
        return longest_path(order, order.weights(self.edges["weight_ns"]))

    @property
    def path_weight_ns(self) -> int:
        """Weight of the longest path (0 without edges)."""
        return self.longest[1]

    def forget_orders(self) -> None:
        """Let go of what the path and the what-ifs computed on the edges (`edge_order`,
        `cpu_runs`, `longest`, `graph`): each is computed again if asked for."""
        for name in ("edge_order", "cpu_runs", "longest", "graph"):
            self.__dict__.pop(name, None)


def build_graph(trace: Trace, *, start_ns: int | None = None, end_ns: int | None = None,
                sync_tolerance_ns: int = DEFAULT_SYNC_TOLERANCE_NS,
                min_blocking_ns: int = DEFAULT_MIN_BLOCKING_NS, idle_gap_ns: int = DEFAULT_IDLE_GAP_NS,
                links: pl.DataFrame | None = None, classes: pl.DataFrame | None = None) -> DepGraph:
    """The dependency graph of the trace, or of the window [start_ns, end_ns) (clipped);
    `links` (`links.gpu_links`) and `classes` (`taxonomy.classify_names` of the GPU names)
    computed when not given."""
    links = gpu_links(trace) if links is None else links
    slices = _cpu_slices(trace)
    work = _work(trace, links, classes)
    w0, w1 = _bounds(slices, work, start_ns, end_ns)
    slices, work = _clip(slices, w0, w1), _clip(work, w0, w1)
    nested = with_parents(slices.with_columns(dur_ns=pl.col("end_ns") - pl.col("ts_ns")))
    syncs = sync_waits(trace, slices, work, tolerance_ns=sync_tolerance_ns, min_blocking_ns=min_blocking_ns)
    points, lanes = chain_points(nested)
    gpu_base = points.height
    work = work.lazy().sort("device", "stream", "ts_ns", "eid").with_row_index("_i").with_columns(
        s_node=pl.col("_i").cast(I64) * 2 + gpu_base, e_node=pl.col("_i").cast(I64) * 2 + gpu_base + 1
    ).collect(engine=ENGINE)
    launched = work.lazy().filter(pl.col("launch_eid").is_not_null()).select("launch_eid").unique().collect(
        engine=ENGINE)
    callers = links.lazy().select(eid="launch_eid").drop_nulls().unique().collect(engine=ENGINE)
    gpu = stream_edges(work)
    # each kind's (src, dst) pairs are unique, and only a cross-stream edge can repeat another
    # kind's (a stream edge, when a wait names its own stream) or itself: those go, the
    # first kept (no unique over every edge)
    cross = cross_stream_edges(trace, slices, work).lazy().unique(["src", "dst"], keep="first", maintain_order=True)
    cross = cross.join(gpu.lazy().filter(pl.col("kind") == "stream").select("src", "dst"), on=["src", "dst"],
                       how="anti", maintain_order="left")
    # the two kinds that read the slices, made first (a few rows a sync or a wait), so that
    # the slices, and the columns of their nesting that the pieces and the result do not
    # read, go before the pieces are made, the build's largest step (which lowers its peak
    # there and where the edges are put together)
    few = pl.collect_all([sync_edges(syncs, work, points, lanes, slices), cross], engine=ENGINE)
    kept = nested.select("eid", "name", "role", "parent_eid")  # what the pieces and the path's context walk read
    del slices, nested, cross
    segments, anchors = chain_pieces(points, lanes, kept, syncs, launched, callers, idle_gap_ns)
    del launched, callers
    points = points.drop("key", "owner")  # (the pieces' order and owners: read by the segments alone)
    parts = [gpu.lazy(), few[0].lazy(), launch_edges(work, points), few[1].lazy(), chain_edges(segments, anchors, lanes)]
    # one plan for the edges of every kind
    edges = pl.concat([p.select(list(EDGE_SCHEMA)).cast(EDGE_SCHEMA) for p in parts]).collect(engine=ENGINE)
    # what the order and the result read, and nothing else: the rest of the points and of the
    # work go before the order's work, the largest step after the pieces (the edges' own
    # pieces stay with `edges` until it is made one chunk)
    del parts, gpu, few, anchors
    points, work = points.select("node", "t", "opening"), work.select("s_node", "e_node", "ts_ns", "end_ns")
    ok, order = _in_order(edges, points, work)
    dropped = ok.len() - ok.sum()
    del points, work
    # one chunk per column (every reader gathers or joins on them, and a gather walks every
    # chunk), made once the order's work is let go: a copy either way
    edges = (edges.filter(ok) if dropped else edges).rechunk()
    counts = {k: 0 for k in EDGE_KINDS} | dict(edges.group_by("kind").len().rows())
    return DepGraph(edges=edges, segments=segments, syncs=syncs, slices=kept, start_ns=w0, end_ns=w1,
                    edge_counts={k: int(v) for k, v in counts.items()}, inferred_edges=int(edges["inferred"].sum()),
                    dropped_edges=dropped, order=order,
                    sync_records=_records(trace, w0, w1).height)


def _in_order(edges: pl.DataFrame, points: pl.DataFrame, work: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """Rank every node by (time, kind, id) and flag the edges that go forward in it.

    Every edge goes forward in time; at equal times the kinds are ordered GPU end < CPU end
    < CPU start < GPU start (a zero-length GPU activity's end counts as a start), which every
    kind of edge respects but for rare equal-time corners (those, and edges back in time
    from clock skew, are left out: the graph is a DAG by construction). Returns the flags
    (one per edge) and the nodes of the kept edges in rank order (a topological order).
    """
    opening = pl.col("opening")
    ends, starts = ((points.lazy().filter(which).select("node", "t")) for which in (~opening, opening))  # in node order
    gpu = pl.concat([work.lazy().select(node="s_node", t="ts_ns", k=pl.lit(3, I64)),
                     work.lazy().select(node="e_node", t="end_ns",
                                        k=pl.when(pl.col("end_ns") > pl.col("ts_ns")).then(0).otherwise(3).cast(I64))])
    gpu = gpu.sort("node").collect().lazy()
    k = pl.col("k")
    # (t, k, node) order as a stable sort on t alone: the rows go in already in (k, node)
    # order (each kind's rows in node order, the kinds one after the other), cheaper than a
    # sort on three keys; only the nodes are gathered in that order
    parts = [gpu.filter(k == 0).select("node", "t"), ends, starts, gpu.filter(k == 3).select("node", "t")]
    ranked = pl.concat(parts).select(pl.col("node").sort_by("t", maintain_order=True)).collect()["node"]
    del gpu, parts, ends, starts
    # nodes are 0..n-1 (points' rows, then two per GPU activity): rank and membership are
    # arrays indexed by node, read with gathers instead of joins
    n = ranked.len()
    rank = pl.Series(dtype=I64).extend_constant(0, n).scatter(ranked, pl.int_range(n, dtype=I64, eager=True))
    ok = rank.gather(edges["src"]) < rank.gather(edges["dst"])
    del rank
    # the kept edges' ends one column at a time, each let go once marked (both at once, with
    # the ranks still held, add to the build's peak)
    used = pl.Series(dtype=BOOL).extend_constant(False, n)
    for end in ("src", "dst"):
        used = used.scatter(edges[end].filter(ok), True)
    order = ranked.filter(used.gather(ranked)).rename("node")
    return ok, order


# -- inputs --------------------------------------------------------------------------------

def _cpu_slices(trace: Trace) -> pl.DataFrame:
    """CPU slices with a `role`: op | python | runtime. Their names are codes (`model.TEXT`):
    every step of the build copies them (sorted, nested, filtered), four bytes a slice where
    text takes a 16-byte view; the calls' names are read as
    text where a pattern is matched (`sync_waits`, `cross_stream_edges`)."""
    cat = pl.col("cat")
    python = cat.is_in(["user_annotation", "python_function"]) | pl.col("name").str.contains(STEP_NAME)
    ops = trace.ops.select("eid", "name", "pid", "tid", "ts_ns", "end_ns", "cat", "dur_ns").filter(
        ~cat.is_in(NOT_CPU_CATS) & (pl.col("dur_ns") > 0)).select(
        "eid", pl.col("name").cast(TEXT), "pid", "tid", "ts_ns", "end_ns", correlation=pl.lit(None, I64),
        role=pl.when(python).then(pl.lit("python", ROLE)).otherwise(pl.lit("op", ROLE)))
    rt = trace.runtime.select("eid", pl.col("name").cast(TEXT), "pid", "tid", "ts_ns", "end_ns", "correlation",
                              role=pl.lit("runtime", ROLE))
    return pl.concat([ops, rt.cast(ops.schema)]).sort("ts_ns", "eid")


def _work(trace: Trace, links: pl.DataFrame, classes: pl.DataFrame | None) -> pl.DataFrame:
    """GPU work rows with launch info and class (gpu_compute | gpu_memory | communication)."""
    if links.is_empty():
        return pl.DataFrame(schema=WORK_SCHEMA)
    cls = work_class(links, classes=classes).replace_strict(GPU_CLASS, return_dtype=CLASS)
    return links.lazy().filter(pl.col("cat").is_in(GPU_WORK_CATS)).select(
        "eid", "name", pl.col("device").fill_null(-1), pl.col("stream").fill_null(-1), "ts_ns",
        pl.max_horizontal("ts_ns", "end_ns").alias("end_ns"), "launch_eid", "launch_ts_ns", "launch_pid",
        "launch_tid", cls=cls).cast(WORK_SCHEMA).collect(engine=ENGINE)


def _bounds(slices: pl.DataFrame, work: pl.DataFrame, start_ns: int | None, end_ns: int | None) -> tuple[int, int]:
    both = pl.concat([slices.select("ts_ns", "end_ns"), work.select("ts_ns", "end_ns")])
    lo = start_ns if start_ns is not None else both["ts_ns"].min()
    hi = end_ns if end_ns is not None else both["end_ns"].max()
    lo = 0 if lo is None else int(lo)  # type: ignore[arg-type]
    return lo, max(lo, 0 if hi is None else int(hi))  # type: ignore[arg-type]


def _clip(frame: pl.DataFrame, w0: int, w1: int) -> pl.DataFrame:
    """Rows overlapping [w0, w1), clipped to it; zero-length rows inside it kept."""
    ts, end = pl.col("ts_ns"), pl.col("end_ns")
    keep = ((ts < w1) & (end > w0)) | ((ts == end) & ts.is_between(w0, w1))
    return frame.filter(keep).with_columns(ts.clip(w0, w1), end.clip(w0, w1))


def _records(trace: Trace, start_ns: int, end_ns: int) -> pl.DataFrame:
    """The `cuda_sync` records in the window."""
    return _clip(trace.gpu.filter(pl.col("cat") == "cuda_sync"), start_ns, end_ns)
