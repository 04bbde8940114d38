"""The op tree and the launch -> op links against the raw events of every real trace.

The checks read the JSON themselves (gzip + json, exact decimal times) and hold tracekit's
frames (`links.cpu_ops`, `links.launch_ops`) to the rules of docs/metrics.md:

- a runtime call's op (link `external_id` or `containment`) is on the call's pid/tid and
  its [ts, end] contains the call's;
- a parent is on its child's thread and contains it (parent.ts <= child.ts, child.end <=
  parent.end);
- no top-level op lies inside an earlier op of positive length on its thread (earlier in
  the tree's order: start, longer first, event id; a zero-length op contains nothing);
- the tree is the one the stack of open ops gives (recomputed here), and an op's CPU self
  time (its duration less its children's) is never negative.

Run as a script for the figures: `python tests/test_links_tree_real.py [TRACE...]`.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import ROOT, all_real_traces  # noqa: E402

OP_CATS = {"cpu_op", "operator"}
CALL_CATS = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime", "hip_driver"}
FIXTURES = sorted(p for p in (ROOT / "tests" / "fixtures").glob("*.json*") if p.is_file())


def raw_events(path: Path) -> list[dict]:
    """The file's event array; a broken one gives the events read up to the break."""
    data = path.read_bytes()
    text = (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8", "replace")
    try:
        doc = json.loads(text, parse_float=Decimal)
        return doc["traceEvents"] if isinstance(doc, dict) else doc
    except (ValueError, KeyError):
        pass
    at = text.find("[", text.find('"traceEvents"') if '"traceEvents"' in text else 0) + 1
    decoder, out = json.JSONDecoder(parse_float=Decimal), []
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        try:
            event, at = decoder.raw_decode(text, at)
        except ValueError:
            return out
        out.append(event)


def _ns(value) -> int | None:
    if value is None or isinstance(value, (str, bool, dict, list)):
        return None
    return int((Decimal(value) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def raw_slices(path: Path) -> tuple[dict[int, tuple], dict[int, tuple]]:
    """(ops, calls): eid -> (pid, tid, ts_ns, end_ns, External id) of the complete `cpu_op`
    and runtime/driver events, read from the JSON (a negative duration counts as 0)."""
    ops, calls = {}, {}
    for eid, e in enumerate(raw_events(path)):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = str(e.get("cat", "")).lower()
        into = ops if cat in OP_CATS else calls if cat in CALL_CATS else None
        ts = _ns(e.get("ts"))
        if into is None or ts is None:
            continue
        dur = _ns(e.get("dur")) or 0
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        into[eid] = (str(e.get("pid")), str(e.get("tid")), ts, ts + max(dur, 0), args.get("External id"))
    return ops, calls


def contains(outer: tuple, inner: tuple) -> bool:
    return outer[:2] == inner[:2] and outer[2] <= inner[2] and inner[3] <= outer[3]


def stack_tree(ops: dict[int, tuple]) -> dict[int, tuple[int, int | None]]:
    """eid -> (depth, parent eid) by a stack: per thread in (start, longer first, eid)
    order, an op is the child of the innermost (last) earlier op that contains it: one of
    positive length that ends at or after it."""
    threads = defaultdict(list)
    for eid, (pid, tid, ts, end, _) in ops.items():
        threads[(pid, tid)].append((ts, -(end - ts), eid, end))
    tree = {}
    for rows in threads.values():
        stack: list[tuple[int, int, int]] = []  # (end, eid, duration)
        for ts, _, eid, end in sorted(rows):
            while stack and not (stack[-1][2] > 0 and end <= stack[-1][0]):
                stack.pop()
            tree[eid] = (len(stack), stack[-1][1] if stack else None)
            stack.append((end, eid, end - ts))
    return tree


def check(path: Path) -> dict[str, int]:
    """The counts of every broken rule on one trace (all 0 when tracekit is right), and the
    sizes that say what was checked."""
    import polars as pl

    import tracekit
    from tracekit.analysis import links

    ops, calls = raw_slices(path)
    trace = tracekit.load(path)
    nested = links.cpu_ops(trace)
    launches = links.launch_ops(trace)
    tree = {e: (d, p) for e, d, p in nested.select("eid", "depth", "parent_eid").iter_rows()}
    out = {"ops": len(ops), "calls": len(calls), "op_rows": nested.height}
    out["op_rows_not_raw"] = sum(1 for e in tree if e not in ops)
    out["parent_not_containing"] = sum(1 for e, (_, p) in tree.items() if p is not None and not contains(ops[p], ops[e]))
    out["tree_differs_from_stack"] = sum(1 for e, want in stack_tree(ops).items() if tree.get(e) != want)
    # inside an earlier op of positive length: the largest end of these reaches its end
    threads = defaultdict(list)
    for eid, (pid, tid, ts, end, _) in ops.items():
        threads[(pid, tid)].append((ts, -(end - ts), eid, end))
    inside = 0
    for rows in threads.values():
        reach = None
        for ts, neg, eid, end in sorted(rows):
            inside += tree.get(eid, (None,))[0] == 0 and reach is not None and reach >= end
            if neg < 0:
                reach = end if reach is None else max(reach, end)
    out["top_level_inside_op"] = inside
    children = defaultdict(int)
    for e, (_, p) in tree.items():
        if p is not None:
            children[p] += ops[e][3] - ops[e][2]
    out["self_above_total"] = sum(1 for p, c in children.items() if c > ops[p][3] - ops[p][2])
    bad = {"external_id": 0, "containment": 0}
    for eid, op, link in launches.select("eid", "op_eid", pl.col("link").cast(pl.String)).iter_rows():
        if op is not None and link in bad and (eid not in calls or op not in ops or not contains(ops[op], calls[eid])):
            bad[link] += 1
    out["external_id_links"] = int((launches["link"] == "external_id").sum())
    out["external_id_links_not_containing"] = bad["external_id"]
    out["containment_links_not_containing"] = bad["containment"]
    by_ext = defaultdict(list)
    for eid, op in ops.items():
        if op[4] is not None:
            by_ext[op[4]].append(op)
    named = [c for c in calls.values() if c[4] in by_ext]
    out["calls_ext_naming_an_op"] = len(named)
    out["calls_ext_naming_no_containing_op"] = sum(1 for c in named if not any(contains(o, c) for o in by_ext[c[4]]))
    return out


BROKEN = ("parent_not_containing", "tree_differs_from_stack", "top_level_inside_op", "self_above_total",
          "external_id_links_not_containing", "containment_links_not_containing", "op_rows_not_raw")


def _traces() -> list[Path]:
    return all_real_traces() + FIXTURES


@pytest.mark.real
@pytest.mark.parametrize("path", _traces(), ids=lambda p: p.name)
def test_tree_and_links_hold_on_the_raw_events(path: Path):
    found = check(path)
    assert {k: found[k] for k in BROKEN} == dict.fromkeys(BROKEN, 0), found


@pytest.mark.real
def test_every_shared_trace_is_checked():
    if not all_real_traces():
        pytest.skip("../shared/traces is absent")
    assert len(_traces()) > 20


if __name__ == "__main__":
    for p in [Path(a) for a in sys.argv[1:]] or _traces():
        print(p.name, check(p))
