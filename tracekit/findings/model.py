"""What the findings engine returns: `Finding`, its `Evidence`, and `FindingsResult`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("high", "medium", "low", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
# what a finding's time lost is part of (`recoverable`): GPU busy time that could be shorter,
# GPU idle time, or the window's wall time (may overlap either)
LOSSES = ("gpu_work", "gpu_idle", "window")


@dataclass(frozen=True)
class Evidence:
    """One event to look at, with what it takes to find it in Perfetto or chrome://tracing."""

    name: str
    ts_ns: int  # start as written in the trace (Trace.ts_ns)
    abs_ts_ns: int  # absolute: meta.base_time_ns + ts_ns
    rel_us: float  # microseconds after the first event of the trace (Perfetto's time axis)
    dur_ns: int | None
    lane: str  # "thread <tid> (pid <pid>)" or "stream <stream> (device <device>)"
    eid: int | None = None  # index of the event in the file's event array
    note: str = ""


@dataclass(frozen=True)
class Finding:
    """One problem found by one rule."""

    rule: str
    severity: str  # high | medium | low | info
    title: str  # one line
    time_lost_ns: int  # estimated time it costs (the rule's docs say how it is estimated)
    share: float  # time_lost_ns / the window's length
    evidence: tuple[Evidence, ...]
    advice: str
    thresholds: dict[str, Any] = field(default_factory=dict)
    loses: str = "window"  # LOSSES: the time its loss is part of (the rule's `loses`)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["evidence"] = [asdict(e) for e in self.evidence]
        return d


@dataclass(frozen=True)
class Clean:
    """A rule that ran and found nothing."""

    rule: str
    text: str  # the rule's "nothing found" text


@dataclass(frozen=True)
class FindingsResult:
    """Result of `run_findings`: findings by time lost (then severity), and the clean rules."""

    findings: tuple[Finding, ...]
    clean: tuple[Clean, ...]  # rules that ran and found nothing
    ran: tuple[str, ...]  # every rule that ran, in registry order
    skipped: tuple[str, ...]  # rules disabled by the configuration
    errors: tuple[tuple[str, str], ...]  # (rule, message) for rules that failed on this trace
    window_start_ns: int
    window_end_ns: int

    @property
    def window_ns(self) -> int:
        return self.window_end_ns - self.window_start_ns

    def worst(self) -> str | None:
        """The most severe severity among the findings (None without findings)."""
        if not self.findings:
            return None
        return min((f.severity for f in self.findings), key=SEVERITY_RANK.__getitem__)

    def at_least(self, severity: str) -> list[Finding]:
        """Findings of `severity` or worse."""
        limit = SEVERITY_RANK[severity]
        return [f for f in self.findings if SEVERITY_RANK[f.severity] <= limit]

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_start_ns": self.window_start_ns, "window_end_ns": self.window_end_ns,
            "window_ns": self.window_ns, "findings": [f.to_dict() for f in self.findings],
            "clean": [asdict(c) for c in self.clean], "ran": list(self.ran), "skipped": list(self.skipped),
            "errors": [{"rule": r, "message": m} for r, m in self.errors],
            "recoverable_ns": self.recoverable().ns,
        }

    def recoverable(self) -> Any:
        """`recoverable.Recoverable` of these findings: their losses with overlaps removed."""
        from tracekit.findings.recoverable import recoverable

        return recoverable(self.findings, self.window_ns)
