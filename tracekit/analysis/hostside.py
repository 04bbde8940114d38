"""Host-side figures, for traces without GPU work: CPU time in ops and the op tree's hot paths.

`host_time(trace) -> HostTime`. A CPU-only capture has nothing for the GPU figures to
measure, so the report and `tracekit summary` rank by these instead:

- ops time: summed wall time of the top-level `cpu_op` slices (depth 0 on their thread),
  all threads added; each op's self time (its wall time less that of its direct child ops)
  sums to the same figure.
- hot paths: the op tree's chains of names from a top-level op down (`aten::linear >
  aten::matmul > aten::mm`), each with the summed self time of the ops at its end: where
  the CPU time was spent, and under what.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.analysis.attribution import op_paths
from tracekit.analysis.links import op_tree
from tracekit.analysis.nesting import OpTree, tree_of
from tracekit.model import Trace

HOT_PATH_SCHEMA: dict[str, pl.DataType] = {
    "op_path": pl.String, "op": pl.String, "calls": pl.Int64, "self_ns": pl.Int64, "share": pl.Float64,
}


@dataclass(frozen=True)
class HostTime:
    ops_ns: int  # summed wall time of the top-level cpu_op slices, all threads
    op_calls: int  # cpu_op slices at any depth
    threads: int  # threads with a cpu_op
    hot_paths: pl.DataFrame  # HOT_PATH_SCHEMA, by self time; share = self_ns / ops_ns

    def to_dict(self, *, limit: int = 10) -> dict[str, object]:
        return {"ops_ns": self.ops_ns, "op_calls": self.op_calls, "threads": self.threads,
                "hot_paths": self.hot_paths.head(limit).to_dicts()}


def host_time(trace: Trace, *, top: int = 10, ops: pl.DataFrame | OpTree | None = None) -> HostTime:
    """The ops' CPU time and the `top` hot paths of `trace`'s op tree (`ops`, `links.op_tree`:
    computed when not given)."""
    tree = op_tree(trace) if ops is None else tree_of(ops)
    nested = tree.frame
    if nested.is_empty():
        return HostTime(0, 0, 0, pl.DataFrame(schema=HOT_PATH_SCHEMA))
    ops_ns = int(nested.filter(pl.col("depth") == 0)["dur_ns"].sum() or 0)
    children = nested.group_by("parent_eid").agg(child_ns=pl.col("dur_ns").sum()).rename({"parent_eid": "eid"})
    own = (nested.select("eid", "name", "dur_ns").join(children, on="eid", how="left")
           .select("eid", "name", self_ns=(pl.col("dur_ns") - pl.col("child_ns").fill_null(0)).clip(lower_bound=0)))
    paths = op_paths(tree, own["eid"])
    hot = (own.join(paths, on="eid", how="left")
           .group_by("op_path")
           .agg(op=pl.col("name").first(), calls=pl.len().cast(pl.Int64), self_ns=pl.col("self_ns").sum())
           .sort(["self_ns", "op_path"], descending=[True, False])
           .head(top)
           .with_columns(share=pl.col("self_ns") / ops_ns if ops_ns else pl.lit(None, pl.Float64)))
    threads = nested.select("pid", "tid").unique().height
    return HostTime(ops_ns=ops_ns, op_calls=nested.height, threads=threads, hot_paths=hot.cast(HOT_PATH_SCHEMA))
