"""Rules about host<->device syncs and copies (nsys `cuda_api_sync`, `cuda_memcpy_sync`, ...)."""

from __future__ import annotations

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.nesting import rows_of
from tracekit.analysis.order import longest
from tracekit.analysis.syncs import MEMCPY_CALL
from tracekit.findings.context import Context
from tracekit.findings.patterns import ancestor_map
from tracekit.findings.registry import Hit, Params, rule

I64 = pl.Int64
SYNC_OPS = r"aten::(_local_scalar_dense|item|nonzero|is_nonzero|equal)\b"


@rule(id="sync_in_loop", severity="high", loses="gpu_idle", title="The host waits for the GPU inside the loop",
      advice="Every sync drains the GPU's queue and the CPU must refill it: keep values on the GPU (no .item(), "
             ".cpu(), print or Python `if` on a tensor per step), use torch.nonzero_static / masks instead of "
             "nonzero, and drop cudaDeviceSynchronize/torch.cuda.synchronize from the loop.",
      nothing_found="No host-device sync repeats in {min_steps} or more steps ({min_calls}+ calls without steps).",
      min_steps=2, min_calls=3)
def sync_in_loop(ctx: Context, p: Params) -> Hit | None:
    syncs = ctx.syncs.syncs.filter((pl.col("kind") != "memcpy") | pl.col("op_path").str.contains(SYNC_OPS).fill_null(False))
    if syncs.is_empty():
        return None
    syncs = syncs.with_columns(key=pl.coalesce("op_path", "name"))
    steps = ctx.steps
    if steps.height:
        tagged = syncs.sort("ts_ns").join_asof(steps.select(_start="start_ns", _end="end_ns", step="step"),
                                               left_on="ts_ns", right_on="_start", strategy="backward")
        tagged = tagged.filter(pl.col("ts_ns") < pl.col("_end"))
        per = tagged.group_by("key").agg(calls=pl.len(), steps=pl.col("step").n_unique(), ns=pl.col("dur_ns").sum())
        per = per.filter(pl.col("steps") >= p.min_steps)
    else:
        per = syncs.group_by("key").agg(calls=pl.len(), steps=pl.lit(0), ns=pl.col("dur_ns").sum())
        per = per.filter(pl.col("calls") >= p.min_calls)
    if per.is_empty():
        return None
    chosen = syncs.join(per.select("key"), on="key", how="semi")
    stall = ctx.gaps.by_cause.get("sync_stall", 0)
    lost = max(int(stall), int(chosen["tail_ns"].sum() or 0))
    per = per.sort(["ns", "key"], descending=[True, False], nulls_last=True)
    top = per.row(0, named=True)
    where = f"in {fmt.counted(top['steps'], 'step')}" if top["steps"] else "calls"
    first = chosen.sort("ts_ns").unique("key", keep="first").join(per.select("key", "ns"), on="key").sort(
        "ns", descending=True)
    title = fmt.agree("{syncs} [repeat|repeats] in the loop (`{key}` x{calls} {where}); the GPU idles {lost} around them",
                      chosen.height)
    return Hit(title=title.format(syncs=fmt.counted(chosen.height, "host-device sync"), key=top["key"],
                                  calls=top["calls"], where=where, lost=fmt.ns(lost)),
               time_lost_ns=lost, evidence=ctx.evidence(first, note=pl.format("{} blocked", "kind")))


def _copies(ctx: Context) -> pl.DataFrame:
    return ctx.copies.copies.filter(pl.col("kind") == "memcpy")


@rule(id="sync_memcpy", severity="high", title="Synchronous memcpy calls block the host (nsys `cuda_memcpy_sync`)",
      advice="Use cudaMemcpyAsync with pinned memory (tensor.to(device, non_blocking=True) from pin_memory() "
             "tensors) so the host does not wait for each copy.",
      nothing_found="No memcpy was issued by a synchronous API.", min_count=1)
def sync_memcpy(ctx: Context, p: Params) -> Hit | None:
    # by the API's name: copies replayed by cudaGraphLaunch are not synchronous
    rows = _copies(ctx).filter(pl.col("api").str.contains(MEMCPY_CALL) & ~pl.col("api").str.contains("Async"))
    if rows.height < p.min_count:
        return None
    lost = int(rows["dur_ns"].sum() or 0)
    title = fmt.agree("{calls} ({apis}) [block|blocks] the host for at least {lost}", rows.height)
    return Hit(title=title.format(calls=fmt.counted(rows.height, "synchronous memcpy call"), lost=fmt.ns(lost),
                                  apis=", ".join(sorted(set(rows["api"].drop_nulls())))),
               time_lost_ns=lost, evidence=ctx.evidence(longest(rows),
                                                         note=pl.format("{} {}", "direction", "op_path")))


@rule(id="pageable_memcpy", severity="medium", loses="gpu_work", title="Copies to or from pageable host memory (nsys `cuda_memcpy_async`)",
      advice="Pageable copies are staged through a driver buffer, run at a fraction of the bandwidth and are "
             "synchronous: allocate the host side pinned (pin_memory=True in DataLoader, tensor.pin_memory()).",
      nothing_found="No memcpy touches pageable host memory.", min_count=1, pinned_speedup=2.0)
def pageable_memcpy(ctx: Context, p: Params) -> Hit | None:
    rows = _copies(ctx).filter(pl.col("host_memory") == "pageable")
    if rows.height < p.min_count:
        return None
    ns = int(rows["dur_ns"].sum() or 0)
    mb = int(rows["bytes"].sum() or 0)
    title = fmt.agree("{copies} of {size}[ in all|] [use|uses] pageable host memory ({ns} of copy time)", rows.height)
    title = title.format(copies=fmt.counted(rows.height, "copy", "copies"), size=fmt.size(mb), ns=fmt.ns(ns))
    # async calls that still blocked: their copy went to pageable memory (`syncs.blocking_copies`)
    blocked = ctx.syncs.syncs.filter((pl.col("kind") == "memcpy") & pl.col("name").str.contains("Async"))
    if blocked.height:
        title += fmt.agree("; the host waited {ns} in [the {calls}|the call] that copied to it ([async calls return|an async call returns] "
                           "only when such a copy is done)", blocked.height).format(
            ns=fmt.ns(int(blocked["dur_ns"].sum() or 0)), calls=fmt.counted(blocked.height, "call"))
    return Hit(title=title,
               time_lost_ns=int(ns * (1 - 1 / p.pinned_speedup)),
               evidence=ctx.evidence(longest(rows), note=pl.format("{} {}", "name", "op_path")))


# The ops under which a device copy is made, by cause (exact names; in-place forms such as
# `masked_fill_` are not among them). `hidden_copy` looks for them among the copy's launching
# op and its parents.
CAST_OPS = r"^aten::(to|_to_copy|type_as|float|half|bfloat16|double)$"
LAYOUT_OPS = r"^aten::(contiguous|clone|reshape|_reshape_copy|flatten)$"
MASKED_OPS = r"^aten::(masked_fill|masked_scatter|where)$"
# cause -> (what the copies are, in the number they take; advice)
COPY_CAUSES: dict[str, tuple[str, str]] = {
    "cast": ("[dtype casts|a dtype cast]",
             "Each cast reads and writes the whole tensor in a kernel of its own (an RMSNorm or LayerNorm "
             "upcasting to float32 and back, `.float()` on activations): fuse it into the kernels around it "
             "(torch.compile, a fused RMSNorm kernel; `tracekit roofline` lists such fusible chains), or keep "
             "the tensor in the dtype the next op takes (torch.autocast) instead of casting back and forth."),
    "layout": ("[layout copies|a layout copy]",
               "`.contiguous()`, `clone()` or a `reshape` of a non-contiguous view copies the whole tensor (often "
               "a transpose before a projection): make the layout the next op wants once (transpose the weight, "
               "not the activation, or use the matmul's transpose flags), use ops that take strided inputs, or "
               "let torch.compile fuse the copy into its consumer."),
    "masked": ("[made by out-of-place masked ops|made by an out-of-place masked op]",
               "An out-of-place masked op copies its whole input first (the Memcpy DtoD in the HF article's "
               "naive attention): use the in-place form (masked_fill_) on a tensor you own, or build the "
               "masked tensor once and reuse it."),
    "other": ("[`to` copies that cast nothing|a `to` copy that casts nothing]",
              "`.to()` copied a tensor without changing its dtype (the copy's recorded input types are equal): "
              "a memory-format or device move; keep the tensor in the format and on the device the next op "
              "wants, or let torch.compile fuse the copy away."),
}


@rule(id="hidden_copy", severity="medium", loses="gpu_work",
      title="Device copies made by dtype casts, layout changes and out-of-place masked ops",
      advice="Casts: fuse them into the kernels around them (torch.compile) or keep the dtype; layout copies: make "
             "the layout the next op wants once; out-of-place masked ops: the in-place form (masked_fill_).",
      nothing_found="No DtoD memcpy or copy kernel under a cast (to, _to_copy, type_as, float/half/bfloat16), a "
                    "layout op (contiguous, clone, reshape) or an out-of-place masked op (masked_fill, where).",
      min_count=1)
def hidden_copy(ctx: Context, p: Params) -> list[Hit]:
    rows = _copy_causes(ctx)
    hits = []
    for cause, (what, advice) in COPY_CAUSES.items():
        part = rows.filter(pl.col("cause") == cause)
        if part.height < p.min_count:
            continue
        lost = int(part["dur_ns"].sum() or 0)
        ops = part.group_by("cause_op").agg(n=pl.len()).sort(["n", "cause_op"], descending=[True, False])
        title = fmt.agree(fmt.agree("{copies} [are|is] " + what, part.height)
                          + " ([mostly |]under `{op}`), {lost} of GPU time", ops.height)
        hits.append(Hit(title=title.format(copies=fmt.counted(part.height, "device copy", "device copies"),
                                           op=ops["cause_op"][0], lost=fmt.ns(lost)),
                        time_lost_ns=lost, advice=advice,
                        evidence=ctx.evidence(longest(part), note=pl.col("op_path"))))
    return hits


def _copy_causes(ctx: Context) -> pl.DataFrame:
    """The DtoD memcpys and copy kernels launched under a cast, layout or masked op (the
    launching op or one of its parents), with `cause` and `cause_op` (the outermost such op):
    a cast when the launching `aten::copy_` records two different input types; else masked,
    cast or layout by the ops above it, in that order; a cast op whose copy records equal
    types casts nothing ("other")."""
    links = ctx.links
    rows = links.filter((pl.col("name").str.starts_with("Memcpy DtoD")
                         | ((pl.col("cat") == "kernel") & (pl.col("kernel_class") == "copy")))
                        & pl.col("op_eid").is_not_null())
    nested = ctx.nested
    names = nested.select(root_eid="eid", _root="name")
    for cause, ops in (("masked", MASKED_OPS), ("cast", CAST_OPS), ("layout", LAYOUT_OPS)):
        under = ancestor_map(nested, rows["op_eid"], nested.filter(pl.col("name").str.contains(ops))["eid"],
                             outermost=True)
        under = under.join(names, on="root_eid").select(op_eid="eid", **{f"_{cause}": "_root"})
        rows = rows.join(under, on="op_eid", how="left", maintain_order="left")
    at = rows_of(nested, rows["op_eid"])
    op = nested.select(pl.col("name", "input_types").gather(at.set(at < 0, None)))
    types = op["input_types"].str.extract_groups(r'^\[\s*"([^"]*)"\s*,\s*"([^"]*)"')
    dst, src = types.struct.field("1"), types.struct.field("2")
    recorded = (op["name"] == "aten::copy_") & (dst.str.len_chars() > 0) & (src.str.len_chars() > 0)
    rows = rows.with_columns(_differ=(recorded & (dst != src)).fill_null(False),
                             _same=(recorded & (dst == src)).fill_null(False))
    cast, masked, layout = pl.col("_cast"), pl.col("_masked"), pl.col("_layout")
    return rows.with_columns(
        cause=pl.when(pl.col("_differ") & pl.any_horizontal(c.is_not_null() for c in (cast, masked, layout)))
        .then(pl.lit("cast")).when(masked.is_not_null()).then(pl.lit("masked"))
        .when(cast.is_not_null() & pl.col("_same")).then(pl.lit("other"))
        .when(cast.is_not_null()).then(pl.lit("cast")).when(layout.is_not_null()).then(pl.lit("layout")),
    ).filter(pl.col("cause").is_not_null()).with_columns(
        cause_op=pl.when(pl.col("cause") == "masked").then(masked)
        .when(pl.col("cause").is_in(["cast", "other"])).then(pl.coalesce(cast, masked, layout)).otherwise(layout))
