"""`run_findings(trace) -> FindingsResult`: run every enabled rule and rank what they find."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracekit.errors import UsageError
from tracekit.findings.context import Context
from tracekit.findings.model import SEVERITIES, SEVERITY_RANK, Clean, Finding, FindingsResult
from tracekit.findings.registry import RULES, Config, Hit, Params, RuleSpec
from tracekit.model import Trace

# Severity from the share of the window a finding costs (docs/findings.md, "Severity"): the
# first band whose share, in parts per ten thousand, time lost reaches; below the last: info
BANDS: tuple[tuple[str, int], ...] = (("high", 1_000), ("medium", 200), ("low", 50))
MIN_LOST_ABOVE_LOW_NS = 50_000  # a loss under 50 µs is never above low, whatever its share
MIN_WINDOW_FOR_HIGH_NS = 1_000_000  # a window under 1 ms (a fragment of a step) is never high


def run_findings(trace: Trace, *, config: Config | Mapping[str, Any] | None = None,
                 rules: list[str] | None = None, seed: Mapping[str, Any] | None = None) -> FindingsResult:
    """Run the registered rules (all, or those in `rules`) on one trace.

    Findings are ranked by time lost, then severity, then rule id. A rule that raises is
    reported in `errors` (with its message) instead of stopping the others. Disabled rules,
    and rules whose `superseded_by` rule runs in the same pass, are listed in `skipped`.
    `seed` hands over the analyses the caller has (keys are `Context` attributes: the
    pipeline's findings step gives every one it computed), so that the rules compute
    nothing again; None for an analysis that may fail (`Context.MAY_FAIL`) says it failed,
    and a rule that reads it is reported in `errors` rather than computing it again. A
    standalone call computes what its rules read, once, on first use.
    """
    cfg = config if isinstance(config, Config) else Config(config)
    ctx = Context(trace, seed=seed)
    chosen = list(RULES) if rules is None else rules
    unknown = [r for r in chosen if r not in RULES]
    if unknown:
        raise UsageError(f"unknown rule(s): {', '.join(unknown)}")
    found: list[Finding] = []
    clean: list[Clean] = []
    ran: list[str] = []
    skipped: list[str] = []
    errors: list[tuple[str, str]] = []
    todo = [r for r in chosen if cfg.params(r)["enabled"] and not _superseded(RULES[r], chosen, cfg)]
    outcomes = {rule_id: _run_rule(ctx, cfg, rule_id) for rule_id in todo}
    for rule_id in chosen:
        spec, params = RULES[rule_id], cfg.params(rule_id)
        if rule_id not in outcomes:
            skipped.append(rule_id)
            continue
        ran.append(rule_id)
        hits, error = outcomes[rule_id]
        if error is not None:
            errors.append((rule_id, error))
            continue
        if not hits:
            clean.append(Clean(rule=rule_id, text=spec.clean_text(params)))
        found.extend(_finding(spec, params, hit, ctx) for hit in hits)
    found.sort(key=lambda f: (-f.time_lost_ns, SEVERITY_RANK[f.severity], f.rule))
    return FindingsResult(findings=tuple(found), clean=tuple(clean), ran=tuple(ran), skipped=tuple(skipped),
                          errors=tuple(errors), window_start_ns=ctx.window_start_ns, window_end_ns=ctx.window_end_ns)


def _run_rule(ctx: Context, cfg: Config, rule_id: str) -> tuple[list[Hit], str | None]:
    """The rule's hits, or the error it raised."""
    try:
        return _as_list(RULES[rule_id].func(ctx, cfg.params(rule_id))), None
    except Exception as exc:  # noqa: BLE001  (one broken rule must not hide the others)
        return [], f"{type(exc).__name__}: {exc}"


def _superseded(spec: RuleSpec, chosen: list[str], cfg: Config) -> bool:
    other = spec.superseded_by
    return other is not None and other in RULES and other in chosen and cfg.enabled(other)


def _as_list(result: Hit | list[Hit] | tuple[Hit, ...] | None) -> list[Hit]:
    if result is None:
        return []
    return [result] if isinstance(result, Hit) else list(result)


def band(lost_ns: int, window_ns: int) -> str:
    """The severity a loss of `lost_ns` in a window of `window_ns` earns (`BANDS`, with the
    floors `MIN_LOST_ABOVE_LOW_NS` and `MIN_WINDOW_FOR_HIGH_NS`); exact at the boundaries
    (integers: a share of exactly 10 % is high)."""
    found = "info"
    for severity, per_10k in BANDS:
        if window_ns > 0 and lost_ns * 10_000 >= per_10k * window_ns:
            found = severity
            break
    if lost_ns < MIN_LOST_ABOVE_LOW_NS:
        found = _milder(found, "low")
    if window_ns < MIN_WINDOW_FOR_HIGH_NS:
        found = _milder(found, "medium")
    return found


def _milder(a: str, b: str) -> str:
    return max(a, b, key=SEVERITY_RANK.__getitem__)


def _finding(spec: RuleSpec, params: Params, hit: Hit, ctx: Context) -> Finding:
    # the band the cost earns, lowered (never raised) to the rule's severity and the hit's own
    for given in (spec.severity, hit.severity):
        if given is not None and given not in SEVERITIES:  # pragma: no cover (a rule's own mistake)
            raise ValueError(f"rule {spec.id}: bad severity {given!r}")
    lost = max(0, int(hit.time_lost_ns))
    severity = _milder(band(lost, ctx.window_ns), spec.severity)
    if hit.severity is not None:
        severity = _milder(severity, hit.severity)
    thresholds = {k: v for k, v in params.items() if k != "enabled"}
    return Finding(rule=spec.id, severity=severity, title=hit.title, time_lost_ns=lost, share=ctx.share(lost),
                   evidence=tuple(hit.evidence), advice=hit.advice or spec.advice, thresholds=thresholds,
                   loses=spec.loses)
