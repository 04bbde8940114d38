"""Attention findings and the attention report section, from an `AttentionResult`.

`attention_findings(result) -> list[dict]`: each finding has `id`, `severity` (high /
medium / low by the share of time lost; `info` when nothing is lost), `title`,
`time_lost_ns`, `share`, `evidence` (a list of dicts), `advice` and `call_ids` (the calls
it is about). Time lost is a
measured floor, never a model: the GPU time of the kernels a fused kernel would not run,
the copies an in-place op avoids, the CPU time above the GPU time, ...

| id                              | fires when                                                         |
|---------------------------------|--------------------------------------------------------------------|
| attention_eager_fusable         | eager attention (matmul, softmax, matmul) where fused SDPA applies |
| attention_math_backend          | SDPA ran its math backend (with the reasons visible in the inputs) |
| attention_fp32_gemm             | GEMMs inside attention on CUDA cores in FP32 (`sgemm`)             |
| attention_mask_rebuilt          | the causal mask is built again (ones/tril/triu) in most calls      |
| attention_hidden_copy           | an out-of-place `masked_fill` copies the scores (Memcpy) per call  |
| attention_decode_launch_bound   | decode-step attention costs more CPU than GPU time                 |
| attention_cpu_overhead          | a fused backend's CPU time per call is above its GPU time          |
| attention_occupancy_misleading  | Kineto reads 0 % occupancy for kernels that opted into more smem   |
| attention_backend_mismatch      | the capture asked for one implementation and another ran           |

The report section built from the result and these findings is `attention_report.attention_section`.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.attention.result import AttentionResult

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
MAX_EVIDENCE = 5


def attention_findings(result: AttentionResult) -> list[dict[str, Any]]:
    """Every attention finding that applies, largest time lost first."""
    rules = (
        _eager,
        _math,
        _fp32_gemm,
        _mask_rebuilt,
        _hidden_copy,
        _decode_launch_bound,
        _cpu_overhead,
        _occupancy,
        _mismatch,
    )
    found = [f for rule in rules if (f := rule(result)) is not None]
    return sorted(found, key=lambda f: -f["time_lost_ns"])


def _denominator(result: AttentionResult) -> int:
    return result.gpu_total_ns if result.has_gpu else int(result.calls["cpu_ns"].sum() or 0)


def _finding(
    result: AttentionResult,
    calls: pl.DataFrame | None,
    fid: str,
    title: str,
    lost_ns: float,
    evidence: list[dict[str, Any]],
    advice: str,
) -> dict[str, Any]:
    """A finding dict; `call_ids` lists the calls it is about (empty for trace-wide findings)."""
    denominator = _denominator(result)
    share = lost_ns / denominator if denominator else 0.0
    severity = "info" if lost_ns <= 0 else "high" if share >= 0.10 else "medium" if share >= 0.03 else "low"
    return {
        "id": fid,
        "severity": severity,
        "title": title,
        "time_lost_ns": int(max(lost_ns, 0)),
        "share": share,
        "evidence": evidence,
        "advice": advice,
        "call_ids": [] if calls is None else calls["call_id"].to_list(),
    }


def _median(frame: pl.DataFrame, col: str) -> float | None:
    value = frame[col].drop_nulls().median() if frame.height else None
    return float(value) if value is not None else None  # type: ignore[arg-type]


def _calls_evidence(calls: pl.DataFrame, *extra: str) -> list[dict[str, Any]]:
    cols = ["call_id", "layer", "phase", "backend", "gpu_events", "classes", "gpu_ns", "cpu_ns", *extra]
    return calls.select([c for c in dict.fromkeys(cols) if c in calls.columns]).head(MAX_EVIDENCE).to_dicts()


def _non_gemm_ns(result: AttentionResult, calls: pl.DataFrame) -> int:
    """GPU time of the non-GEMM kernels (scale, mask, softmax, copies, ...) of `calls`."""
    if not result.has_gpu:
        return 0
    events = result.events.filter(
        pl.col("in_scope") & pl.col("call_id").is_in(calls["call_id"].implode()) & (pl.col("stage") != "gemm")
    )
    return int(events["dur_ns"].sum() or 0)


def _eager(result: AttentionResult) -> dict[str, Any] | None:
    calls = result.calls.filter(pl.col("backend") == "eager")
    if calls.is_empty():
        return None
    kernels = _median(calls, "gpu_events")
    drop = (
        f"{kernels:.0f} → 1 kernels per call"
        if result.has_gpu and kernels is not None
        else "one fused op per call"
    )
    evidence = [
        {
            "calls": calls.height,
            "median_kernels": kernels,
            "expected_kernels": 1 if result.has_gpu else None,
            "median_gpu_ns": _median(calls, "gpu_ns"),
            "median_cpu_ns": _median(calls, "cpu_ns"),
        },
        *_calls_evidence(calls, "masked_fill_copies", "mask_ns"),
    ]
    return _finding(
        result,
        calls,
        "attention_eager_fusable",
        f"eager attention in {fmt.counted(calls.height, 'call')}: fused SDPA would run it as one kernel ({drop})",
        _non_gemm_ns(result, calls),
        evidence,
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
        reasons.append(
            f"head dim {', '.join(map(str, odd))} (fused kernels want a multiple of 8, at most 256)"
        )
    if (calls["dropout_p"].fill_null(0.0) > 0).any():
        reasons.append("dropout_p > 0")
    return reasons


def _math(result: AttentionResult) -> dict[str, Any] | None:
    calls = result.calls.filter(pl.col("backend") == "sdpa_math")
    if calls.is_empty():
        return None
    reasons = math_reasons(calls, result.requested)
    kernels = _median(calls, "gpu_events")
    evidence = [
        {
            "calls": calls.height,
            "median_kernels": kernels,
            "median_gpu_ns": _median(calls, "gpu_ns"),
            "softmax": calls["softmax"].drop_nulls().first() if calls.height else None,
            "reasons": reasons or ["none visible in the inputs"],
        },
        *_calls_evidence(calls, "dtype", "head_dim", "attn_mask"),
    ]
    why = (
        "; ".join(reasons)
        if reasons
        else (
            "no reason visible in the inputs: check sdpa_kernel contexts, "
            "torch.backends.cuda.enable_*_sdp flags and the GPU's capability"
        )
    )
    kernel_text = f", {fmt.counted(round(kernels), 'kernel')} per call" if result.has_gpu and kernels else ""
    return _finding(
        result,
        calls,
        "attention_math_backend",
        f"SDPA ran its math backend in {fmt.counted(calls.height, 'call')}{kernel_text}",
        _non_gemm_ns(result, calls),
        evidence,
        f"the math backend is attention written out (upcast, mask built, matmul, softmax, matmul); "
        f"likely cause: {why}. Remove the cause so flash, efficient or cuDNN is chosen",
    )


def _fp32_gemm(result: AttentionResult) -> dict[str, Any] | None:
    calls = result.calls.filter(pl.col("gemm_simt") > 0)
    if calls.is_empty() or not result.has_gpu:
        return None
    simt = result.events.filter(
        pl.col("in_scope") & (pl.col("kernel_class") == "gemm") & pl.col("tensor_cores").eq(False)
    )
    names = (
        simt.group_by("name")
        .agg(count=pl.len(), total_ns=pl.col("dur_ns").sum())
        .sort(["total_ns", "name"], descending=[True, False])
    )
    casts = result.events.filter(
        pl.col("in_scope") & (pl.col("stage") == "copy") & pl.col("call_id").is_in(calls["call_id"].implode())
    )
    dtypes = sorted(set(calls["dtype"].drop_nulls().to_list()))
    upcast = any(d in ("bf16", "fp16") for d in dtypes)
    evidence = [
        {
            "calls": calls.height,
            "input_dtypes": dtypes,
            "fp32_gemm_ns": int(simt["dur_ns"].sum() or 0),
            "cast_kernels": casts.height,
            "cast_ns": int(casts["dur_ns"].sum() or 0),
        },
        *names.head(MAX_EVIDENCE).to_dicts(),
    ]
    title = (
        "FP32 upcast inside attention: " if upcast else "FP32 GEMMs inside attention: "
    ) + f"{fmt.counted(simt.height, 'sgemm kernel')} on CUDA cores instead of tensor cores"
    return _finding(
        result,
        calls,
        "attention_fp32_gemm",
        title,
        int(casts["dur_ns"].sum() or 0),
        evidence,
        "keep attention in bf16/fp16 on a fused backend (flash/efficient/cuDNN run the GEMMs on tensor "
        "cores); the math backend and fp32 inputs compute the scores with FP32 sgemm",
    )


def _mask_rebuilt(result: AttentionResult) -> dict[str, Any] | None:
    calls = result.calls
    built = calls.filter(pl.col("mask_build_ops") > 0)
    if built.is_empty() or built.height * 2 < calls.height:
        return None
    ops = result.events.filter(
        pl.col("in_scope") & (pl.col("stage") == "mask") & pl.col("call_id").is_in(built["call_id"].implode())
    )
    per_call = ops.group_by("call_id").agg(n=pl.len())
    lost = int(built["mask_ns"].sum() or 0) - int(_median(built, "mask_ns") or 0) if result.has_gpu else 0
    evidence = [
        {
            "calls": calls.height,
            "calls_building_a_mask": built.height,
            "mask_kernels_per_call": _median(per_call, "n"),
            "mask_ns_median": _median(built, "mask_ns"),
            "mask_ops": sorted(set(ops["stage_op"].drop_nulls().to_list())),
        }
    ]
    return _finding(
        result,
        built,
        "attention_mask_rebuilt",
        f"the attention mask is built again in {built.height} of {fmt.counted(calls.height, 'call')}",
        lost,
        evidence,
        "build the mask once per forward and reuse it, or let a fused kernel apply causality itself "
        "(is_causal=True on flash/efficient/cuDNN builds no mask at all)",
    )


def _hidden_copy(result: AttentionResult) -> dict[str, Any] | None:
    calls = result.calls.filter(pl.col("masked_fill_copies") > 0)
    if calls.is_empty():
        return None
    copies = result.events.filter(
        pl.col("in_scope")
        & (pl.col("stage_op") == "aten::masked_fill")
        & ((pl.col("cat") == "gpu_memcpy") | pl.col("kernel_class").is_in(["copy", "memcpy"]))
    )
    evidence = [
        {
            "calls": calls.height,
            "copies": copies.height,
            "copy_ns": int(copies["dur_ns"].sum() or 0),
            "names": sorted(set(copies["name"].to_list()))[:MAX_EVIDENCE],
        },
        *_calls_evidence(calls, "masked_fill_copies"),
    ]
    return _finding(
        result,
        calls,
        "attention_hidden_copy",
        f"out-of-place masked_fill copies the scores before masking ({fmt.counted(copies.height, 'copy', 'copies')})",
        int(copies["dur_ns"].sum() or 0),
        evidence,
        "aten::masked_fill clones its input (aten::clone → aten::copy_ → Memcpy DtoD); use the in-place "
        "masked_fill_ on the freshly computed scores (one kernel less per call), or fused SDPA",
    )


def _decode_launch_bound(result: AttentionResult) -> dict[str, Any] | None:
    calls = result.calls.filter((pl.col("phase") == "decode") & pl.col("gpu_ns").is_not_null())
    if calls.is_empty() or (_median(calls, "cpu_ns") or 0) <= (_median(calls, "gpu_ns") or 0):
        return None
    over = calls.select((pl.col("cpu_ns") - pl.col("gpu_ns")).clip(lower_bound=0).sum()).item()
    evidence = [
        {
            "decode_calls": calls.height,
            "steps": calls["decode_step"].drop_nulls().n_unique(),
            "median_cpu_ns": _median(calls, "cpu_ns"),
            "median_gpu_ns": _median(calls, "gpu_ns"),
            "median_launch_api_ns": _median(calls, "launch_api_ns"),
            "median_kernels": _median(calls, "gpu_events"),
        }
    ]
    return _finding(
        result,
        calls,
        "attention_decode_launch_bound",
        f"decode attention is launch-bound: {fmt.ns(_median(calls, 'cpu_ns'))} CPU per call for "
        f"{fmt.ns(_median(calls, 'gpu_ns'))} of GPU work",
        int(over or 0),
        evidence,
        "decode launches the same small kernels every token: use a static KV cache "
        "(cache_implementation='static') and capture the step in a CUDA graph "
        "(torch.compile(mode='reduce-overhead')), so one graph launch replaces hundreds of launches",
    )


def _cpu_overhead(result: AttentionResult) -> dict[str, Any] | None:
    calls = result.calls.filter(
        pl.col("backend").is_in(FUSED)
        & (pl.col("phase").fill_null("") != "decode")
        & pl.col("gpu_ns").is_not_null()
        & (pl.col("attention_kernels") > 0)
    )
    rows = []
    for backend in sorted(set(calls["backend"].to_list())):
        group = calls.filter(pl.col("backend") == backend)
        if (_median(group, "cpu_ns") or 0) > (_median(group, "gpu_ns") or 0):
            rows.append((backend, group))
    if not rows:
        return None
    lost = sum(
        g.select((pl.col("cpu_ns") - pl.col("gpu_ns")).clip(lower_bound=0).sum()).item() for _, g in rows
    )
    evidence = [
        {
            "backend": b,
            "library": LIBRARY.get(b, b),
            "calls": g.height,
            "median_cpu_ns": _median(g, "cpu_ns"),
            "median_gpu_ns": _median(g, "gpu_ns"),
            "median_launch_api_ns": _median(g, "launch_api_ns"),
            "median_runtime_ns": _median(g, "runtime_ns"),
            "launch_apis": g["launch_apis"].drop_nulls().first(),
        }
        for b, g in rows
    ]
    names = ", ".join(LIBRARY.get(b, b) for b, _ in rows)
    found = _finding(
        result,
        pl.concat([g for _, g in rows]),
        "attention_cpu_overhead",
        f"{names}: CPU time per attention call above its GPU time",
        lost,
        evidence,
        "the library's host-side work (plan/graph lookup, attribute setting, the launch itself) costs more "
        "than the kernel: it only hides while the CPU runs ahead of the GPU. Batch more work per call, "
        "or capture the step in a CUDA graph so the host cost is paid once",
    )
    # host time above GPU time only costs while the GPU waits for it: never more than medium
    return {**found, "severity": "medium"} if found["severity"] == "high" else found


def _occupancy(result: AttentionResult) -> dict[str, Any] | None:
    occ = result.occupancy.filter(
        (pl.col("kineto_occupancy_pct").fill_null(-1) == 0)
        & (pl.col("theoretical_occupancy").fill_null(0) > 0)
    )
    if occ.is_empty():
        return None
    evidence = (
        occ.select("name", "count", "kineto_occupancy_pct", "theoretical_occupancy", "limiting_factor")
        .head(MAX_EVIDENCE)
        .to_dicts()
    )
    return _finding(
        result,
        None,
        "attention_occupancy_misleading",
        fmt.agree("Kineto reports 0 % occupancy for {kernels} that [do|does] run", occ.height).format(
            kernels=fmt.counted(occ.height, "attention kernel")),
        0,
        evidence,
        "Kineto computes occupancy with the default 48 KB shared-memory limit; these kernels opt into "
        "more, so the 0 % is an artefact. tracekit recomputes it from deviceProperties "
        "(sharedMemPerBlockOptin): read the recomputed figure",
    )


def _mismatch(result: AttentionResult) -> dict[str, Any] | None:
    if not result.warnings:
        return None
    evidence = [
        {
            "requested": result.requested.get("requested"),
            "actual": result.requested.get("actual"),
            "sdpa_backend": result.requested.get("sdpa_backend"),
            "ran": result.backends,
        }
    ]
    return _finding(
        result,
        None,
        "attention_backend_mismatch",
        "the attention that ran is not the one requested: " + "; ".join(result.warnings),
        0,
        evidence,
        "check the transformers warning at load time (missing package, unsupported dtype or mask) and "
        "SDPA's backend choice (torch.nn.attention.sdpa_kernel, fp16/bf16 inputs, is_causal)",
    )
