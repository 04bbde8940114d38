"""Invariants of every explanation, checked on every real trace in ../shared/traces and on the
fixtures, against the raw JSON events where the claim is about them.

A claim tracekit prints (who launched a kernel, which op is inside which, how much time is
communication) must hold on the events themselves: each test reads the file with `json`, finds
the events by their index (`eid`), and checks what tracekit says against them.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from functools import cache
from pathlib import Path

import polars as pl
import pytest
from conftest import SHARED_TRACES, all_real_traces

import tracekit
from tracekit.pipeline import Analysis, analyse
from tracekit.analysis.attribution import op_instances
from tracekit.analysis.links import cpu_ops, launch_ops
from tracekit.analysis.taxonomy import classify_names

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TRACES = [
    *(pytest.param(p, id=f"fixture:{p.name}") for p in sorted(FIXTURES.glob("*.json*"))),
    *(pytest.param(p, id=str(p.relative_to(SHARED_TRACES)), marks=pytest.mark.real) for p in all_real_traces()),
]
GPU_WORK = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
MAX_OTHER_SHARE = 0.05  # of kernel time, on each real GPU trace


@cache
def _analysis(path: Path) -> Analysis:
    return analyse(tracekit.load(path))


@cache
def _raw(path: Path) -> list[dict] | None:
    """The file's event array as `json` reads it (None: not plain JSON, e.g. a truncated file)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        try:
            doc = json.load(f, parse_float=Decimal)  # exact: absolute µs floats lose the ns
        except ValueError:
            return None
    return doc if isinstance(doc, list) else doc.get("traceEvents")


def _event(raw: list[dict], eid: int) -> dict:
    return raw[eid]


def _span_us(e: dict) -> tuple[Decimal, Decimal]:
    ts = Decimal(e["ts"])
    return ts, ts + Decimal(e.get("dur") or 0)


def _contains(outer: dict, inner: dict) -> bool:
    """`outer`'s [ts, ts + dur] holds `inner`'s, on the same thread (exact decimal µs)."""
    (a, b), (c, d) = _span_us(outer), _span_us(inner)
    same = (str(outer.get("pid")), str(outer.get("tid"))) == (str(inner.get("pid")), str(inner.get("tid")))
    return same and a <= c and d <= b


def _raw_or_skip(path: Path) -> list[dict]:
    raw = _raw(path)
    if raw is None:
        pytest.skip(f"{path.name} is not plain JSON (read by tracekit's recovery only)")
    return raw


@pytest.mark.parametrize("path", TRACES)
def test_every_op_link_contains_its_launch_on_the_same_thread(path: Path) -> None:
    raw = _raw_or_skip(path)
    trace = tracekit.load(path)
    links = launch_ops(trace).filter(pl.col("link").is_in(["external_id", "containment"]))
    bad = [(c, o) for c, o in links.select("eid", "op_eid").iter_rows()
           if not _contains(_event(raw, o), _event(raw, c))]
    assert not bad, f"{len(bad)} of {links.height} links name an op that does not hold the call: {bad[:5]}"


@pytest.mark.parametrize("path", TRACES)
def test_every_parent_contains_its_child(path: Path) -> None:
    raw = _raw_or_skip(path)
    ops = cpu_ops(tracekit.load(path)).filter(pl.col("parent_eid").is_not_null())
    bad = [(c, p) for c, p in ops.select("eid", "parent_eid").iter_rows()
           if not _contains(_event(raw, p), _event(raw, c))]
    assert not bad, f"{len(bad)} of {ops.height} ops have a parent that does not contain them: {bad[:5]}"


def _ns(us: object) -> int:
    return round(Decimal(us) * 1000)  # type: ignore[arg-type]


def _raw_ops(raw: list[dict], eids: list[int]) -> pl.DataFrame:
    rows = [(i, str(raw[i].get("pid")), str(raw[i].get("tid")), _ns(raw[i]["ts"]), _ns(raw[i].get("dur") or 0))
            for i in eids]
    schema = {"eid": pl.Int64, "pid": pl.String, "tid": pl.String, "ts": pl.Int64, "dur": pl.Int64}
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    return frame.with_columns(end=pl.col("ts") + pl.col("dur"))


@pytest.mark.parametrize("path", TRACES)
def test_no_top_level_op_lies_inside_a_longer_op(path: Path) -> None:
    """From the raw spans: a top-level op has no longer op on its thread that holds it."""
    raw = _raw_or_skip(path)
    ops = cpu_ops(tracekit.load(path))
    spans = _raw_ops(raw, ops["eid"].to_list()).join(ops.select("eid", "depth"), on="eid")
    thread = ["pid", "tid"]
    # in (start, longer first) order, the latest end among the ops that start earlier or are
    # longer: an op whose end that reaches lies inside one of them
    before = (spans.sort([*thread, "ts", "dur", "eid"], descending=[False, False, False, True, False])
              .with_columns(_reach=pl.col("end").cum_max().shift(1).over(thread))
              .with_columns(_reach=pl.col("_reach").first().over([*thread, "ts", "dur"])))
    inside = before.filter((pl.col("depth") == 0) & (pl.col("_reach") >= pl.col("end")))
    assert inside.is_empty(), f"{inside.height} top-level ops lie inside a longer op: {inside.head(5)}"


@pytest.mark.parametrize("path", TRACES)
def test_self_time_never_exceeds_total(path: Path) -> None:
    a = _analysis(path)
    att = a.attribution
    inst = op_instances(att, a.trace)
    over_cpu = inst.filter(pl.col("self_ns") > pl.col("dur_ns"))
    over_gpu = inst.filter(pl.col("gpu_self_ns") > pl.col("gpu_incl_ns"))
    assert over_cpu.is_empty(), f"CPU self > total: {over_cpu.head(5)}"
    assert over_gpu.is_empty(), f"GPU self > inclusive: {over_gpu.head(5)}"
    names = att.ops
    assert names.filter(pl.col("cpu_self_ns") > pl.col("cpu_total_ns")).is_empty()
    assert names.filter(pl.col("gpu_self_ns") > pl.col("gpu_incl_ns")).is_empty()


@pytest.mark.parametrize("path", TRACES)
def test_self_gpu_time_sums_to_the_linked_gpu_total(path: Path) -> None:
    raw = _raw_or_skip(path)
    a = _analysis(path)
    att = a.attribution
    linked = att.gpu.filter(pl.col("op_eid").is_not_null())
    assert int(op_instances(att, a.trace)["gpu_self_ns"].sum()) == int(linked["dur_ns"].sum())
    assert int(att.ops["gpu_self_ns"].sum()) == int(linked["dur_ns"].sum())
    # every GPU event whose launch call (same correlation) sits inside an op on its thread is linked
    calls: dict[int, dict] = {}
    for e in raw:
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver", "runtime"):
            corr = (e.get("args") or {}).get("correlation")
            if isinstance(corr, int):
                calls.setdefault(corr, e)
    ops = cpu_ops(a.trace)
    by_thread: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for i in ops["eid"].to_list():
        by_thread.setdefault((str(raw[i].get("pid")), str(raw[i].get("tid"))), []).append(_span_us(raw[i]))
    should = set()
    for eid in att.gpu["eid"].to_list():
        call = calls.get((raw[eid].get("args") or {}).get("correlation"))
        if call is None:
            continue
        c0, c1 = _span_us(call)
        spans = by_thread.get((str(call.get("pid")), str(call.get("tid"))), [])
        if any(a <= c0 and c1 <= b for a, b in spans):
            should.add(eid)
    missing = should - set(linked["eid"].to_list())
    assert not missing, f"{len(missing)} GPU events launched inside an op are tied to none: {sorted(missing)[:5]}"


def _communication_names(names: list[str]) -> set[str]:
    if not names:
        return set()
    classes = classify_names(pl.Series(names, dtype=pl.String))
    return set(classes.filter(pl.col("kernel_class") == "communication")["name"].to_list())


def _union_ns(spans: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for a, b in sorted(spans):
        if reach is None or a > reach:
            total += b - a
            reach = b
        elif b > reach:
            total += b - reach
            reach = b
    return total


@pytest.mark.parametrize("path", TRACES)
def test_communication_is_one_figure(path: Path) -> None:
    """The breakdown's communication, the kernel table's and the critical path's are the same
    kernels: those the taxonomy classes `communication`, recomputed from the raw events."""
    raw = _raw_or_skip(path)
    a = _analysis(path)
    kernels = [(i, e) for i, e in enumerate(raw)
               if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel"]
    comm = _communication_names(sorted({str(e.get("name")) for _, e in kernels}))
    comm_kernels = [(i, e) for i, e in kernels if str(e.get("name")) in comm]
    per_device: dict[str, list[tuple[int, int]]] = {}
    for _, e in comm_kernels:
        ts, dur = _ns(e["ts"]), _ns(e.get("dur") or 0)
        per_device.setdefault(str(e.get("pid")), []).append((ts, ts + dur))
    union = sum(_union_ns(v) for v in per_device.values())
    total = sum(_ns(e.get("dur") or 0) for _, e in comm_kernels)
    assert a.breakdown.communication_total_ns == pytest.approx(union, abs=len(comm_kernels) + 1)
    table = a.kernels.filter(pl.col("kernel_class") == "communication")
    assert int(table["total_ns"].sum()) == pytest.approx(total, abs=len(comm_kernels) + 1)
    assert set(table["name"].to_list()) == comm
    cp = a.critical_path
    if cp is not None and not cp.segments.is_empty():
        gpu = cp.segments.filter(pl.col("lane").cast(pl.String).str.starts_with("gpu:")
                                 & pl.col("eid").is_not_null())
        said = set(gpu.filter(pl.col("cls") == "communication")["eid"].to_list())
        comm_eids = {i for i, _ in comm_kernels}
        kernel_eids = {i for i, _ in kernels}
        on_path = {e for e in gpu["eid"].to_list() if e in kernel_eids}
        assert said == on_path & comm_eids


@pytest.mark.parametrize("path", TRACES)
def test_no_roofline_efficiency_above_one(path: Path) -> None:
    r = _analysis(path).roofline
    if r is None:
        return
    for frame in (r.ops, r.calls, r.op_types, r.kernels, r.classes):
        if "efficiency" in frame.columns:
            over = frame.filter(pl.col("efficiency") > 1.0 + 1e-9)
            assert over.is_empty(), f"efficiency above 100 %: {over.head(5)}"
    if r.efficiency is not None:
        assert r.efficiency <= 1.0 + 1e-9


@pytest.mark.real
@pytest.mark.parametrize("path", all_real_traces(), ids=lambda p: str(p.relative_to(SHARED_TRACES)))
def test_other_holds_little_kernel_time(path: Path) -> None:
    """Each real GPU trace's kernels are read: at most 5 % of kernel time is class `other`."""
    raw = _raw_or_skip(path)
    time: dict[str, int] = {}
    for e in raw:
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel":
            name = str(e.get("name"))
            time[name] = time.get(name, 0) + _ns(e.get("dur") or 0)
    total = sum(time.values())
    if not total:
        pytest.skip(f"{path.name} has no kernels")
    classes = classify_names(pl.Series(list(time), dtype=pl.String))
    other = classes.filter(pl.col("kernel_class") == "other")["name"].to_list()
    other_ns = sum(time[n] for n in other)
    left = sorted(other, key=lambda n: -time[n])[:15]
    assert other_ns <= MAX_OTHER_SHARE * total, (
        f"`other` holds {other_ns / total:.1%} of kernel time; names left: "
        + "; ".join(f"{n[:90]} ({time[n]} ns)" for n in left))
