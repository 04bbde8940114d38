"""Modules stay small enough to read in one sitting (docs/architecture.md, Habits): none of
tracekit/ or capture/ over `CEILING` lines but those in `OVER`, each at most its count there.
The list may only shrink: a listed module that grows fails, and so does one that is gone or
back under the ceiling (take it off the list)."""

from __future__ import annotations

from pathlib import Path

CEILING = 400
# module (path from the repository root) -> its line count when it was listed
OVER: dict[str, int] = {}

ROOT = Path(__file__).resolve().parents[1]


def _counts() -> dict[str, int]:
    files = [p for pkg in ("tracekit", "capture") for p in (ROOT / pkg).rglob("*.py")]
    return {p.relative_to(ROOT).as_posix(): len(p.read_bytes().splitlines()) for p in files}


def test_no_module_grows_over_the_ceiling():
    counts = _counts()
    over = {m: n for m, n in counts.items() if n > max(CEILING, OVER.get(m, 0))}
    assert not over, f"over {CEILING} lines (split by meaning; see docs/architecture.md): {over}"


def test_the_list_only_shrinks():
    counts = _counts()
    stale = {m: counts.get(m) for m in OVER if counts.get(m, 0) <= CEILING}
    assert not stale, f"gone or under {CEILING} lines now, take off OVER: {stale}"
