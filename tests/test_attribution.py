"""Op <-> GPU attribution: golden traces with hand-computed answers, properties, real traces, CLI."""

from __future__ import annotations

import json

import polars as pl
import pytest
from builders import TraceBuilder
from click.testing import CliRunner
from conftest import all_real_traces, real_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracekit
from tracekit.pipeline import analyse
from tracekit.analysis.attribution import INSTANCE_SCHEMA, OPS_SCHEMA, attribute, op_instances, op_paths
from tracekit.analysis.compile import compile_stats
from tracekit.analysis.launches import launch_stats
from tracekit.analysis.links import LINK, UNREAD_OP_COLUMNS, cpu_ops
from tracekit.analysis.memory import memory_stats
from tracekit.analysis.syncs import copy_stats, sync_stats


def linear_trace() -> TraceBuilder:
    """aten::linear launches two kernels through its children; t/transpose/view launch nothing.

    aten::linear    [1_000, 51_000]
      aten::t       [2_000,  5_000]
        aten::transpose [2_500, 4_000]
      aten::mm      [10_000, 30_000]  cudaLaunchKernel [12_000, 16_000] -> gemm [20_000, 120_000]
      aten::add     [32_000, 45_000]  cudaLaunchKernel [34_000, 37_000] -> add  [120_000, 130_000]
    aten::view      [60_000, 61_000]
    """
    b = TraceBuilder()
    b.op("aten::linear", 1_000, 50_000)
    b.op("aten::t", 2_000, 3_000)
    b.op("aten::transpose", 2_500, 1_500)
    mm = b.op("aten::mm", 10_000, 20_000)
    b.launch_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", launch_ns=12_000, launch_dur_ns=4_000,
                    start_ns=20_000, dur_ns=100_000, ext=mm)
    add = b.op("aten::add", 32_000, 13_000)
    b.launch_kernel("vectorized_elementwise_kernel<add>", launch_ns=34_000, launch_dur_ns=3_000,
                    start_ns=120_000, dur_ns=10_000, ext=add)
    b.op("aten::view", 60_000, 1_000)
    return b


def by_name(frame: pl.DataFrame) -> dict[str, dict]:
    return {r["name"]: r for r in frame.iter_rows(named=True)}


def test_golden_nested_self_time_and_inclusive_gpu(tmp_path):
    a = attribute(linear_trace().load(tmp_path))
    ops = by_name(a.ops)
    lin = ops["aten::linear"]
    assert (lin["calls"], lin["cpu_total_ns"], lin["cpu_self_ns"]) == (1, 50_000, 50_000 - 3_000 - 20_000 - 13_000)
    assert (lin["gpu_self_ns"], lin["gpu_incl_ns"], lin["gpu_events_incl"], lin["kernels_incl"]) == (0, 110_000, 2, 2)
    assert lin["kernels_per_call"] == 2.0 and not lin["launches_nothing"]
    assert lin["gpu_share"] == 1.0
    assert (ops["aten::t"]["cpu_self_ns"], ops["aten::transpose"]["cpu_self_ns"]) == (1_500, 1_500)
    # launch calls are not ops: their time stays in the launching op's self time
    mm = ops["aten::mm"]
    assert (mm["cpu_self_ns"], mm["gpu_self_ns"], mm["gpu_incl_ns"]) == (20_000, 100_000, 100_000)
    assert ops["aten::add"]["gpu_incl_ns"] == 10_000
    for name in ("aten::t", "aten::transpose", "aten::view"):
        row = ops[name]
        assert row["launches_nothing"] and row["gpu_incl_ns"] == 0 and row["calls_without_gpu"] == 1
    assert a.silent_op_names == 3
    assert a.ops["name"].to_list() == [
        "aten::linear", "aten::mm", "aten::add", "aten::t", "aten::transpose", "aten::view"]
    assert (a.gpu_events, a.gpu_total_ns, a.linked_events) == (2, 110_000, 2)
    assert (a.unlinked_events, a.no_launch_events) == (0, 0)
    assert a.ops.schema == pl.Schema(OPS_SCHEMA) and a.instances.schema == pl.Schema(INSTANCE_SCHEMA)


def test_golden_instances(tmp_path):
    a = attribute(linear_trace().load(tmp_path))
    inst = by_name(a.instances)
    assert inst["aten::linear"]["depth"] == 0 and inst["aten::transpose"]["depth"] == 2
    assert inst["aten::transpose"]["parent_eid"] == inst["aten::t"]["eid"]
    assert (inst["aten::mm"]["launches"], inst["aten::mm"]["gpu_events_self"]) == (1, 1)
    assert (inst["aten::linear"]["launches"], inst["aten::linear"]["gpu_events_incl"]) == (0, 2)
    assert inst["aten::linear"]["self_ns"] == 14_000


def test_instances_not_kept(tmp_path):
    """`instances=False` (what `analyse()` asks for): the same figures without the rows,
    which `op_instances` computes again, equal to those a full call keeps."""
    trace = linear_trace().load(tmp_path)
    full, lean = attribute(trace), attribute(trace, instances=False)
    assert lean.instances is None and lean.ops.equals(full.ops) and lean.gpu.equals(full.gpu)
    assert (lean.gpu_events, lean.linked_events, lean.silent_op_names) == (2, 2, 3) == (
        full.gpu_events, full.linked_events, full.silent_op_names)
    again = op_instances(lean, trace)
    assert again.equals(full.instances) and again.height == 6
    assert op_instances(full, trace) is full.instances
    analysis = analyse(trace)
    assert analysis.attribution.instances is None and analysis.attribution.ops.equals(full.ops)


def test_recursion_counted_once(tmp_path):
    """aten::to inside aten::to: CPU total and inclusive GPU per name count the inner call once."""
    b = TraceBuilder()
    b.op("aten::to", 0, 10_000)
    inner = b.op("aten::to", 1_000, 8_000)
    b.launch_kernel("copy_kernel", launch_ns=2_000, launch_dur_ns=1_000, start_ns=5_000, dur_ns=5_000, ext=inner)
    a = attribute(b.load(tmp_path))
    row = by_name(a.ops)["aten::to"]
    assert (row["calls"], row["cpu_total_ns"], row["cpu_self_ns"]) == (2, 10_000, 10_000)
    assert (row["gpu_incl_ns"], row["gpu_events_incl"], row["gpu_self_ns"]) == (5_000, 1, 5_000)
    assert sorted(a.instances["gpu_incl_ns"].to_list()) == [5_000, 5_000]


def test_unlinked_and_containment(tmp_path):
    b = TraceBuilder()
    b.op("aten::relu", 0, 10_000, ext=None)
    # no External id on the call: tied by containment to aten::relu
    corr = b.runtime("cudaLaunchKernel", 1_000, 2_000)
    b.kernel("relu_kernel", 5_000, 1_000, corr=corr)
    # a launch outside any op, and a kernel whose launch is not in the trace
    corr2 = b.runtime("cudaLaunchKernel", 20_000, 1_000)
    b.kernel("orphan_launch", 22_000, 3_000, corr=corr2)
    b.kernel("before_the_trace", 30_000, 7_000, corr=424242)
    a = attribute(b.load(tmp_path))
    assert (a.gpu_events, a.linked_events, a.unlinked_events, a.no_launch_events) == (3, 1, 2, 1)
    assert a.unlinked_ns == 10_000
    assert by_name(a.ops)["aten::relu"]["gpu_incl_ns"] == 1_000
    links = dict(zip(a.gpu["name"].to_list(), a.gpu["link"].to_list()))
    assert links == {"relu_kernel": "containment", "orphan_launch": None, "before_the_trace": None}
    assert a.gpu.schema["link"] == LINK and "args" not in a.gpu.columns  # (`UNREAD_GPU_COLUMNS`)


def test_op_paths(tmp_path):
    b = TraceBuilder()
    b.op("aten::masked_fill", 0, 10_000)
    b.op("aten::clone", 1_000, 5_000)
    b.op("aten::copy_", 2_000, 3_000)
    nested = cpu_ops(b.load(tmp_path))
    leaf = nested.filter(pl.col("name") == "aten::copy_")["eid"]
    paths = op_paths(nested, leaf)
    assert paths["op_path"].to_list() == ["aten::masked_fill > aten::clone > aten::copy_"]


def test_the_op_tree_holds_its_category_once(tmp_path):
    """`cpu_ops`: the trace's cpu_op rows, in their order, with their nesting and without the
    columns no analysis reads; the category, the same on every row, is a constant column (no
    bytes a row), whatever the ops around."""
    b = TraceBuilder()
    b.op("aten::masked_fill", 0, 10_000)
    b.op("aten::clone", 1_000, 5_000)
    b.annotation("ProfilerStep#1", 0, 20_000)
    b.op("aten::copy_", 2_000, 3_000)
    trace = b.load(tmp_path)
    nested = cpu_ops(trace)
    ops = trace.ops.filter(pl.col("cat") == "cpu_op")
    assert nested.drop("depth", "parent_eid").equals(ops.drop(UNREAD_OP_COLUMNS)) and ops.height == 3
    assert nested.columns == [c for c in ops.columns if c not in UNREAD_OP_COLUMNS] + ["depth", "parent_eid"]
    assert nested["depth"].to_list() == [0, 1, 2]
    long = cpu_ops(TraceBuilder().load(tmp_path, "empty.json.gz"))
    assert long.is_empty() and long.schema == nested.schema
    many = TraceBuilder()
    many.annotation("ProfilerStep#1", 0, 30_000)
    for i in range(2000):
        many.op(f"aten::op{i % 7}", i * 10, 5)
    trace = many.load(tmp_path, "many.json.gz")
    nested = cpu_ops(trace)
    assert trace.ops.select("cat").estimated_size() > 2000  # (both categories: a value a row)
    assert nested.select("cat").estimated_size() < 64 and nested.select("name").estimated_size() > 2000
    assert nested["cat"].unique().to_list() == ["cpu_op"] and nested.height == 2000


def test_empty_trace():
    a = attribute(tracekit.Trace.empty())
    assert a.ops.is_empty() and a.ops.schema == pl.Schema(OPS_SCHEMA)
    assert a.instances.is_empty() and a.instances.schema == pl.Schema(INSTANCE_SCHEMA)
    assert (a.gpu_events, a.unlinked_events, a.silent_op_names) == (0, 0, 0)


# -- properties -----------------------------------------------------------------------

NAMES = ("aten::to", "aten::copy_", "aten::mm", "aten::view")
actions = st.lists(st.tuples(st.sampled_from(("open", "close", "launch")), st.sampled_from(NAMES),
                             st.integers(1, 50), st.integers(0, 40)), max_size=40)


def random_trace(steps) -> tracekit.Trace:
    """Properly nested ops from open/close/launch actions; kernels launched from inside them."""
    b, stack, t = TraceBuilder(), [], 0
    for action, name, step, gpu_dur in steps:
        t += step * 100
        if action == "open":
            stack.append((name, t, b.next_ext()))
        elif action == "close" and stack:
            op_name, start, ext = stack.pop()
            b.op(op_name, start, t - start, ext=ext)
        elif action == "launch":
            ext = stack[-1][2] if stack else None
            b.launch_kernel("k", launch_ns=t, launch_dur_ns=50, start_ns=t + 60, dur_ns=gpu_dur * 100, ext=ext)
    while stack:
        t += 100
        op_name, start, ext = stack.pop()
        b.op(op_name, start, t - start, ext=ext)
    return tracekit.loads(b.text().encode())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions)
def test_properties_hold(steps):
    a = attribute(random_trace(steps))
    inst, ops = a.instances, a.ops
    assert (inst["self_ns"] <= inst["dur_ns"]).all() and (inst["self_ns"] >= 0).all()
    assert (inst["gpu_self_ns"] <= inst["gpu_incl_ns"]).all()
    assert (ops["gpu_incl_ns"] <= a.gpu_total_ns).all()
    assert (ops["cpu_self_ns"] <= ops["cpu_total_ns"]).all()
    assert int(ops["gpu_self_ns"].sum() or 0) <= a.gpu_total_ns
    assert int(inst["self_ns"].sum() or 0) == int(inst.filter(pl.col("depth") == 0)["dur_ns"].sum() or 0)
    assert a.linked_events + a.unlinked_events == a.gpu_events


# -- real traces ----------------------------------------------------------------------

@pytest.mark.real
@pytest.mark.parametrize("path", all_real_traces(), ids=lambda p: p.name)
def test_real_traces_run_every_analysis(path):
    """All the analyses of this issue on every shared trace, one load each (keeps the suite fast)."""
    trace = tracekit.load(path)
    a = attribute(trace)
    assert a.ops.schema == pl.Schema(OPS_SCHEMA)
    if a.ops.height:
        assert (a.ops["gpu_incl_ns"] <= a.gpu_total_ns).all()
        assert (a.instances["self_ns"] <= a.instances["dur_ns"]).all()
    assert a.linked_events + a.unlinked_events == a.gpu_events
    s = launch_stats(trace)
    if s.queue.height:
        assert int(s.queue["depth"].min()) >= 1
    assert s.graph_events >= s.graph_launches
    syncs = sync_stats(trace)
    assert (syncs.syncs["gpu_wait_ns"] + syncs.syncs["tail_ns"] == syncs.syncs["dur_ns"]).all()
    copies = copy_stats(trace)
    assert copies.memcpys + copies.memsets == trace.gpu["cat"].is_in(["gpu_memcpy", "gpu_memset"]).sum()
    m = memory_stats(trace)
    assert m.timeline.height == trace.memory.height
    c = compile_stats(trace)
    assert c.triton_in_regions <= c.triton_events


@pytest.mark.real
def test_real_qwen_flash_kernel_attributed():
    a = attribute(tracekit.load(real_trace("h100_qwen15_05b_hf_inference.json.gz")))
    flash = a.gpu.filter(pl.col("name").str.contains("flash_fwd_kernel") & pl.col("op_eid").is_not_null())
    assert flash.height == 24 and set(flash["op_name"]) == {"aten::_flash_attention_forward"}
    ops = by_name(a.ops)
    flash_ns = int(flash["dur_ns"].sum())
    for name in ("aten::_flash_attention_forward", "aten::_scaled_dot_product_flash_attention",
                 "aten::scaled_dot_product_attention"):
        assert ops[name]["gpu_incl_ns"] == flash_ns
    assert a.ops.row(0, named=True)["name"] == "aten::linear"
    assert a.unlinked_events == 509  # launched before the profiling window opened
    driver = a.gpu.filter(pl.col("launch_name") == "cuLaunchKernel")
    assert driver["op_name"].to_list() == ["aten::bmm"]


# -- CLI ------------------------------------------------------------------------------

def test_cli_ops_and_kernels(tmp_path):
    from tracekit.cli.tables import kernels, ops

    path = linear_trace().write(tmp_path / "t.json")
    runner = CliRunner()
    out = runner.invoke(ops, [str(path), "--top", "2"])
    assert out.exit_code == 0, out.output
    assert "aten::linear" in out.output and "aten::add" not in out.output
    data = json.loads(runner.invoke(ops, [str(path), "--json"]).output)
    assert data["ops"][0]["name"] == "aten::linear" and data["gpu_total_ns"] == 110_000
    out = runner.invoke(kernels, [str(path), "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)["kernels"]
    assert rows[0]["name"].startswith("sm90_xmma_gemm") and rows[0]["total_ns"] == 100_000
    out = runner.invoke(kernels, [str(path)])
    assert out.exit_code == 0 and "sm90_xmma_gemm" in out.output
