"""Attention rules, registered from `analysis.attention_findings` (one analysis per trace).

`analyze_attention` runs once per `Context` (`Context.attention`, on the context's op tree
and launch links); each rule picks its finding from `attention_findings` and turns it into a
`Hit` whose evidence points at the attention calls (or kernels) in the trace.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.attention import AttentionResult
from tracekit.findings.context import Context
from tracekit.findings.registry import Hit, Params, rule


def _analysis(ctx: Context) -> tuple[AttentionResult, dict[str, dict[str, Any]]]:
    """The attention analysis and its findings by id: once per context (`Context.attention`),
    whichever rule asks first."""
    return ctx.attention, ctx.attention_findings


def _evidence(ctx: Context, result: AttentionResult, finding: dict[str, Any]) -> tuple[Any, ...]:
    if finding["call_ids"]:
        calls = result.calls.filter(pl.col("call_id").is_in(finding["call_ids"])).sort("ts_ns")
        rows = calls.select(
            "name",
            "pid",
            "tid",
            ts_ns="scope_ts_ns",
            dur_ns="cpu_ns",
            eid=pl.coalesce("root_eid", "region_eid"),
            backend="backend",
            gpu_events="gpu_events",
            gpu_ns="gpu_ns",
        )
        return ctx.evidence(rows, note=lambda r: f"{r['backend']}: {fmt.counted(r['gpu_events'] or 0, 'GPU event')}, "
                                                f"{fmt.ns(r['gpu_ns'] or 0)} of GPU time")
    names = [e["name"] for e in finding["evidence"] if isinstance(e, dict) and "name" in e]
    if names:
        kernels = result.events.filter(pl.col("in_scope") & pl.col("name").is_in(names)).sort("ts_ns")
        return ctx.evidence(kernels.select("name", "ts_ns", "dur_ns", "eid", "device", "stream"))
    return ()


def _hit(ctx: Context, finding_id: str) -> Hit | None:
    result, found = _analysis(ctx)
    finding = found.get(finding_id)
    if finding is None:
        return None
    return Hit(
        title=finding["title"],
        time_lost_ns=finding["time_lost_ns"],
        evidence=_evidence(ctx, result, finding),
        advice=finding["advice"],
        severity=finding["severity"],
    )


@rule(
    id="attention_eager_fusable",
    loses="gpu_work",
    severity="medium",
    title="Eager attention (matmul, scale, mask, softmax, matmul) where fused SDPA applies",
    advice="Use attn_implementation='sdpa' (F.scaled_dot_product_attention with is_causal=True).",
    nothing_found="No eager attention call.",
)
def attention_eager_fusable(ctx: Context, p: Params) -> Hit | None:
    return _hit(ctx, "attention_eager_fusable")


@rule(
    id="attention_math_backend",
    loses="gpu_work",
    severity="high",
    title="SDPA runs its unfused math backend",
    advice="Remove what rules the fused backends out: fp32 inputs, an explicit mask, the head dim, dropout.",
    nothing_found="No SDPA call ran the math backend.",
)
def attention_math_backend(ctx: Context, p: Params) -> Hit | None:
    return _hit(ctx, "attention_math_backend")


@rule(
    id="attention_fp32_gemm",
    loses="gpu_work",
    severity="medium",
    title="FP32 sgemm inside attention (no tensor cores)",
    advice="Keep attention in bf16/fp16 on a fused backend.",
    nothing_found="No FP32 CUDA-core GEMM inside attention.",
)
def attention_fp32_gemm(ctx: Context, p: Params) -> Hit | None:
    return _hit(ctx, "attention_fp32_gemm")


@rule(
    id="attention_mask_rebuilt",
    severity="low",
    title="The attention mask is built again in every call",
    advice="Build the mask once per forward, or use is_causal=True on a fused backend.",
    nothing_found="No attention call builds its mask (ones/tril/triu) again.",
)
def attention_mask_rebuilt(ctx: Context, p: Params) -> Hit | None:
    return _hit(ctx, "attention_mask_rebuilt")


@rule(
    id="attention_hidden_copy",
    loses="gpu_work",
    severity="low",
    title="Out-of-place masked_fill copies the attention scores",
    advice="Use masked_fill_ in place, or fused SDPA.",
    nothing_found="No copy hidden in an out-of-place masked_fill inside attention.",
)
def attention_hidden_copy(ctx: Context, p: Params) -> Hit | None:
    return _hit(ctx, "attention_hidden_copy")


@rule(
    id="attention_decode_launch_bound",
    severity="medium",
    title="Decode-step attention costs more CPU than GPU time",
    advice="Static KV cache plus CUDA graphs (torch.compile(mode='reduce-overhead')).",
    nothing_found="Decode-step attention is not launch-bound (or the trace has no decode steps).",
)
def attention_decode_launch_bound(ctx: Context, p: Params) -> Hit | None:
    return _hit(ctx, "attention_decode_launch_bound")


@rule(
    id="attention_cpu_overhead",
    severity="low",
    title="A fused attention library's CPU time is above its GPU time",
    advice="Batch more work per call, or capture the step in a CUDA graph.",
    nothing_found="No fused attention backend spends more CPU than GPU time per call.",
)
def attention_cpu_overhead(ctx: Context, p: Params) -> Hit | None:
    return _hit(ctx, "attention_cpu_overhead")


@rule(
    id="attention_occupancy_misleading",
    severity="info",
    title="Kineto reports 0 % occupancy for attention kernels that opt into more shared memory",
    advice="Read tracekit's recomputed occupancy (deviceProperties sharedMemPerBlockOptin).",
    nothing_found="No attention kernel with a misleading 0 % Kineto occupancy.",
)
def attention_occupancy_misleading(ctx: Context, p: Params) -> Hit | None:
    return _hit(ctx, "attention_occupancy_misleading")


@rule(
    id="attention_backend_mismatch",
    severity="medium",
    title="The attention implementation that ran is not the one the capture requested",
    advice="Check the transformers warnings at load time and SDPA's backend choice.",
    nothing_found="The attention that ran matches the capture's request (or the trace records none).",
)
def attention_backend_mismatch(ctx: Context, p: Params) -> Hit | None:
    return _hit(ctx, "attention_backend_mismatch")
