"""mypy on tracekit, as `[tool.mypy]` in pyproject.toml configures it: strict on the model and
the report model, the default checks on every other module but those listed as not yet typed
(a list that may only shrink). Skipped where mypy is not installed (it is in the `dev` extra)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STRICT = {"tracekit.model", "tracekit.report.model", "tracekit.pipeline", "tracekit.pipeline.*"}


def _overrides() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]


def test_the_strict_modules_are_strict_and_checked():
    strict = next(o for o in _overrides() if o.get("disallow_untyped_defs"))
    assert STRICT <= set(strict["module"])
    ignored = {m for o in _overrides() if o.get("ignore_errors") for m in o["module"]}
    assert not STRICT & ignored


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (pip install -e '.[dev]')")
def test_mypy_passes():
    # the cache (.mypy_cache, ignored by git) spares a second run the reading of Polars' stubs
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache")],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
