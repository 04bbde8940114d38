"""The critical path's segments (`critical_path`): the longest path's nodes, its edges in
path order, those edges as time segments tiling the window (cpu edges expanded into
their pieces), and each segment's context (the module or op its time belongs to)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from tracekit.analysis.graph import CLASS, EDGE_KINDS, TEXT, DepGraph, piece_runs
from tracekit.analysis.nesting import rows_of
from tracekit.analysis.walks import climb
from tracekit.analysis.windows import STEP_NAME
from tracekit.errors import UsageError

if TYPE_CHECKING:  # networkx loads only where a DiGraph is needed (its import is slow)
    import networkx as nx

I64, STR, BOOL = pl.Int64, pl.String, pl.Boolean
MODULE = r"^nn\.Module: |^## .* ##$"
EDGE = pl.Enum((*EDGE_KINDS, "window"))  # what put a segment on the path ("window": before or after it)
PATH_SCHEMA: dict[str, pl.DataType] = {
    "start_ns": I64, "end_ns": I64, "dur_ns": I64, "cls": CLASS, "name": TEXT, "eid": I64, "context": TEXT,
    "lane": TEXT, "edge": EDGE, "weight_ns": I64, "inferred": BOOL, "src_eid": I64,
}


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
    return to_segments(on_path, [segments], start_ns, end_ns)


def to_segments(on_path: pl.DataFrame, held: list[pl.DataFrame], start_ns: int, end_ns: int) -> pl.DataFrame:
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


def with_context(segs: pl.DataFrame, slices: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
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
