"""Attention rules: what the attention analysis (`Context.attention`) shows each call wastes.

One analysis per trace (`analysis.attention.analyze_attention`, on the context's op tree
and launch links), read by every `attention_*` rule; the host-side ones are in
`attention_host`. Time lost is a measured floor, never a model: the GPU time of the
kernels a fused kernel would not run, the copies an in-place op avoids, the CPU time above
the GPU time. Each hit's own severity is its share of the trace's GPU work (CPU time where
there is none: high from 10 %, medium from 3 %; info when nothing is lost), which the
engine's band of the window can only lower. Evidence points at the calls (or kernels).

`tracekit attention` runs `RULE_IDS` alone, with the analysis it already has as the seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.attention import AttentionResult
from tracekit.findings.context import Context
from tracekit.findings.registry import Hit, Params, rule

RULE_IDS = (
    "attention_eager_fusable",
    "attention_math_backend",
    "attention_fp32_gemm",
    "attention_mask_rebuilt",
    "attention_hidden_copy",
    "attention_decode_launch_bound",
    "attention_cpu_overhead",
    "attention_occupancy_misleading",
    "attention_backend_mismatch",
)


def median(frame: pl.DataFrame, col: str) -> float | None:
    value = frame[col].drop_nulls().median() if frame.height else None
    return float(value) if value is not None else None  # type: ignore[arg-type]


def hit(ctx: Context, calls: pl.DataFrame | None, title: str, lost_ns: float, advice: str, *,
        kernels: Sequence[str] = ()) -> Hit:
    """A hit about `calls` (evidence: the calls), or about the `kernels` named (their launches)."""
    result: AttentionResult = ctx.attention
    denominator = result.gpu_total_ns if result.has_gpu else int(result.calls["cpu_ns"].sum() or 0)
    share = lost_ns / denominator if denominator else 0.0
    severity = "info" if lost_ns <= 0 else "high" if share >= 0.10 else "medium" if share >= 0.03 else "low"
    return Hit(title=title, time_lost_ns=int(max(lost_ns, 0)), evidence=_evidence(ctx, result, calls, kernels),
               advice=advice, severity=severity)


def _evidence(ctx: Context, result: AttentionResult, calls: pl.DataFrame | None,
              kernels: Sequence[str]) -> tuple[Any, ...]:
    if calls is not None and calls.height:
        rows = result.calls.filter(pl.col("call_id").is_in(calls["call_id"].implode())).sort("ts_ns").select(
            "name", "pid", "tid", ts_ns="scope_ts_ns", dur_ns="cpu_ns", eid=pl.coalesce("root_eid", "region_eid"),
            backend="backend", gpu_events="gpu_events", gpu_ns="gpu_ns",
        )
        return ctx.evidence(rows, note=lambda r: f"{r['backend']}: {fmt.counted(r['gpu_events'] or 0, 'GPU event')}, "
                                                f"{fmt.ns(r['gpu_ns'] or 0)} of GPU time")
    if kernels:
        found = result.events.filter(pl.col("in_scope") & pl.col("name").is_in(list(kernels))).sort("ts_ns")
        return ctx.evidence(found.select("name", "ts_ns", "dur_ns", "eid", "device", "stream"))
    return ()


def _non_gemm_ns(result: AttentionResult, calls: pl.DataFrame) -> int:
    """GPU time of the non-GEMM kernels (scale, mask, softmax, copies, ...) of `calls`."""
    if not result.has_gpu:
        return 0
    events = result.events.filter(
        pl.col("in_scope") & pl.col("call_id").is_in(calls["call_id"].implode()) & (pl.col("stage") != "gemm")
    )
    return int(events["dur_ns"].sum() or 0)


@rule(
    id="attention_eager_fusable",
    loses="gpu_work",
    severity="medium",
    title="Eager attention (matmul, scale, mask, softmax, matmul) where fused SDPA applies",
    advice="Use attn_implementation='sdpa' (F.scaled_dot_product_attention with is_causal=True).",
    nothing_found="No eager attention call.",
)
def attention_eager_fusable(ctx: Context, p: Params) -> Hit | None:
    """Lost: the GPU time of the calls' non-GEMM kernels (scale, mask, softmax, copies)."""
    result: AttentionResult = ctx.attention
    calls = result.calls.filter(pl.col("backend") == "eager")
    if calls.is_empty():
        return None
    kernels = median(calls, "gpu_events")
    drop = f"{kernels:.0f} → 1 kernels per call" if result.has_gpu and kernels is not None else "one fused op per call"
    return hit(
        ctx, calls,
        f"eager attention in {fmt.counted(calls.height, 'call')}: fused SDPA would run it as one kernel ({drop})",
        _non_gemm_ns(result, calls),
        "use attn_implementation='sdpa' (F.scaled_dot_product_attention(q, k, v, is_causal=True)): the "
        "scale, mask, softmax and both GEMMs run in one flash/efficient/cuDNN kernel that never writes "
        "the L×L score matrix; keep eager only where the attention weights themselves are needed "
        "(output_attentions=True)",
    )


def math_reasons(calls: pl.DataFrame, requested: dict[str, Any]) -> list[str]:
    """Why SDPA may have fallen back to its math backend, read from the calls' inputs."""
    reasons = []
    if requested.get("sdpa_backend") == "MATH":
        reasons.append("the capture pinned it with sdpa_kernel(SDPBackend.MATH)")
    dtypes = sorted(set(calls["dtype"].drop_nulls().to_list()))
    if "fp32" in dtypes or "fp64" in dtypes:
        reasons.append(f"inputs are {'/'.join(dtypes)} (flash and cuDNN need fp16/bf16)")
    if calls["attn_mask"].fill_null(False).any():
        reasons.append("an explicit attn_mask is passed (flash takes none: pass is_causal=True instead)")
    dims = sorted(set(calls["head_dim"].drop_nulls().to_list()))
    odd = [d for d in dims if d > 256 or d % 8]
    if odd:
        reasons.append(f"head dim {', '.join(map(str, odd))} (fused kernels want a multiple of 8, at most 256)")
    if (calls["dropout_p"].fill_null(0.0) > 0).any():
        reasons.append("dropout_p > 0")
    return reasons


@rule(
    id="attention_math_backend",
    loses="gpu_work",
    severity="high",
    title="SDPA runs its unfused math backend",
    advice="Remove what rules the fused backends out: fp32 inputs, an explicit mask, the head dim, dropout.",
    nothing_found="No SDPA call ran the math backend.",
)
def attention_math_backend(ctx: Context, p: Params) -> Hit | None:
    """Lost: the GPU time of the calls' non-GEMM kernels; the advice names the likely cause."""
    result: AttentionResult = ctx.attention
    calls = result.calls.filter(pl.col("backend") == "sdpa_math")
    if calls.is_empty():
        return None
    reasons = math_reasons(calls, result.requested)
    why = "; ".join(reasons) if reasons else (
        "no reason visible in the inputs: check sdpa_kernel contexts, "
        "torch.backends.cuda.enable_*_sdp flags and the GPU's capability")
    kernels = median(calls, "gpu_events")
    kernel_text = f", {fmt.counted(round(kernels), 'kernel')} per call" if result.has_gpu and kernels else ""
    return hit(
        ctx, calls,
        f"SDPA ran its math backend in {fmt.counted(calls.height, 'call')}{kernel_text}",
        _non_gemm_ns(result, calls),
        f"the math backend is attention written out (upcast, mask built, matmul, softmax, matmul); "
        f"likely cause: {why}. Remove the cause so flash, efficient or cuDNN is chosen",
    )


@rule(
    id="attention_fp32_gemm",
    loses="gpu_work",
    severity="medium",
    title="FP32 sgemm inside attention (no tensor cores)",
    advice="Keep attention in bf16/fp16 on a fused backend.",
    nothing_found="No FP32 CUDA-core GEMM inside attention.",
)
def attention_fp32_gemm(ctx: Context, p: Params) -> Hit | None:
    """Lost: the GPU time of the calls' casts (the FP32 upcast before the sgemm)."""
    result: AttentionResult = ctx.attention
    calls = result.calls.filter(pl.col("gemm_simt") > 0)
    if calls.is_empty() or not result.has_gpu:
        return None
    simt = result.events.filter(
        pl.col("in_scope") & (pl.col("kernel_class") == "gemm") & pl.col("tensor_cores").eq(False))
    casts = result.events.filter(
        pl.col("in_scope") & (pl.col("stage") == "copy") & pl.col("call_id").is_in(calls["call_id"].implode()))
    upcast = any(d in ("bf16", "fp16") for d in calls["dtype"].drop_nulls().to_list())
    title = ("FP32 upcast inside attention: " if upcast else "FP32 GEMMs inside attention: ") + \
        f"{fmt.counted(simt.height, 'sgemm kernel')} on CUDA cores instead of tensor cores"
    return hit(
        ctx, calls, title, int(casts["dur_ns"].sum() or 0),
        "keep attention in bf16/fp16 on a fused backend (flash/efficient/cuDNN run the GEMMs on tensor "
        "cores); the math backend and fp32 inputs compute the scores with FP32 sgemm",
    )


@rule(
    id="attention_mask_rebuilt",
    severity="low",
    title="The attention mask is built again in every call",
    advice="Build the mask once per forward, or use is_causal=True on a fused backend.",
    nothing_found="No attention call builds its mask (ones/tril/triu) again.",
)
def attention_mask_rebuilt(ctx: Context, p: Params) -> Hit | None:
    """In at least half the calls. Lost: the mask time of every call but one (its median)."""
    result: AttentionResult = ctx.attention
    calls = result.calls
    built = calls.filter(pl.col("mask_build_ops") > 0)
    if built.is_empty() or built.height * 2 < calls.height:
        return None
    lost = int(built["mask_ns"].sum() or 0) - int(median(built, "mask_ns") or 0) if result.has_gpu else 0
    return hit(
        ctx, built, f"the attention mask is built again in {built.height} of {fmt.counted(calls.height, 'call')}",
        lost,
        "build the mask once per forward and reuse it, or let a fused kernel apply causality itself "
        "(is_causal=True on flash/efficient/cuDNN builds no mask at all)",
    )


@rule(
    id="attention_hidden_copy",
    loses="gpu_work",
    severity="low",
    title="Out-of-place masked_fill copies the attention scores",
    advice="Use masked_fill_ in place, or fused SDPA.",
    nothing_found="No copy hidden in an out-of-place masked_fill inside attention.",
)
def attention_hidden_copy(ctx: Context, p: Params) -> Hit | None:
    """Lost: the GPU time of the copies `aten::masked_fill` makes."""
    result: AttentionResult = ctx.attention
    calls = result.calls.filter(pl.col("masked_fill_copies") > 0)
    if calls.is_empty():
        return None
    copies = result.events.filter(
        pl.col("in_scope")
        & (pl.col("stage_op") == "aten::masked_fill")
        & ((pl.col("cat") == "gpu_memcpy") | pl.col("kernel_class").is_in(["copy", "memcpy"]))
    )
    return hit(
        ctx, calls,
        f"out-of-place masked_fill copies the scores before masking ({fmt.counted(copies.height, 'copy', 'copies')})",
        int(copies["dur_ns"].sum() or 0),
        "aten::masked_fill clones its input (aten::clone → aten::copy_ → Memcpy DtoD); use the in-place "
        "masked_fill_ on the freshly computed scores (one kernel less per call), or fused SDPA",
    )
