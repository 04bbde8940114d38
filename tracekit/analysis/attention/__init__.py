"""Attention analysis: every attention call of a trace, its backend, kernels, GPU and CPU cost.

`analyze_attention(trace) -> AttentionResult` (`analyze`, `result`). The calls are found
by `find` and measured by `calls`; comparing traces is `compare`. The attention findings
are registered rules (`tracekit.findings.rules.attention`); the report section is
`tracekit.report.attention`.
"""

from __future__ import annotations

from tracekit.analysis.attention.analyze import analyze_attention, critical_path_share
from tracekit.analysis.attention.result import AttentionResult

__all__ = ["AttentionResult", "analyze_attention", "critical_path_share"]
