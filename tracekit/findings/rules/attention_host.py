"""Attention rules about the host and the capture: launch-bound decode, a library's CPU
overhead, Kineto's misleading 0 % occupancy, an implementation other than the one asked for.

The same analysis and the same `hit` as the rules in `attention` (see there)."""

from __future__ import annotations

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.attention import AttentionResult
from tracekit.findings.context import Context
from tracekit.findings.registry import Hit, Params, rule
from tracekit.findings.rules.attention import hit, median

FUSED = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_cpu_flash", "flash_attn", "flex", "ck", "aiter")
LIBRARY = {
    "sdpa_cudnn": "cuDNN",
    "sdpa_flash": "FlashAttention (PyTorch)",
    "sdpa_efficient": "mem-efficient (CUTLASS)",
    "flash_attn": "flash-attn",
    "ck": "Composable Kernel",
    "aiter": "aiter",
    "flex": "FlexAttention (Triton)",
    "sdpa_cpu_flash": "CPU flash",
}


def _cpu_over_gpu(calls: pl.DataFrame) -> int:
    return int(calls.select((pl.col("cpu_ns") - pl.col("gpu_ns")).clip(lower_bound=0).sum()).item() or 0)


@rule(
    id="attention_decode_launch_bound",
    severity="medium",
    title="Decode-step attention costs more CPU than GPU time",
    advice="Static KV cache plus CUDA graphs (torch.compile(mode='reduce-overhead')).",
    nothing_found="Decode-step attention is not launch-bound (or the trace has no decode steps).",
)
def attention_decode_launch_bound(ctx: Context, p: Params) -> Hit | None:
    """When the median decode call's CPU time is above its GPU time. Lost: Σ (CPU − GPU)."""
    result: AttentionResult = ctx.attention
    calls = result.calls.filter((pl.col("phase") == "decode") & pl.col("gpu_ns").is_not_null())
    if calls.is_empty() or (median(calls, "cpu_ns") or 0) <= (median(calls, "gpu_ns") or 0):
        return None
    return hit(
        ctx, calls,
        f"decode attention is launch-bound: {fmt.ns(median(calls, 'cpu_ns'))} CPU per call for "
        f"{fmt.ns(median(calls, 'gpu_ns'))} of GPU work",
        _cpu_over_gpu(calls),
        "decode launches the same small kernels every token: use a static KV cache "
        "(cache_implementation='static') and capture the step in a CUDA graph "
        "(torch.compile(mode='reduce-overhead')), so one graph launch replaces hundreds of launches",
    )


@rule(
    id="attention_cpu_overhead",
    severity="low",
    title="A fused attention library's CPU time is above its GPU time",
    advice="Batch more work per call, or capture the step in a CUDA graph.",
    nothing_found="No fused attention backend spends more CPU than GPU time per call.",
)
def attention_cpu_overhead(ctx: Context, p: Params) -> Hit | None:
    """Per fused backend outside decode, when its median call's CPU time is above its GPU
    time. Lost: Σ (CPU − GPU) over those backends' calls (host time only costs while the GPU
    waits for it: the rule is never above low)."""
    result: AttentionResult = ctx.attention
    calls = result.calls.filter(
        pl.col("backend").is_in(FUSED)
        & (pl.col("phase").fill_null("") != "decode")
        & pl.col("gpu_ns").is_not_null()
        & (pl.col("attention_kernels") > 0)
    )
    rows = [(backend, group) for backend in sorted(set(calls["backend"].to_list()))
            if (median(group := calls.filter(pl.col("backend") == backend), "cpu_ns") or 0)
            > (median(group, "gpu_ns") or 0)]
    if not rows:
        return None
    names = ", ".join(LIBRARY.get(b, b) for b, _ in rows)
    return hit(
        ctx, pl.concat([g for _, g in rows]),
        f"{names}: CPU time per attention call above its GPU time",
        sum(_cpu_over_gpu(g) for _, g in rows),
        "the library's host-side work (plan/graph lookup, attribute setting, the launch itself) costs more "
        "than the kernel: it only hides while the CPU runs ahead of the GPU. Batch more work per call, "
        "or capture the step in a CUDA graph so the host cost is paid once",
    )


@rule(
    id="attention_occupancy_misleading",
    severity="info",
    title="Kineto reports 0 % occupancy for attention kernels that opt into more shared memory",
    advice="Read tracekit's recomputed occupancy (deviceProperties sharedMemPerBlockOptin).",
    nothing_found="No attention kernel with a misleading 0 % Kineto occupancy.",
)
def attention_occupancy_misleading(ctx: Context, p: Params) -> Hit | None:
    """Kernels Kineto gives 0 % whose recomputed occupancy is above 0; nothing lost."""
    result: AttentionResult = ctx.attention
    occ = result.occupancy.filter(
        (pl.col("kineto_occupancy_pct").fill_null(-1) == 0) & (pl.col("theoretical_occupancy").fill_null(0) > 0)
    )
    if occ.is_empty():
        return None
    return hit(
        ctx, None,
        fmt.agree("Kineto reports 0 % occupancy for {kernels} that [do|does] run", occ.height).format(
            kernels=fmt.counted(occ.height, "attention kernel")),
        0,
        "Kineto computes occupancy with the default 48 KB shared-memory limit; these kernels opt into "
        "more, so the 0 % is an artefact. tracekit recomputes it from deviceProperties "
        "(sharedMemPerBlockOptin): read the recomputed figure",
        kernels=occ["name"].head(5).to_list(),  # (the first five, as the evidence shows)
    )


@rule(
    id="attention_backend_mismatch",
    severity="medium",
    title="The attention implementation that ran is not the one the capture requested",
    advice="Check the transformers warnings at load time and SDPA's backend choice.",
    nothing_found="The attention that ran matches the capture's request (or the trace records none).",
)
def attention_backend_mismatch(ctx: Context, p: Params) -> Hit | None:
    """From the analysis's warnings (capture metadata against the backends that ran); nothing lost."""
    result: AttentionResult = ctx.attention
    if not result.warnings:
        return None
    return hit(
        ctx, None,
        "the attention that ran is not the one requested: " + "; ".join(result.warnings),
        0,
        "check the transformers warning at load time (missing package, unsupported dtype or mask) and "
        "SDPA's backend choice (torch.nn.attention.sdpa_kernel, fp16/bf16 inputs, is_causal)",
    )
