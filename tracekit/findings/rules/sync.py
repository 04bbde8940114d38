"""Rules about host<->device syncs and copies (nsys `cuda_api_sync`, `cuda_memcpy_sync`, ...)."""

from __future__ import annotations

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.order import longest
from tracekit.analysis.syncs import MEMCPY_CALL
from tracekit.findings.context import Context
from tracekit.findings.registry import Hit, Params, rule

I64 = pl.Int64
SYNC_OPS = r"aten::(_local_scalar_dense|item|nonzero|is_nonzero|equal)\b"
HIDDEN_COPY_OPS = r"aten::(masked_fill|clone|contiguous|to|_to_copy)( >|$)"


@rule(id="sync_in_loop", severity="high", title="The host waits for the GPU inside the loop",
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


@rule(id="pageable_memcpy", severity="medium", title="Copies to or from pageable host memory (nsys `cuda_memcpy_async`)",
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


@rule(id="hidden_copy", severity="medium", title="Device copies made by out-of-place ops (masked_fill, to, clone, contiguous)",
      advice="An out-of-place op copies its whole input first (the Memcpy DtoD in the HF article's naive "
             "attention): use the in-place form (masked_fill_), keep tensors in the layout and dtype the next op "
             "wants, or let torch.compile fuse the copy away.",
      nothing_found="No DtoD memcpy or copy kernel under masked_fill/to/clone/contiguous.", min_count=1)
def hidden_copy(ctx: Context, p: Params) -> Hit | None:
    links = ctx.links
    dtod = links.filter(pl.col("name").str.starts_with("Memcpy DtoD"))
    kernels = links.filter((pl.col("cat") == "kernel") & (pl.col("kernel_class") == "copy"))
    rows = pl.concat([dtod, kernels]).filter(pl.col("op_path").str.contains(HIDDEN_COPY_OPS).fill_null(False))
    if rows.height < p.min_count:
        return None
    lost = int(rows["dur_ns"].sum() or 0)
    per = (rows.with_columns(_op=pl.col("op_path").str.extract(r"(aten::(?:masked_fill|clone|contiguous|to|_to_copy))( >|$)"))
           .group_by("_op").agg(n=pl.len()).sort(["n", "_op"], descending=[True, False], nulls_last=True))
    top = longest(rows)
    title = fmt.agree("{copies} made by out-of-place ops ([mostly |]`{op}`), {lost} of GPU time", rows.height)
    return Hit(title=title.format(copies=fmt.counted(rows.height, "device copy", "device copies"), op=per["_op"][0],
                                  lost=fmt.ns(lost)),
               time_lost_ns=lost, evidence=ctx.evidence(top, note=pl.col("op_path")))
