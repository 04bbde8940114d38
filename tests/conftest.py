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


@pytest.fixture(params=["c", "reference"])
def implementation(request):
    """Every pass registered with `tracekit.native` as C (skipped where the C passes are not
    built) or as its reference, for the test's duration: the parity tests take it."""
    from tracekit import native

    if request.param == native.C and not native.BUILT:
        pytest.skip("the C passes are not built (no C compiler at install)")
    with native.use(request.param):
        yield request.param


def both_ways(compute):
    """(compute() with the C passes, compute() with the references); both the references
    where the C passes are not built (for property tests, which take no fixture)."""
    from tracekit import native

    with native.use(native.C if native.BUILT else native.REFERENCE):
        got = compute()
    with native.use(native.REFERENCE):
        return got, compute()


def as_reference(compute):
    """compute() with the references alone."""
    from tracekit import native

    with native.use(native.REFERENCE):
        return compute()
