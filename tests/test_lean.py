"""A lean trace (`loader.lean`): the flows, the ops' leftover args and ids and the GPU rows'
args (but the sync records') left out; every analysis and report the same as the whole
trace's; the cache keeps the whole trace; `info` loads it whole."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest
from conftest import real_trace
from test_analysis_cache import reports, same

from tracekit.runtime.sizing import frames_bytes
from tracekit.pipeline import analyse
from tracekit.batch.sources import Job, load_job_trace
from tracekit.cache import Cache
from tracekit.cli.main import main
from tracekit.loader import load, loads
from tracekit.loader.lean import lean_trace
from tracekit.model import UNREAD_OP_COLUMNS, UNREAD_RUNTIME_COLUMNS

FIXTURES = Path(__file__).parent / "fixtures"
TWO_STREAMS = FIXTURES / "kineto_two_streams.json"


def with_op_args(path: Path) -> bytes:
    """The fixture with the args torch.profiler gives cpu_ops: a sequence number, the
    forward thread, an event index (left in `args`), numbered by the op's order."""
    doc = json.loads(path.read_text())
    i = 0
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "cpu_op":
            ev.setdefault("args", {}).update({"Sequence number": 100 + i, "Fwd thread id": 7, "Ev Idx": i})
            i += 1
    return json.dumps(doc).encode()


@pytest.fixture(scope="module")
def whole():
    return loads(with_op_args(TWO_STREAMS), path=str(TWO_STREAMS))


def test_lean_trace_leaves_out_what_no_analysis_reads(whole):
    lean = lean_trace(whole)
    ops = whole.ops.filter(pl.col("cat") == "cpu_op")
    assert ops["sequence_nr"].to_list() == [100, 101, 102]  # the whole trace has them
    assert ops["fwd_tid"].to_list() == [7, 7, 7]
    assert ops["args"].to_list() == ['{"Ev Idx":0}', '{"Ev Idx":1}', '{"Ev Idx":2}']
    assert whole.flows.height == 6
    for column in UNREAD_OP_COLUMNS:
        assert lean.ops[column].null_count() == lean.ops.height == 4, column
    # the GPU rows' args: the sync record's kept (the graph reads the stream it waited on)
    assert lean.gpu.select("cat", "args").rows() == [
        (c, a if c == "cuda_sync" else None) for c, a in whole.gpu.select("cat", "args").rows()]
    assert lean.gpu.filter(pl.col("cat") == "cuda_sync")["args"].str.contains('"wait_on_stream"').to_list() == [True]
    assert lean.flows.height == 0
    # every frame keeps its columns and types; everything else is the same
    for name, frame in whole.frames().items():
        assert lean.frames()[name].schema == frame.schema, name
    assert lean.ops.drop(UNREAD_OP_COLUMNS).equals(whole.ops.drop(UNREAD_OP_COLUMNS))
    assert lean.gpu.drop("args").equals(whole.gpu.drop("args"))
    # the calls' callback ids
    assert whole.runtime["cbid"].null_count() < whole.runtime.height
    assert lean.runtime["cbid"].null_count() == lean.runtime.height
    assert lean.runtime.drop(UNREAD_RUNTIME_COLUMNS).equals(whole.runtime.drop(UNREAD_RUNTIME_COLUMNS))
    for name in ("counters", "instants", "memory", "warnings"):
        assert lean.frames()[name].equals(whole.frames()[name]), name
    assert (whole.meta.lean, lean.meta.lean) == (False, True)
    assert dataclasses.replace(lean.meta, lean=False) == whole.meta
    assert lean_trace(lean) is lean


def test_a_trace_without_sync_records_keeps_no_gpu_args():
    whole = load(FIXTURES / "kineto_gpu_bound.json")
    assert whole.gpu["args"].null_count() < whole.gpu.height
    lean = lean_trace(whole)
    assert lean.gpu["args"].null_count() == lean.gpu.height


def analyses_equal(whole, lean):
    a, b = analyse(whole), analyse(lean)
    for f in dataclasses.fields(a):
        if f.name != "trace":
            same(getattr(a, f.name), getattr(b, f.name), f"analysis.{f.name}")
    assert reports(whole, a) == reports(lean, b)


def test_analyses_and_reports_of_a_lean_trace_are_the_whole_ones(whole):
    assert frames_bytes(whole) == frames_bytes(lean_trace(whole))
    analyses_equal(whole, lean_trace(whole))


@pytest.mark.parametrize("name", ["a100_dlrm_6streams_rank0.json.gz", "a100_alexnet_cuda_sync.json.gz"])
def test_a_real_lean_trace_analyses_the_same(name):
    whole = load(real_trace(name))
    lean = lean_trace(whole)
    assert whole.flows.height > 0 and lean.flows.height == 0
    # the columns left out take no memory (constant columns: one value each)
    unread = whole.ops.select(UNREAD_OP_COLUMNS)
    assert unread.estimated_size() > 10_000 and lean.ops.select(UNREAD_OP_COLUMNS).estimated_size() < 100
    assert lean.gpu.select("args").estimated_size() < whole.gpu.select("args").estimated_size()
    assert frames_bytes(whole) == frames_bytes(lean)
    analyses_equal(whole, lean)


def test_the_cache_keeps_the_whole_trace(tmp_path, monkeypatch):
    lean = Cache(tmp_path).load(TWO_STREAMS, lean=True)
    assert lean.meta.lean and lean.flows.height == 0

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed again: the cache was not used")

    monkeypatch.setattr("tracekit.loader.load_file", no_parse)
    again = Cache(tmp_path).load(TWO_STREAMS)
    assert not again.meta.lean and again.flows.height == 6
    assert Cache(tmp_path).load(TWO_STREAMS, lean=True).flows.height == 0


def test_info_counts_the_flows_and_a_batch_job_loads_lean(capsys):
    assert main(["info", str(TWO_STREAMS), "--json", "--no-cache"]) in (0, None)
    assert json.loads(capsys.readouterr().out)[0]["categories"]["ac2g"] == 6  # the flows
    job = Job(source=str(TWO_STREAMS), name="two", content_hash="x", size_bytes=TWO_STREAMS.stat().st_size,
              paths=(str(TWO_STREAMS),))
    trace = load_job_trace(job)
    assert trace.meta.lean and trace.flows.height == 0
