"""Roofline rules, registered from `analysis.roofline_findings` (one roofline per trace).

`Context.roofline` is computed once per context (or handed over by `analyse()`, with its
ceilings); each rule picks one of the roofline's findings with its own thresholds and points
its evidence at the first call of each shape or chain in the trace. Their time lost is GPU
busy time (`loses="gpu_work"`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from tracekit import format as fmt
from tracekit.analysis import roofline_findings as rf
from tracekit.findings.context import EVIDENCE_ROWS, Context
from tracekit.findings.registry import Hit, Params, rule


def _hit(ctx: Context, finding: dict[str, Any] | None, note: Callable[[dict[str, Any]], str]) -> Hit | None:
    """The roofline finding as a `Hit`: its title with the time and share of GPU time, and
    one evidence row per shape or chain (its first call), in the finding's order."""
    if finding is None or finding["time_lost_ns"] <= 0:
        return None
    rows = finding["evidence"]
    firsts = [(r.get("example_eids") or [None])[0] for r in rows]
    order = pl.DataFrame({"eid": [e for e in firsts if e is not None],
                          "_note": [note(r) for r, e in zip(rows, firsts) if e is not None],
                          "_rank": [i for i, e in enumerate(firsts) if e is not None]},
                         schema={"eid": pl.Int64, "_note": pl.String, "_rank": pl.Int64})
    calls = ctx.cpu_rows(order["eid"]).join(order, on="eid").sort("_rank")
    lost = finding["time_lost_ns"]
    return Hit(title=f"{finding['title']}: {fmt.ns(lost)}, {fmt.pct(finding['share'])} of GPU time",
               time_lost_ns=lost, evidence=ctx.evidence(calls, note=pl.col("_note")), advice=finding["advice"])


def _shape_note(r: dict[str, Any]) -> str:
    eff = "–" if r.get("efficiency") is None else fmt.pct(r["efficiency"])
    return f"{r['input_dims'] or 'no shapes'}: {fmt.counted(r['calls'], 'call')}, {fmt.ns(r['gpu_ns'])}, {eff} of its ceiling"


@rule(id="gemm_below_ceiling", severity="high", loses="gpu_work",
      title="GEMM shapes run far below the tensor-core ceiling (roofline)",
      advice="Autocast to bf16/fp16, pad dims to multiples of 8, batch small M/N (each shape's causes in the advice).",
      nothing_found="No GEMM shape under {min_efficiency} of its ceiling loses {min_lost_share} of GPU time or more.",
      min_efficiency=0.5, min_lost_share=0.005)
def gemm_below_ceiling(ctx: Context, p: Params) -> Hit | None:
    found = rf.gemm_finding(ctx.roofline, min_efficiency=p.min_efficiency, min_lost_share=p.min_lost_share,
                            max_evidence=EVIDENCE_ROWS)
    return _hit(ctx, found, _shape_note)


@rule(id="fusible_chains", severity="high", loses="gpu_work",
      title="Chains of memory-bound ops that one fused kernel could replace (roofline)",
      advice="Fuse them: torch.compile, or a fused RMSNorm/rotary/SwiGLU kernel.",
      nothing_found="No chain of {min_ops} or more memory-bound ops saves {min_lost_share} of GPU time or more fused.",
      min_ops=3, min_lost_share=0.005)
def fusible_chains(ctx: Context, p: Params) -> Hit | None:
    found = rf.chain_finding(ctx.roofline, min_ops=p.min_ops, min_lost_share=p.min_lost_share,
                             max_evidence=EVIDENCE_ROWS)
    return _hit(ctx, found, lambda r: (f"{r['signature']} ×{r['occurrences']}: {fmt.ns(r['gpu_ns'])}, "
                                       f"{fmt.ns(r['saving_ns'])} saved fused"))


@rule(id="attention_below_backend", severity="medium", loses="gpu_work",
      title="Attention runs below what its backend reaches (roofline)",
      advice="A backend that reaches more of the device (cuDNN SDPA or FlashAttention-3 on Hopper), is_causal=True, bf16.",
      nothing_found="No attention shape below what its backend reaches loses {min_lost_share} of GPU time or more.",
      min_lost_share=0.005)
def attention_below_backend(ctx: Context, p: Params) -> Hit | None:
    found = rf.attention_finding(ctx.roofline, min_lost_share=p.min_lost_share, max_evidence=EVIDENCE_ROWS,
                                 classes=ctx.taxonomy)
    return _hit(ctx, found, lambda r: f"{r['backend']} (reaches ~{fmt.pct(r['expected_efficiency'])}): "
                                      + _shape_note(r))
