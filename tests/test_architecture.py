"""The layering of docs/architecture.md, checked on the source: every `import` of every module
of tracekit/ and capture/ (function-level and type-only ones too) must go down the layers or stay in its own layer.

A new import against the table fails here. Today's exceptions are listed in `EXCEPTIONS`, each
with why it still exists; one that is gone fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# module prefix -> layer (the longest prefix wins)
LAYER_OF = {
    "tracekit": "base",  # the package root: the errors, and the API's names imported lazily
    "tracekit.errors": "base",
    "tracekit.format": "base",
    "tracekit.model": "base",
    "tracekit.atomic": "base",
    "tracekit.sizes": "base",
    "tracekit.runtime": "runtime",
    "tracekit.cache": "cache",  # beside the layers: loads and analyses through its folder
    "tracekit.native": "native",  # the C parts and the one choice of C or reference
    "tracekit.loader": "loader",
    "tracekit.analysis": "analysis",
    "tracekit.info": "analysis",
    "tracekit.findings": "findings",
    "tracekit.findings.annotate": "render",  # writes the trace back with the findings: an output
    "tracekit.pipeline": "pipeline",
    "tracekit.report": "report",
    "tracekit.render": "render",
    "tracekit.diff": "diff",
    "tracekit.batch": "batch",
    "tracekit.cli": "cli",
    "tracekit.__main__": "cli",
    "tracekit.capture": "capture",  # the repository's capture/, installed as tracekit.capture
}

_UNDER_RENDER = {"base", "analysis", "findings", "pipeline", "report"}
# layer -> the layers its modules may import (its own included); docs/architecture.md's table
ALLOWED = {
    "base": {"base"},
    "runtime": {"base", "pipeline", "runtime"},  # (chooses the pipeline's runner for the command)
    "cache": {"base", "loader", "pipeline", "cache"},
    "native": {"base", "native"},
    "loader": {"base", "native", "loader"},
    "analysis": {"base", "native", "analysis"},
    "findings": {"base", "analysis", "findings"},
    "pipeline": {"base", "analysis", "findings", "pipeline"},
    "report": {"base", "native", "analysis", "findings", "pipeline", "report"},
    "render": _UNDER_RENDER | {"render"},
    "diff": _UNDER_RENDER | {"loader", "render", "diff"},
    "batch": _UNDER_RENDER | {"cache", "loader", "render", "batch"},
    "cli": set(LAYER_OF.values()),
    "capture": {"capture"},
}

# Today's imports against the table: (importer, imported) -> why it still exists (and what
# removes it). Never add to this list: change the design or the table (and the doc) instead.
EXCEPTIONS = {
    # annotate copies the original file byte for byte, opened as the loader opens it (gzip,
    # size limit); goes when opening a file is a module of its own below the loader
    ("tracekit.findings.annotate", "tracekit.loader.source"): "read_source re-reads the input",
    # annotate re-reads the events as raw JSON and skips the ones the loader skips (not valid
    # JSON); goes with the module above, when reading events is a layer below both
    ("tracekit.findings.annotate", "tracekit.loader.events"): "empties deep args as the loader does",
    ("tracekit.findings.annotate", "tracekit.loader.skip"): "skips invalid events as the loader does",
}

# `capture` (needs torch) is reached only through this lazy command
CAPTURE_IMPORTERS = {"tracekit.cli.capture"}
FORBIDDEN_ANYWHERE = ("torch", "transformers")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "capture":  # (pyproject's package-dir)
        parts.insert(0, "tracekit")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in ("tracekit", "capture") for p in sorted((ROOT / pkg).rglob("*.py"))}


MODULES = _modules()


@cache
def imports(path: Path) -> frozenset[str]:
    """Every module `path` imports, at any depth of its code: `from a import b` counts as
    `a.b` where that is a module, else as `a`; relative imports resolved."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.add(sub if sub in MODULES else source)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")):
            found.add(node.args[0].value)
    return frozenset(found)


def layer(module: str) -> str | None:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        hit = LAYER_OF.get(".".join(parts[:n]))
        if hit:
            return hit
    return None


def _against_the_table() -> dict[tuple[str, str], str]:
    out = {}
    for name, path in MODULES.items():
        own = layer(name)
        for target in imports(path):
            other = layer(target)
            if other is not None and other not in ALLOWED[own]:
                out[(name, target)] = f"{own} -> {other}"
    return out


def test_every_module_has_a_layer():
    assert not [m for m in MODULES if layer(m) is None]


def test_no_import_against_the_layers():
    found = _against_the_table()
    new = {k: v for k, v in found.items() if k not in EXCEPTIONS}
    assert not new, "imports against docs/architecture.md's table:\n" + "\n".join(
        f"  {a} imports {b} ({why})" for (a, b), why in sorted(new.items()))


def test_the_exceptions_still_exist():
    """An exception that was fixed comes off the list (so it cannot come back unnoticed)."""
    gone = sorted(set(EXCEPTIONS) - set(_against_the_table()))
    assert not gone, f"fixed, remove from EXCEPTIONS: {gone}"


def test_only_the_cli_and_batch_use_the_cache():
    """The library's `load` and `analyse` know nothing of the cache: it calls them."""
    users = {own for own, allowed in ALLOWED.items() if "cache" in allowed} - {"cache"}
    assert users == {"batch", "cli"}
    hits = sorted({layer(m) for m, p in MODULES.items() for t in imports(p) if layer(t) == "cache"} - {"cache"})
    assert hits == ["batch", "cli"]


def test_no_torch_in_tracekit():
    hits = sorted((m, t) for m, p in MODULES.items() if layer(m) != "capture"
                  for t in imports(p) if t.split(".")[0] in FORBIDDEN_ANYWHERE)
    assert not hits


def test_capture_is_reached_only_from_its_command():
    hits = sorted(m for m, p in MODULES.items() if layer(m) != "capture"
                  and any(layer(t) == "capture" for t in imports(p)))
    assert hits == sorted(CAPTURE_IMPORTERS)


def test_capture_stands_apart():
    """capture/ writes files the loader reads; it imports nothing of tracekit's."""
    hits = sorted((m, t) for m, p in MODULES.items() if layer(m) == "capture"
                  for t in imports(p) if t.split(".")[0] == "tracekit" and layer(t) != "capture")
    assert not hits


# C sources: `#include "x"` of another package's file -> why it still exists (none: every C
# source and the Arrow header they share are in tracekit/native/)
C_EXCEPTIONS: dict[tuple[str, str], str] = {}


def test_c_sources_include_only_their_own_package():
    found = {}
    for source in sorted((ROOT / "tracekit").rglob("*.[ch]")):
        for included in re.findall(r'^\s*#\s*include\s+"([^"]+)"', source.read_text(), re.MULTILINE):
            target = (source.parent / included).resolve()
            if target.parent != source.parent:
                found[(str(source.relative_to(ROOT)), str(target.relative_to(ROOT)))] = "include"
    assert set(found) == set(C_EXCEPTIONS), sorted(found)
