"""`analyse(trace) -> Analysis`: every analysis of one trace, by one ordered list of steps.

The steps (`steps.STEPS`) and their engine (`run`) are the only orchestration there is:
reports, summaries, diffs and batches all read the `Analysis` this returns. Nothing here
formats, prints or changes the process (allocators, collector, threads left running).
"""

from __future__ import annotations

from collections.abc import Sequence

from tracekit.model import Trace
from tracekit.pipeline.result import Analysis, AnalysisOptions
from tracekit.pipeline.run import Plan, Progress, Runner, Step, Threaded, sequential
from tracekit.pipeline.steps import STEPS

__all__ = ["Analysis", "AnalysisOptions", "Plan", "Progress", "Runner", "STEPS", "Step", "Threaded", "analyse",
           "run_steps", "sequential"]


def analyse(trace: Trace, *, options: AnalysisOptions | None = None, progress: Progress | None = None,
            runner: Runner | None = None) -> Analysis:
    """Run every step on `trace` (pure: the trace is not modified).

    progress: called as `progress(name, done, total)` as each step ends, from the thread
        that ran it. runner: when each step starts (default `sequential`; `Threaded(2)`
        uses a second core, which the `tracekit` command passes where memory allows)."""
    opts = options or AnalysisOptions()
    plan = run_steps(trace, opts, STEPS, progress=progress, runner=runner)
    fields = {s.name: plan.results[s.name] for s in STEPS if s.kept}
    return Analysis(trace=trace, options=opts, notes=plan.notes, **fields)


def run_steps(trace: Trace, options: AnalysisOptions, steps: Sequence[Step], *, progress: Progress | None = None,
              runner: Runner | None = None) -> Plan:
    """Run `steps` (each after those it needs) and return the plan with the kept results."""
    plan = Plan(trace, options, steps, progress)
    (runner or sequential)(plan)
    return plan
