"""tracekit capture: record torch.profiler traces of transformer inference.

This package imports torch and transformers only when a capture runs, and never imports
`tracekit`: capture and analysis share nothing but the trace file format.

Python API (see docs/capture.md):

- `profile(path, metadata=None, model=None, ...)`: context manager around your own code;
- `capture_model(CaptureSettings(...), path)`: one trace of a preset or local model;
- `run_sweep(settings, out_dir, variants)`: one trace per attention implementation + index.json;
- `run_attention_variants(out_dir, ...)`: the attention-variants scenario;
- `available()`: None when torch and transformers are installed, else what to install.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from .errors import CaptureError
from .settings import CaptureSettings

__all__ = [
    "CaptureError",
    "CaptureSettings",
    "available",
    "capture_model",
    "profile",
    "run_attention_variants",
    "run_sweep",
]

INSTALL_HINT = "pip install 'tracekit-gpu[capture]'"


def available(need: tuple[str, ...] = ("torch", "transformers")) -> str | None:
    """Return None when the packages in `need` import, else a one-line install message."""
    missing = [name for name in need if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"tracekit capture needs {' and '.join(missing)} (not installed): {INSTALL_HINT}"


def profile(*args: Any, **kwargs: Any) -> Any:
    """Context manager writing a trace of its body; see `capture.session.profile`."""
    from .session import profile as session_profile

    return session_profile(*args, **kwargs)


def capture_model(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Capture one model trace; see `capture.workload.capture_model`."""
    from .workload import capture_model as run

    return run(*args, **kwargs)


def run_sweep(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """Capture one trace per attention implementation; see `capture.workload.run_sweep`."""
    from .workload import run_sweep as run

    return run(*args, **kwargs)


def run_attention_variants(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """Run the attention-variants scenario; see `capture.scenarios.run_attention_variants`."""
    from .scenarios import run_attention_variants as run

    return run(*args, **kwargs)
