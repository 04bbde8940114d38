"""`make demo`: the shipped GPU trace, and the headline `tracekit summary` prints for it."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from click.testing import CliRunner

from tracekit.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "traces" / "gpu" / "h100-qwen1.5-0.5b-sdpa.json.gz"
FAKE_TOKEN = "hf_FAKEfakeFAKEfakeFAKEfakeFAKEfakeFA"


def _raw() -> dict:
    with gzip.open(DEMO) as fh:
        return json.load(fh)


def _busy_and_span_by_hand(events: list[dict]) -> tuple[int, int]:
    """Union of the GPU work intervals, and first start to last end, in ns."""
    pairs = sorted((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in events
                   if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    busy, cur = 0, None
    for start, end in pairs:
        if cur is None or start > cur[1]:
            busy += 0 if cur is None else cur[1] - cur[0]
            cur = [start, end]
        else:
            cur[1] = max(cur[1], end)
    busy += cur[1] - cur[0]
    return busy, max(e for _, e in pairs) - pairs[0][0]


def test_the_makefile_demo_analyses_the_shipped_gpu_trace():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^TRACE\s*\?=\s*examples/traces/gpu/h100-qwen1\.5-0\.5b-sdpa\.json\.gz$", makefile, re.MULTILINE)
    assert "$(BIN)/tracekit summary $(TRACE)" in makefile and "$(BIN)/tracekit report $(TRACE) -o $(OUT)" in makefile
    folder = DEMO.parent
    assert DEMO.is_file() and (folder / "LICENSE").is_file()
    readme = (folder / "README.md").read_text()
    assert "AMD-AGI/TraceLens" in readme and "171dd74721ca1ec45709e5805b68ae1f65e27811" in readme
    assert "tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz" in readme
    assert "Copyright (c) 2024 - 2025 Advanced Micro Devices, Inc." in (folder / "LICENSE").read_text()


def test_the_shipped_trace_holds_only_the_fake_token():
    raw = _raw()
    meta = json.dumps({k: v for k, v in raw.items() if k != "traceEvents"})
    assert re.findall(r"hf_[A-Za-z0-9]{20,}", meta) == [FAKE_TOKEN]


def test_summary_headline_of_the_demo_trace():
    """Utilisation (recomputed here from the raw events: 45,647,300 of 49,652,832 ns), the
    verdict, the attention backend (24 calls of aten::_scaled_dot_product_flash_attention)
    and the top findings, above the tables."""
    raw = _raw()
    busy, span = _busy_and_span_by_hand(raw["traceEvents"])
    assert (busy, span) == (45_647_300, 49_652_832)
    flash_calls = [e for e in raw["traceEvents"]
                   if e.get("cat") == "cpu_op" and e.get("name") == "aten::_scaled_dot_product_flash_attention"]
    assert len(flash_calls) == 24
    out = CliRunner().invoke(cli, ["summary", str(DEMO), "--no-cache"])
    assert out.exit_code == 0, out.output
    head = out.output.split("\n\n")[0].splitlines()
    assert head[2] == "GPU busy    45.6 ms of 49.7 ms (91.9 %)"
    assert head[3].startswith("verdict     GPU-bound: 83 % of the critical path is GPU work")
    assert head[4] == "attention   sdpa_flash, 24 calls, 2.72 ms of GPU time (6.0 %)"
    assert head[5] == "findings    5 (the top 3 by time lost)"
    assert head[6] == "  [high]    12.7 ms  72 chains of memory-bound ops could be fused: 12.7 ms, 27.9 % of GPU time"
    assert head[7] == "  [medium]  2.77 ms  96 device copies are layout copies (under `aten::contiguous`), 2.77 ms of GPU time"
    assert head[8] == "  [medium]  2.34 ms  101 device copies are dtype casts (under `aten::to`), 2.34 ms of GPU time"
    assert len(head) == 9

    data = json.loads(CliRunner().invoke(cli, ["summary", str(DEMO), "--no-cache", "--json"]).output)
    assert data["timeline"]["busy_ns"] == busy and data["timeline"]["span_ns"] == span
    assert data["attention"]["backend"] == "sdpa_flash" and data["attention"]["calls"] == 24
    assert data["verdict"].startswith("GPU-bound") and data["findings_total"] == 5
    assert data["findings"][0]["rule"] == "fusible_chains"
