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
from typing import TYPE_CHECKING, Any

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.graph import CLASS, CLASSES, EDGE_KINDS, TEXT, DepGraph, build_graph, piece_runs
from tracekit.analysis.links import gpu_links
from tracekit.analysis.nesting import rows_of
from tracekit.analysis.taxonomy import classify_names
from tracekit.analysis.walks import climb
from tracekit.analysis.windows import STEP_NAME, window_bounds
from tracekit.errors import UsageError
from tracekit.model import GROUPING_ENGINE, Trace

if TYPE_CHECKING:  # networkx loads only where a DiGraph is needed (its import is slow)
    import networkx as nx

I64, F64, STR, BOOL = pl.Int64, pl.Float64, pl.String, pl.Boolean
GROUPS: dict[str, tuple[str, ...]] = {
    "gpu-bound": ("gpu_compute", "gpu_memory", "communication"),
    "launch-bound": ("python_overhead", "launch_overhead"),
    "cpu-bound": ("cpu_compute",),
    "sync-bound": ("sync_wait",),
    "idle": ("idle",),
}
MODULE = r"^nn\.Module: |^## .* ##$"
EDGE = pl.Enum((*EDGE_KINDS, "window"))  # what put a segment on the path ("window": before or after it)
PATH_SCHEMA: dict[str, pl.DataType] = {
    "start_ns": I64, "end_ns": I64, "dur_ns": I64, "cls": CLASS, "name": TEXT, "eid": I64, "context": TEXT,
    "lane": TEXT, "edge": EDGE, "weight_ns": I64, "inferred": BOOL, "src_eid": I64,
}
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
                  handed_over: bool = False, **graph_options: int) -> CriticalPath:
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
    segs = _to_segments(steps, held, shape.start_ns, shape.end_ns)
    del steps
    segments = _with_context(segs, slices, links)
    del segs, slices
    return summarise(segments, shape, label=label, graph=kept)


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


def path_nodes(dep: DepGraph) -> pl.Series:
    """The nodes of the graph's longest path (Int64, in path order): on the edge arrays in
    `build_graph`'s topological order (no DiGraph needed), or with networkx where that
    order is unknown."""
    if len(dep.order):
        return dep.longest[0]
    return pl.Series("node", longest_path(dep.graph), dtype=I64)


def longest_path(graph: nx.DiGraph, *, weight: str = "weight", topo_order: list[int] | None = None) -> list[int]:
    """`nx.dag_longest_path` (with `build_graph`'s topological order when given). Graphs from
    `build_graph` are acyclic by construction; for others, edges closing a cycle are cut."""
    import networkx as nx

    for _ in range(1000):
        try:
            return nx.dag_longest_path(graph, weight=weight, default_weight=0, topo_order=topo_order)
        except nx.NetworkXUnfeasible:
            cycle = nx.find_cycle(graph)
            graph.remove_edge(*cycle[-1][:2])
            topo_order = None
    raise UsageError("the dependency graph has too many cycles")  # pragma: no cover


def path_segments(dep: DepGraph, nodes: pl.Series | list[int]) -> pl.DataFrame:
    """The path's edges as time segments (cpu edges expanded into their pieces), plus idle
    segments for the window before and after the path (PATH_SCHEMA; `context` still empty).

    The path goes forward in time and its segments tile it, so path order is time order:
    no sort by time is needed. A cpu edge's pieces are one run of `dep.segments` (sorted
    by `src`, the anchor the edge starts at), found by binary search. Each output row is
    first given its source (a piece's row, or a row of the path's other edges) in path
    order, and each column is then gathered once in that order: the pieces are never
    copied out of order and sorted back (that would take far more than the result; this
    takes a column's worth).
    """
    return steps_to_segments(path_steps(dep, nodes), dep.segments, dep.start_ns, dep.end_ns)


def path_steps(dep: DepGraph, nodes: pl.Series | list[int]) -> pl.DataFrame:
    """The path's edges (`EDGE_SCHEMA`), one row per step, in path order."""
    pairs = pl.DataFrame({"src": nodes[:-1], "dst": nodes[1:]}, schema={"src": I64, "dst": I64})
    # a (src, dst) pair is one edge at most (`build_graph` keeps them unique). The pair is
    # one number (src * 2^32 + dst, nodes being under 2^31) and the join finds the edge's
    # row alone, whose columns are then gathered (a join on both columns, carrying every
    # edge column, peaks about five times higher)
    edges = dep.edges
    if pairs.is_empty() or max(edges["src"].max() or 0, edges["dst"].max() or 0) >= 1 << 31:  # type: ignore[operator]
        return pairs.join(edges, on=["src", "dst"], how="inner", maintain_order="left")
    key = pl.col("src") * (1 << 32) + pl.col("dst")
    rows = pairs.select(_k=key).join(edges.select(_k=key, _row=pl.int_range(pl.len(), dtype=pl.get_index_type())),
                                     on="_k", how="inner", maintain_order="left")["_row"]
    return edges.gather(rows)


def steps_to_segments(on_path: pl.DataFrame, segments: pl.DataFrame, start_ns: int, end_ns: int) -> pl.DataFrame:
    """`path_segments` from the path's edges (`path_steps`), the graph's CPU pieces
    (`DepGraph.segments`) and its window: the rest of the graph need not be alive."""
    return _to_segments(on_path, [segments], start_ns, end_ns)


def _to_segments(on_path: pl.DataFrame, held: list[pl.DataFrame], start_ns: int, end_ns: int) -> pl.DataFrame:
    """`steps_to_segments` from the pieces in `held` (a list of one frame, emptied here): where
    nothing else holds them, each piece column is let go as soon as it is gathered, so the
    path's columns never all coexist with the pieces' (the path has about as many rows as
    the pieces)."""
    segments = held.pop()
    lo, hi = piece_runs(segments["src"], on_path["src"])
    steps = pl.DataFrame({"cpu": on_path["kind"] == "cpu", "lo": lo, "hi": hi})
    # a row's source: a piece's row (>= 0), or -1 - (its row among the other edges)
    other_row = (~pl.col("cpu")).cast(I64).cum_sum() - 1
    source = steps.select(pl.when("cpu").then(pl.int_ranges("lo", "hi")).otherwise(
        pl.concat_list(-1 - other_row)).alias("source")).explode("source").drop_nulls()["source"]
    other = on_path.filter(pl.col("kind") != "cpu").select(
        *_PIECE_COLUMNS, edge=pl.col("kind").cast(EDGE), inferred="inferred", src_eid="src_eid")
    pieces = dict(zip(_PIECE_COLUMNS, segments.select(_PIECE_COLUMNS).get_columns(), strict=True))
    del segments
    first, last = (_value(pieces, other, "start_ns", source, 0), _value(pieces, other, "end_ns", source, -1)) \
        if source.len() else (end_ns, end_ns)
    before, after = first > start_ns, end_ns > last
    if before or after:  # the window's ends become rows of `other`, read before and after the path's
        bounds = [(start_ns, first)] * before + [(last, end_ns)] * after
        idle = pl.DataFrame(bounds, schema={"start_ns": I64, "end_ns": I64}, orient="row").with_columns(
            cls=pl.lit("idle", CLASS), name=pl.lit("outside the path", TEXT), eid=pl.lit(None, I64),
            lane=pl.lit(None, TEXT), weight_ns=pl.lit(0, I64), edge=pl.lit("window", EDGE),
            inferred=pl.lit(False), src_eid=pl.lit(None, I64))
        n = other.height
        other = pl.concat([other, idle.select(other.columns)], how="vertical")
        source = pl.concat([pl.Series([-1 - n] * before, dtype=I64), source,
                            pl.Series([-1 - n - before] * after, dtype=I64)]).rechunk()
    return _gather(source, pieces, other).with_columns(
        dur_ns=pl.col("end_ns") - pl.col("start_ns"), context=pl.lit(None, TEXT)).select(list(PATH_SCHEMA))


_PIECE_COLUMNS = ["start_ns", "end_ns", "cls", "name", "eid", "lane", "weight_ns"]
_CPU_EDGE = {"edge": "cpu", "inferred": False, "src_eid": None}  # what a cpu edge's pieces lack


def _value(pieces: dict[str, pl.Series], other: pl.DataFrame, column: str, source: pl.Series, at: int) -> int:
    row = source[at]
    return pieces[column][row] if row >= 0 else other[column][-1 - row]


def _gather(source: pl.Series, pieces: dict[str, pl.Series], other: pl.DataFrame) -> pl.DataFrame:
    """The columns of `path_segments` for each row of `source` (a piece's row, or -1 - a
    row of `other`): each column gathered from the pieces (taken out of `pieces` as it is
    read: let go there, where nothing else holds it), the other edges' rows put in."""
    at_other = (source < 0).arg_true()
    rows = -1 - source.gather(at_other)
    at_piece = source.set(source < 0, None)
    n = source.len()
    out: dict[str, pl.Series] = {}
    for name in _PIECE_COLUMNS:
        out[name] = pieces.pop(name).gather(at_piece).scatter(at_other, other[name].gather(rows))
    for name, value in _CPU_EDGE.items():
        dtype = other.schema[name]
        out[name] = pl.repeat(value, n, dtype=dtype, eager=True).scatter(at_other, other[name].gather(rows))
    return pl.DataFrame(out)


def _with_context(segs: pl.DataFrame, slices: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """`context`: the module/op a host segment runs in; the launching op of GPU work.

    Host segments carry a CPU slice's eid and GPU segments an activity's (the event ids of
    a trace are unique): a segment whose eid is a slice's is a host segment, any other with
    an eid is GPU work. The context is found as a row (of the slices, or of the launching
    ops after them) and its name read once at the end: text gathered and joined per step
    costs more than the walk itself.
    """
    eid = segs["eid"]  # `slices`: the graph's CPU slices (`DepGraph.slices`)
    at = rows_of(slices, eid)  # the segment's slice, -1 for GPU work and the window's ends
    row = _host_rows(at, slices)
    gpu = pl.DataFrame({"_i": pl.int_range(eid.len(), dtype=I64, eager=True), "eid": eid}).filter(
        (at < 0) & eid.is_not_null())
    ops = links.join(gpu.select(pl.col("eid").unique()), on="eid", how="semi").select("eid", "op_name")
    found = gpu.join(ops.with_row_index("_k").select("eid", pl.col("_k").cast(I64) + slices.height), on="eid",
                     how="inner")
    row = row.scatter(found["_i"], found["_k"]) if found.height else row
    # the names as codes (`model.TEXT`): the gather copies four bytes a segment, where text
    # took a 16-byte view (and, gathered from two chunks, a copy of every name it read)
    names = pl.concat([slices["name"].cast(TEXT), ops["op_name"].cast(TEXT)])
    context = names.gather(row.set(row < 0, None))
    return segs.with_columns(context=pl.coalesce(context, "name")).select(list(PATH_SCHEMA)).cast(PATH_SCHEMA)


def _host_rows(at: pl.Series, slices: pl.DataFrame, *, max_depth: int = 256) -> pl.Series:
    """Per row `at` of the slices (-1: none), the row of its context: the nearest
    module-like ancestor-or-self, else the outermost cpu_op; -1 when it has neither.

    The walk up the tree follows parent pointers held as row positions (`walks.climb`).
    """
    if slices.is_empty():
        return pl.repeat(-1, at.len(), dtype=I64, eager=True)
    # the patterns run on the distinct names (a few dozen), which the rows then look up
    name = pl.col("name")
    text = name.cast(STR)  # (codes in a graph's slices: `graph._cpu_slices`)
    kinds = slices.select(name.unique()).filter(name.is_not_null()).with_columns(
        _mod=text.str.contains(MODULE),
        _py=~text.str.contains(STEP_NAME) & ~text.str.contains(r"\.py\(\d+\)|^<built-in|^<string>|^threading"))
    module = name.is_in(kinds.filter("_mod")["name"].implode()) | (
        (pl.col("role") == "python") & name.is_in(kinds.filter("_py")["name"].implode()))
    info = slices.select(hit=module.fill_null(False), go=(~module).fill_null(False) & pl.col("parent_eid").is_not_null(),
                         op=(pl.col("role") == "op").fill_null(False))
    parent = rows_of(slices, slices["parent_eid"])
    mod, top = climb(parent, info["hit"], info["go"], info["op"], at, max_depth)  # (`walks`)
    return mod.zip_with(mod >= 0, top)


def summarise(segs: pl.DataFrame, shape: GraphShape, *, label: str, graph: DepGraph | None = None) -> CriticalPath:
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
    verdict, share = _verdict(shares, has_gpu=has_gpu, window_ns=window_ns)
    return CriticalPath(
        segments=segs, by_class=by_class, by_context=by_context, window=label, start_ns=shape.start_ns,
        end_ns=shape.end_ns, weight_ns=int(segs["weight_ns"].sum() or 0), shares=shares, verdict=verdict,
        verdict_share=share, sentence=_sentence(verdict, share, shares, segs),
        nodes=shape.nodes, edges=shape.edges, edge_counts=shape.edge_counts,
        inferred_edges=shape.inferred_edges, graph=graph)


def _verdict(shares: dict[str, float], *, has_gpu: bool, window_ns: int) -> tuple[str, float]:
    if window_ns <= 0:
        return "empty", 0.0
    if not has_gpu:
        return "no-gpu", 1.0 - shares.get("idle", 0.0)
    totals = {v: sum(shares.get(c, 0.0) for c in classes) for v, classes in GROUPS.items()}
    verdict = max(totals, key=lambda v: totals[v])  # ties: the order of GROUPS (GPU first)
    return verdict, totals[verdict]


def _top(segs: pl.DataFrame, classes: tuple[str, ...], col: str = "context") -> str:
    # (one plan: the rows kept are summed as they are found, never copied out first)
    rows = (segs.lazy().filter(pl.col("cls").is_in(classes) & pl.col(col).is_not_null())
            .group_by(col).agg(ns=pl.col("dur_ns").sum()).sort(["ns", col], descending=[True, False])
            .collect(engine=GROUPING_ENGINE))
    return rows[col][0] if rows.height else "(unknown)"


def _sentence(verdict: str, share: float, shares: dict[str, float], segs: pl.DataFrame) -> str:
    p = fmt.pct(share, 0)
    if verdict == "empty":
        return "empty window: nothing to analyse"
    if verdict == "no-gpu":
        return (f"no GPU work in this window: the critical path is host-only (host work {fmt.pct(shares['cpu_compute'], 0)}, "
                f"Python and calls {fmt.pct(shares['python_overhead'] + shares['launch_overhead'], 0)})")
    if verdict == "gpu-bound":
        gpu = segs.select("cls", "name", "dur_ns").filter(pl.col("cls").is_in(GROUPS["gpu-bound"]))
        classes = classify_names(gpu["name"]).select(pl.col("name").cast(TEXT), "kernel_class")
        kinds = gpu.join(classes, on="name", how="left").with_columns(pl.col("kernel_class").fill_null("other"))
        lead = _top(kinds, GROUPS[verdict], "kernel_class")
        top = _top(kinds.filter(pl.col("kernel_class") == lead), GROUPS[verdict], "name")
        parts = ", ".join(f"{c.replace('gpu_', '')} {fmt.pct(shares[c], 0)}" for c in GROUPS[verdict] if shares[c] > 0)
        return f"GPU-bound: {p} of the critical path is GPU work ({parts}), led by {lead} kernels (`{_short(top)}`)"
    where = _top(segs, GROUPS[verdict])
    if verdict == "launch-bound":
        return (f"this window is {p} launch-bound: the GPU waits on the host (Python {fmt.pct(shares['python_overhead'], 0)}, "
                f"dispatch and launch calls {fmt.pct(shares['launch_overhead'], 0)}), most of it in `{_short(where)}`")
    if verdict == "cpu-bound":
        return f"this window is {p} CPU-bound: the critical path runs CPU ops that launch no GPU work, most of it in `{_short(where)}`"
    if verdict == "sync-bound":
        call = _top(segs, GROUPS[verdict], "name")
        return (f"this window is {p} sync-bound: the critical path sits in blocking calls (`{_short(call)}`, "
                f"in `{_short(where)}`) after the GPU work they waited for had finished")
    return f"this window is {p} idle: the critical path waits on something the trace does not record"


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"
