"""Built-in rules. Every module in this package is imported by `tracekit.findings`, so a new
module here (e.g. `attention.py`, `roofline.py`) registers its rules just by existing."""

from __future__ import annotations

import importlib
import pkgutil


def load_all() -> list[str]:
    """Import every module of this package; returns their names."""
    names = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    for name in sorted(names):
        importlib.import_module(f"{__name__}.{name}")
    return names
