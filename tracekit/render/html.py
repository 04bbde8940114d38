"""Report model -> one self-contained HTML file (inline CSS, SVG and script; nothing fetched).

The page's Content-Security-Policy allows only its own style block and script, by hash,
and no network at all. Every trace-derived string goes through Jinja2's autoescaping.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.bccache

# installed: tracekit/templates (pyproject maps the repository's reports/templates there);
# in a source checkout, that folder itself
TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
if not TEMPLATES.is_dir():
    TEMPLATES = Path(__file__).resolve().parents[2] / "reports" / "templates"


@lru_cache(maxsize=4)
def environment(template_cache: Path | None = None) -> jinja2.Environment:
    """The templates' environment; with `template_cache`, a folder that keeps them compiled
    (`_CompiledTemplates`), else they are compiled in memory and nothing is written."""
    loader = jinja2.FunctionLoader(_template_source)
    compiled = _CompiledTemplates(template_cache) if template_cache is not None else None
    return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                              bytecode_cache=compiled)


class _CompiledTemplates(jinja2.BytecodeCache):
    """The templates compiled to Python bytecode, kept in `folder` (the command gives
    `tracekit.cache.Cache().templates`), as Python keeps its modules' in `__pycache__`:
    compiling them takes tens of ms of each process's first report. An entry
    is keyed by the template's name and source (and Jinja's and Python's versions), so an
    edited template compiles afresh. A folder that cannot be read or written costs only
    the compiling."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            with open(self._path(bucket), "rb") as f:
                bucket.load_bytecode(f)
        except Exception:  # noqa: BLE001  (missing, unreadable or damaged: compiled afresh)
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        path = self._path(bucket)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(temp, "wb") as f:
                bucket.write_bytecode(f)
            os.replace(temp, path)  # whole or not at all, whoever else writes it
        except OSError:
            with contextlib.suppress(OSError):  # (not there, or no folder to be in)
                temp.unlink()

    def _path(self, bucket: jinja2.bccache.Bucket) -> Path:
        return self.folder / f"{bucket.key}.jinja"


def _template_source(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def csp_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


def render_page(template: str, *, template_cache: str | os.PathLike[str] | None = None, **context: Any) -> str:
    """Render a page template with the shared stylesheet and script inlined under the CSP
    (`template_cache`: a folder that keeps the templates compiled; None: nothing written)."""
    style = _template_source("report.css")
    script = _template_source("report.js")
    folder = Path(template_cache) if template_cache is not None else None
    return environment(folder).get_template(template).render(
        style=style, script=script, style_hash=csp_hash(style), script_hash=csp_hash(script), **context
    )


def render_html(report: Any, *, template_cache: str | os.PathLike[str] | None = None) -> str:
    """The report's page; its strings clipped for display (`for_display`)."""
    from tracekit.report.model import for_display

    return render_page("report.html.j2", template_cache=template_cache, report=for_display(report))
