"""What `analyse()` returns: every analysis of one trace, typed, computed once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracekit.analysis.attention.result import AttentionResult
from tracekit.analysis.attribution import Attribution
from tracekit.analysis.breakdown import Breakdown
from tracekit.analysis.compile import CompileStats
from tracekit.analysis.critical_path import CriticalPath
from tracekit.analysis.defaults import DEFAULT_MIN_GAP_NS
from tracekit.analysis.gaps import Gaps
from tracekit.analysis.launches import LaunchStats
from tracekit.analysis.memory import MemoryStats
from tracekit.analysis.roofline import RooflineResult
from tracekit.analysis.syncs import CopyStats, SyncStats
from tracekit.analysis.timeline import Timeline
from tracekit.analysis.whatif import WhatIf
from tracekit.analysis.windows import Windows
from tracekit.findings.model import FindingsResult
from tracekit.model import Trace


@dataclass(frozen=True)
class AnalysisOptions:
    """What changes the figures (and so keys the analysis cache); how the steps are
    scheduled is not an option but a runner (`analyse(runner=)`)."""

    min_gap_ns: int = DEFAULT_MIN_GAP_NS
    findings_config: dict[str, Any] = field(default_factory=dict)
    peak_tflops: float | None = None
    peak_gbps: float | None = None
    keep_graph: bool = False  # keep `critical_path.graph` (the whole dependency graph) in the result


@dataclass(frozen=True)
class Analysis:
    """One field per kept step of `pipeline.steps.STEPS`. The optional analyses are None
    (and say why in `notes`) when they failed: one analysis failing never loses the others."""

    trace: Trace
    options: AnalysisOptions
    timeline: Timeline
    breakdown: Breakdown
    gaps: Gaps
    windows: Windows
    steps: Windows  # the `ProfilerStep#N` windows alone
    attribution: Attribution
    launches: LaunchStats
    syncs: SyncStats
    copies: CopyStats
    memory: MemoryStats
    compile: CompileStats
    kernels: pl.DataFrame  # taxonomy.kernel_table
    classes: pl.DataFrame  # taxonomy.class_table
    tensor_core_share: float | None
    occupancy: pl.DataFrame  # occupancy.occupancy_table
    critical_path: CriticalPath | None = None
    findings: FindingsResult | None = None
    attention: AttentionResult | None = None
    roofline: RooflineResult | None = None
    whatifs: list[WhatIf] = field(default_factory=list)  # whatif.standard() on the critical path's graph
    notes: list[str] = field(default_factory=list)  # analyses that could not run, and why
