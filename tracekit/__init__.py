"""tracekit: where transformer inference wastes GPU time, read from torch.profiler traces.

The names below are imported on first use, so `import tracekit` (and the CLI's start)
does not load Polars before the CLI has set up the memory allocator
(`tracekit.runtime`, which the library never imports).
"""

from tracekit.errors import TraceError, TraceFormatError, TraceTooLargeError, UsageError

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

_LAZY = {
    "load": "tracekit.loader",
    "loads": "tracekit.loader",
    "load_ranks": "tracekit.loader",
    "Trace": "tracekit.model",
    "TraceMeta": "tracekit.model",
    "run_batch": "tracekit.batch",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
