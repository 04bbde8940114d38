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
from itertools import pairwise
from typing import TYPE_CHECKING

import polars as pl

from tracekit.analysis.breakdown import work_class
from tracekit.analysis.links import gpu_links
from tracekit.analysis.longest import EdgeOrder, longest_path
from tracekit.analysis.nesting import rows_of, with_parents
from tracekit.analysis.order import sort_order
from tracekit.analysis.syncs import STREAM_WAIT_CALL, sync_kind, sync_records
from tracekit.analysis.walks import flag_callers
from tracekit.analysis.windows import STEP_NAME
from tracekit.model import ENGINE, GPU_WORK_CATS, NOT_CPU_CATS, TEXT, Trace

if TYPE_CHECKING:  # networkx loads only when a DiGraph is asked for (its import is slow)
    import networkx as nx

I64, F64, STR, BOOL = pl.Int64, pl.Float64, pl.String, pl.Boolean
CLASSES = ("cpu_compute", "python_overhead", "launch_overhead", "gpu_compute", "gpu_memory",
           "communication", "sync_wait", "idle")
EDGE_KINDS = ("cpu", "gpu", "stream", "launch", "cross_stream", "sync")
ROLES = ("op", "python", "runtime")
# closed vocabularies as Enums: one byte a row where a string takes a 16-byte view
CLASS = pl.Enum(CLASSES)
KIND = pl.Enum(EDGE_KINDS)
ROLE = pl.Enum(ROLES)
# names and lanes, which repeat a few dozen values over millions of edges and pieces, are
# `TEXT` (the model's Categorical): four bytes a row where text takes a 16-byte view (a
# graph and its path carry millions of pieces each)
EVENT_RECORD_CALL = r"^(cuda|cu|hip)EventRecord"
DEFAULT_SYNC_TOLERANCE_NS = 20_000
DEFAULT_MIN_BLOCKING_NS = 10_000
DEFAULT_IDLE_GAP_NS = 200_000
_GPU_CLASS = {"compute": "gpu_compute", "memory": "gpu_memory", "communication": "communication"}

EDGE_SCHEMA: dict[str, pl.DataType] = {
    "src": I64, "dst": I64, "kind": KIND, "weight_ns": I64, "start_ns": I64, "end_ns": I64,
    "cls": CLASS, "eid": I64, "name": TEXT, "lane": TEXT, "inferred": BOOL, "src_eid": I64,
}
SEGMENT_SCHEMA: dict[str, pl.DataType] = {
    "src": I64, "lane": TEXT, "start_ns": I64, "end_ns": I64, "cls": CLASS, "weight_ns": I64,
    "eid": I64, "name": TEXT, "role": ROLE,
}
SYNC_SCHEMA: dict[str, pl.DataType] = {"eid": I64, "gpu_eid": I64, "tail_ns": I64, "inferred": BOOL, "source": STR}
_WORK_SCHEMA: dict[str, pl.DataType] = {
    "eid": I64, "name": TEXT, "device": I64, "stream": I64, "ts_ns": I64, "end_ns": I64,
    "launch_eid": I64, "launch_ts_ns": I64, "launch_pid": TEXT, "launch_tid": TEXT, "cls": CLASS,
}


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
                links: pl.DataFrame | None = None) -> DepGraph:
    """The dependency graph of the trace, or of the window [start_ns, end_ns) (clipped)."""
    links = gpu_links(trace) if links is None else links
    slices = _cpu_slices(trace)
    work = _work(trace, links)
    w0, w1 = _bounds(slices, work, start_ns, end_ns)
    slices, work = _clip(slices, w0, w1), _clip(work, w0, w1)
    nested = with_parents(slices.with_columns(dur_ns=pl.col("end_ns") - pl.col("ts_ns")))
    syncs = sync_waits(trace, slices, work, tolerance_ns=sync_tolerance_ns, min_blocking_ns=min_blocking_ns)
    points, lanes = _points(nested)
    gpu_base = points.height
    work = work.lazy().sort("device", "stream", "ts_ns", "eid").with_row_index("_i").with_columns(
        s_node=pl.col("_i").cast(I64) * 2 + gpu_base, e_node=pl.col("_i").cast(I64) * 2 + gpu_base + 1
    ).collect(engine=ENGINE)
    launched = work.lazy().filter(pl.col("launch_eid").is_not_null()).select("launch_eid").unique().collect(
        engine=ENGINE)
    callers = links.lazy().select(eid="launch_eid").drop_nulls().unique().collect(engine=ENGINE)
    gpu = _gpu_edges(work)
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
    few = pl.collect_all([_sync_edges(syncs, work, points, lanes, slices), cross], engine=ENGINE)
    kept = nested.select("eid", "name", "role", "parent_eid")  # what the pieces and the path's context walk read
    del slices, nested, cross
    segments, anchors = _segments(points, lanes, kept, syncs, launched, callers, idle_gap_ns)
    del launched, callers
    points = points.drop("key", "owner")  # (the pieces' order and owners: read by the segments alone)
    parts = [gpu.lazy(), few[0].lazy(), _launch_edges(work, points), few[1].lazy(), _chain_edges(segments, anchors, lanes)]
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


def _work(trace: Trace, links: pl.DataFrame) -> pl.DataFrame:
    """GPU work rows with launch info and class (gpu_compute | gpu_memory | communication)."""
    if links.is_empty():
        return pl.DataFrame(schema=_WORK_SCHEMA)
    cls = work_class(links).replace_strict(_GPU_CLASS, return_dtype=CLASS)
    return links.lazy().filter(pl.col("cat").is_in(GPU_WORK_CATS)).select(
        "eid", "name", pl.col("device").fill_null(-1), pl.col("stream").fill_null(-1), "ts_ns",
        pl.max_horizontal("ts_ns", "end_ns").alias("end_ns"), "launch_eid", "launch_ts_ns", "launch_pid",
        "launch_tid", cls=cls).cast(_WORK_SCHEMA).collect(engine=ENGINE)


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


# -- CPU chains ----------------------------------------------------------------------------

def _points(nested: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    """Start/end points of the CPU slices in chain order; `node` = row index. And each
    thread's lane (`cpu:pid:tid`), by `_thread`.

    At equal times ends come before starts, inner ends before outer ones, outer starts
    before inner ones. A zero-length slice has only its start point. `owner` is the
    innermost slice open right after the point. Threads sort as (pid, tid) through one
    integer per thread (`_thread`, their rank): sorting on two strings costs more. The
    points carry that integer, not the lane's text: a row's lane is read from `lanes` where
    an edge or a piece needs it (a text column sorted with the points costs 16 bytes a
    point).
    """
    dur = pl.col("end_ns") - pl.col("ts_ns")
    threads = nested.select("pid", "tid").unique().sort("pid", "tid").with_row_index("_thread")
    lanes = threads.select(pl.format("cpu:{}:{}", "pid", "tid").cast(TEXT)).to_series().rename("lane")
    # each slice's thread number, found by a join of the two key columns alone (a join of
    # the slices' columns would copy them all)
    thread = nested.select("pid", "tid").join(threads, on=["pid", "tid"], how="left", nulls_equal=True,
                                              maintain_order="left")["_thread"]
    nested = nested.select("eid", "ts_ns", "end_ns", "depth", "parent_eid").with_columns(_thread=thread)
    del thread
    depth = pl.col("depth").cast(pl.Int32)  # (a sort key only: four bytes a point fewer to sort and hold)
    starts = nested.select("_thread", "eid", t=pl.col("ts_ns"), opening=pl.lit(True),
                           key=depth, owner=pl.when(dur > 0).then(pl.col("eid")).otherwise(pl.col("parent_eid")))
    ends = nested.lazy().filter(dur > 0).select(  # (lazy: only these columns are filtered)
        "_thread", "eid", t=pl.col("end_ns"), opening=pl.lit(False), key=-depth,
        owner=pl.col("parent_eid")).collect(engine=ENGINE)
    del nested
    # `nested` is in (ts, eid) order (`with_parents`), so the starts are in eid order among
    # equal times: with the ends put in eid order, a stable sort on the other four keys gives
    # the order of all five, in a third of the time of a sort on the five
    ends = ends.sort("eid")
    both = pl.concat([starts, ends])
    del starts, ends
    # the sort finds the order on its keys alone, and each column is then gathered in it and
    # let go (a sort of the whole frame holds every column twice)
    by = sort_order(both, "_thread", "t", "opening", "key", maintain_order=True)
    columns = dict(zip(both.columns, both.get_columns(), strict=True))
    del both
    pts = pl.DataFrame({"node": pl.int_range(by.len(), dtype=I64, eager=True),
                        **{name: columns.pop(name).gather(by) for name in list(columns)}})
    return pts, lanes


def _segments(points: pl.DataFrame, lanes: pl.Series, nested: pl.DataFrame, syncs: pl.DataFrame,
              launched: pl.DataFrame, callers: pl.DataFrame, idle_gap_ns: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The CPU pieces (SEGMENT_SCHEMA, `src` = the anchor the piece's chain edge starts at) and the anchors."""
    same = pl.col("_thread") == pl.col("_thread").shift(-1)
    first = ~(pl.col("_thread") == pl.col("_thread").shift(1)).fill_null(False)
    # points stay in node order throughout (membership tests, not joins): `src` is a forward
    # fill along it, and the segments come out sorted by `src` (path_segments relies on it)
    launches = pl.col("eid").is_in(launched["launch_eid"].implode())
    waits = pl.col("eid").is_in(syncs["eid"].implode())
    pts = points.with_columns(_next=pl.when(same).then(pl.col("t").shift(-1)), _first=first,
                              _last=~same.fill_null(False))
    anchor = (pl.col("_first") | pl.col("_last") | (pl.col("opening") & launches) | (~pl.col("opening") & waits))
    pts = pts.with_columns(_anchor=anchor.fill_null(False))
    pts = pts.with_columns(src=pl.when("_anchor").then("node").forward_fill())
    anchors = pts.select("node", "_thread", "t", "eid", "_anchor").filter("_anchor").drop("_anchor")
    # (only what a piece reads: a filter of every point column would copy them all)
    # every point is made a piece and each thread's last (no next point: no piece) is left
    # out at the end (`_between`), so that the columns stay one chunk while they are worked on
    last = pts["_last"]
    seg = pts.select("src", "_thread", "t", "_next", "owner")
    del pts  # (the columns made here go before the pieces' own are made)
    owners = _owners(nested, syncs, callers)  # one row per slice: each piece reads its owner's row
    at = rows_of(owners, seg["owner"])
    seg = pl.concat([seg, owners.select("role", "name", "launches", "block_ns").gather(at.set(at < 0, None))],
                    how="horizontal")
    del owners, at
    length = pl.col("_next") - pl.col("t")
    hostless = pl.col("role").is_null() | (pl.col("role") == "python")
    idle = hostless & (length > idle_gap_ns)
    cls = (pl.when(idle).then(pl.lit("idle", CLASS))
           .when(hostless).then(pl.lit("python_overhead", CLASS))
           .when(pl.col("block_ns").is_not_null()).then(pl.lit("sync_wait", CLASS))
           .when(pl.col("launches")).then(pl.lit("launch_overhead", CLASS))
           .otherwise(pl.lit("cpu_compute", CLASS)))
    weight = (pl.when(idle).then(0)
              .when(pl.col("block_ns").is_not_null()).then(pl.min_horizontal(length, "block_ns"))
              .otherwise(length))
    # one step: the class and the weight side by side, and only the result's columns kept
    seg = seg.select("src", lanes.gather(seg["_thread"]), start_ns="t", end_ns="_next", cls=cls,
                     weight_ns=weight, eid="owner", name="name", role="role").cast(SEGMENT_SCHEMA)
    return _between(seg, last), anchors


def _between(points: pl.DataFrame, last: pl.Series) -> pl.DataFrame:
    """The rows of `points` but each thread's last (`last`): the pieces, one per point that
    has a next one on its thread. Those are a few rows of millions, so the rows between
    them are taken as slices of the columns, which copy nothing (a filter of the points
    would copy five columns, beside the points' own),
    unless there are more than `MAX_PIECE_RUNS` threads: the pieces' columns are then as
    many chunks, which every later gather would walk."""
    ends = last.arg_true()
    if ends.len() > MAX_PIECE_RUNS:
        return points.filter(~last)
    bounds = [-1, *ends.to_list()]
    runs = [points.slice(a + 1, b - a - 1) for a, b in pairwise(bounds) if b - a > 1]
    return pl.concat(runs) if runs else points.clear()


MAX_PIECE_RUNS = 64


def _owners(nested: pl.DataFrame, syncs: pl.DataFrame, callers: pl.DataFrame) -> pl.DataFrame:
    """Per slice: role, name, block weight, and `launches`: it launched GPU work, or a call
    below it did, or (for a runtime call) the op around it launches (dispatch work).

    The callers' ancestors (up to 256 levels) are flagged by `walks.flag_callers`."""
    out = flag_callers(nested.select("eid", "role", "name", "parent_eid"), nested, callers)
    out = out.with_columns(
        launches=pl.col("_up").fill_null(False) | ((pl.col("role") == "runtime") & pl.col("_around").fill_null(False)))
    return out.select("eid", "role", pl.col("name").cast(TEXT), "launches").join(
        syncs.select("eid", block_ns="tail_ns"), on="eid", how="left")


def piece_runs(src: pl.Series, anchors: pl.Series) -> tuple[pl.Series, pl.Series]:
    """(lo, hi) per anchor: its pieces are the rows lo..hi-1 of the segments, whose `src`
    column is sorted (`_segments` makes it so; a binary search of unsorted anchors would
    find wrong runs, so it is checked, a pass over the column)."""
    if not src.is_sorted():
        raise ValueError("DepGraph.segments must be sorted by src, as build_graph makes them")
    return src.search_sorted(anchors, side="left").cast(I64), src.search_sorted(anchors, side="right").cast(I64)


def run_sums(weights: pl.Series, lo: pl.Series, hi: pl.Series) -> pl.Series:
    """The sum of `weights` over rows lo..hi-1, per (lo, hi): a difference of running sums
    (nulls count 0), instead of a group-by of every piece and a join back, which costs
    far more on millions of pieces."""
    running = pl.concat([pl.Series([0], dtype=I64), weights.cast(I64).fill_null(0).cum_sum()])
    return running.gather(hi) - running.gather(lo)


def _chain_edges(segments: pl.DataFrame, anchors: pl.DataFrame, lanes: pl.Series) -> pl.LazyFrame:
    """One edge per pair of consecutive anchors on a thread: the sum of the pieces between
    (the anchor's run of pieces, `piece_runs`)."""
    same = pl.col("_thread") == pl.col("_thread").shift(-1)
    pairs = anchors.sort("node")
    sums = run_sums(segments["weight_ns"], *piece_runs(segments["src"], pairs["node"]))
    pairs = pairs.lazy().with_columns(weight_ns=sums, dst=pl.when(same).then(pl.col("node").shift(-1)),
                                      _end=pl.when(same).then(pl.col("t").shift(-1)))
    pairs = pairs.filter(pl.col("dst").is_not_null())
    return pairs.select(src="node", dst="dst", kind=pl.lit("cpu", KIND), weight_ns="weight_ns",
                        start_ns="t", end_ns="_end", cls=pl.lit(None, CLASS), eid=pl.lit(None, I64),
                        name=pl.lit(None, TEXT), lane=_lane(lanes), inferred=pl.lit(False),
                        src_eid=pl.lit(None, I64))


# -- GPU side ------------------------------------------------------------------------------

def _gpu_edges(work: pl.DataFrame) -> pl.DataFrame:
    lane = pl.format("gpu:{}:{}", "device", "stream")
    rows = work.lazy()
    own = rows.select(src="s_node", dst="e_node", kind=pl.lit("gpu", KIND), weight_ns=pl.col("end_ns") - pl.col("ts_ns"),
                      start_ns="ts_ns", end_ns="end_ns", cls="cls", eid="eid", name="name", lane=lane,
                      inferred=pl.lit(False), src_eid="eid")
    same = (pl.col("device") == pl.col("device").shift(-1)) & (pl.col("stream") == pl.col("stream").shift(-1))
    nxt = rows.with_columns(_dst=pl.col("s_node").shift(-1), _t=pl.col("ts_ns").shift(-1),
                            _eid=pl.col("eid").shift(-1), _name=pl.col("name").shift(-1)).filter(same)
    order = nxt.select(src="e_node", dst="_dst", kind=pl.lit("stream", KIND), weight_ns=pl.lit(0, I64), start_ns="end_ns",
                       end_ns="_t", cls=pl.lit("idle", CLASS), eid="_eid", name="_name", lane=lane, inferred=pl.lit(False),
                       src_eid="eid")
    return pl.concat([own, order]).collect(engine=ENGINE)


def _launch_edges(work: pl.DataFrame, points: pl.DataFrame) -> pl.LazyFrame:
    starts = points.lazy().filter("opening").select(launch_eid="eid", src="node", _t="t")
    rows = work.lazy().join(starts, on="launch_eid", how="inner")
    return rows.select("src", dst="s_node", kind=pl.lit("launch", KIND), weight_ns=pl.lit(0, I64), start_ns="_t",
                       end_ns="ts_ns", cls=pl.lit("launch_overhead", CLASS), eid="eid", name="name",
                       lane=pl.format("gpu:{}:{}", "device", "stream"), inferred=pl.lit(False), src_eid="launch_eid")


def _sync_edges(syncs: pl.DataFrame, work: pl.DataFrame, points: pl.DataFrame, lanes: pl.Series,
                slices: pl.DataFrame) -> pl.LazyFrame:
    ends = points.lazy().filter(~pl.col("opening")).select("eid", "_thread", dst="node", end_ns="t")
    rows = syncs.lazy().filter(pl.col("gpu_eid").is_not_null()).join(ends, on="eid", maintain_order="left").join(
        work.lazy().select(gpu_eid="eid", src="e_node", start_ns="end_ns"), on="gpu_eid", maintain_order="left").join(
        slices.lazy().select("eid", "name"), on="eid", how="left", maintain_order="left")  # in the calls' order
    return rows.select("src", "dst", kind=pl.lit("sync", KIND), weight_ns="tail_ns", start_ns="start_ns", end_ns="end_ns",
                       cls=pl.lit("sync_wait", CLASS), eid="eid", name="name", lane=_lane(lanes),
                       inferred="inferred", src_eid="gpu_eid")


def _lane(lanes: pl.Series) -> pl.Expr:
    """The lane text of each row's `_thread` (the threads' ranks index `lanes`)."""
    return pl.lit(lanes).gather(pl.col("_thread"))


def _records(trace: Trace, start_ns: int, end_ns: int) -> pl.DataFrame:
    """The `cuda_sync` records in the window."""
    return _clip(trace.gpu.filter(pl.col("cat") == "cuda_sync"), start_ns, end_ns)


def sync_waits(trace: Trace, slices: pl.DataFrame, work: pl.DataFrame, *,
               tolerance_ns: int = DEFAULT_SYNC_TOLERANCE_NS,
               min_blocking_ns: int = DEFAULT_MIN_BLOCKING_NS) -> pl.DataFrame:
    """Blocking calls and the GPU work each waited for (SYNC_SCHEMA; see the module docstring).

    Named sync calls that waited for nothing get a row with a null `gpu_eid` and the whole
    call as `tail_ns` (pure sync overhead).
    """
    calls = slices.lazy().filter((pl.col("role") == "runtime") & (pl.col("end_ns") > pl.col("ts_ns"))).with_columns(
        kind=sync_kind(pl.col("name").cast(STR))).collect(engine=ENGINE)
    if calls.is_empty() or work.is_empty():
        named = calls.filter(pl.col("kind").is_not_null())
        return named.select("eid", gpu_eid=pl.lit(None, I64), tail_ns=pl.col("end_ns") - pl.col("ts_ns"),
                            inferred=pl.lit(False), source=pl.lit("name")).cast(SYNC_SCHEMA).sort("eid")
    rec = sync_records(trace.gpu).rename({"device": "r_device", "stream": "r_stream", "record": "r_kind"})
    calls_ = calls.lazy().join(rec, on="correlation", how="left", maintain_order="left")
    right = work.lazy().select(_t="end_ns", gpu_eid="eid", device="device", stream="stream", w_end="end_ns",
                               w_launch="launch_ts_ns").sort("_t")
    left = calls_.with_columns(_t=pl.col("end_ns")).sort("_t")
    own = calls_.join(work.lazy().select("launch_eid", gpu_eid="eid", w_end="end_ns"), left_on="eid",
                      right_on="launch_eid")
    own = own.filter(pl.col("w_end") <= pl.col("end_ns")).sort(["w_end", "gpu_eid"], descending=[True, False]).unique(
        "eid", keep="first")
    stream_rec = left.filter(pl.col("r_kind") == "Stream Sync").join_asof(
        right, on="_t", by_left=["r_device", "r_stream"], by_right=["device", "stream"], strategy="backward",
        check_sortedness=False)
    dev_rec = left.filter(pl.col("r_kind").is_not_null() & (pl.col("r_kind") != "Stream Sync")).join_asof(
        right.drop("stream"), on="_t", by_left="r_device", by_right="device", strategy="backward",
        check_sortedness=False)
    anywhere = left.filter(pl.col("r_kind").is_null()).join_asof(
        right.drop("device", "stream"), on="_t", strategy="backward", check_sortedness=False)
    waited = (pl.col("w_end") >= pl.col("ts_ns")) & (pl.col("w_launch").is_null() | (pl.col("w_launch") < pl.col("ts_ns")))
    dur = pl.col("end_ns") - pl.col("ts_ns")
    timed = ((dur >= min_blocking_ns) & (pl.col("end_ns") - pl.col("w_end") <= tolerance_ns)
             & (2 * (pl.col("w_end") - pl.col("ts_ns")) >= dur))
    cols = ["eid", "gpu_eid", "w_end", "end_ns", "inferred", "source"]
    picks = [
        own.filter(pl.col("w_end").is_between(pl.col("ts_ns"), pl.col("end_ns"))).with_columns(inferred=pl.lit(False), source=pl.lit("own_work")),
        pl.concat([stream_rec, dev_rec], how="diagonal_relaxed").filter(waited).with_columns(
            inferred=pl.lit(False), source=pl.lit("record")),
        anywhere.filter(waited & pl.col("kind").is_not_null()).with_columns(inferred=pl.lit(True), source=pl.lit("name")),
        anywhere.filter(waited & pl.col("kind").is_null() & timed).with_columns(
            inferred=pl.lit(True), source=pl.lit("timing")),
    ]
    found = pl.concat([p.select(cols) for p in picks], how="vertical_relaxed").unique("eid", keep="first",
                                                                                     maintain_order=True)
    found = found.select("eid", "gpu_eid", tail_ns=pl.col("end_ns") - pl.col("w_end"), inferred="inferred",
                         source="source")
    idle = calls.lazy().filter(pl.col("kind").is_not_null()).join(found, on="eid", how="anti").select(
        "eid", gpu_eid=pl.lit(None, I64), tail_ns=dur, inferred=pl.lit(False), source=pl.lit("name"))
    # in call order
    return pl.concat([found.cast(SYNC_SCHEMA), idle.cast(SYNC_SCHEMA)]).sort("eid").collect(engine=ENGINE)


def cross_stream_edges(trace: Trace, slices: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    """Edges from the work an event recorded to the first work that waited on it (EDGE_SCHEMA)."""
    rt = slices.lazy().filter(pl.col("role") == "runtime")
    waits = rt.filter(pl.col("name").cast(STR).str.contains(STREAM_WAIT_CALL)).collect(engine=ENGINE)
    if waits.is_empty() or work.is_empty() or work["launch_ts_ns"].is_null().all():
        return pl.DataFrame(schema=EDGE_SCHEMA)
    launched = work.lazy().filter(pl.col("launch_ts_ns").is_not_null()).select(
        pid="launch_pid", tid="launch_tid", _t="launch_ts_ns", device="device", stream="stream", s_node="s_node",
        e_node="e_node", t_s="ts_ns", t_e="end_ns", g_eid="eid", g_name="name").sort("_t")
    kind = pl.coalesce("sync_kind", "name")
    recs = trace.gpu.lazy().filter((pl.col("cat") == "cuda_sync") & kind.str.contains("Wait Event")).select(
        "correlation", device="device", w_stream="stream",
        on_stream=pl.col("args").str.json_path_match("$.wait_on_stream").cast(I64, strict=False),
        rec_corr=pl.col("args").str.json_path_match("$.wait_on_cuda_event_record_corr_id").cast(I64, strict=False))
    recs = recs.unique("correlation", keep="first", maintain_order=True)
    calls = waits.lazy().join(recs, on="correlation", how="left", maintain_order="left")
    known = calls.filter(pl.col("on_stream").is_not_null()).join(
        rt.select(rec_corr="correlation", rec_ts="ts_ns").drop_nulls(), on="rec_corr", how="inner")
    src = known.sort("rec_ts").join_asof(
        launched.select("_t", "device", on_stream="stream", src="e_node", s_t="t_e", s_eid="g_eid"), left_on="rec_ts",
        right_on="_t", by=["device", "on_stream"], strategy="backward", check_sortedness=False)
    dst = src.drop("_t").sort("ts_ns").join_asof(
        launched.select("_t", "device", w_stream="stream", dst="s_node", d_t="t_s", d_eid="g_eid", d_name="g_name"),
        left_on="ts_ns", right_on="_t", by=["device", "w_stream"], strategy="forward", check_sortedness=False)
    dst = dst.select("src", "dst", "s_t", "d_t", "s_eid", "d_eid", "d_name", d_device="device", d_stream="w_stream",
                     inferred=pl.lit(False))
    guessed = _guessed_waits(calls.filter(pl.col("on_stream").is_null()), rt, launched)
    both = pl.concat([dst.cast(_GUESS_SCHEMA), guessed]).filter(
        pl.col("src").is_not_null() & pl.col("dst").is_not_null() & (pl.col("s_t") <= pl.col("d_t")))
    return both.select("src", "dst", kind=pl.lit("cross_stream", KIND), weight_ns=pl.lit(0, I64), start_ns="s_t",
                       end_ns="d_t", cls=pl.lit("idle", CLASS), eid="d_eid", name="d_name",
                       lane=pl.format("gpu:{}:{}", "d_device", "d_stream"), inferred="inferred",
                       src_eid="s_eid").cast(EDGE_SCHEMA).collect(engine=ENGINE)


_GUESS_SCHEMA: dict[str, pl.DataType] = {
    "src": I64, "dst": I64, "s_t": I64, "d_t": I64, "s_eid": I64, "d_eid": I64, "d_name": TEXT, "d_device": I64,
    "d_stream": I64, "inferred": BOOL,
}


def _guessed_waits(calls: pl.LazyFrame, rt: pl.LazyFrame, launched: pl.LazyFrame) -> pl.LazyFrame:
    """Waits without a record: the thread's last event record before the wait; the work the
    thread launched before that record (recorded stream) and after the wait (waiting stream)."""
    recs = rt.filter(pl.col("name").cast(STR).str.contains(EVENT_RECORD_CALL)).select("pid", "tid", rec_ts="ts_ns")
    # no record call on the thread before the wait (some traces do not list them): the wait itself
    calls = calls.select("pid", "tid", "ts_ns").sort("ts_ns").join_asof(
        recs.sort("rec_ts"), left_on="ts_ns", right_on="rec_ts", by=["pid", "tid"], strategy="backward",
        check_sortedness=False).with_columns(pl.coalesce("rec_ts", "ts_ns").alias("rec_ts"))
    before = calls.sort("rec_ts").join_asof(
        launched, left_on="rec_ts", right_on="_t", by=["pid", "tid"], strategy="backward", check_sortedness=False)
    after = before.drop("_t").sort("ts_ns").join_asof(
        launched, left_on="ts_ns", right_on="_t", by=["pid", "tid"], strategy="forward", check_sortedness=False,
        suffix="_d")
    ok = (pl.col("device") == pl.col("device_d")) & (pl.col("stream") != pl.col("stream_d"))
    return after.filter(ok).select(src="e_node", dst="s_node_d", s_t="t_e", d_t="t_s_d", s_eid="g_eid", d_eid="g_eid_d",
                                   d_name="g_name_d", d_device="device_d", d_stream="stream_d",
                                   inferred=pl.lit(True)).cast(_GUESS_SCHEMA)
