"""The roofline's findings: GEMMs below what their shape reaches, chains of memory-bound ops
that could be fused, attention below what its backend reaches; each with the time it loses
and what to change (`docs/roofline.md`)."""

from __future__ import annotations

import json

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.roofline import RooflineResult, _taxonomy
from tracekit.analysis.work import ATTENTION, matmul_dims

# Attention efficiency one can expect per backend (fraction of the roofline time): FA2 paper
# (50-73 % of A100 peak), FA3 paper (FA2 ~35 % of H100 peak, FA3 up to 75 %); docs/roofline.md.
ATTENTION_EXPECTED = {"flash": 0.5, "flash_hopper": 0.35, "flash3": 0.6, "cudnn": 0.5, "efficient": 0.3,
                      "flex": 0.35, "ck": 0.35, "other": 0.3}
ATTENTION_ADVICE = {
    "flash_hopper": "FlashAttention-2 kernels (pytorch_flash::flash_fwd_kernel) use no Hopper wgmma/TMA and "
                    "reach ~35 % of H100 peak; the cuDNN SDPA backend "
                    "(sdpa_kernel(SDPBackend.CUDNN_ATTENTION)) or FlashAttention-3 reach 60-75 %",
    "efficient": "the memory-efficient backend ran: flash was ruled out (an explicit attn_mask, fp32 inputs "
                 "or an unsupported head dim); pass is_causal=True instead of a mask and use bf16/fp16",
    "other": "attention did not run in a known fused kernel: check the SDPA backend selection",
}
CHAIN_CLASSES = ("elementwise", "normalization", "softmax", "reduction", "copy")
EVIDENCE_COLUMNS = ["name", "input_dims", "input_types", "calls", "gpu_ns", "achieved_tflops",
                    "achieved_gbps", "efficiency", "bound", "top_kernel", "first_ts_ns", "example_eids"]
ADDMM_LIKE = ("aten::addmm", "aten::baddbmm", "aten::_addmm_activation")


def roofline_findings(
    result: RooflineResult, *, gemm_min_efficiency: float = 0.5, min_lost_share: float = 0.005,
    min_chain_ops: int = 3, max_evidence: int = 5,
) -> list[dict]:
    """Findings data: GEMMs far below the tensor-core ceiling, memory-bound chains that could
    fuse, attention below what its backend reaches. `min_lost_share` is of `result.gpu_ns`."""
    found = [gemm_finding(result, min_efficiency=gemm_min_efficiency, min_lost_share=min_lost_share,
                          max_evidence=max_evidence),
             chain_finding(result, min_ops=min_chain_ops, min_lost_share=min_lost_share, max_evidence=max_evidence),
             attention_finding(result, min_lost_share=min_lost_share, max_evidence=max_evidence)]
    return [f for f in found if f is not None]


def gemm_finding(result: RooflineResult, *, min_efficiency: float = 0.5, min_lost_share: float = 0.005,
                 max_evidence: int = 5) -> dict | None:
    """`roofline.gemm_below_ceiling`, or None (the findings rule reads this one alone)."""
    return _gemm_finding(result, min_efficiency, min_lost_share * result.gpu_ns, max_evidence)


def chain_finding(result: RooflineResult, *, min_ops: int = 3, min_lost_share: float = 0.005,
                  max_evidence: int = 5) -> dict | None:
    """`roofline.fusible_chain`, or None."""
    return _chain_finding(result, min_ops, min_lost_share * result.gpu_ns, max_evidence)


def attention_finding(result: RooflineResult, *, min_lost_share: float = 0.005,
                      max_evidence: int = 5, classes: pl.DataFrame | None = None) -> dict | None:
    """`roofline.attention_below_expected`, or None (`classes`: as `taxonomy.classify_names`'s)."""
    return _attention_finding(result, min_lost_share * result.gpu_ns, max_evidence, classes)


def _finding(result: RooflineResult, fid: str, title: str, lost_ns: float, evidence: list[dict],
             advice: str) -> dict:
    share = lost_ns / result.gpu_ns if result.gpu_ns else 0.0
    severity = "high" if share >= 0.10 else "medium" if share >= 0.03 else "low"
    return {"id": fid, "severity": severity, "title": title, "time_lost_ns": int(lost_ns),
            "share": share, "evidence": evidence, "advice": advice}


def _evidence(row: dict, **extra: object) -> dict:
    return {**{c: row[c] for c in EVIDENCE_COLUMNS}, **extra}


def _gemm_mkn(row: dict) -> tuple[int, int, int, int] | None:
    dims = json.loads(row["input_dims"] or "[]")
    i, j = (1, 2) if row["name"] in ADDMM_LIKE else (0, 1)
    if len(dims) <= j or not dims[i] or not dims[j]:
        return None
    b = list(reversed(dims[j])) if row["name"] == "aten::linear" else dims[j]
    return matmul_dims(dims[i], b)


def _gemm_causes(row: dict) -> list[str]:
    kernel, causes = (row["top_kernel"] or "").lower(), []
    fp32_kernel = "sgemm" in kernel or "simt" in kernel or row["kernel_tensor_cores"] is False
    if fp32_kernel:
        causes.append("FP32 GEMM on CUDA cores (sgemm/simt kernel): autocast to bf16/fp16 for the tensor "
                      "cores, or allow TF32 on Ampere+ (torch.backends.cuda.matmul.allow_tf32 = True)")
    elif row["compute_dtype"] == "fp32":  # on the tensor/matrix cores already (TF32, AMD's fp32 MFMA)
        causes.append("FP32 GEMM (fp32 inputs, on the tensor/matrix cores): autocast to bf16/fp16, which "
                      "those cores run several times faster")
    mkn = _gemm_mkn(row)
    if mkn is not None:
        _, m, k, n = mkn
        align = 16 if row["compute_dtype"] == "fp8" else 8
        if any(d % align for d in (m, k, n)):
            causes.append(f"M×K×N = {m}×{k}×{n}: a dim not a multiple of {align} misses the fast "
                          "tensor-core path; pad it")
        if min(m, n) <= 64:
            causes.append(f"small M/N ({min(m, n)}): GEMV-like and memory-bound; batch more tokens/requests")
    if row["bound"] == "memory" and not causes:
        causes.append("memory-bound at this shape (weights read once for few rows): batch more")
    return causes or ["no shape cause found: check the kernel choice (cuBLAS heuristics, split-K) with ncu"]


def _gemm_finding(result: RooflineResult, min_eff: float, floor_ns: float, n: int) -> dict | None:
    """GEMM shapes below `min_eff` of their ceiling; FP32 GEMMs are measured against the
    BF16 tensor-core ceiling (what switching precision would give)."""
    ops = result.ops.filter((pl.col("work_class") == "gemm") & pl.col("efficiency").is_not_null())
    at_tc = pl.max_horizontal(pl.col("flops") / (pl.col("peak_bf16_tflops") * 1e3),
                              pl.col("bytes") / pl.col("peak_gbps"))
    fp32 = pl.col("compute_dtype") == "fp32"
    ops = ops.with_columns(lost_ns=pl.coalesce(
        pl.when(fp32).then((pl.col("rated_ns") - at_tc).clip(lower_bound=0)), "time_lost_ns"))
    bad = ops.filter(((pl.col("efficiency") < min_eff) | fp32) & (pl.col("lost_ns") >= floor_ns))
    if bad.is_empty():
        return None
    bad = bad.sort("lost_ns", descending=True, maintain_order=True)  # ties: in the ops' order
    evidence = [_evidence(r, causes=_gemm_causes(r)) for r in bad.head(n).to_dicts()]
    advice = "; ".join(dict.fromkeys(c for e in evidence for c in e["causes"]))
    return _finding(result, "roofline.gemm_below_ceiling",
                    fmt.agree("{shapes} [run|runs] far below the tensor-core ceiling", len(bad)).format(
                        shapes=fmt.counted(len(bad), "GEMM shape")),
                    float(bad["lost_ns"].sum()), evidence, advice)


def _chain_finding(result: RooflineResult, min_ops: int, floor_ns: float, n: int) -> dict | None:
    """Runs of >= min_ops memory-bound calls in a row on one thread (no GEMM/attention between):
    fused, such a run would cost about its largest member; the rest is the saving."""
    ok = pl.col("work_class").is_in(CHAIN_CLASSES) & (pl.col("bound") == "memory") & pl.col("excluded").is_null()
    calls = result.calls.sort("pid", "tid", "ts_ns").with_columns(
        _run=(~ok).cast(pl.Int64).cum_sum().over("pid", "tid"), _ok=ok).filter("_ok")
    chains = calls.group_by("pid", "tid", "_run").agg(
        ops=pl.col("name").str.replace("^aten::", "").sort_by("ts_ns"), size=pl.len(),
        gpu_ns=pl.col("gpu_ns").sum(), top_ns=pl.col("gpu_ns").max(), first_ts_ns=pl.col("ts_ns").min(),
        example_eids=pl.col("eid").sort_by("ts_ns").head(3),
    ).filter(pl.col("size") >= min_ops).with_columns(signature=pl.col("ops").list.join(" → "))
    by_sig = chains.group_by("signature").agg(
        occurrences=pl.len(), ops_per_chain=pl.col("size").first(), gpu_ns=pl.col("gpu_ns").sum(),
        saving_ns=(pl.col("gpu_ns") - pl.col("top_ns")).sum(), first_ts_ns=pl.col("first_ts_ns").min(),
        example_eids=pl.col("example_eids").sort_by("first_ts_ns").first(),
    ).filter(pl.col("saving_ns") >= floor_ns).sort(["saving_ns", "signature"], descending=[True, False])
    if by_sig.is_empty():
        return None
    return _finding(result, "roofline.fusible_chain",
                    f"{fmt.counted(int(by_sig['occurrences'].sum()), 'chain')} of memory-bound ops could be fused",
                    float(by_sig["saving_ns"].sum()), by_sig.head(n).to_dicts(),
                    "each op of a chain reads and writes the full tensor from HBM; one fused kernel "
                    "(torch.compile, a fused RMSNorm/rotary/SwiGLU kernel) moves the data once")


def _attention_finding(result: RooflineResult, floor_ns: float, n: int,
                       classes: pl.DataFrame | None = None) -> dict | None:
    """Attention shapes below the efficiency their backend reaches (ATTENTION_EXPECTED)."""
    ops = result.ops.filter((pl.col("work_class") == "attention") & pl.col("efficiency").is_not_null())
    if ops.is_empty():
        return None
    hopper = result.devices.select("device", _hopper=pl.col("product").str.contains(r"^H(100|200|800)"))
    backend = _taxonomy(ops["top_kernel"], classes).select(top_kernel="kernel", backend="attention_backend")
    ops = ops.join(hopper, on="device", how="left").join(backend, on="top_kernel", how="left").with_columns(
        backend=pl.when((pl.col("backend") == "flash") & pl.col("_hopper").fill_null(False))
        .then(pl.lit("flash_hopper")).otherwise(pl.col("backend").fill_null("other")))
    ops = ops.with_columns(expected=pl.col("backend").replace_strict(ATTENTION_EXPECTED, default=0.3,
                                                                      return_dtype=pl.Float64))
    lost = (pl.col("rated_ns") - pl.col("min_ns") / pl.col("expected")).clip(lower_bound=0)
    bad = ops.with_columns(lost_ns=lost).filter(
        (pl.col("efficiency") < pl.col("expected")) & (pl.col("lost_ns") >= floor_ns))
    if bad.is_empty():
        return None
    rows = bad.sort("lost_ns", descending=True, maintain_order=True).head(n).to_dicts()
    evidence = [_evidence(r, backend=r["backend"], expected_efficiency=r["expected"], causal=r["causal"])
                for r in rows]
    advice = [ATTENTION_ADVICE.get(r["backend"], ATTENTION_ADVICE["other"]) for r in rows]
    advice += [c for r in rows for c in _attention_causes(r)]
    return _finding(result, "roofline.attention_below_expected",
                    f"attention runs below what its backend reaches ({fmt.counted(len(bad), 'shape')})",
                    float(bad["lost_ns"].sum()), evidence, "; ".join(dict.fromkeys(advice)))


def _attention_causes(row: dict) -> list[str]:
    layout = ATTENTION.get(row["name"].removeprefix("aten::"), ("bhsd", -1))[0]
    q = (json.loads(row["input_dims"] or "[]") or [[]])[0]
    if len(q) != 4:
        return []
    seq, head_dim = (q[1] if layout == "bshd" else q[2]), q[3]
    causes = []
    if head_dim <= 64:
        causes.append(f"head dim {head_dim}: little math per byte loaded (memory-bound tiles)")
    if seq <= 1024:
        causes.append(f"short sequences ({seq}): per-block setup dominates; pack or batch sequences")
    return causes
