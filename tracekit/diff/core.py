"""`diff(before, after) -> TraceDiff`: two analyses aligned by profiler step, compared figure by figure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.pipeline import Analysis, analyse
from tracekit.diff import extras, stats, tables
from tracekit.diff.caveats import Change, configuration
from tracekit.diff.extras import Side
from tracekit.diff.similarity import Similarity, similarity
from tracekit.diff.profile import Profile, has_steps, profile
from tracekit.diff.verdict import verdict_parts
from tracekit.errors import UsageError
from tracekit.model import Trace

METRIC_FIGURES = {"step": "step_ns", "gpu-busy": "gpu_busy_ns"}


@dataclass(frozen=True)
class Headline:
    """The figure `--metric` names, per side: medians over the samples, and the change."""

    metric: str  # step | gpu-busy | window:NAME
    label: str  # what it measures, in words
    before_ns: float
    after_ns: float
    delta_ns: float  # after - before
    delta_pct: float | None  # delta / before (a fraction here, a percent in `to_dict`); None when before is 0
    noise_ns: float  # the two sides' half-spreads that face each other, summed (stats module docstring)
    significant: bool | None  # |delta| > noise; None with fewer than 2 samples on a side
    n_before: int
    n_after: int

    def regressed(self, pct: float) -> bool:
        """True when after is slower than before by more than `pct` percent (raw threshold)."""
        if self.delta_pct is None:
            return self.after_ns > self.before_ns
        return self.delta_pct * 100 > pct

    def fails(self, pct: float, *, raw: bool = False) -> bool:
        """The gate: slower by more than `pct` percent *and* beyond the noise; `raw` ignores
        the noise. With one sample on a side the noise is unknown and the raw threshold decides."""
        return self.regressed(pct) and (raw or self.significant is not False)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: `delta_pct` in percent, as `--fail-if-slower PCT` reads it."""
        return vars(self) | {"delta_pct": None if self.delta_pct is None else self.delta_pct * 100}


@dataclass(frozen=True)
class TraceDiff:
    """Everything that changed between two traces. Frames: see `docs/diff.md` and each builder."""

    before: Side
    after: Side
    scope: str  # steps | gpu-span: what one sample is
    headline: Headline
    summary: pl.DataFrame  # per per-step figure: medians, quartiles, min/max, delta, noise, significant
    kernels: pl.DataFrame  # per matched kernel: per-step count/time, mean per call, status, match
    kernel_classes: pl.DataFrame
    ops: pl.DataFrame
    launches: pl.DataFrame
    syncs: pl.DataFrame
    copies: pl.DataFrame
    windows: pl.DataFrame  # per annotation kind
    attention: pl.DataFrame  # per side: backend, calls, kernels and GPU time per call
    critical_path: pl.DataFrame  # per side: verdict
    findings: pl.DataFrame  # per rule: introduced / resolved / persisting
    comparable: bool  # the workloads are alike (`similarity`): a delta between them means something
    notes: tuple[str, ...]
    verdict: str
    similarity: Similarity | None = None
    same_hardware: bool = True  # same device names on both sides
    changes: tuple[Change, ...] = ()  # configuration changes (`caveats`)
    verdict_parts: tuple[str, ...] = ()  # the verdict's sentences (`verdict.verdict_parts`)

    @property
    def comparable_reason(self) -> str | None:
        return self.similarity.reason if self.similarity is not None else None

    @property
    def idle(self) -> pl.DataFrame:
        """Idle time per cause (rows of `summary`)."""
        return self.summary.filter(pl.col("figure").str.starts_with("idle_")).with_columns(
            cause=pl.col("figure").str.strip_prefix("idle_").str.strip_suffix("_ns"))

    @property
    def breakdown(self) -> pl.DataFrame:
        """The temporal breakdown per step (rows of `summary`)."""
        return self.summary.filter(pl.col("figure").is_in(["compute_ns", "communication_ns", "memory_ns",
                                                            "gpu_idle_ns", "step_ns"]))

    @property
    def appeared(self) -> pl.DataFrame:
        return self.kernels.filter(pl.col("status") == "appeared")

    @property
    def disappeared(self) -> pl.DataFrame:
        return self.kernels.filter(pl.col("status") == "disappeared")

    def regressed(self, pct: float) -> bool:
        return self.headline.regressed(pct)

    def to_dict(self, *, limit: int = 200) -> dict[str, Any]:
        frames = ("summary", "kernels", "kernel_classes", "ops", "launches", "syncs", "copies", "windows",
                  "attention", "critical_path", "findings")
        out: dict[str, Any] = {"before": self.before.to_dict(), "after": self.after.to_dict(), "scope": self.scope,
                               "headline": self.headline.to_dict(), "comparable": self.comparable,
                               "comparable_reason": self.comparable_reason, "same_hardware": self.same_hardware,
                               "similarity": self.similarity.to_dict() if self.similarity else None,
                               "configuration_changes": [vars(c) for c in self.changes],
                               "notes": list(self.notes), "verdict": self.verdict}
        out.update({name: getattr(self, name).head(limit).to_dicts() for name in frames})
        return out


def diff(before: Analysis | Trace, after: Analysis | Trace, *, metric: str = "step") -> TraceDiff:
    """Compare two traces (or their analyses) step by step; `metric`: step | gpu-busy | window:NAME."""
    check_metric(metric)
    b = before if isinstance(before, Analysis) else analyse(before)
    a = after if isinstance(after, Analysis) else analyse(after)
    scope = "steps" if has_steps(b) and has_steps(a) else "gpu-span"
    pb, pa = profile(b, scope=scope), profile(a, scope=scope)
    sb, sa = extras.side(b, steps=pb.windows.height), extras.side(a, steps=pa.windows.height)
    summary = tables.summary(pb, pa)
    head = _headline(metric, summary, pb, pa, sb, sa)
    parts = {
        "summary": summary, "kernels": tables.kernels(pb, pa), "kernel_classes": tables.kernel_classes(pb, pa),
        "ops": tables.ops(pb, pa), "launches": tables.launches(pb, pa), "syncs": tables.syncs(pb, pa),
        "copies": tables.copies(pb, pa), "windows": tables.windows(pb, pa), "attention": extras.attention(b, a),
        "critical_path": extras.critical_path(b, a), "findings": extras.findings(b, a),
    }
    same_hardware, notes = extras.comparability(sb, sa, scope=scope)
    sim = similarity(pb, pa)
    changes = configuration(b, a, sb, sa, parts["attention"])
    sentences = verdict_parts(head, scope=scope, notes=notes, similar=sim, changes=changes, **parts)
    return TraceDiff(before=sb, after=sa, scope=scope, headline=head, **parts, comparable=sim.comparable,
                     notes=tuple(notes), verdict=" ".join(sentences), verdict_parts=tuple(sentences), similarity=sim, same_hardware=same_hardware,
                     changes=tuple(changes))


def check_metric(metric: str) -> None:
    if metric in METRIC_FIGURES or (metric.startswith("window:") and len(metric) > len("window:")):
        return
    raise UsageError(f"unknown metric {metric!r}: use step, gpu-busy or window:NAME")


def _headline(metric: str, summary: pl.DataFrame, pb: Profile, pa: Profile, sb: Side, sa: Side) -> Headline:
    if metric in METRIC_FIGURES:
        row = summary.filter(pl.col("figure") == METRIC_FIGURES[metric]).row(0, named=True)
        label = "step time" if metric == "step" else "GPU busy time per step"
        if pb.scope != "steps":
            label = "GPU span" if metric == "step" else "GPU busy time"
    else:
        name = metric.removeprefix("window:")
        row = _window_row(name, pb, pa, sb, sa)
        label = f"{name} time"
    return Headline(metric=metric, label=label, before_ns=float(row["before"]), after_ns=float(row["after"]),
                    delta_ns=float(row["delta"]), delta_pct=row["delta_pct"], noise_ns=float(row["noise"]),
                    significant=row["significant"], n_before=int(row["n_before"]), n_after=int(row["n_after"]))


def _window_row(name: str, pb: Profile, pa: Profile, sb: Side, sa: Side) -> dict[str, Any]:
    sides = []
    for p, s in ((pb, sb), (pa, sa)):
        samples = tables.window_samples(p, name)
        if samples.is_empty():
            raise UsageError(f"no annotation window matches {name!r} in {s.label}")
        sides.append(stats.summarise(samples, [], ["cpu_ns"]))
    out = stats.compare(sides[0], sides[1], [], ["cpu_ns"])
    return {k.removeprefix("cpu_ns_"): v for k, v in out.row(0, named=True).items()}
