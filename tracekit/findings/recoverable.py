"""The time recoverable: what the findings, taken together, say is lost, each moment once.

Findings can count the same time: the fusible chains hold the copies `hidden_copy` names,
`launch_bound`'s gaps are among `gpu_gaps`'. Findings carry no intervals, so overlaps are
removed by what each loss is part of (the rule's `loses`, `model.LOSSES`): GPU busy time
(`gpu_work`) and GPU idle time (`gpu_idle`) never overlap each other, but two findings of one
kind may, and wall time (`window`) may overlap either. So

    recoverable = min(window, max(largest window loss, largest gpu_work + largest gpu_idle))

each loss first capped at the window. It is never less than the largest single finding and
never more than the sum of them all (docs/findings.md, "Time recoverable"). This is the one
place it is computed: the report's cards and `findings --json` read it from here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tracekit import format as fmt
from tracekit.findings.model import LOSSES, Finding

LOSS_WORDS = {"gpu_work": "GPU work", "gpu_idle": "GPU idle time", "window": "wall time"}


@dataclass(frozen=True)
class Recoverable:
    ns: int  # the time recoverable (the module docstring)
    top_ns: int  # the largest single finding's loss (capped at the window)
    top_rule: str | None
    sum_ns: int  # every finding's loss, added (capped each at the window)
    count: int  # findings that lose time
    largest: dict[str, tuple[int, str]]  # per kind of loss: (the largest loss, its rule)
    parts: tuple[str, ...]  # the kinds whose largest losses make up `ns`, largest first

    def sentence(self) -> str:
        """How `ns` relates to the top finding and to the sum, in words."""
        if not self.count:
            return "no finding loses time"
        every = (f"; the {self.count} findings add up to {fmt.ns(self.sum_ns)}, but findings that lose the same kind "
                 "of time may count it twice" if self.count > 1 and self.sum_ns > self.ns else "")
        if len(self.parts) < 2:
            return f"the top finding ({self.top_rule}, {fmt.ns(self.top_ns)}) alone{every}"
        terms = " + ".join(f"{fmt.ns(self.largest[k][0])} of {LOSS_WORDS[k]} ({self.largest[k][1]})"
                           for k in self.parts)
        return f"the largest loss of each kind that cannot overlap: {terms}{every}"


def recoverable(findings: Iterable[Finding], window_ns: int) -> Recoverable:
    """`Recoverable` of these findings in a window of `window_ns` (see the module docstring)."""
    window = max(0, int(window_ns))
    largest: dict[str, tuple[int, str]] = {}
    total = count = 0
    top: tuple[int, str | None] = (0, None)
    for f in findings:
        lost = min(max(0, int(f.time_lost_ns)), window)
        if not lost:
            continue
        kind = f.loses if f.loses in LOSSES else "window"
        count += 1
        total += lost
        if lost > largest.get(kind, (0, ""))[0]:
            largest[kind] = (lost, f.rule)
        if lost > top[0]:
            top = (lost, f.rule)
    disjoint = [k for k in ("gpu_work", "gpu_idle") if k in largest]
    both = sum(largest[k][0] for k in disjoint)
    alone = largest.get("window", (0, ""))[0]
    parts = disjoint if both > alone else (["window"] if alone else [])
    parts.sort(key=lambda k: -largest[k][0])
    return Recoverable(ns=min(window, max(both, alone)), top_ns=top[0], top_rule=top[1], sum_ns=total, count=count,
                       largest=largest, parts=tuple(parts))
