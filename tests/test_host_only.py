"""Traces without GPU work: host-side figures (CPU time, hot paths, ops by CPU time), never
GPU cards at "–"/"0 ns" or ops ranked by a GPU time that is 0 on every row."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracekit
from tracekit.analysis.hostside import host_time
from tracekit.cli.main import cli
from tracekit.render.json import render_json
from tracekit.report.build import build_report

CPU = Path(__file__).resolve().parents[1] / "examples" / "traces" / "cpu"
CPU_TRACES = sorted(CPU.rglob("*.json.gz"))
SDPA = CPU / "tiny-llama-sdpa.json.gz"


def _by_hand(path: Path) -> tuple[int, dict[str, tuple[int, int]]]:
    """(summed wall time of the top-level cpu_ops, {op path: (calls, summed self time)}),
    from the raw events: nesting by time containment on each thread."""
    with gzip.open(path) as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    top, paths = 0, {}
    threads: dict[tuple, list] = {}
    for e in events:
        start = round(e["ts"] * 1000)
        threads.setdefault((e["pid"], e["tid"]), []).append((start, start + round(e["dur"] * 1000), e["name"]))
    for ops in threads.values():
        stack: list[list] = []  # [end, name, path, own time]
        done = []
        for start, end, name in sorted(ops, key=lambda o: (o[0], -(o[1] - o[0]))):
            while stack and stack[-1][0] <= start:
                done.append(stack.pop())
            if stack:
                stack[-1][3] -= end - start
            else:
                top += end - start
            stack.append([end, name, (stack[-1][2] + " > " if stack else "") + name, end - start])
        done += stack
        for _, _, chain, own in done:
            calls, ns = paths.get(chain, (0, 0))
            paths[chain] = (calls + 1, ns + own)
    return top, paths


def test_host_time_of_the_sdpa_capture_by_hand():
    """105,011,043 ns in top-level ops; the hottest path is the CPU flash kernel under SDPA,
    30,423,231 ns in 16 calls; every path's figures as recomputed from the JSON."""
    top, paths = _by_hand(SDPA)
    host = host_time(tracekit.load(SDPA), top=5)
    assert host.ops_ns == top == 105_011_043
    hot = host.hot_paths.to_dicts()
    assert hot[0]["op_path"] == "aten::scaled_dot_product_attention > aten::_scaled_dot_product_flash_attention_for_cpu"
    assert (hot[0]["calls"], hot[0]["self_ns"]) == (16, 30_423_231)
    for row in hot:
        assert paths[row["op_path"]] == (row["calls"], row["self_ns"])
    assert [r["self_ns"] for r in hot] == sorted((ns for _, ns in paths.values()), reverse=True)[:5]


@pytest.mark.parametrize("path", CPU_TRACES, ids=lambda p: p.relative_to(CPU).as_posix())
def test_report_of_a_cpu_trace_shows_host_figures(path):
    data = json.loads(render_json(build_report(tracekit.load(path))))
    cards = data["cards"]
    assert cards[0]["label"] == "CPU time in ops" and cards[0]["value"] == tracekit.format.ns(_by_hand(path)[0])
    for card in cards:
        assert not card["label"].startswith("GPU") and card["value"] not in ("0 ns", "–"), card
    for finding in data["findings"]:
        assert finding["time_lost"] != "0 ns", finding
    ops = next(s for s in data["sections"] if s["id"] == "ops")
    table = next(t for t in ops["tables"] if t["id"] == "ops")
    assert table["title"] == "Top ops by CPU time"
    assert [c["label"] for c in table["columns"]] == ["op", "calls", "CPU total", "CPU self", "CPU per call"]
    totals = [row[2]["value"] for row in table["rows"]]
    assert totals == sorted(totals, reverse=True) and totals[0] > 0
    assert any(t["id"] == "hot-paths" for t in ops["tables"])
    attention = next((s for s in data["sections"] if s["id"] == "attention"), None)
    if attention is not None:
        for t in attention["tables"]:
            assert not {"GPU time", "kernels", "GPU total"} & {c["label"] for c in t["columns"]}


def test_summary_of_a_cpu_trace_shows_host_figures():
    out = CliRunner().invoke(cli, ["summary", str(SDPA), "--no-cache", "--top", "3"])
    assert out.exit_code == 0, out.output
    text = out.output
    lines = text.splitlines()
    assert lines[2] == "GPU         none: no GPU work in this trace (host-side figures below)"
    assert lines[3] == "CPU in ops  105 ms (4,726 op calls on 1 thread)"
    assert lines[5] == "attention   sdpa_cpu_flash, 16 calls, 80.3 µs CPU per call (median)"
    assert "no GPU activity in this trace" not in text and " 0 ns" not in text
    hot = lines.index("hot paths (CPU self time at the end of each chain of ops)")
    assert "30.4 ms" in lines[hot + 3] and "aten::scaled_dot_product_attention > " in lines[hot + 3]
    ops = lines.index("top ops by CPU time")
    assert [row.split()[0] for row in lines[ops + 3: ops + 6]] == ["aten::linear", "aten::matmul",
                                                                  "aten::scaled_dot_product_attention"]
    data = json.loads(CliRunner().invoke(cli, ["summary", str(SDPA), "--no-cache", "--json"]).output)
    totals = [o["cpu_total_ns"] for o in data["ops"]]
    assert totals == sorted(totals, reverse=True)
    assert data["host"]["ops_ns"] == 105_011_043
