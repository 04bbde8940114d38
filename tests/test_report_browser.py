"""The report in real headless Chromium: no console errors, no network, working tables."""

from __future__ import annotations

import pytest
from browser import broken_cells, open_page, require_browser, screenshot
from conftest import SHARED_TRACES
from report_fixtures import decode_trace

import tracekit
from tracekit.render.html import render_html
from tracekit.report.build import build_report

pytestmark = pytest.mark.browser


def _write_report(trace, path):
    path.write_text(render_html(build_report(trace)), encoding="utf-8")
    return path


def _check_page(path, shot: str):
    with open_page(path) as (page, errors, requests):
        assert errors == []
        assert requests == []
        lanes = page.locator("svg.timeline g.lane")
        assert lanes.count() >= 2
        assert page.locator("svg.timeline rect").count() > 10
        assert broken_cells(page) == []  # figures ("92.3 µs") and labels ("launch-bound (CPU late)") on one line
        # sorting: click the numeric "total" header of the kernels table twice -> ascending
        header = page.locator("#kernels thead th", has_text="total").first
        header.click()
        header.click()
        values = [float(v) for v in page.locator("#kernels tbody tr td:nth-child(6)").evaluate_all(
            "cells => cells.map(c => c.getAttribute('data-v'))")]
        assert values == sorted(values) and len(values) >= 2
        # filtering hides rows that do not match
        box = page.locator('input.filter[data-table="kernels"]')
        if box.count():
            box.fill("zzz-no-such-kernel")
            assert page.locator("#kernels tbody tr:not([hidden])").count() == 0
        assert screenshot(page, shot).stat().st_size > 10_000
        assert errors == [] and requests == []


def test_generated_trace_report_in_browser(tmp_path):
    require_browser()
    trace = decode_trace(4).load(tmp_path)
    _check_page(_write_report(trace, tmp_path / "report.html"), "report-generated.png")


def test_real_qwen_report_in_browser(tmp_path):
    require_browser()
    path = SHARED_TRACES / "h100_qwen15_05b_hf_inference.json.gz"
    if not path.exists():
        pytest.skip("../shared/traces is absent")
    _check_page(_write_report(tracekit.load(path), tmp_path / "qwen.html"), "report-qwen.png")
