"""What-if estimates from the dependency graph: change some work, recompute the critical path.

Each scenario re-weights the edges of `graph.build_graph`'s DAG and takes the longest
path again. The path's weight is its work; the estimated window is the window minus the
weight saved:

    saved_ns = weight(now) - weight(scenario)        estimate_ns = window_ns - saved_ns

This is a critical-path (Amdahl) bound: work that leaves the path is replaced by the next
heaviest chain, and waiting (weight 0) is assumed to stay as it was. Re-weighting alone
never saves more than the changed work on the current path; cutting edges (`no_syncs`)
can save more, because the work the syncs serialised may then overlap.

Scenarios:
- `no_launch_overhead`: host overhead between kernels gone (CUDA graphs replay, or
  torch.compile with `mode="reduce-overhead"`): `launch_overhead` and `python_overhead`
  weigh 0 on every CPU edge.
- `no_syncs`: the blocking syncs removed (e.g. `.item()` moved out of the loop): sync
  edges cut and blocking calls weigh 0; optionally only the calls in `call_eids`.
- `faster(kernel_class, factor)`: GPU activities of one taxonomy class (`gemm`,
  `attention`, ..., or `memcpy`/`memset`) `factor` times faster.

The longest-path weight is the dynamic programme `nx.dag_longest_path` runs (a path may
start at any node, so distances never go below 0), done on the edge arrays
(`longest.longest_weight`) with one topological order (`Order`, the graph's
`edge_order`) computed once per graph and shared by all scenarios and the critical path,
instead of building a new DiGraph each time. The current weight is computed once per
graph too (`DepGraph.path_weight_ns`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.graph import TEXT, DepGraph, run_sums
from tracekit.analysis.longest import EdgeOrder, longest_weight
from tracekit.analysis.taxonomy import classify_names
from tracekit.errors import UsageError

I64 = pl.Int64
CUT = -(10**15)  # an edge weighing this is never on a longest path (networkx restarts below 0)
HOST = ("launch_overhead", "python_overhead")


@dataclass(frozen=True)
class WhatIf:
    """One scenario's estimate."""

    scenario: str
    description: str
    window_ns: int
    weight_ns: int  # the critical path's work now
    scenario_weight_ns: int  # ... with the change
    saved_ns: int
    estimate_ns: int  # the window's estimated length with the change

    @property
    def saved_share(self) -> float:
        return self.saved_ns / self.window_ns if self.window_ns else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "description": self.description, "window_ns": self.window_ns,
                "weight_ns": self.weight_ns, "scenario_weight_ns": self.scenario_weight_ns,
                "saved_ns": self.saved_ns, "saved_share": self.saved_share, "estimate_ns": self.estimate_ns}


Order = EdgeOrder  # the edges in topological positions (`DepGraph.edge_order`)


def path_weight(dep: DepGraph, weights: pl.Series | None = None, *, order: Order | None = None) -> int:
    """Weight of the longest path, with `weights` (aligned with `dep.edges`) if given."""
    if dep.edges.is_empty():
        return 0
    order = order or dep.edge_order
    return longest_weight(order, order.weights(dep.edges["weight_ns"] if weights is None else weights))


def no_launch_overhead(dep: DepGraph, *, order: Order | None = None) -> WhatIf:
    """Launch and Python overhead on the CPU gone (CUDA graphs / torch.compile). `analyse()`
    hands this estimate from its scenarios to the `host_bound_path` rule."""
    weights = _cpu_without(dep, HOST)
    return _estimate(dep, "no_launch_overhead", "launch and Python overhead removed (CUDA graphs, torch.compile)",
                     weights, order)


def no_syncs(dep: DepGraph, *, call_eids: Iterable[int] | None = None, order: Order | None = None) -> WhatIf:
    """Blocking syncs removed: all of them, or only the calls whose eid is in `call_eids`."""
    chosen = dep.syncs["eid"] if call_eids is None else pl.Series("eid", list(call_eids), dtype=I64)
    gone = (pl.col("cls") == "sync_wait") & pl.col("eid").is_in(chosen.implode())
    weights = _cpu_weights(dep, dep.segments.select(pl.when(gone).then(0).otherwise("weight_ns"))[:, 0])
    cut = (pl.col("kind") == "sync") & pl.col("eid").is_in(chosen.implode())
    weights = dep.edges.with_columns(_w=weights).select(pl.when(cut).then(CUT).otherwise("_w"))[:, 0]
    label = "all syncs" if call_eids is None else fmt.counted(chosen.len(), "sync call")
    return _estimate(dep, "no_syncs", f"{label} removed", weights, order)


def faster(dep: DepGraph, *, kernel_class: str, factor: float, order: Order | None = None) -> WhatIf:
    """GPU work of one kernel class `factor` times faster (Amdahl bound on the path)."""
    if factor <= 0:
        raise UsageError(f"factor must be > 0, got {factor}")
    return _faster(dep, _classes(dep), kernel_class=kernel_class, factor=factor, order=order)


def _classes(dep: DepGraph, known: pl.DataFrame | None = None) -> pl.DataFrame:
    """(name, kernel_class) of the GPU edges' kernels (`known`: as `taxonomy.classify_names`'s
    `classes`)."""
    return classify_names(dep.edges.filter(pl.col("kind") == "gpu")["name"], classes=known).select(
        pl.col("name").cast(TEXT), "kernel_class")


def _faster(dep: DepGraph, classes: pl.DataFrame, *, kernel_class: str, factor: float, order: Order | None) -> WhatIf:
    # the names of the class, looked up (a join of every edge with the classes copied them all)
    names = classes.filter(pl.col("kernel_class") == kernel_class)["name"]
    hit = (pl.col("kind") == "gpu") & pl.col("name").is_in(names.implode())
    weights = dep.edges.select(pl.when(hit).then((pl.col("weight_ns") / factor).round().cast(I64))
                               .otherwise("weight_ns"))[:, 0]
    return _estimate(dep, f"faster:{kernel_class}", f"{kernel_class} kernels {factor:g}x faster", weights, order)


def standard(dep: DepGraph, *, classes: pl.DataFrame | None = None) -> list[WhatIf]:
    """The scenarios a report shows: no launch overhead, no syncs, the top GPU class 2x faster
    (`classes`: `taxonomy.classify_names` of the trace's GPU names, when the caller has it)."""
    order = dep.edge_order
    out = [no_launch_overhead(dep, order=order), no_syncs(dep, order=order)]
    gpu = dep.edges.filter(pl.col("kind") == "gpu")
    if gpu.height:
        classes = _classes(dep, classes)  # (classified once for the pick and the scenario)
        kinds = gpu.join(classes, on="name", how="left")
        top = kinds.group_by("kernel_class").agg(ns=pl.col("weight_ns").sum()).sort(
            ["ns", "kernel_class"], descending=[True, False], nulls_last=True)
        out.append(_faster(dep, classes, kernel_class=top["kernel_class"][0], factor=2.0, order=order))
    return out


def _cpu_without(dep: DepGraph, classes: tuple[str, ...]) -> pl.Series:
    gone = pl.col("cls").is_in(classes)
    return _cpu_weights(dep, dep.segments.select(pl.when(gone).then(0).otherwise("weight_ns"))[:, 0])


def _cpu_weights(dep: DepGraph, weights: pl.Series) -> pl.Series:
    """Edge weights (aligned with dep.edges) with the cpu edges re-summed from the pieces'
    `weights` (aligned with dep.segments).

    A cpu edge's pieces are one run of the segments (`DepGraph.cpu_runs`), summed by
    `graph.run_sums`."""
    rows, lo, hi = dep.cpu_runs
    return dep.edges["weight_ns"].clone().scatter(rows, run_sums(weights, lo, hi)).rename("weight")


def _estimate(dep: DepGraph, scenario: str, description: str, weights: pl.Series, order: Order | None) -> WhatIf:
    order = order or dep.edge_order
    now = dep.path_weight_ns
    then = path_weight(dep, weights, order=order)
    saved = max(0, now - then)
    return WhatIf(scenario=scenario, description=description, window_ns=dep.window_ns, weight_ns=now,
                  scenario_weight_ns=then, saved_ns=saved, estimate_ns=dep.window_ns - saved)
