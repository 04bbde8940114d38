"""Batch rows and index page: capture time from calendar timestamps, the PyTorch flag,
row names that keep their folder, and trend lines that join only comparable traces."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
from pathlib import Path

import pytest
from builders import TraceBuilder
from conftest import real_trace

import tracekit
from tracekit.batch.rows import trace_values

EPOCH_2024_US = 1_712_195_495_406_752  # 2024-04-04 01:51:35.406752 UTC


def utc(us: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(us // 1_000_000, dt.UTC) + dt.timedelta(microseconds=us % 1_000_000)


def raw_first_ts_us(path: Path) -> float:
    """The earliest `ts` of the file's complete (`X`) events, read with json alone."""
    with gzip.open(path, "rt") if path.name.endswith(".gz") else open(path) as fh:
        doc = json.load(fh)
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    return min(e["ts"] for e in events if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e)


def one_kernel_trace(t0_ns: int, **kw) -> TraceBuilder:
    b = TraceBuilder(**kw)
    ext = b.op("aten::mm", t0_ns, 5_000)
    b.launch_kernel("gemm", launch_ns=t0_ns + 1_000, launch_dur_ns=2_000, start_ns=t0_ns + 10_000,
                    dur_ns=40_000, ext=ext)
    return b


# -- capture time ---------------------------------------------------------------------------


def test_capture_time_from_calendar_timestamps(tmp_path):
    # No baseTimeNanoseconds; the first event (the op) at 1712195495406752.5 µs: calendar time.
    t = one_kernel_trace(EPOCH_2024_US * 1000 + 500).load(tmp_path)
    v = trace_values(t)
    assert v["captured_at_source"] == "timestamps"
    assert v["captured_at"] == 1_712_195_495_406_752
    assert utc(v["captured_at"]) == dt.datetime(2024, 4, 4, 1, 51, 35, 406_752, dt.UTC)


def test_offsets_are_not_calendar_time(tmp_path):
    # 10^15 µs and below is an offset (from a process or boot start), not a date.
    v = trace_values(one_kernel_trace(10**18 - 20_000).load(tmp_path))
    assert (v["captured_at"], v["captured_at_source"]) == (None, None)


def test_base_time_wins_over_timestamps(tmp_path):
    base = 1_790_000_000_000_000_000
    v = trace_values(one_kernel_trace(2_000_000, base_time_ns=base).load(tmp_path))
    assert (v["captured_at"], v["captured_at_source"]) == ((base + 2_000_000) // 1000, "base_time")


# Earliest `ts` of each file as read from its raw JSON (µs since the epoch), by hand from
# `raw_first_ts_us`; the traces carry no baseTimeNanoseconds.
CALENDAR = {
    "a100_alexnet_cuda_sync.json.gz": (1_695_835_542_481_129, dt.datetime(2023, 9, 27, 17, 25, 42, 481_129, dt.UTC)),
    "resnet50_2021_array_form.json.gz": (1_606_910_596_288_053, dt.datetime(2020, 12, 2, 12, 3, 16, 288_053, dt.UTC)),
    "v100_resnet_ns_timestamps.json.gz": (1_712_195_495_406_752, dt.datetime(2024, 4, 4, 1, 51, 35, 406_752, dt.UTC)),
    "dlrm_8rank_v100/worker0.json.gz": (1_694_128_201_426_556, dt.datetime(2023, 9, 7, 23, 10, 1, 426_556, dt.UTC)),
}


@pytest.mark.real
@pytest.mark.parametrize("name", sorted(CALENDAR))
def test_real_capture_times_from_timestamps(name):
    path = real_trace(name)
    us, when = CALENDAR[name]
    assert int(raw_first_ts_us(path)) == us  # the pinned value is the file's own
    v = trace_values(tracekit.load(path, workers=0, lean=True))
    assert v["captured_at_source"] == "timestamps"
    assert v["captured_at"] == us and utc(v["captured_at"]) == when


@pytest.mark.real
def test_generic_chrome_trace_has_no_capture_time():
    # A browser trace: its timestamps (4.6e11 µs) are a monotonic clock, not calendar time.
    path = real_trace("chrome_browser_lthi_generic.json.gz")
    assert raw_first_ts_us(path) < 1e15
    v = trace_values(tracekit.load(path, workers=0, lean=True))
    assert (v["captured_at"], v["captured_at_source"]) == (None, None)


# -- PyTorch or not -------------------------------------------------------------------------

GENERIC = {"traceEvents": [{"ph": "X", "cat": "renderer", "name": "Paint", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
                           {"ph": "B", "cat": "v8", "name": "GC", "pid": 1, "tid": 1, "ts": 20},
                           {"ph": "E", "cat": "v8", "name": "GC", "pid": 1, "tid": 1, "ts": 30}]}


def raw_has_kineto_markers(path: Path) -> bool:
    """Kineto's markers read with json alone: cpu_op/kernel events (old spellings Operator/Kernel),
    schemaVersion or deviceProperties."""
    with gzip.open(path, "rt") if path.name.endswith(".gz") else open(path) as fh:
        doc = json.load(fh)
    top = doc if isinstance(doc, dict) else {}
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    cats = {e.get("cat") for e in events if isinstance(e, dict)}
    return bool(cats & {"cpu_op", "kernel", "Operator", "Kernel"}) or "schemaVersion" in top or "deviceProperties" in top


def test_generic_chrome_trace_is_not_pytorch(tmp_path):
    path = tmp_path / "browser.json"
    path.write_text(json.dumps(GENERIC))
    assert trace_values(tracekit.load(path))["pytorch"] is False
    assert trace_values(one_kernel_trace(0).load(tmp_path))["pytorch"] is True


def test_old_kineto_spellings_are_pytorch(tmp_path):
    # The 2021 bare-array form: no schemaVersion, no deviceProperties, `Operator` and `Kernel`.
    events = [{"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(events))
    assert trace_values(tracekit.load(path))["pytorch"] is True


@pytest.mark.real
@pytest.mark.parametrize(
    "name,pytorch",
    [("chrome_browser_lthi_generic.json.gz", False), ("resnet50_2021_array_form.json.gz", True),
     ("h100_qwen15_05b_hf_inference.json.gz", True)],
)
def test_real_pytorch_flag(name, pytorch):
    path = real_trace(name)
    assert raw_has_kineto_markers(path) is pytorch
    assert trace_values(tracekit.load(path, workers=0, lean=True))["pytorch"] is pytorch


def test_index_flags_a_trace_that_is_not_pytorch(tmp_path):
    from tracekit.batch import run_batch

    src = tmp_path / "src"
    src.mkdir()
    (src / "browser.json").write_text(json.dumps(GENERIC))
    one_kernel_trace(0).write(src / "model.json.gz")
    result = run_batch([str(src)], out_dir=tmp_path / "out", jobs=1)
    by_file = {Path(r["source"]).name: r["pytorch"] for r in result.summary.iter_rows(named=True)}
    assert by_file == {"browser.json": False, "model.json.gz": True}
    html = (tmp_path / "out" / "index.html").read_text()
    badge = '<td class="label" data-v="not a PyTorch trace">not a PyTorch trace</td>'
    assert html.count(badge) == 1 and html.count(">PyTorch</td>") == 1
    assert "<dt>not PyTorch traces</dt><dd>1</dd>" in html


# -- rows keep their folder -----------------------------------------------------------------


def nested(tmp_path: Path) -> Path:
    """traces/jobA/worker{0,1}.json.gz, traces/jobB/worker0.json.gz, traces/top.json.gz."""
    root = tmp_path / "traces"
    for sub, n in (("jobA", 2), ("jobB", 1)):
        (root / sub).mkdir(parents=True)
        for i in range(n):
            one_kernel_trace(i * 1_000_000).write(root / sub / f"worker{i}.json.gz")
    one_kernel_trace(0).write(root / "top.json.gz")
    return root


def test_expand_labels_keep_the_folder(tmp_path):
    from tracekit.batch.sources import expand

    root = nested(tmp_path)
    by_dir = {i.label for i in expand(str(root))}
    assert by_dir == {"jobA/worker0.json.gz", "jobA/worker1.json.gz", "jobB/worker0.json.gz", "top.json.gz"}
    by_glob = {i.label for i in expand(str(root / "job*" / "*.json.gz"))}
    assert by_glob == {"jobA/worker0.json.gz", "jobA/worker1.json.gz", "jobB/worker0.json.gz"}
    one = str(root / "jobB" / "worker0.json.gz")
    assert [i.label for i in expand(one)] == [one]  # a file named directly: as given
    grouped = {i.label for i in expand(str(root), group_ranks=True)}
    assert grouped == {"jobA/worker*.json.gz", "jobB/worker0.json.gz", "top.json.gz"}


def test_rows_and_index_show_the_path_not_the_hashed_name(tmp_path):
    from tracekit.batch import run_batch

    root = nested(tmp_path)
    result = run_batch([str(root)], out_dir=tmp_path / "out", jobs=1)
    s = result.summary.sort("path")
    assert s["path"].to_list() == ["jobA/worker0.json.gz", "jobA/worker1.json.gz", "jobB/worker0.json.gz",
                                   "top.json.gz"]
    assert s["name"].n_unique() == 4  # the file-name-safe unique id stays, for reports and joins
    html = (tmp_path / "out" / "index.html").read_text()
    cells = re.findall(r'<td class="name"[^>]*>([^<]*)</td>', html)
    assert cells == ["jobA/worker0.json.gz", "jobA/worker1.json.gz", "jobB/worker0.json.gz", "top.json.gz"]


# -- trend lines join only comparable traces --------------------------------------------------


def summary_rows(rows: list[dict]):
    from tracekit.batch.schema import SUMMARY_SCHEMA, frame

    return frame(rows, SUMMARY_SCHEMA)


DAY_US = 86_400 * 10**6
T0_US = 1_790_000_000 * 10**6


def test_trend_lines_one_per_gpu_and_workload():
    from tracekit.batch.index import trend_charts

    rows = [
        # two H100 runs of tiny-a (model from the capture), one of tiny-b, two V100 traces of folder dlrm
        {"path": "x/a1.json", "source": "/r/x/a1.json", "devices": "H100", "model": "tiny-a",
         "captured_at": T0_US, "gpu_utilisation": 0.5},
        {"path": "y/a2.json", "source": "/r/y/a2.json", "devices": "H100", "model": "tiny-a",
         "captured_at": T0_US + 2 * DAY_US, "gpu_utilisation": 0.7},
        {"path": "x/b.json", "source": "/r/x/b.json", "devices": "H100", "model": "tiny-b",
         "captured_at": T0_US + DAY_US, "gpu_utilisation": 0.9},
        {"path": "dlrm/w0.json", "source": "/r/dlrm/w0.json", "devices": "V100", "captured_at": T0_US + DAY_US,
         "gpu_utilisation": 0.2},
        {"path": "dlrm/w1.json", "source": "/r/dlrm/w1.json", "devices": "V100",
         "captured_at": T0_US + 3 * DAY_US, "gpu_utilisation": 0.4},
    ]
    (chart,) = trend_charts(summary_rows(rows))  # only utilisation is set
    got = {s.label: [p.title.split(" (")[0] for p in s.points] for s in chart.series}
    assert got == {
        "H100 · tiny-a": ["x/a1.json", "y/a2.json"],
        "H100 · tiny-b": ["x/b.json"],
        "V100 · dlrm/w#": ["dlrm/w0.json", "dlrm/w1.json"],
    }
    lone = next(s for s in chart.series if s.label == "H100 · tiny-b")
    assert lone.polyline == ""  # a single trace is a point, never joined to another group's
    # Shared axes: x from the first (T0) to the last capture (T0 + 3 days), utilisation 0..1.
    v100 = next(s for s in chart.series if s.label == "V100 · dlrm/w#")
    plot_w, plot_h = 1000 - 70 - 20, 220 - 12 - 28
    assert v100.polyline == f"{70 + plot_w / 3:.1f},{12 + plot_h * 0.8:.1f} {70 + plot_w:.1f},{12 + plot_h * 0.6:.1f}"


@pytest.mark.real
def test_real_trend_lines_never_join_gpus(tmp_path):
    from tracekit.batch import run_batch
    from tracekit.batch.index import trend_charts

    root = real_trace("dlrm_8rank_v100/worker0.json.gz").parent.parent
    pair = [str(root / n) for n in ("diff_control_a100_dlrm.json.gz", "diff_test_v100_dlrm.json.gz")]
    s = run_batch([str(root / "dlrm_8rank_v100" / "worker*.json.gz"), *pair], jobs=1).summary
    charts = {c.id: c for c in trend_charts(s)}
    labels = {x.label: len(x.points) for x in charts["trend-util"].series}
    # The 8 ranks share a GPU, a folder and a name but for their digits; the A100 and V100 DLRM
    # files (both in `traces`) stand alone: their GPUs and names differ.
    assert labels == {
        "Tesla V100-SXM2-32GB · dlrm_8rank_v100/worker#": 8,
        "NVIDIA A100-PG509-200 · traces/diff_control_a#_dlrm": 1,
        "Tesla V100-SXM2-16GB · traces/diff_test_v#_dlrm": 1,
    }
