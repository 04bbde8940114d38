"""Findings: small registered rules that turn analyses into ranked, evidenced advice.

    from tracekit.findings import run_findings
    result = run_findings(trace, config={"gpu_gaps.min_gap_ns": 5_000_000})
    for f in result.findings: print(f.severity, f.title, f.time_lost_ns)

`docs/findings.md` lists every rule. To add rules, write `@rule(...)` functions in a module
under `tracekit/findings/rules/` (imported here) — see `registry.py`.
"""

from __future__ import annotations

from tracekit.findings.engine import run_findings
from tracekit.findings.model import SEVERITIES, Clean, Evidence, Finding, FindingsResult
from tracekit.findings.registry import RULES, Config, Hit, Params, RuleSpec, rule
from tracekit.findings.rules import load_all as _load_all

_load_all()

__all__ = [
    "RULES", "SEVERITIES", "Clean", "Config", "Evidence", "Finding", "FindingsResult", "Hit", "Params",
    "RuleSpec", "rule", "run_findings",
]
