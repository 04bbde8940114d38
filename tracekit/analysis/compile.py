"""torch.compile in a trace: compiled regions, their wrapper cost, Triton kernels, recompiles.

Regions are CPU slices (any category: `record_function` ranges are `user_annotation`,
autograd functions are `cpu_op`) whose names match, first rule wins:

| kind              | name                                                             |
|-------------------|------------------------------------------------------------------|
| compiled_region   | `Torch-Compiled Region: <frame>/<compile>` (torch >= 2.4; older: no ids) |
| compiled_graph    | `## Call CompiledFxGraph <hash> ##` (Inductor running one graph) |
| compiled_function | `CompiledFunction`, `CompiledFunctionBackward` (AOTAutograd)     |
| cache_lookup      | `TorchDynamo Cache Lookup` (guard evaluation, older torch)       |

Per region instance: launch calls inside it (same thread, span contained, innermost region
first, then every enclosing region), their API time, the GPU work they launched and how much
of it is Triton (`triton_` kernel names; Inductor's generated kernels). The wrapper CPU cost
is the region's wall time minus the time spent in those launch calls: Python guard checks,
argument unpacking, allocator calls, everything that is neither GPU work nor launching it.

Recompiles: the compile id of `Torch-Compiled Region: F/C` counts the compilations of frame
F; C >= 1 means F was recompiled at some point (not necessarily inside the trace). Compile
work that ran inside the trace is found by name: `… (dynamo_timed)` ranges and Dynamo's
`convert_frame.py(…): _compile` Python frames. CUDA-graph replays (`mode="reduce-overhead"`)
come from `launches.launch_stats`.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.analysis.attribution import enclosing_ops
from tracekit.analysis.launches import LaunchStats, launch_stats
from tracekit.analysis.links import gpu_links, launch_ops
from tracekit.analysis.nesting import ancestors, with_parents
from tracekit.model import TEXT, Trace

I64, F64, STR = pl.Int64, pl.Float64, pl.String

REGION_RULES: tuple[tuple[str, str], ...] = (
    ("compiled_region", r"^Torch-Compiled Region"),
    ("compiled_graph", r"^## Call CompiledFxGraph"),
    ("compiled_function", r"^CompiledFunction"),
    ("cache_lookup", r"^TorchDynamo Cache Lookup"),
)
COMPILE_WORK = r"\(dynamo_timed\)$|convert_frame\.py\(\d+\): _compile$"
TRITON = r"^triton_"
_REGION_IDS = r"^Torch-Compiled Region: (\d+)/(\d+)"

REGION_SCHEMA: dict[str, pl.DataType] = {
    "eid": I64, "kind": STR, "name": STR, "cat": TEXT, "pid": TEXT, "tid": TEXT, "ts_ns": I64, "dur_ns": I64,
    "end_ns": I64, "depth": I64, "parent_eid": I64, "launches": I64, "launch_ns": I64, "wrapper_ns": I64,
    "gpu_events": I64, "gpu_ns": I64, "triton_events": I64, "triton_ns": I64, "graph_launches": I64,
}
KIND_SCHEMA: dict[str, pl.DataType] = {
    "kind": STR, "regions": I64, "cpu_ns": I64, "launch_ns": I64, "wrapper_ns": I64, "gpu_events": I64,
    "gpu_ns": I64, "triton_events": I64, "triton_ns": I64, "graph_launches": I64,
}
TRITON_SCHEMA: dict[str, pl.DataType] = {
    "name": STR, "count": I64, "total_ns": I64, "mean_ns": F64, "op_name": STR, "region": STR,
    "in_region": I64,
}


@dataclass(frozen=True)
class CompileStats:
    """Result of `compile_stats`. Frames are typed even when empty."""

    regions: pl.DataFrame  # REGION_SCHEMA: one row per region instance
    kinds: pl.DataFrame  # KIND_SCHEMA: per region kind
    triton: pl.DataFrame  # TRITON_SCHEMA: per Triton kernel name, with launching op and region
    regions_outer: int  # region instances not inside another region
    region_cpu_ns: int  # wall time of those outermost instances
    wrapper_ns: int  # of which not spent in launch calls
    triton_events: int
    triton_ns: int
    triton_in_regions: int  # Triton events launched from inside a region
    graph_launches: int  # CUDA-graph replays (all of the trace, from launches)
    graph_events: int
    compile_events: int  # compile work seen inside the trace (dynamo_timed, _compile)
    compile_ns: int
    compiled_frames: int  # distinct frame ids in `Torch-Compiled Region: F/C` names
    recompiled_frames: int  # of which some C >= 1


def region_kind(name: pl.Expr) -> pl.Expr:
    """The region kind of an op name (`REGION_RULES`), else null."""
    expr = pl.when(name.str.contains(REGION_RULES[0][1])).then(pl.lit(REGION_RULES[0][0]))
    for kind, pattern in REGION_RULES[1:]:
        expr = expr.when(name.str.contains(pattern)).then(pl.lit(kind))
    return expr.otherwise(pl.lit(None, STR)).alias("kind")


def compile_stats(trace: Trace, *, launches: LaunchStats | None = None, calls: pl.DataFrame | None = None,
                  gpu: pl.DataFrame | None = None) -> CompileStats:
    """Compiled regions, wrapper cost, Triton kernels, recompiles and graph replays.

    launches (`launches.launch_stats`), calls (`links.launch_ops`), gpu (`links.gpu_links`):
    computed when not given."""
    if gpu is None or launches is None:
        calls = launch_ops(trace) if calls is None else calls
    gpu = gpu_links(trace, launches=calls) if gpu is None else gpu
    launches = launch_stats(trace, calls=calls, gpu=gpu) if launches is None else launches
    # the patterns run on the distinct names (a few dozen, where ops are millions), and the
    # rows are picked by name: run on every row, they were most of this function's time
    names = _distinct(trace.ops).with_columns(region_kind(pl.col("name")), work=pl.col("name").str.contains(COMPILE_WORK))
    regions_by_name = names.filter(pl.col("kind").is_not_null()).select("name", "kind")
    nested = with_parents(trace.ops.filter(_named(regions_by_name)).join(
        regions_by_name, on="name", how="left", maintain_order="left"))
    calls_in = enclosing_ops(launches.launches, nested).rename({"op_eid": "region_eid"})
    regions = _regions(nested, launches.launches, calls_in, gpu)
    triton = gpu.filter(_named(_distinct(gpu).filter(pl.col("name").str.contains(TRITON))))
    frames = _frame_ids(names)
    work = trace.ops.filter(_named(names.filter("work")))
    outer = regions.filter(pl.col("parent_eid").is_null())
    return CompileStats(
        regions=regions,
        kinds=_kinds(regions),
        triton=_triton(triton, calls_in, nested),
        regions_outer=outer.height,
        region_cpu_ns=int(outer["dur_ns"].sum() or 0),
        wrapper_ns=int(outer["wrapper_ns"].sum() or 0),
        triton_events=triton.height,
        triton_ns=int(triton["dur_ns"].sum() or 0),
        triton_in_regions=int(triton["launch_eid"].is_in(calls_in["eid"].implode()).sum() or 0),
        graph_launches=launches.graph_launches,
        graph_events=launches.graph_events,
        compile_events=work.height,
        compile_ns=int(work["dur_ns"].sum() or 0),
        compiled_frames=frames["frame"].n_unique(),
        recompiled_frames=frames.filter(pl.col("compile") >= 1)["frame"].n_unique(),
    )


def _distinct(rows: pl.DataFrame) -> pl.DataFrame:
    """The distinct non-null names of `rows` (`name`)."""
    return rows.select(pl.col("name").unique()).drop_nulls()


def _named(names: pl.DataFrame) -> pl.Expr:
    """Rows whose name is one of `names` (`name`)."""
    return pl.col("name").is_in(names["name"].implode())


def _frame_ids(names: pl.DataFrame) -> pl.DataFrame:
    """(frame, compile) from the distinct `Torch-Compiled Region: F/C` names (what is
    counted of them is distinct frames: the ops that repeat a name add none)."""
    ids = names.select(pl.col("name").str.extract_groups(_REGION_IDS).alias("_ids")).unnest("_ids")
    return ids.drop_nulls().cast(I64).rename({"1": "frame", "2": "compile"})


def _regions(nested: pl.DataFrame, launches: pl.DataFrame, in_region: pl.DataFrame,
             gpu: pl.DataFrame) -> pl.DataFrame:
    if nested.is_empty():
        return pl.DataFrame(schema=REGION_SCHEMA)
    closure = pl.concat([nested.select("eid", ancestor_eid="eid"), ancestors(nested).cast(I64)])
    triton_gpu = gpu.lazy().filter(pl.col("launch_eid").is_not_null()).group_by("launch_eid").agg(
        triton_events=pl.col("name").str.contains(TRITON).sum(),
        triton_ns=pl.col("dur_ns").filter(pl.col("name").str.contains(TRITON)).sum(),
    ).rename({"launch_eid": "eid"}).collect()  # (lazy: the filter copies only the columns read)
    calls = (in_region.join(launches.select("eid", "dur_ns", "gpu_events", "gpu_ns", "family"), on="eid")
             .join(triton_gpu, on="eid", how="left")
             .join(closure.rename({"eid": "region_eid"}), on="region_eid"))
    per = calls.group_by("ancestor_eid").agg(
        launches=pl.len(), launch_ns=pl.col("dur_ns").sum(), gpu_events=pl.col("gpu_events").sum(),
        gpu_ns=pl.col("gpu_ns").sum(), triton_events=pl.col("triton_events").sum(),
        triton_ns=pl.col("triton_ns").sum(), graph_launches=(pl.col("family") == "graph").sum(),
    ).rename({"ancestor_eid": "eid"})
    counts = ["launches", "launch_ns", "gpu_events", "gpu_ns", "triton_events", "triton_ns", "graph_launches"]
    out = nested.join(per, on="eid", how="left").with_columns(pl.col(counts).fill_null(0))
    out = out.with_columns(wrapper_ns=(pl.col("dur_ns") - pl.col("launch_ns")).clip(lower_bound=0))
    return out.select(list(REGION_SCHEMA)).cast(REGION_SCHEMA).sort("ts_ns", "eid")


def _kinds(regions: pl.DataFrame) -> pl.DataFrame:
    sums = ("launch_ns", "wrapper_ns", "gpu_events", "gpu_ns", "triton_events", "triton_ns", "graph_launches")
    out = regions.group_by("kind").agg(
        *(pl.col(c).sum() for c in sums), regions=pl.len(), cpu_ns=pl.col("dur_ns").sum(),
    )
    return out.select(list(KIND_SCHEMA)).cast(KIND_SCHEMA).sort(["cpu_ns", "kind"], descending=[True, False])


def _triton(triton: pl.DataFrame, in_region: pl.DataFrame, nested: pl.DataFrame) -> pl.DataFrame:
    if triton.is_empty():
        return pl.DataFrame(schema=TRITON_SCHEMA)
    names = nested.select(pl.col("eid").alias("region_eid"), pl.col("name").alias("region"))
    rows = (triton.join(in_region.rename({"eid": "launch_eid"}), on="launch_eid", how="left")
            .join(names, on="region_eid", how="left"))
    out = rows.group_by("name").agg(
        count=pl.len(), total_ns=pl.col("dur_ns").sum(), mean_ns=pl.col("dur_ns").mean(),
        op_name=pl.col("op_name").drop_nulls().mode().sort().first(),
        region=pl.col("region").drop_nulls().mode().sort().first(),
        in_region=pl.col("region_eid").is_not_null().sum(),
    )
    out = out.select(list(TRITON_SCHEMA)).cast(TRITON_SCHEMA)
    return out.sort(["total_ns", "name"], descending=[True, False])
