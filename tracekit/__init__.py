"""tracekit: where transformer inference wastes GPU time, read from torch.profiler traces.

The names below are imported on first use, so `import tracekit` (and the CLI's start)
does not load Polars before the CLI has set up the memory allocator
(`tracekit.runtime`, which the library never imports).
"""

import importlib.abc
import importlib.util
import os
import sys

from tracekit.errors import TraceError, TraceFormatError, TraceTooLargeError, UsageError

__version__ = "0.1.0"

__all__ = [
    "Cache",
    "Trace",
    "TraceMeta",
    "TraceError",
    "TraceFormatError",
    "TraceTooLargeError",
    "UsageError",
    "analyse",
    "load",
    "loads",
    "load_ranks",
    "run_batch",
    "__version__",
]

_LAZY = {
    "analyse": "tracekit.pipeline",
    "Cache": "tracekit.cache",
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


class _CheckoutCapture(importlib.abc.MetaPathFinder):
    """In a source checkout, `tracekit.capture` is the repository's `capture/` folder, as the
    wheel installs it (pyproject's package-dir): one name for the capture package everywhere."""

    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "capture")

    def find_spec(self, name, path=None, target=None):
        if name != "tracekit.capture":
            return None
        return importlib.util.spec_from_file_location(name, os.path.join(self.folder, "__init__.py"),
                                                      submodule_search_locations=[self.folder])


if not os.path.isdir(os.path.join(os.path.dirname(__file__), "capture")) and os.path.isfile(
        os.path.join(_CheckoutCapture.folder, "__init__.py")):
    sys.meta_path.append(_CheckoutCapture())
