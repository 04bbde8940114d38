"""Rules about communication (kernels of taxonomy class `communication`)."""

from __future__ import annotations

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.order import longest
from tracekit.analysis.taxonomy import is_communication
from tracekit.findings.context import Context
from tracekit.findings.registry import Hit, Params, rule


@rule(id="low_comm_overlap", severity="medium", loses="gpu_work", title="Communication is not hidden under computation",
      advice="Overlap collectives with compute: DDP bucketing (bucket_cap_mb), FSDP prefetch "
             "(forward_prefetch/backward_prefetch), async_op=True with the wait placed as late as possible, and "
             "no sync between the collective and the next compute.",
      nothing_found="Communication takes under {min_comm_share:.0%} of the window, or at least "
                    "{max_overlap:.0%} of it overlaps computation.",
      min_comm_share=0.05, max_overlap=0.5)
def low_comm_overlap(ctx: Context, p: Params) -> Hit | None:
    b = ctx.breakdown
    if b.communication_total_ns == 0 or b.span_ns == 0 or b.overlap_share is None:
        return None
    if b.communication_total_ns < p.min_comm_share * b.span_ns or b.overlap_share >= p.max_overlap:
        return None
    # (one filter of the GPU rows: `Trace.kernels` would first copy every kernel)
    gpu = ctx.trace.gpu
    comm = longest(gpu.filter((pl.col("cat") == "kernel") & is_communication(gpu["name"], classes=ctx.taxonomy)))
    return Hit(title=f"Only {fmt.pct(b.overlap_share)} of {fmt.ns(b.communication_total_ns)} of communication overlaps "
                     f"computation; {fmt.ns(b.communication_ns)} is exposed",
               time_lost_ns=b.communication_ns, evidence=ctx.evidence(comm))
