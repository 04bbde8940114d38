"""Report model -> one self-contained HTML file (inline CSS, SVG and script; nothing fetched).

The page's Content-Security-Policy allows only its own style block and script, by hash,
and no network at all. Every trace-derived string goes through Jinja2's autoescaping.
"""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache
from typing import Any

import jinja2

from reports import TEMPLATES


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    loader = jinja2.FunctionLoader(_template_source)
    return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def _template_source(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def csp_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


def render_page(template: str, **context: Any) -> str:
    """Render a page template with the shared stylesheet and script inlined under the CSP."""
    style = _template_source("report.css")
    script = _template_source("report.js")
    return environment().get_template(template).render(
        style=style, script=script, style_hash=csp_hash(style), script_hash=csp_hash(script), **context
    )


def render_html(report: Any) -> str:
    return render_page("report.html.j2", report=report)
