"""Op <-> GPU attribution: which CPU op costs how much CPU time and launched which GPU work.

Every `cpu_op` slice is placed in its thread's op tree (`nesting.with_parents`); every
GPU work event (kernel, memcpy, memset) is tied to the op that launched it
(`links.gpu_links`: correlation -> launch call -> External id, else containment).
From those two facts, per op instance and per op name (the long form: `docs/metrics.md`,
"Attribution, launches, syncs and copies"):

- CPU total: the op's wall time. Per name, an instance nested inside another instance
  of the same name (recursion) is not counted again.
- CPU self: total minus the time of its direct child ops on the same thread (runtime
  calls are not ops: launch time stays in the self time of the op that launched).
- self GPU: summed duration of the GPU events launched directly by the op.
- inclusive GPU: summed duration of the GPU events launched by the op or any op below
  it. Per name, each GPU event counts once however many same-name ancestors it has, so a
  name's inclusive GPU time never exceeds the trace's total GPU work time.

GPU time is summed activity time, not busy time: two overlapping kernels on two streams
count twice. GPU events with no op are counted, never dropped (`unlinked_events`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from tracekit import native
from tracekit.analysis.launches import launch_family
from tracekit.analysis.links import _containing_op, gpu_links, launch_ops, link_warnings, op_tree
from tracekit.analysis.nesting import OpTree, in_time_order, rows_of, tree_of
from tracekit.model import ENGINE, TEXT, WARNINGS_SCHEMA, Trace
from tracekit.native import kernels

I64, F64, STR, BOOL = pl.Int64, pl.Float64, pl.String, pl.Boolean

INSTANCE_SCHEMA: dict[str, pl.DataType] = {
    "eid": I64, "name": STR, "pid": TEXT, "tid": TEXT, "ts_ns": I64, "dur_ns": I64, "end_ns": I64,
    "depth": I64, "parent_eid": I64, "external_id": I64, "self_ns": I64, "launches": I64,
    "gpu_events_self": I64, "gpu_self_ns": I64, "gpu_events_incl": I64, "kernels_incl": I64,
    "gpu_incl_ns": I64,
}
OPS_SCHEMA: dict[str, pl.DataType] = {
    "name": STR, "calls": I64, "cpu_total_ns": I64, "cpu_self_ns": I64, "cpu_mean_ns": F64,
    "gpu_incl_ns": I64, "gpu_self_ns": I64, "gpu_events_incl": I64, "gpu_events_self": I64,
    "kernels_incl": I64, "kernels_per_call": F64, "calls_without_gpu": I64,
    "launches_nothing": BOOL, "gpu_share": F64,
}


@dataclass(frozen=True)
class Attribution:
    """Result of `attribute`. Frames are typed even when empty."""

    ops: pl.DataFrame  # OPS_SCHEMA: one row per cpu_op name, by inclusive GPU time
    # INSTANCE_SCHEMA: one row per cpu_op slice; None when not kept (`attribute(instances=False)`)
    instances: pl.DataFrame | None
    gpu: pl.DataFrame  # GPU work rows with their launch and op (`links.gpu_links`)
    gpu_events: int  # GPU work events (kernels + memcpys + memsets)
    gpu_total_ns: int  # their summed duration (the denominator of `gpu_share`)
    linked_events: int  # tied to a cpu_op
    unlinked_events: int  # tied to no cpu_op (no launch call, or a launch outside any op)
    unlinked_ns: int
    no_launch_events: int  # of the unlinked: no launch call found at all
    silent_op_names: int  # op names none of whose calls launched GPU work
    # what the links noticed (`links.link_warnings`, `model.WARNINGS_SCHEMA`): External ids rejected
    warnings: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=WARNINGS_SCHEMA))


def attribute(trace: Trace, *, instances: bool = True, ops: pl.DataFrame | OpTree | None = None,
              launches: pl.DataFrame | None = None, links: pl.DataFrame | None = None) -> Attribution:
    """Per-op and per-op-name CPU and GPU time; see the module docstring.

    instances: keep the per-instance rows (`Attribution.instances`; else None). `analyse()`
        does not: only a diff reads them (`op_instances`, which computes them again), and
        held they would take a row per op through the rest of the analyses and the report.
    ops, launches, links: the op tree (`links.op_tree`), the launch calls (`links.launch_ops`)
        and the GPU links (`links.gpu_links`) of `trace`, computed when not given.
    """
    rows, gpu, tree, closure, launches = _instance_rows(trace, ops, launches, links)
    warnings = link_warnings(trace, launches=launches, gpu=gpu)
    ops = _per_name(rows, gpu, closure, total_ns=int(gpu["dur_ns"].sum() or 0),
                    recursive=tree[1] if tree else None)
    no_op = gpu.filter(pl.col("op_eid").is_null())
    return Attribution(
        ops=ops,
        instances=rows if instances else None,
        gpu=gpu,
        gpu_events=gpu.height,
        gpu_total_ns=int(gpu["dur_ns"].sum() or 0),
        linked_events=gpu.height - no_op.height,
        unlinked_events=no_op.height,
        unlinked_ns=int(no_op["dur_ns"].sum() or 0),
        no_launch_events=int(gpu["launch_eid"].null_count()),
        silent_op_names=int(ops["launches_nothing"].sum() or 0),
        warnings=warnings,
    )


def op_instances(attribution: Attribution, trace: Trace, *, ops: pl.DataFrame | OpTree | None = None,
                 launches: pl.DataFrame | None = None, links: pl.DataFrame | None = None) -> pl.DataFrame:
    """The per-instance rows of `trace`'s attribution: those it kept, else computed again
    (the rows alone: not the per-name table), from `ops`, `launches`, `links` when given."""
    if attribution.instances is not None:
        return attribution.instances
    return _instance_rows(trace, ops, launches, links)[0]


def _instance_rows(trace: Trace, ops: pl.DataFrame | OpTree | None, launches: pl.DataFrame | None,
                   links: pl.DataFrame | None) -> tuple[pl.DataFrame, pl.DataFrame,
                                                        tuple[pl.DataFrame, pl.DataFrame] | None,
                                                        pl.DataFrame | None, pl.DataFrame]:
    """(instances, GPU links, the C walks' sums and same-name frames or None, the closure
    or None, the launch calls): what `attribute` and `op_instances` start from."""
    nested = op_tree(trace) if ops is None else tree_of(ops)
    launches = launch_ops(trace, ops=nested) if launches is None else launches
    gpu = gpu_links(trace, launches=launches) if links is None else links
    tree, closure = _op_tree(nested, gpu)
    return (_instances(nested.frame, launches, gpu, closure, sums=tree[0] if tree else None), gpu, tree, closure,
            launches)


LEVELS = 256  # the closure's depth (`nesting.ancestors`), which the C walks keep to


def _tree_walks(nested: OpTree, gpu: pl.DataFrame) -> tuple[tuple[pl.DataFrame, pl.DataFrame], None] | None:
    """(the C walks' sums and same-name frame, no closure): see `_tree_native`."""
    tree = _tree_native(nested, gpu)
    return None if tree is None else (tree, None)


def _tree_closure(nested: OpTree, gpu: pl.DataFrame) -> tuple[None, pl.DataFrame]:
    """(no walks, the closure `_instances` and `_per_name` join with): the reference."""
    return None, nested.closure


# what the per-instance and per-name sums start from: the C walks' answers, or the closure
_op_tree = native.register("op_tree", c=_tree_walks, reference=_tree_closure)


def _tree_native(nested: pl.DataFrame | OpTree, gpu: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """What the closure's joins give, by two C walks up the op tree: per op row its own and
    its subtree's GPU events (`tree_sums`), and the ops with a same-name op above them
    (`same_above`, as `_per_name`'s `recursive` frame). None (the joins decide) when an eid
    repeats, a name is null, or the tree is `LEVELS` deep (there the closure stops short).
    The joins' closure holds one row per (op, ancestor) pair, deduplicated on text."""
    tree = tree_of(nested)
    rows = _walkable(tree)
    if rows is None:
        return None
    nested = tree.frame
    events = gpu.lazy().filter(pl.col("op_eid").is_not_null()).select(
        "op_eid", pl.col("dur_ns").fill_null(0), (pl.col("cat") == "kernel").cast(I64).alias("kernel")).collect(
        engine=ENGINE)
    at = rows_of(nested, events["op_eid"])
    sums = pl.DataFrame(kernels.tree_sums(rows, at, events["dur_ns"], events["kernel"], LEVELS))
    inner = kernels.same_above(rows, tree.name_codes, LEVELS)
    recursive = nested.select("eid").filter(inner).with_columns(_inner=pl.lit(True))
    return sums, recursive


def _walkable(tree: OpTree) -> pl.Series | None:
    """The op tree's parent rows (`OpTree.parent_rows`) when the C walks that compare names
    give the closure's answers: no eid repeats, no name is null, and the tree is less than
    `LEVELS` deep (there the closure stops short). Else None: the joins decide."""
    nested = tree.frame
    if nested["name"].null_count() or int(nested["depth"].max() or 0) >= LEVELS:  # type: ignore[arg-type]
        return None
    return tree.parent_rows


def closure_pairs(nested: pl.DataFrame | OpTree) -> pl.DataFrame:
    """(eid, ancestor_eid) for every op and each of its ancestors, itself included (kept with
    an `OpTree`: attribution and every `op_paths` call on it share it)."""
    return tree_of(nested).closure


def op_paths(nested: pl.DataFrame | OpTree, eids: pl.Series, *, sep: str = " > ") -> pl.DataFrame:
    """(eid, op_path): the names from the outermost op down to `eid`, joined by `sep`. An
    `OpTree` keeps what the paths are made from, for the next call on it."""
    tree = tree_of(nested)
    nested = tree.frame
    wanted = pl.DataFrame({"eid": eids.cast(I64)}).drop_nulls().unique()
    if wanted.is_empty() or nested.is_empty():
        return pl.DataFrame(schema={"eid": I64, "op_path": STR})
    return _op_paths(tree, wanted, sep)


def _op_paths_joins(tree: OpTree, wanted: pl.DataFrame, sep: str) -> pl.DataFrame:
    """`op_paths` through the closure's joins (the reference)."""
    nested = tree.frame
    names = nested.select(pl.col("eid").alias("ancestor_eid"), "name", "depth")
    chain = tree.closure.join(wanted, on="eid", how="semi").join(names, on="ancestor_eid")
    return chain.group_by("eid").agg(op_path=pl.col("name").sort_by("depth").str.join(sep))


def _op_paths_native(tree: OpTree, wanted: pl.DataFrame, sep: str) -> pl.DataFrame | None:
    """`op_paths` through the C pass `chains`: ops with the same chain of names from the
    root down share one path, so each distinct chain's text is built once (top-down, each
    from its parent's) instead of once per op. None (the joins take over) when a name is
    null or the tree is deeper than the closure's 256 levels."""
    if sep not in tree.paths:
        tree.paths[sep] = _chain_paths(tree, sep)
    found = tree.paths[sep]
    if found is None:
        return None
    row_chain, paths = found
    at = wanted.with_columns(_row=rows_of(tree.frame, wanted["eid"])).filter(pl.col("_row") >= 0)
    return at.select("eid", op_path=paths.gather(row_chain.gather(at["_row"])))


_op_paths = native.register("op_paths", c=_op_paths_native, reference=_op_paths_joins)


def _chain_paths(tree: OpTree, sep: str) -> tuple[pl.Series, pl.Series] | None:
    """(chain of each row, path text of each chain), kept per separator with the tree."""
    rows = _walkable(tree)
    if rows is None:
        return None
    nested, codes = tree.frame, tree.name_codes
    row_chain, chain_parent, chain_code = kernels.chains(rows, codes)
    name_of = dict(pl.DataFrame({"code": codes, "name": nested["name"]}).unique("code").iter_rows())
    texts: list[str] = []
    for parent, code in zip(chain_parent.to_list(), chain_code.to_list()):  # parents come first
        texts.append(name_of[code] if parent < 0 else texts[parent] + sep + name_of[code])
    return row_chain, pl.Series("op_path", texts, dtype=STR)


def enclosing_ops(points: pl.DataFrame, nested: pl.DataFrame | OpTree) -> pl.DataFrame:
    """(eid, op_eid): for rows (`eid, pid, tid, ts_ns, end_ns`) the innermost op containing them."""
    schema = {"eid": I64, "op_eid": I64}
    tree = tree_of(nested)
    if points.is_empty() or tree.frame.is_empty():
        return pl.DataFrame(schema=schema)
    found = _containing_op(points.select("eid", "pid", "tid", "ts_ns", "end_ns"), tree)
    return found.select("eid", pl.col("_c_eid").alias("op_eid")).cast(schema)


def _instances(nested: pl.DataFrame, launches: pl.DataFrame, gpu: pl.DataFrame,
               closure: pl.DataFrame | None, *, sums: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per op; `sums` (from `_tree_native`, in the ops' rows) stands for the GPU
    events' joins with the closure."""
    if nested.is_empty():
        return pl.DataFrame(schema=INSTANCE_SCHEMA)
    children = nested.lazy().group_by("parent_eid").agg(_child_ns=pl.col("dur_ns").sum())
    children = children.rename({"parent_eid": "eid"})
    is_launch = launch_family(pl.col("name")).is_not_null() & pl.col("op_eid").is_not_null()
    n_launch = launches.lazy().filter(is_launch).group_by("op_eid").agg(launches=pl.len()).rename({"op_eid": "eid"})
    # the ops' own columns are picked before the joins, and the joins keep the ops' time
    # order: sorted only if it was not
    out = nested.lazy().select(c for c in INSTANCE_SCHEMA if c in nested.columns and c not in (
        sums.columns if sums is not None else ()))
    parts: tuple[pl.LazyFrame, ...] = (children, n_launch)
    if sums is not None:  # in the ops' rows: the left joins keep them (each key once on the right)
        out = pl.concat([out, sums.lazy()], how="horizontal")
    else:
        assert closure is not None
        parts += _event_sums(gpu, closure)
    for part in parts:
        out = out.join(part, on="eid", how="left", maintain_order="left")
    zero = ["launches", "gpu_events_self", "gpu_self_ns", "gpu_events_incl", "kernels_incl", "gpu_incl_ns"]
    out = out.with_columns(
        *(pl.col(c).fill_null(0) for c in zero),
        self_ns=(pl.col("dur_ns") - pl.col("_child_ns").fill_null(0)).clip(lower_bound=0),
    )
    return in_time_order(out.select(list(INSTANCE_SCHEMA)).cast(INSTANCE_SCHEMA).collect(engine=ENGINE))


def _event_sums(gpu: pl.DataFrame, closure: pl.DataFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Per op eid, its own GPU events and its subtree's (through the closure): the reference
    of the C pass `tree_sums`."""
    # the linked GPU events (the filter reads only these columns, not a copy of every column
    # of the links); each op's own events and its subtree's are sums over them
    events = gpu.lazy().filter(pl.col("op_eid").is_not_null()).select(
        pl.col("op_eid").alias("eid"), "dur_ns", _kernel=(pl.col("cat") == "kernel").cast(I64))
    own = events.group_by("eid").agg(gpu_events_self=pl.len(), gpu_self_ns=pl.col("dur_ns").sum())
    incl = events.join(closure.lazy(), on="eid").group_by("ancestor_eid").agg(
        gpu_events_incl=pl.len(), kernels_incl=pl.col("_kernel").sum(), gpu_incl_ns=pl.col("dur_ns").sum(),
    ).rename({"ancestor_eid": "eid"})
    return own, incl


def _per_name(instances: pl.DataFrame, gpu: pl.DataFrame, closure: pl.DataFrame | None, *,
              total_ns: int, recursive: pl.DataFrame | pl.LazyFrame | None = None) -> pl.DataFrame:
    """One row per op name. `recursive` (eid, _inner: from `_tree_native`) stands for the
    closure: with it, a name's inclusive GPU events are those below its outermost instances
    (an event below several instances of a name is below exactly one outermost one)."""
    if instances.is_empty():
        return pl.DataFrame(schema=OPS_SCHEMA)
    names = instances.lazy().select("eid", "name")
    anc_names = names.rename({"eid": "ancestor_eid", "name": "_anc_name"})
    closure_ = closure.lazy() if closure is not None else None
    # an instance with a same-name ancestor is a recursion: its CPU time is already counted
    if recursive is None:
        assert closure_ is not None
        recursive = (closure_.filter(pl.col("eid") != pl.col("ancestor_eid")).join(anc_names, on="ancestor_eid")
                     .join(names, on="eid").filter(pl.col("name") == pl.col("_anc_name")).select("eid").unique()
                     .with_columns(_inner=pl.lit(True)))
    base = instances.lazy().join(recursive.lazy(), on="eid", how="left", maintain_order="left").with_columns(
        _outer=pl.col("_inner").is_null())
    outer = pl.col("_outer")
    if closure_ is None:  # the inclusive sums of the outermost instances
        incl = [pl.col(c).filter(outer).sum() for c in ("gpu_incl_ns", "gpu_events_incl", "kernels_incl")]
    else:
        incl = []
    cpu = base.group_by("name").agg(
        *incl,
        calls=pl.len(),
        cpu_total_ns=pl.col("dur_ns").filter(pl.col("_outer")).sum(),
        cpu_self_ns=pl.col("self_ns").sum(),
        cpu_mean_ns=pl.col("dur_ns").mean(),
        gpu_self_ns=pl.col("gpu_self_ns").sum(),
        gpu_events_self=pl.col("gpu_events_self").sum(),
        calls_without_gpu=(pl.col("gpu_events_incl") == 0).sum(),
    )
    if closure_ is None:
        out = cpu
    else:
        events = gpu.lazy().filter(pl.col("op_eid").is_not_null()).select(
            pl.col("eid").alias("_g"), pl.col("op_eid").alias("eid"), "dur_ns", _kernel=pl.col("cat") == "kernel")
        # each GPU event once per name, however many same-name ancestors it has
        per_name = (events.join(closure_, on="eid").join(anc_names, on="ancestor_eid")
                    .unique(["_g", "_anc_name"]).group_by("_anc_name").agg(
                        gpu_incl_ns=pl.col("dur_ns").sum(), gpu_events_incl=pl.len(),
                        kernels_incl=pl.col("_kernel").sum()).rename({"_anc_name": "name"}))
        out = cpu.join(per_name, on="name", how="left").with_columns(
            pl.col("gpu_incl_ns", "gpu_events_incl", "kernels_incl").fill_null(0))
    out = out.with_columns(
        kernels_per_call=pl.col("kernels_incl") / pl.col("calls"),
        launches_nothing=pl.col("gpu_events_incl") == 0,
        gpu_share=pl.col("gpu_incl_ns") / total_ns if total_ns > 0 else pl.lit(0.0),
    )
    return (out.select(list(OPS_SCHEMA)).cast(OPS_SCHEMA)
            .sort(["gpu_incl_ns", "cpu_total_ns", "name"], descending=[True, True, False]).collect(engine=ENGINE))
