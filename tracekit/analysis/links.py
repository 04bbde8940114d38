"""Who launched what: runtime call -> CPU op, and GPU activity -> runtime call -> CPU op.

- GPU activity -> launch call: `correlation` (the CUPTI id both carry). A `cudaGraphLaunch`
  has one correlation for all the kernels of the graph: each gets the same launch.
- launch call -> CPU op: the launch's `External id` equals the launching `cpu_op`'s
  (Kineto since 2021), taken only where that op is on the call's thread and contains it
  in time (`ts <= call.ts`, `call.end <= end`) and the id is not the call's own
  `correlation`: PyTorch 2.0-era Kineto writes the correlation there, which can equal an
  unrelated op's id. Otherwise (no External id, no op of it, or a rejected one) the
  innermost `cpu_op` on the same thread whose span contains the call ("containment");
  `link_warnings` counts the rejected ids.
- A GPU row has its launch call's op. Its own `External id` is not used: it could only be
  checked against the launch call, inside which containment has already found the op,
  and a row without a launch call cannot be checked (`link_warnings` counts those whose
  id names an op).

Each function computes what it starts from unless given it (`ops`, `launches`): a caller
that has the op tree or the launch calls passes them on. The op tree may be passed as an
`nesting.OpTree` (`op_tree`), whose derived arrays the containment walk shares.
"""

from __future__ import annotations

import polars as pl

from tracekit import native
from tracekit.analysis.nesting import OpTree, in_time_order, rows_of, tree_of, with_parents
from tracekit.model import GPU_WORK_CATS, TEXT, UNREAD_GPU_COLUMNS, UNREAD_OP_COLUMNS, WARNINGS_SCHEMA, Trace
from tracekit.native import kernels

LINK = pl.Enum(["external_id", "containment"])  # how a row's op was found: one byte a row
# the names the calls and the GPU work are given (their launch call's, their op's) are codes
# (`model.TEXT`): four bytes a row where text took a 16-byte view, in frames held for the
# whole of `analyse()`
OP_COLUMNS = {"op_eid": pl.Int64, "op_name": TEXT, "op_external_id": pl.Int64, "link": LINK}
# `cpu_ops` and `gpu_links` leave out the ops' and the GPU work's columns that no analysis
# reads (`model.UNREAD_OP_COLUMNS`, `model.UNREAD_GPU_COLUMNS`): they would be held for the
# whole of `analyse()`


def cpu_ops(trace: Trace) -> pl.DataFrame:
    """The `cpu_op` slices with `depth` and `parent_eid`, with the ops' columns but
    `UNREAD_OP_COLUMNS`.

    Their `cat`, "cpu_op" on every row, is held as one value (`loader.constants`): the
    filter would copy it, a 16-byte view a row, held for the whole run."""
    ops = trace.ops.drop(UNREAD_OP_COLUMNS, strict=False).filter(pl.col("cat") == "cpu_op")
    if ops.height > 1:
        ops = ops.with_columns(pl.lit("cpu_op", ops.schema["cat"]).alias("cat"))
    return with_parents(ops)


def op_tree(trace: Trace) -> OpTree:
    """`cpu_ops(trace)` as an `OpTree`: the form to hand to several analyses, which then share
    the arrays derived from the tree."""
    return OpTree(cpu_ops(trace))


def launch_ops(trace: Trace, *, ops: pl.DataFrame | OpTree | None = None) -> pl.DataFrame:
    """Every runtime/driver call plus the CPU op that made it (`op_eid`, `op_name`, `link`);
    `ops`: the op tree (`cpu_ops`, `op_tree`), computed when not given."""
    return _launch_ops(trace, op_tree(trace) if ops is None else tree_of(ops))


def _launch_ops(trace: Trace, tree: OpTree) -> pl.DataFrame:
    rt, ops = trace.runtime, tree.frame
    if rt.is_empty() or ops.is_empty():
        return rt.with_columns(*(pl.lit(None, t).alias(c) for c, t in OP_COLUMNS.items()))
    # the deepest op of each External id on each thread (ties: the first in time), on the
    # columns it reads (not a sort of every column of the ops)
    by_ext = _ops_by_ext(ops, ("pid", "tid"))
    # the joins keep the calls' order (time, then eid): no sort of every column afterwards.
    # No link: an op that does not contain the call, and an id that is the call's own
    # correlation (PyTorch 2.0-era Kineto writes that on every call: where it names an op
    # that contains the call, that op is an ancestor by chance; where the id is right,
    # containment finds the same op)
    held = ((pl.col("_x_ts") <= pl.col("ts_ns")) & (pl.col("end_ns") <= pl.col("_x_end"))
            & pl.col("external_id").ne_missing(pl.col("correlation")))
    linked = rt.join(by_ext, on=["external_id", "pid", "tid"], how="left", maintain_order="left").with_columns(
        _x_eid=pl.when(held).then("_x_eid")).drop("_x_ts", "_x_end")
    contained = _containing_op(linked.filter(pl.col("_x_eid").is_null()), tree)
    linked = linked.join(contained, on="eid", how="left", maintain_order="left").with_columns(
        op_eid=pl.coalesce("_x_eid", "_c_eid"),
        link=pl.when(pl.col("_x_eid").is_not_null()).then(pl.lit("external_id", LINK))
        .when(pl.col("_c_eid").is_not_null()).then(pl.lit("containment", LINK)),
    )
    names = ops.select(pl.col("eid").alias("op_eid"), pl.col("name").cast(TEXT).alias("op_name"),
                       pl.col("external_id").alias("op_external_id"))
    return in_time_order(linked.join(names, on="op_eid", how="left", maintain_order="left").drop("_x_eid", "_c_eid"))


def _ops_by_ext(ops: pl.DataFrame, keys: tuple[str, ...] = ()) -> pl.DataFrame:
    """(external_id, *keys, _x_eid, _x_ts, _x_end): the deepest op of each External id (and
    `keys`), ties the first in time."""
    return (
        ops.select("external_id", *keys, "depth", "eid", "ts_ns", "end_ns").filter(pl.col("external_id").is_not_null())
        .sort("depth", descending=True, maintain_order=True)
        .unique(["external_id", *keys], keep="first")
        .select("external_id", *keys, pl.col("eid").alias("_x_eid"), pl.col("ts_ns").alias("_x_ts"),
                pl.col("end_ns").alias("_x_end"))
    )


def _containing_op(calls: pl.DataFrame, tree: OpTree, *, max_depth: int = 64) -> pl.DataFrame:
    """(eid, _c_eid): the innermost op on the call's thread whose span contains the call.

    From the last op that started at or before the call, up its parents to the first that
    ends at or after the call's end: one C walk per call (`up_until`) when the C passes are
    built, else a join per level.
    """
    if calls.is_empty():
        return pl.DataFrame(schema={"eid": pl.Int64, "_c_eid": pl.Int64})
    ops = tree.frame
    right = ops.select("pid", "tid", pl.col("ts_ns").alias("_t"), pl.col("eid").alias("_cand")).sort("_t")
    left = calls.select("eid", "pid", "tid", "end_ns", pl.col("ts_ns").alias("_t")).sort("_t")
    cand = left.join_asof(right, on="_t", by=["pid", "tid"], strategy="backward", check_sortedness=False)
    return _climb_to_op(cand, tree, max_depth)


def _climb_native(cand: pl.DataFrame, tree: OpTree, max_depth: int) -> pl.DataFrame | None:
    """`_containing_op`'s climb by one C walk up per call (`up_until`); None (the joins
    climb) when an op has no end or an eid repeats."""
    ops = tree.frame
    rows = None if ops["end_ns"].null_count() else tree.parent_rows
    if rows is None:
        return None
    at = cand.filter(pl.col("end_ns").is_not_null())  # a call without an end is in no op
    hit = kernels.up_until(rows, ops["end_ns"], rows_of(ops, at["_cand"]), at["end_ns"], max_depth)
    found = at.select("eid", _r=hit).filter(pl.col("_r") >= 0)
    return found.select("eid", _c_eid=ops["eid"].gather(found["_r"]))


def _climb_joins(cand: pl.DataFrame, tree: OpTree, max_depth: int) -> pl.DataFrame:
    """`_containing_op`'s climb by a join per level (the reference)."""
    ops = tree.frame
    spans = ops.select(pl.col("eid").alias("_cand"), pl.col("end_ns").alias("_cend"), pl.col("parent_eid").alias("_up"))
    found = []
    for _ in range(max_depth):
        cand = cand.filter(pl.col("_cand").is_not_null()).join(spans, on="_cand", how="left")
        ok = pl.col("_cend") >= pl.col("end_ns")
        found.append(cand.filter(ok).select("eid", pl.col("_cand").alias("_c_eid")))
        cand = cand.filter(~ok).select("eid", "pid", "tid", "end_ns", "_t", pl.col("_up").alias("_cand"))
        if cand.is_empty():
            break
    return pl.concat(found) if found else pl.DataFrame(schema={"eid": pl.Int64, "_c_eid": pl.Int64})


_climb_to_op = native.register("up_until", c=_climb_native, reference=_climb_joins)


def gpu_links(trace: Trace, *, launches: pl.DataFrame | None = None,
              ops: pl.DataFrame | OpTree | None = None) -> pl.DataFrame:
    """GPU work rows (kernels, memcpys, memsets) plus their launch call and CPU op.

    The work's columns but `UNREAD_GPU_COLUMNS`, and these: launch_eid, launch_name,
    launch_ts_ns, launch_end_ns, launch_pid, launch_tid, op_eid, op_name, op_external_id,
    link (`LINK`: how the op was found; null where no link was found). `launches`
    (`launch_ops`) is computed when not given, from `ops` when given.
    """
    return _gpu_links(trace, launch_ops(trace, ops=ops) if launches is None else launches)


def _gpu_links(trace: Trace, launches: pl.DataFrame) -> pl.DataFrame:
    work = trace.gpu.drop(UNREAD_GPU_COLUMNS, strict=False).filter(pl.col("cat").is_in(GPU_WORK_CATS))
    calls = (
        launches.select(
            "correlation",
            pl.col("eid").alias("launch_eid"), pl.col("name").cast(TEXT).alias("launch_name"),
            pl.col("ts_ns").alias("launch_ts_ns"), pl.col("end_ns").alias("launch_end_ns"),
            pl.col("pid").alias("launch_pid"), pl.col("tid").alias("launch_tid"),
            "op_eid", "op_name", "op_external_id", "link",
        )
        .filter(pl.col("correlation").is_not_null())
        .unique("correlation", keep="first")
    )
    # (as the work: in time order). A row's own External id is not used: where its launch
    # call has an op the row has it too; where the call has none, no op contains the call
    # (an op of that id would not hold); and a row with no launch call cannot be checked
    # (its External id may be its correlation, as on the calls)
    return in_time_order(work.join(calls, on="correlation", how="left", maintain_order="left"))


def link_warnings(trace: Trace, *, launches: pl.DataFrame | None = None,
                  gpu: pl.DataFrame | None = None, ops: pl.DataFrame | OpTree | None = None) -> pl.DataFrame:
    """What the links noticed (`model.WARNINGS_SCHEMA`): launch calls whose External id
    names a `cpu_op` but was rejected (linked by containment instead), and GPU rows with no
    op whose External id names one (left untied: nothing confirms it)."""
    launches = launch_ops(trace, ops=ops) if launches is None else launches
    gpu = gpu_links(trace, launches=launches) if gpu is None else gpu
    named = trace.ops.filter((pl.col("cat") == "cpu_op") & pl.col("external_id").is_not_null()).select(
        "external_id").unique()
    rejected = launches.filter(pl.col("link").ne_missing("external_id")).join(named, on="external_id", how="semi")
    untied = gpu.filter(pl.col("op_eid").is_null()).join(named, on="external_id", how="semi")
    rows = []
    if rejected.height:
        n = rejected.height
        rows.append({"level": "warning", "code": "external_id_rejected", "count": n,
                     "first_eid": rejected["eid"].min(),
                     "message": f"{n:,} launch call{'' if n == 1 else 's'}: the External id names an op but is the "
                                "call's own correlation (as PyTorch 2.0-era traces write it) or the op does not "
                                "contain the call on its thread; linked to the op that contains the call instead"})
    if untied.height:
        n = untied.height
        rows.append({"level": "warning", "code": "gpu_external_id_unchecked", "count": n,
                     "first_eid": untied["eid"].min(),
                     "message": f"{n:,} GPU row{'' if n == 1 else 's'} with no launching op: the External id "
                                "names an op, but no launch call inside that op confirms it; left untied"})
    return pl.DataFrame(rows, schema=WARNINGS_SCHEMA)

