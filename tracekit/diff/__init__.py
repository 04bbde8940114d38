"""Trace diff for code reviews: what changed between a before and an after trace.

`diff(before, after, metric="step") -> TraceDiff` (`core`). The two traces are aligned by
profiler step: every figure becomes one sample per counted step (warm-up excluded) on each
side, compared by its median, so traces with different step counts compare; traces
without steps are compared over their whole GPU span (`profile`). Kernels are matched by a
normalised name (`names`); each delta is marked significant only when it is larger than
the step-to-step spread of both sides (`stats`). `report.build_diff_report` turns a
`TraceDiff` into the report model the HTML, Markdown and JSON renderers read.
"""

from __future__ import annotations

from tracekit.diff.core import Headline, TraceDiff, diff
from tracekit.diff.extras import HARDWARE_NOTE, Side
from tracekit.diff.names import kernel_base, kernel_key, op_key

__all__ = ["HARDWARE_NOTE", "Headline", "Side", "TraceDiff", "diff", "kernel_base", "kernel_key", "op_key"]
