"""The roofline's and torch.compile's findings as ordinary rules, and one notion of the time
recoverable (`findings.recoverable`) on the report's cards."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from functools import cache

import pytest

from tests.conftest import real_trace
from tracekit import format as fmt
from tracekit.findings import run_findings
from tracekit.findings.model import Finding
from tracekit.findings.recoverable import recoverable

QWEN = "h100_qwen15_05b_hf_inference.json.gz"
COMPILE = "mi300x_torch_compile_triton.json.gz"


@cache
def _raw(name: str) -> list[dict]:
    with gzip.open(real_trace(name)) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


@cache
def _findings(name: str):
    from tracekit.loader import load

    return run_findings(load(real_trace(name)))


def _f(rule: str, lost: int, loses: str) -> Finding:
    return Finding(rule=rule, severity="low", title=rule, time_lost_ns=lost, share=0.0, evidence=(), advice="",
                   loses=loses)


@pytest.mark.real
def test_qwen_fusible_chains_is_a_finding():
    result = _findings(QWEN)
    chains = [f for f in result.findings if f.rule == "fusible_chains"]
    assert len(chains) == 1
    f = chains[0]
    assert f.time_lost_ns == 12_715_991  # 12.7 ms, 27.9 % of GPU time (`tracekit roofline`)
    assert f.title.startswith("72 chains of memory-bound ops could be fused: 12.7 ms")
    assert f.severity == "high" and f.loses == "gpu_work"
    assert result.findings[0] is f  # the largest loss in this trace
    raw = _raw(QWEN)
    for e in f.evidence:  # each row is the first call of a chain: the event at that index, by name and time
        assert raw[e.eid]["name"] == e.name
        assert round(float(raw[e.eid]["ts"]) * 1000) == e.ts_ns
    # the rotary chain (mul → neg → mul → add …) holds two aten::neg: as many chains as half of them
    neg = Counter(e["name"] for e in raw if e.get("cat") == "cpu_op" and e.get("ph") == "X")["aten::neg"]
    rotary = [e for e in f.evidence if "neg" in e.note]
    assert neg == 48 and rotary and f"×{neg // 2}:" in rotary[0].note


@pytest.mark.real
def test_qwen_attention_below_backend_is_a_finding():
    f = [f for f in _findings(QWEN).findings if f.rule == "attention_below_backend"]
    assert [x.time_lost_ns for x in f] == [1_222_950]
    assert f[0].evidence[0].name == "aten::_flash_attention_forward"


def _compile_raw() -> dict:
    """The figures `compile_stats` reports, from the JSON: regions by name, their frame/compile ids."""
    cpu = [e for e in _raw(COMPILE) if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    regions = [e for e in cpu if e["name"].startswith("Torch-Compiled Region")]
    lookups = [e for e in cpu if e["name"].startswith("TorchDynamo Cache Lookup")]
    graphs = [e for e in cpu if e["name"].startswith("## Call CompiledFxGraph")]
    ids = [tuple(map(int, re.match(r"Torch-Compiled Region: (\d+)/(\d+)", e["name"]).groups())) for e in regions]
    triton = [e for e in _raw(COMPILE) if e.get("cat") == "kernel" and e["name"].startswith("triton_")]
    return {"regions": regions, "lookups": lookups, "graphs": graphs, "frames": {f for f, _ in ids},
            "recompiled": {f for f, c in ids if c >= 1}, "triton": triton}


@pytest.mark.real
def test_compile_trace_findings_and_section():
    raw = _compile_raw()
    assert len(raw["regions"]) == 1 and len(raw["lookups"]) == 1 and len(raw["graphs"]) == 1
    assert raw["frames"] == {0} and raw["recompiled"] == set()
    result = _findings(COMPILE)
    assert "compile_recompiles" in {c.rule for c in result.clean}  # compile id 0 only, nothing compiled inside
    hit = [f for f in result.findings if f.rule == "compile_wrapper_on_path"]
    assert len(hit) == 1
    outer_ns = sum(round(e["dur"] * 1000) for e in raw["regions"] + raw["lookups"])
    assert outer_ns == 878_845
    assert hit[0].time_lost_ns == 164_043  # the path's host time inside the two outermost regions
    assert 0 < hit[0].time_lost_ns <= outer_ns
    assert f"2 torch.compile regions (800 µs of their {fmt.ns(outer_ns)}" in hit[0].title
    assert [e.name for e in hit[0].evidence] == ["Torch-Compiled Region: 0/0", "TorchDynamo Cache Lookup"]

    from tracekit.pipeline import analyse
    from tracekit.loader import load
    from tracekit.report.build import build_report

    trace = load(real_trace(COMPILE))
    report = build_report(trace, analysis=analyse(trace))
    section = [s for s in report.sections if s.id == "torch-compile"]
    assert len(section) == 1
    triton_ns = sum(round(e["dur"] * 1000) for e in raw["triton"])
    assert triton_ns == 835_957
    text = " ".join(section[0].paragraphs)
    assert f"2 outermost compiled regions ({fmt.ns(outer_ns)} of CPU time" in text
    assert "1 compiled frame, 0 recompiled" in text
    assert f"{len(raw['triton'])} Triton kernels ({fmt.ns(triton_ns)} of GPU time), 4 launched inside" in text
    assert "compile_wrapper_on_path" in [f.id for f in report.findings]


@pytest.mark.real
def test_no_compile_section_without_markers():
    from tracekit.pipeline import analyse
    from tracekit.loader import load
    from tracekit.report.extras import compile_section

    assert compile_section(analyse(load(real_trace(QWEN)))) is None


def test_recoverable_adds_disjoint_kinds_and_keeps_the_largest_of_one():
    found = [_f("a", 10, "gpu_work"), _f("b", 4, "gpu_work"), _f("c", 3, "gpu_idle"), _f("d", 5, "window")]
    r = recoverable(found, window_ns=100)
    # gpu_work overlaps itself: 10, not 14; idle time never overlaps GPU work: + 3; wall time 5 < 13
    assert (r.ns, r.top_ns, r.top_rule, r.sum_ns, r.count) == (13, 10, "a", 22, 4)
    assert r.parts == ("gpu_work", "gpu_idle")
    assert "10 ns of GPU work (a) + 3 ns of GPU idle time (c)" in r.sentence()
    # wall time can overlap anything: a larger one stands alone
    assert recoverable([*found, _f("e", 20, "window")], window_ns=100).ns == 20
    # capped at the window, each loss and the total
    assert recoverable(found, window_ns=12).ns == 12
    assert recoverable([_f("z", 0, "gpu_work")], window_ns=10).count == 0


@pytest.mark.parametrize("losses", [
    [(5, "gpu_work"), (7, "gpu_idle"), (9, "window")], [(3, "gpu_work")], [(1, "gpu_idle"), (1, "gpu_idle")],
    [(50, "gpu_work"), (60, "gpu_idle"), (1, "window")], [(8, "window"), (8, "gpu_work")],
])
def test_recoverable_between_the_largest_and_the_sum(losses):
    found = [_f(f"r{i}", ns, kind) for i, (ns, kind) in enumerate(losses)]
    for window in (10, 1000):
        r = recoverable(found, window)
        capped = [min(ns, window) for ns, _ in losses]
        assert max(capped) <= r.ns <= min(sum(capped), window)


@pytest.mark.real
def test_report_cards_state_one_recoverable_time():
    from tracekit.pipeline import analyse
    from tracekit.loader import load
    from tracekit.report.build import build_report

    trace = load(real_trace(QWEN))
    a = analyse(trace)
    cards = {c.label: c for c in build_report(trace, analysis=a).cards}
    r = a.findings.recoverable()
    assert cards["Top bottleneck"].value == fmt.ns(r.top_ns) == "12.7 ms"
    assert cards["Time recoverable"].value == fmt.ns(r.ns)
    assert r.top_ns <= r.ns <= r.sum_ns
    # every finding here is GPU work: they may overlap, so the top one alone counts
    assert (r.ns, r.sum_ns, r.count) == (12_715_991, 19_522_642, 5)
    assert cards["Time recoverable"].detail == (
        "25.5 % of the window: the top finding (fusible_chains, 12.7 ms) alone; the 5 findings add up to "
        "19.5 ms, but findings that lose the same kind of time may count it twice")
    assert a.findings.to_dict()["recoverable_ns"] == r.ns
