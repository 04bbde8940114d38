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
    "__version__",
]
