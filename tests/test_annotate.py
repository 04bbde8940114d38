"""`tracekit annotate`: the original events kept, critical path and findings added, valid TEF."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from conftest import real_trace
from test_graph import cross_stream, launch_bound

import tracekit
from tracekit.cli.main import main
from tracekit.findings.annotate import FINDINGS_CAT, PATH_CAT, us


def _doc(path: Path):
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)


def _check_tef(events: list) -> None:
    """Trace Event Format: objects with ph; timed phases carry ts/pid/tid; flows pair up."""
    assert isinstance(events, list) and all(isinstance(e, dict) and "ph" in e for e in events)
    for e in events:
        if e["ph"] in ("X", "i", "s", "f", "B", "E"):
            assert {"ts", "pid", "tid"} <= e.keys(), e
    ours = [e for e in events if e.get("cat") == PATH_CAT and e["ph"] in ("s", "f")]
    ids: dict[int, list[str]] = {}
    for e in ours:
        ids.setdefault(e["id"], []).append(e["ph"])
    assert all(sorted(v) == ["f", "s"] for v in ids.values())
    assert all(e.get("bp") == "e" for e in ours if e["ph"] == "f")


def test_annotate_golden(tmp_path, capsys):
    src = cross_stream().write(tmp_path / "in.json.gz")
    out = tmp_path / "out.json.gz"
    assert main(["annotate", str(src), "-o", str(out)]) == 0
    assert "critical-path arrows" in capsys.readouterr().out
    before, after = _doc(src), _doc(out)
    n = len(before["traceEvents"])
    assert after["traceEvents"][:n] == before["traceEvents"]  # nothing lost, nothing changed
    assert {k: v for k, v in after.items() if k != "traceEvents"} == {k: v for k, v in before.items() if k != "traceEvents"}
    _check_tef(after["traceEvents"])
    added = after["traceEvents"][n:]
    flows = [e for e in added if e["ph"] in ("s", "f")]
    # launch (call -> kernel A), cross-stream (A -> B on stream 20), sync (B -> cudaDeviceSynchronize)
    assert [(e["ph"], e["pid"], e["tid"]) for e in flows] == [
        ("s", 1000, 1000), ("f", 0, 7), ("s", 0, 7), ("f", 0, 20), ("s", 0, 20), ("f", 1000, 1000)]
    names = {e["args"]["name"] for e in added if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"critical path", "findings"}
    # it loads back: same kernels, plus our flows, slices and instants
    a, b = tracekit.load(src), tracekit.load(out)
    assert a.kernels.select("name", "ts_ns", "dur_ns", "stream").equals(b.kernels.select("name", "ts_ns", "dur_ns", "stream"))
    assert b.flows.filter(pl.col("cat") == PATH_CAT).height == 6
    path = b.ops.filter(pl.col("cat") == PATH_CAT)
    assert path.height > 0 and set(path["pid"]) == {"tracekit"}
    assert path["ts_ns"].min() == 0 and path["end_ns"].max() == 330_000


def test_findings_become_instants(tmp_path):
    src = launch_bound(n=30).write(tmp_path / "in.json")
    out = tmp_path / "out.json"  # not .gz: plain JSON
    assert main(["annotate", str(src), "-o", str(out), "--set", "launch_bound.min_kernels=5"]) == 0
    doc = _doc(out)
    _check_tef(doc["traceEvents"])
    instants = [e for e in doc["traceEvents"] if e.get("cat") == FINDINGS_CAT]
    assert instants and all(e["ph"] == "i" and e["pid"] == "tracekit" and e["tid"] == "findings" for e in instants)
    rules = {e["args"]["rule"] for e in instants}
    assert {"launch_bound", "host_bound_path"} <= rules
    b = tracekit.load(out)
    assert b.instants.filter(pl.col("cat") == FINDINGS_CAT).height == len(instants)


def test_array_form_and_truncated_input(tmp_path):
    doc = cross_stream().document()
    events = json.loads(json.dumps(doc["traceEvents"], default=lambda o: float(o.text())))
    arr = tmp_path / "arr.json"
    arr.write_text(json.dumps(events))
    assert main(["annotate", str(arr), "-o", str(tmp_path / "arr_out.json")]) == 0
    out = _doc(tmp_path / "arr_out.json")
    assert isinstance(out, list) and out[: len(events)] == events
    broken = tmp_path / "broken.json"
    text = json.dumps({"traceEvents": events})
    broken.write_text(text[: text.rfind("}", 0, len(text) - 3)] + "}, {\"ph\": \"X\", \"na")  # cut mid-event
    assert main(["annotate", str(broken), "-o", str(tmp_path / "fixed.json.gz")]) == 0
    fixed = _doc(tmp_path / "fixed.json.gz")
    _check_tef(fixed["traceEvents"])
    assert fixed["traceEvents"][: len(events) - 1] == events[:-1]


def test_write_is_atomic(tmp_path):
    src = cross_stream().write(tmp_path / "in.json.gz")
    out = tmp_path / "out.json.gz"
    out.write_bytes(b"old")
    assert main(["annotate", str(src), "-o", str(out)]) == 0
    assert _doc(out)["traceEvents"] and sorted(p.name for p in tmp_path.iterdir()) == ["in.json.gz", "out.json.gz"]
    assert main(["annotate", str(src), "-o", str(tmp_path / "missing" / "x.json.gz")]) != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.json.gz", "out.json.gz"]


def test_exact_microseconds():
    assert bytes(us(1_234_567)) == b"1234.567"
    assert bytes(us(1_695_835_585_751_488_123)) == b"1695835585751488.123"
    assert bytes(us(-1_500)) == b"-1.500" and bytes(us(2_000)) == b"2"


@pytest.mark.real
def test_annotate_real_trace(tmp_path):
    src = real_trace("a100_alexnet_cuda_sync.json.gz")
    out = tmp_path / "alexnet.json.gz"
    assert main(["annotate", str(src), "-o", str(out)]) == 0
    doc = _doc(out)
    _check_tef(doc["traceEvents"])
    a, b = tracekit.load(src), tracekit.load(out)
    assert a.kernels.height == b.kernels.height and a.gpu.equals(b.gpu.select(a.gpu.columns))
    assert b.flows.filter(pl.col("cat") == PATH_CAT).height > 0
