"""Rules about attention in transformer inference (HF article part 3): eager attention, the
SDPA math backend, masks rebuilt per call.

Generic op-tree versions written against `findings.patterns`. The attention analysis
(`analysis/attention/`, rules in `rules/attention.py`) has its own, more specific rules
for the same problems; each rule here names it in `superseded_by` and is skipped when it
runs, so a problem is reported once.
"""

from __future__ import annotations

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.order import longest
from tracekit.findings.context import Context
from tracekit.findings.patterns import ancestor_map, eager_attention_chains, gpu_under
from tracekit.findings.registry import Hit, Params, rule

SDPA_MATH = "aten::_scaled_dot_product_attention_math"
ATTENTION_SCOPE = r"(?i)scaled_dot_product|attention|sdpa"
MASK_OPS = r"^aten::(ones|ones_like|tril|triu|where|full)$"


@rule(id="eager_attention", severity="medium", loses="gpu_work", title="Attention computed eagerly (matmul -> softmax -> matmul)",
      advice="Call torch.nn.functional.scaled_dot_product_attention (attn_implementation='sdpa' in transformers) "
             "so a fused kernel (flash, memory-efficient, cuDNN) computes QK^T, softmax and PV in one pass.",
      nothing_found="No matmul -> softmax -> matmul chain outside SDPA.", superseded_by="attention_eager_fusable",
      min_count=1, expected_speedup=2.0,
      max_gap_ns=1_000_000)
def eager_attention(ctx: Context, p: Params) -> Hit | None:
    chains = eager_attention_chains(ctx.nested, max_gap_ns=p.max_gap_ns)
    if chains.height < p.min_count:
        return None
    roots = pl.concat([chains["mm1_eid"], chains["softmax_eid"], chains["mm2_eid"]])
    gpu = gpu_under(ctx.links, ctx.nested, roots)
    gpu_ns = int(gpu["dur_ns"].sum() or 0)
    lost = int(gpu_ns * (1 - 1 / p.expected_speedup))
    ev = chains.with_columns(name=pl.lit("matmul -> softmax -> matmul"))
    title = fmt.agree("{chains} (matmul -> softmax -> matmul) [take|takes] {ns} of GPU time in {kernels}", chains.height)
    return Hit(title=title.format(chains=fmt.counted(chains.height, "eager attention chain"), ns=fmt.ns(gpu_ns),
                                  kernels=fmt.counted(gpu.height, "kernel")),
               time_lost_ns=lost, evidence=ctx.evidence(ev))


@rule(id="sdpa_math", severity="high", loses="gpu_work", title="SDPA runs its unfused math backend",
      advice="The math backend is SDPA's fallback: ~20 kernels per call, FP32 GEMMs, the mask rebuilt every "
             "call (3.7x slower than flash in the HF article). Make a fused backend eligible: bf16/fp16 "
             "inputs, is_causal=True instead of an explicit mask, a supported head dim; "
             "torch.nn.attention.sdpa_kernel([...]) raises with the reason when it cannot be used.",
      nothing_found="No call of aten::_scaled_dot_product_attention_math.", superseded_by="attention_math_backend",
      min_count=1, expected_speedup=3.0)
def sdpa_math(ctx: Context, p: Params) -> Hit | None:
    rows = ctx.nested.filter(pl.col("name") == SDPA_MATH)
    outer = rows.join(ancestor_map(ctx.nested, rows["eid"], rows["eid"], outermost=True)
                      .filter(pl.col("eid") == pl.col("root_eid")), on="eid", how="semi")
    if outer.height < p.min_count:
        return None
    gpu = gpu_under(ctx.links, ctx.nested, outer["eid"])
    gpu_ns = int(gpu["dur_ns"].sum() or 0)
    base = gpu_ns if gpu_ns else int(outer["dur_ns"].sum() or 0)
    per_call = gpu.height / outer.height
    return Hit(title=f"SDPA fell back to the math backend in {fmt.counted(outer.height, 'call')}: {per_call:.0f} GPU "
                     f"activities per call, {fmt.ns(gpu_ns)} of GPU time",
               time_lost_ns=int(base * (1 - 1 / p.expected_speedup)),
               evidence=ctx.evidence(longest(outer)))


@rule(id="mask_rebuilt", severity="low", title="The attention mask is rebuilt inside every attention call",
      advice="Build the causal mask once (or pass is_causal=True to SDPA, which needs no mask tensor) instead of "
             "ones/tril/triu/where/full in every layer's forward: each is a kernel launch on the host's path.",
      nothing_found="No mask-building op (ones, tril, triu, where, full) inside {min_calls}+ attention calls.",
      superseded_by="attention_mask_rebuilt", min_calls=2)
def mask_rebuilt(ctx: Context, p: Params) -> Hit | None:
    nested = ctx.host_nested
    scopes = nested.filter(pl.col("name").str.contains(ATTENTION_SCOPE))
    masks = nested.filter((pl.col("cat") == "cpu_op") & pl.col("name").str.contains(MASK_OPS))
    if scopes.is_empty() or masks.is_empty():
        return None
    owner = ancestor_map(nested, masks["eid"], scopes["eid"], outermost=True)
    inside = masks.join(owner, on="eid", how="inner")
    # the outermost mask ops only (where inside tril would count twice)
    outer_masks = ancestor_map(nested, inside["eid"], inside["eid"], outermost=True).filter(
        pl.col("eid") == pl.col("root_eid"))
    inside = inside.join(outer_masks.select("eid"), on="eid", how="semi")
    calls = inside["root_eid"].n_unique()
    if calls < p.min_calls:
        return None
    lost = int(inside["dur_ns"].sum() or 0)
    names = ", ".join(sorted(set(inside["name"].str.replace("aten::", ""))))
    return Hit(title=f"The mask is rebuilt in {fmt.counted(calls, 'attention call')} ({fmt.counted(inside.height, 'op')}: {names}), "
                     f"{fmt.ns(lost)} of host time",
               time_lost_ns=lost, evidence=ctx.evidence(inside.sort("ts_ns")))
