"""tracekit: where transformer inference wastes GPU time, read from torch.profiler traces."""

from tracekit.errors import TraceError, TraceFormatError, TraceTooLargeError, UsageError
from tracekit.loader import load, load_ranks, loads
from tracekit.model import Trace, TraceMeta

__version__ = "0.1.0"

__all__ = [
    "Trace",
    "TraceMeta",
    "TraceError",
    "TraceFormatError",
    "TraceTooLargeError",
    "UsageError",
    "load",
    "loads",
    "load_ranks",
    "run_batch",
    "__version__",
]


def __getattr__(name: str):
    """`tracekit.run_batch`, imported on first use (it pulls in the report and batch code)."""
    if name == "run_batch":
        from tracekit.batch import run_batch

        return run_batch
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
