"""Headless Chromium for the page tests (Debian's chromium driven by playwright).

`open_page(path)` yields (page, console_errors, network_requests); the test is skipped with
a message saying what to install when Chromium or playwright is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("TRACEKIT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-sync", "--disable-quic"]
OUTPUT = Path(__file__).resolve().parents[1] / "test-output"


def require_browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser tests need playwright: pip install playwright (and apt-get install chromium)")
    if not Path(CHROMIUM).exists():
        pytest.skip("browser tests need Chromium: apt-get install chromium (Debian), or set TRACEKIT_CHROMIUM")
    return sync_playwright


@contextlib.contextmanager
def open_page(path: Path, *, width: int = 1400, height: int = 1000):
    sync_playwright = require_browser()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            errors: list[str] = []
            requests: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            url = Path(path).resolve().as_uri()
            page.on("request", lambda r: requests.append(r.url) if r.url != url else None)
            page.goto(url)
            page.wait_for_load_state("load")
            yield page, errors, requests
        finally:
            browser.close()


def screenshot(page, name: str) -> Path:
    OUTPUT.mkdir(exist_ok=True)
    out = OUTPUT / name
    page.screenshot(path=str(out), full_page=True)
    return out


def broken_cells(page, selector: str = "td.num, td.label") -> list[str]:
    """The texts of the cells matching `selector` that the page lays out on more than one
    line (figures and short labels must not break)."""
    lines = page.locator(selector).evaluate_all(
        "cells => cells.map(c => { const r = document.createRange(); r.selectNodeContents(c);"
        " return [c.textContent, new Set([...r.getClientRects()].map(b => Math.round(b.top))).size]; })")
    assert lines, f"no cells match {selector!r}"
    return [text for text, n in lines if n > 1]
