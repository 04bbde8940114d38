"""Longest path of a `DepGraph`, on its edge arrays instead of a networkx graph.

`build_graph` already knows a topological order of its nodes (`DepGraph.order`), so the
longest path is one pass of the dynamic programme `nx.dag_longest_path` runs, over plain
lists: no DiGraph has to be built (building one for ~100k edges costs more than all the
rest of the graph). `EdgeOrder` turns the edges into positions in that order once per
graph; the critical path and every what-if scenario share it.

The programme, as in networkx: visit the nodes in topological order; a node's distance is
the best over its incoming edges (in the order the edges were added, the first of equal
bests wins) of the source's distance plus the edge's weight, or 0 with the node as its
own start when it has no incoming edge or the best is below 0 (a path may start at any
node). The path ends at the first node of the largest distance and is read back through
the chosen predecessors, so ties break exactly as `nx.dag_longest_path` breaks them.

Both loops run in C (`_paths.c`, built with the package when a C compiler is there) and
fall back to the Python loops here, which stay the reference: same answers, ties
included, about ten times slower; sums beyond 64 bits are left to them. The C loops read
the edge columns as Arrow arrays; only the Python loops turn them into lists.
`TRACEKIT_NATIVE=0` turns the C loops off, as it does the native scanner
(`tracekit.native` chooses, once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from tracekit import native
from tracekit.analysis.order import sort_order
from tracekit.native import kernels

if TYPE_CHECKING:
    from tracekit.analysis.graph import DepGraph

I64 = pl.Int64


@dataclass(frozen=True)
class EdgeOrder:
    """The edges of a DepGraph as topological positions, sorted by (target position, edge row).

    Within one target the edges keep their row order in `dep.edges`, the order in which a
    DiGraph built from them lists each node's predecessors. The columns stay Polars Series
    (Int64): the C loops read them as Arrow arrays, and only the Python loops make lists.
    """

    src: pl.Series
    dst: pl.Series
    perm: pl.Series  # row of dep.edges for each position in src/dst
    nodes: int
    topo: pl.Series  # node of each position

    @classmethod
    def of(cls, dep: DepGraph) -> EdgeOrder:
        if len(dep.order):
            topo = dep.order
        else:
            import networkx as nx  # only for graphs without build_graph's order

            topo = list(nx.topological_sort(dep.graph))
        # position of each node in `topo` (-1: not in it), read with gathers, not joins
        nodes = pl.Series("node", topo, dtype=I64)
        size = max(int(nodes.max() or 0), int(dep.edges["src"].max() or 0), int(dep.edges["dst"].max() or 0)) + 1
        pos = pl.Series(dtype=I64).extend_constant(-1, size).scatter(nodes, pl.int_range(nodes.len(), dtype=I64, eager=True))
        e = dep.edges.select(_s=pos.gather(dep.edges["src"]), _d=pos.gather(dep.edges["dst"])).with_row_index("_row")
        del pos  # (the node positions go before the edges are put in order; then each column is
        # gathered in it on its own: a sort of the filtered frame held both copies of all three)
        e = e.filter((pl.col("_s") >= 0) & (pl.col("_s") < pl.col("_d")))
        by = sort_order(e, "_d", maintain_order=True)
        src, dst, perm = (e.get_column(c).gather(by) for c in ("_s", "_d", "_row"))
        return cls(src=src, dst=dst, perm=perm, nodes=nodes.len(), topo=nodes)

    def weights(self, weights: pl.Series) -> pl.Series:
        """`weights` (aligned with dep.edges) in this order."""
        return weights.cast(I64).gather(self.perm)


def longest_weight(order: EdgeOrder, weights: pl.Series) -> int:
    """Weight of the longest path (0 for a graph without edges)."""
    return _weight(order, weights)


def _longest_weight_c(order: EdgeOrder, weights: pl.Series) -> int | None:
    try:
        return kernels.longest_weight(order.src, order.dst, weights, order.nodes)
    except OverflowError:  # sums beyond 64 bits: the Python loop has no such limit
        return None


def _longest_weight(order: EdgeOrder, weights: pl.Series) -> int:
    dist = [0] * order.nodes
    for s, d, w in zip(order.src.to_list(), order.dst.to_list(), weights.to_list()):
        v = dist[s] + w
        if v > dist[d]:  # noqa: PLR1730  (faster than max() in this hot loop)
            dist[d] = v
    return max(dist, default=0)


_weight = native.register("longest_weight", c=_longest_weight_c, reference=_longest_weight)


def longest_path(order: EdgeOrder, weights: pl.Series) -> tuple[pl.Series, int]:
    """The nodes of the longest path (Int64, in path order), as `nx.dag_longest_path` would
    return them, and its weight (the same as `longest_weight`: one pass gives both).

    The nodes stay a column: as a list they would be as many Python ints, twice over, at
    the critical path's largest."""
    if not order.nodes:
        return pl.Series("node", [], dtype=I64), 0
    return _path(order, weights)


def _longest_path_c(order: EdgeOrder, weights: pl.Series) -> tuple[pl.Series, int] | None:
    try:
        positions, weight = kernels.longest_path(order.src, order.dst, weights, order.nodes)
    except OverflowError:
        return None
    return order.topo.gather(positions).rename("node"), weight


def _longest_path_py(order: EdgeOrder, weights: pl.Series) -> tuple[pl.Series, int]:
    nodes, weight = _longest_path(order, weights)
    return pl.Series("node", nodes, dtype=I64), weight


def _longest_path(order: EdgeOrder, weights: pl.Series) -> tuple[list[int], int]:
    n = order.nodes
    dist = [0] * n
    back = list(range(n))
    cur = -1
    for s, d, w in zip(order.src.to_list(), order.dst.to_list(), weights.to_list()):
        if d != cur:  # first edge into d: every node before d is final, so settle the last one
            if cur >= 0 and dist[cur] < 0:
                dist[cur], back[cur] = 0, cur
            cur = d
            dist[d], back[d] = dist[s] + w, s
        else:
            v = dist[s] + w
            if v > dist[d]:
                dist[d], back[d] = v, s
    if cur >= 0 and dist[cur] < 0:
        dist[cur], back[cur] = 0, cur
    end = max(range(n), key=dist.__getitem__)
    path = [end]
    while back[path[-1]] != path[-1]:
        path.append(back[path[-1]])
    topo = order.topo.to_list()
    return [topo[p] for p in reversed(path)], dist[end]


_path = native.register("longest_path", c=_longest_path_c, reference=_longest_path_py)
