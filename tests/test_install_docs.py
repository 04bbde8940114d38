"""What the docs tell users to install is this project: the distribution name and the extras.

`tracekit` on the public package index is an unrelated project, so every install line must
name this project's distribution (`tracekit-gpu`), a local path, or a named dependency.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIST = "tracekit-gpu"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# named dependencies the docs may install beside this project
OTHERS = {"torch", "flash-attn", "playwright", "chromium"}


def _pip_lines() -> list[tuple[str, str]]:
    """Every `pip install ...` command in README.md, docs/*.md and the code's install hints."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "tracekit").rglob("*.py")), *sorted((ROOT / "capture").rglob("*.py"))]
    found = []
    for path in files:
        for line in path.read_text().splitlines():
            for m in re.finditer(r"pip install ([^`#\n\"]*?)(?=`|#|\"|\)|$| &&)", line):
                found.append((path.relative_to(ROOT).as_posix(), m.group(1).strip()))
    return found


def _requirements(args: str) -> list[str]:
    """The requirement names of a pip command line's arguments (options and paths left out)."""
    names = []
    for token in shlex.split(args):
        if token.startswith(("-", ".", "/")):
            continue
        names.append(re.split(r"[\[<>=!~; ]", token, maxsplit=1)[0].lower())
    return names


def test_pyproject_names_the_free_distribution_and_keeps_the_command():
    assert PYPROJECT["project"]["name"] == DIST
    assert PYPROJECT["project"]["scripts"] == {"tracekit": "tracekit.cli.main:run"}


def test_every_install_line_names_this_distribution_never_bare_tracekit():
    lines = _pip_lines()
    assert len(lines) >= 6, lines
    for where, args in lines:
        names = _requirements(args)
        assert "tracekit" not in names, (where, args)
        assert all(n == DIST or n in OTHERS for n in names), (where, args)
    named = [args for _, args in lines if DIST in _requirements(args)]
    assert f"'{DIST}[capture]'" in {a for a in named}, named
    assert DIST in named, named


def test_install_hints_use_declared_extras():
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    for where, args in _pip_lines():
        for token in shlex.split(args):
            m = re.match(rf"{re.escape(DIST)}\[([\w,]+)\]", token)
            if m:
                assert set(m.group(1).split(",")) <= extras, (where, args)


def test_capture_extra_gives_torch_a_floor_not_a_pin():
    """An exact pin would replace a GPU box's own CUDA build of torch; the pin lives in the Makefile."""
    capture = PYPROJECT["project"]["optional-dependencies"]["capture"]
    torch = [r for r in capture if re.match(r"torch\b", r)]
    assert torch == ["torch>=2.6"], capture
    assert not any("==" in r for r in capture), capture
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install -q torch==2.13.0" in makefile
