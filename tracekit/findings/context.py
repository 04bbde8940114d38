"""What rules read: the trace plus analyses computed once, on first use, and shared.

`Context` is created by `run_findings` for one trace. Its properties call the analysis
modules (`timeline`, `gaps`, `syncs`, `breakdown`, `windows`, `taxonomy`, `occupancy`,
`critical_path`, ...) lazily, so a rule that is disabled costs nothing; the pipeline's
findings step seeds every analysis it has, so that none is computed twice. The window every
`share` is measured against is the whole trace: first start to last end of the CPU slices
(profiler spans and overhead rows excluded) and the GPU work. The rules run one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any

import polars as pl

from tracekit.analysis import breakdown as _breakdown
from tracekit.analysis import gaps as _gaps
from tracekit.analysis import syncs as _syncs
from tracekit.analysis import timeline as _timeline
from tracekit.analysis import windows as _windows
from tracekit.analysis.attribution import op_paths
from tracekit.analysis.links import gpu_links, launch_ops, op_tree
from tracekit.analysis.nesting import OpTree
from tracekit.analysis.occupancy import occupancy_plan
from tracekit.analysis.taxonomy import classify_names
from tracekit.findings.model import Evidence
from tracekit.model import ENGINE, NOT_CPU_CATS, Trace

I64, STR = pl.Int64, pl.String
EVIDENCE_ROWS = 5  # rows of evidence a finding shows (the first, in its order)
# the per-launch occupancy columns the rules read (`Context.occupancy`): a launch's place
# and time for its evidence, its grid and its SM efficiency, its grid per SM and the most
# of its blocks an SM holds at once (`tiny_grids` tells persistent kernels by them)
OCCUPANCY_COLUMNS = ("eid", "name", "device", "stream", "ts_ns", "dur_ns", "grid_blocks", "sm_efficiency",
                     "grid_blocks_per_sm", "active_blocks_per_sm")


def step_bounds(trace: Trace) -> pl.DataFrame | None:
    """`ProfilerStep#N` windows (windows.BOUNDS_SCHEMA), None when the trace has none."""
    bounds = _windows.window_bounds(trace, "ProfilerStep")
    return bounds if bounds.height else None


def step_timeline(trace: Trace, bounds: pl.DataFrame | None) -> _timeline.Timeline | None:
    """Busy/idle in the profiler steps (`bounds`, from `step_bounds`); None without steps
    (`Context.step_timeline` then takes the device span's timeline)."""
    return None if bounds is None else _timeline.timeline(trace, windows=bounds, window_label="ProfilerStep")


class AnalysisFailed(RuntimeError):
    """A rule read an analysis that failed (its note says why): the rule cannot run."""


class Context:
    """One trace and its shared analyses (see the module docstring)."""

    MAY_FAIL = ("critical_path", "attention", "roofline")  # the pipeline's optional analyses

    def __init__(self, trace: Trace, *, seed: Mapping[str, Any] | None = None) -> None:
        """`seed`: analyses the caller has, by attribute name; None for one of `MAY_FAIL`
        says it failed (reading it raises `AnalysisFailed`), not that it is to be computed."""
        self.trace = trace
        self.failed: set[str] = set()
        for name, value in (seed or {}).items():
            if not isinstance(getattr(type(self), name, None), cached_property):
                raise ValueError(f"seed {name!r} is not an analysis of the findings' Context")
            if value is None and name in self.MAY_FAIL:
                self.failed.add(name)
            else:
                self.__dict__[name] = value
        parts = [trace.ops.select("cat", "ts_ns", "end_ns").filter(~pl.col("cat").is_in(NOT_CPU_CATS)).drop("cat"),
                 trace.runtime.select("ts_ns", "end_ns"), trace.gpu_work.select("ts_ns", "end_ns")]
        both = pl.concat(parts)
        first = both["ts_ns"].min() if both.height else 0
        last = both["end_ns"].max() if both.height else 0
        self.window_start_ns = int(first or 0)  # type: ignore[arg-type]
        self.window_end_ns = max(self.window_start_ns, int(last or 0))  # type: ignore[arg-type]
        self.trace_start_ns = trace.start_ns

    @property
    def window_ns(self) -> int:
        return self.window_end_ns - self.window_start_ns

    def share(self, ns: float) -> float:
        return float(ns) / self.window_ns if self.window_ns > 0 else 0.0

    # -- shared analyses ------------------------------------------------------------------
    @cached_property
    def tree(self) -> OpTree:
        """The op tree (`links.op_tree`): what op paths and the C walks derive from it is kept."""
        return op_tree(self.trace)

    @cached_property
    def nested(self) -> pl.DataFrame:
        return self.tree.frame

    @cached_property
    def launches(self) -> pl.DataFrame:
        return launch_ops(self.trace, ops=self.tree)

    @cached_property
    def gpu_links(self) -> pl.DataFrame:
        """GPU work with launch call and op (`links.gpu_links`)."""
        return gpu_links(self.trace, launches=self.launches, ops=self.tree)

    @cached_property
    def taxonomy(self) -> pl.DataFrame:
        """`taxonomy.classify_names` of every GPU name: what the rules classify names from."""
        return classify_names(self.trace.gpu["name"])

    @cached_property
    def links(self) -> pl.DataFrame:
        """GPU work with launch call and op (`gpu_links`), plus `op_path` and taxonomy."""
        links = self.gpu_links
        paths = op_paths(self.tree, links["op_eid"]).rename({"eid": "op_eid"})
        classes = classify_names(links["name"], classes=self.taxonomy)
        return links.join(paths, on="op_eid", how="left").join(classes, on="name", how="left")

    @cached_property
    def host_nested(self) -> pl.DataFrame:
        """cpu_ops, Python frames and annotations together, with depth and parent."""
        from tracekit.analysis.nesting import with_parents

        return with_parents(self.trace.ops.filter(~pl.col("cat").is_in(NOT_CPU_CATS)))

    def _not_failed(self, name: str) -> None:
        if name in self.failed:
            raise AnalysisFailed(f"needs the {name.replace('_', ' ')} analysis, which failed (see the notes)")

    @cached_property
    def attention(self) -> Any:
        """`analysis.attention.analyze_attention` on the shared op tree and launches."""
        from tracekit.analysis.attention import analyze_attention

        self._not_failed("attention")
        return analyze_attention(self.trace, ops=self.tree, launches=self.launches, links=self.gpu_links,
                                 classes=self.taxonomy)

    @cached_property
    def roofline(self) -> Any:
        """`analysis.roofline.roofline` with the device table's ceilings (`analyse()` seeds
        its own, computed with its `AnalysisOptions` peaks)."""
        from tracekit.analysis.roofline import roofline

        self._not_failed("roofline")
        return roofline(self.trace, ops=self.tree, links=self.gpu_links, classes=self.taxonomy)

    @cached_property
    def compile(self) -> Any:
        """`analysis.compile.compile_stats` (torch.compile regions, Triton kernels, recompiles)."""
        from tracekit.analysis.compile import compile_stats

        return compile_stats(self.trace, calls=self.launches, gpu=self.gpu_links)

    @cached_property
    def steps(self) -> pl.DataFrame:
        return _windows.steps(self.trace)

    @cached_property
    def step_bounds(self) -> pl.DataFrame | None:
        """`ProfilerStep#N` windows (windows.BOUNDS_SCHEMA), None when the trace has none."""
        return step_bounds(self.trace)

    @cached_property
    def timeline(self) -> _timeline.Timeline:
        return _timeline.timeline(self.trace)

    @cached_property
    def step_timeline(self) -> _timeline.Timeline:
        """Busy/idle in the profiler steps (the TB plugin's window), else the device span."""
        return step_timeline(self.trace, self.step_bounds) if self.step_bounds is not None else self.timeline

    @cached_property
    def gaps(self) -> _gaps.Gaps:
        return _gaps.gaps(self.trace, links=self.gpu_links, ops=self.tree)

    @cached_property
    def syncs(self) -> _syncs.SyncStats:
        return _syncs.sync_stats(self.trace, ops=self.tree, launches=self.launches)

    @cached_property
    def copies(self) -> _syncs.CopyStats:
        return _syncs.copy_stats(self.trace, ops=self.tree, links=self.gpu_links)

    @cached_property
    def breakdown(self) -> _breakdown.Breakdown:
        return _breakdown.breakdown(self.trace, classes=self.taxonomy)

    @cached_property
    def occupancy(self) -> pl.DataFrame:
        """Per kernel launch (`occupancy.occupancy`), the columns the rules read
        (`OCCUPANCY_COLUMNS`): from the plan, not every column of every launch."""
        return occupancy_plan(self.trace.gpu, self.trace.meta.devices).select(OCCUPANCY_COLUMNS).collect(
            engine=ENGINE)

    @cached_property
    def critical_path(self) -> Any:
        from tracekit.analysis.critical_path import critical_path

        self._not_failed("critical_path")
        return critical_path(self.trace, links=self.gpu_links, classes=self.taxonomy)

    @cached_property
    def no_launch_overhead(self) -> Any:
        """The critical path's `no_launch_overhead` what-if (None without a graph to run it on)."""
        from tracekit.analysis.whatif import no_launch_overhead

        graph = getattr(self.critical_path, "graph", None)
        return no_launch_overhead(graph) if graph is not None else None

    # -- evidence --------------------------------------------------------------------------
    def evidence(self, rows: pl.DataFrame, *, limit: int = EVIDENCE_ROWS,
                 note: pl.Expr | Callable[[dict[str, Any]], str] | None = None) -> tuple[Evidence, ...]:
        """Evidence from rows with `name`, `ts_ns`, optional `dur_ns`/`eid`, and a `lane`, or
        `device`/`stream` (GPU), or `pid`/`tid` (CPU); `note` a short note: an expression, or
        a function of the row (a dict), for notes that format times or counts."""
        if rows.is_empty():
            return ()
        if callable(note):
            rows = rows.head(limit)
            rows = rows.with_columns(pl.Series("_note", [note(r) for r in rows.iter_rows(named=True)], dtype=STR))
            note = pl.col("_note")
        cols = rows.columns
        lane = (pl.col("lane") if "lane" in cols
                else pl.format("stream {} (device {})", "stream", "device") if "stream" in cols
                else pl.format("thread {} (pid {})", "tid", "pid") if "tid" in cols else pl.lit(""))
        base = self.trace.meta.base_time_ns
        out = rows.head(limit).select(
            name=pl.col("name").fill_null("(unnamed)"), ts_ns="ts_ns",
            dur_ns=pl.col("dur_ns") if "dur_ns" in cols else pl.lit(None, I64),
            lane=lane.fill_null(""), eid=pl.col("eid") if "eid" in cols else pl.lit(None, I64),
            note=(note if note is not None else pl.lit("")).cast(STR).fill_null(""),
        )
        return tuple(
            Evidence(name=r["name"], ts_ns=r["ts_ns"], abs_ts_ns=base + r["ts_ns"],
                     rel_us=(r["ts_ns"] - self.trace_start_ns) / 1000, dur_ns=r["dur_ns"], lane=r["lane"],
                     eid=r["eid"], note=r["note"])
            for r in out.iter_rows(named=True)
        )

    def cpu_rows(self, eids: pl.Series) -> pl.DataFrame:
        """The CPU slices (ops and runtime calls) with these eids, for evidence."""
        cols = ["eid", "name", "pid", "tid", "ts_ns", "dur_ns"]
        both = pl.concat([self.trace.ops.select(cols), self.trace.runtime.select(cols)])
        return both.join(pl.DataFrame({"eid": eids.cast(I64)}).unique(), on="eid", how="semi").sort("ts_ns")
