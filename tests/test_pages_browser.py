"""What a reader sees first, in real headless Chromium: the report of the shipped GPU trace,
the diff page of the DLRM pair and a rank group's page. Each page loads with no console
error and no network request; its first screen (the 1400x1000 viewport) says what matters;
a screenshot of it goes to test-output/."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import open_page, require_browser
from conftest import real_trace
from test_ranks import write_skewed_job

from tracekit.batch import run_batch
from tracekit.cli.main import main

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "traces" / "gpu" / "h100-qwen1.5-0.5b-sdpa.json.gz"
OUTPUT = ROOT / "test-output"
FIRST_SCREEN_TEXT = """() => {
  const out = [], walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n; (n = walk.nextNode());) {
    const r = document.createRange(); r.selectNodeContents(n); const b = r.getBoundingClientRect();
    if (b.height > 0 && b.bottom > 0 && b.top < window.innerHeight && n.textContent.trim()) out.push(n.textContent.trim());
  }
  return out.join("\\n");
}"""


def _first_screen(page: Path, shot: str) -> str:
    """The text laid out in the first screen of `page`, after checking it loads cleanly."""
    with open_page(page) as (tab, errors, requests):
        text = tab.evaluate(FIRST_SCREEN_TEXT)
        OUTPUT.mkdir(exist_ok=True)
        tab.screenshot(path=str(OUTPUT / shot))
        assert (OUTPUT / shot).stat().st_size > 10_000
        assert errors == [] and requests == []
    return text


def test_report_first_screen_says_utilisation_verdict_attention_and_findings(tmp_path):
    require_browser()
    out = tmp_path / "report.html"
    assert main(["report", str(DEMO), "-o", str(out), "--no-cache"]) == 0
    text = _first_screen(out, "report-first-screen.png")
    assert "GPU utilisation" in text and "91.9 %" in text
    assert "GPU-bound: 83 % of the critical path is GPU work" in text
    assert "sdpa_flash, 24 calls, 2.72 ms of GPU time (6.0 %)" in text
    assert "72 chains of memory-bound ops could be fused: 12.7 ms" in text  # the top finding: fusion


@pytest.mark.real
def test_diff_page_first_screen_names_the_configuration_change(tmp_path):
    require_browser()
    out = tmp_path / "diff.html"
    before, after = real_trace("diff_control_a100_dlrm.json.gz"), real_trace("diff_test_v100_dlrm.json.gz")
    assert main(["diff", str(before), str(after), "-o", str(out), "--no-cache"]) in (0, 1)
    text = _first_screen(out, "diff-first-screen.png")
    assert "Configuration changed" in text
    assert "A100" in text and "V100" in text
    assert "8 ranks → 2 ranks" in text


def test_rank_group_page_names_the_late_rank(tmp_path):
    require_browser()
    write_skewed_job(tmp_path / "job")
    result = run_batch(tmp_path / "job", out_dir=tmp_path / "out", jobs=1, group_ranks=True, reports=True)
    page = tmp_path / "out" / result.summary.row(0, named=True)["report"]
    text = _first_screen(page, "rank-group-first-screen.png")
    assert "tracekit rank group: job/rank-*.json.gz" in text  # the folder, not the machine's path
    assert "late ranks\nrank 2" in text and "job time lost to late arrivals\n41 µs" in text
    assert "Arrival at each collective" in text and "What rank 2 ran before arriving at collective #0" in text
