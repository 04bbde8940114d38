"""Shared test fixtures: where the real traces are, and a skip when they are absent."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = (ROOT / ".." / "shared" / "traces").resolve()
sys.path.insert(0, str(Path(__file__).resolve().parent))


def real_trace(name: str) -> Path:
    """Path of a real trace under ../shared/traces; skips the test when it is absent."""
    path = SHARED_TRACES / name
    if not path.exists():
        pytest.skip(f"real trace {name} not found (../shared/traces is absent)")
    return path


def all_real_traces() -> list[Path]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(p for p in SHARED_TRACES.rglob("*.json*") if p.is_file())


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces is absent")
    return SHARED_TRACES


@pytest.fixture(autouse=True, scope="session")
def _cache_outside_home(tmp_path_factory):
    """The CLI caches loaded traces by default: keep the suite's entries out of ~/.cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    yield
    mp.undo()
