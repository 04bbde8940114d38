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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from tracekit.analysis.graph import DepGraph

I64 = pl.Int64


@dataclass(frozen=True)
class EdgeOrder:
    """The edges of a DepGraph as topological positions, sorted by (target position, edge row).

    Within one target the edges keep their row order in `dep.edges`, the order in which a
    DiGraph built from them lists each node's predecessors.
    """

    src: list[int]
    dst: list[int]
    perm: pl.Series  # row of dep.edges for each position in src/dst
    nodes: int
    topo: list[int]  # node of each position

    @classmethod
    def of(cls, dep: DepGraph) -> EdgeOrder:
        if dep.order:
            topo = dep.order
        else:
            import networkx as nx  # only for graphs without build_graph's order

            topo = list(nx.topological_sort(dep.graph))
        index = pl.DataFrame({"node": topo, "pos": range(len(topo))}, schema={"node": I64, "pos": I64})
        e = dep.edges.select("src", "dst").with_row_index("_row").join(
            index.rename({"node": "src", "pos": "_s"}), on="src").join(
            index.rename({"node": "dst", "pos": "_d"}), on="dst").filter(pl.col("_s") < pl.col("_d")).sort("_d", "_row")
        return cls(src=e["_s"].to_list(), dst=e["_d"].to_list(), perm=e["_row"], nodes=len(topo), topo=topo)

    def weights(self, weights: pl.Series) -> list[int]:
        """`weights` (aligned with dep.edges) in this order."""
        return weights.gather(self.perm).to_list()


def longest_weight(order: EdgeOrder, weights: list[int]) -> int:
    """Weight of the longest path (0 for a graph without edges)."""
    dist = [0] * order.nodes
    for s, d, w in zip(order.src, order.dst, weights):
        v = dist[s] + w
        if v > dist[d]:  # noqa: PLR1730  (faster than max() in this hot loop)
            dist[d] = v
    return max(dist, default=0)


def longest_path(order: EdgeOrder, weights: list[int]) -> tuple[list[int], int]:
    """The nodes of the longest path, as `nx.dag_longest_path` would return them, and its
    weight (the same as `longest_weight`: one pass gives both)."""
    n = order.nodes
    if not n:
        return [], 0
    dist = [0] * n
    back = list(range(n))
    cur = -1
    for s, d, w in zip(order.src, order.dst, weights):
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
    topo = order.topo
    return [topo[p] for p in reversed(path)], dist[end]
