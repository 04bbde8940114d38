"""What the commands refuse, and what they say besides their output: numbers that are not
numbers, a zoom window that does not exist, an output folder that does not exist, a trace
read from a broken file; the bare command; the Markdown report's rows and warnings."""

from __future__ import annotations

import gzip

import pytest
from report_fixtures import decode_trace

from tracekit.cli.main import main


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return decode_trace(3).write(tmp_path_factory.mktemp("checks") / "t.json.gz")


@pytest.fixture(scope="module")
def broken(tmp_path_factory, trace):
    """The same trace cut in the middle of its gzip stream: read in part, with warnings."""
    data = gzip.compress(gzip.decompress(trace.read_bytes()))
    path = tmp_path_factory.mktemp("broken") / "cut.json.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    return path


@pytest.mark.parametrize("args", [
    ["gaps", "{t}", "--min-gap-us", "nan"], ["gaps", "{t}", "--min-gap-us", "inf"],
    ["gaps", "{t}", "--min-gap-us", "-1"], ["gaps", "{t}", "--limit", "-2"], ["summary", "{t}", "--top", "0"],
    ["roofline", "{t}", "--peak-tflops", "inf", "--json"], ["roofline", "{t}", "--peak-gbps", "nan"],
    ["diff", "{t}", "{t}", "--fail-if-slower", "nan"],
])
def test_numbers_that_are_not_finite_or_in_range_are_usage_errors(trace, args, capsys):
    assert main([a.format(t=trace) for a in args] + ["--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tracekit: error: Invalid value for") and err.count("\n") == 1


def test_gaps_takes_top_as_well_as_limit(trace, capsys):
    assert main(["gaps", str(trace), "--top", "1", "--json", "--no-cache"]) == 0
    import json

    assert len(json.loads(capsys.readouterr().out)["longest"]) == 1


def test_the_bare_command_prints_its_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("Usage: tracekit [OPTIONS] COMMAND") and "Commands:" in out.out and out.err == ""


def test_annotate_into_a_missing_folder_is_an_output_error(trace, tmp_path, capsys):
    assert main(["annotate", str(trace), "-o", str(tmp_path / "nowhere" / "a.json"), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err == f"tracekit: error: cannot write {tmp_path / 'nowhere' / 'a.json'}: No such file or directory\n"


def test_report_zoom_on_no_annotation_is_refused_before_the_analysis(trace, tmp_path, capsys, monkeypatch):
    import tracekit.pipeline

    monkeypatch.setattr(tracekit.pipeline, "analyse", lambda *a, **k: pytest.fail("analysed anyway"))
    assert main(["report", str(trace), "--zoom", "nosuch", "-o", str(tmp_path / "r.html"), "--no-cache"]) == 2
    assert "no annotation matches --zoom 'nosuch'" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_markdown_rows_follow_top(trace, capsys):
    def shown(*extra: str) -> set[str]:
        assert main(["report", str(trace), "--format", "md", "--no-cache", *extra]) == 0
        return {line for line in capsys.readouterr().out.splitlines() if line.startswith("_") and " of " in line}

    assert shown("--top", "1")  # each table cut to one row says so
    assert all(line.startswith("_1 of ") for line in shown("--top", "1"))
    assert not any(line.startswith("_1 of ") for line in shown())  # default: 10 rows


def test_a_recovered_trace_says_so_on_every_command_and_in_the_markdown_report(broken, capsys):
    for command in (["summary"], ["kernels"], ["gaps"], ["findings"], ["critical-path"]):
        assert main([*command, str(broken), "--no-cache"]) == 0
        err = capsys.readouterr().err
        assert err.startswith(f"tracekit: warning: {broken}: the event array is truncated") and err.count("\n") == 1
    assert main(["report", str(broken), "--format", "md", "--no-cache"]) == 0
    out = capsys.readouterr()
    assert "**What the loader noticed**" in out.out and "- \\[warning\\] the event array is truncated" in out.out
    assert out.err.startswith("tracekit: warning:")
    assert main(["info", str(broken), "--no-cache"]) == 0  # info lists the warnings itself
    assert "tracekit: warning" not in capsys.readouterr().err


def test_a_whole_trace_gets_no_warning(trace, capsys):
    assert main(["summary", str(trace), "--no-cache"]) == 0
    assert capsys.readouterr().err == ""


def test_finding_thresholds_must_be_numbers_not_below_zero(trace, capsys):
    for value in ("-5", "nan", "1e400"):
        assert main(["findings", str(trace), "--set", f"gpu_gaps.min_gap_ns={value}", "--no-cache"]) == 2
        assert "gpu_gaps.min_gap_ns:" in capsys.readouterr().err
    assert main(["findings", str(trace), "--set", "gpu_gaps.min_gap_ns=5e6", "--no-cache"]) == 0


def test_an_instance_index_needs_a_window(trace, capsys):
    assert main(["critical-path", str(trace), "--index", "1", "--no-cache"]) == 2
    assert "an instance index needs a window" in capsys.readouterr().err
    assert main(["critical-path", str(trace), "--window", "ProfilerStep", "--index", "1", "--no-cache"]) == 0


def test_batch_of_sources_that_do_not_exist_is_a_usage_error(trace, tmp_path, capsys):
    assert main(["batch", str(tmp_path / "nothing"), "-o", str(tmp_path / "out"), "--jobs", "1"]) == 2
    assert capsys.readouterr().err == f"tracekit: error: no trace files found: {tmp_path / 'nothing'} does not exist\n"
    # one missing among real ones: a row with its error, the batch goes on, and exits 1
    assert main(["batch", str(tmp_path / "nothing"), str(trace), "-o", str(tmp_path / "out"), "--jobs", "1"]) == 1
    assert "(1 analysed, 0 cached, 1 failed)" in capsys.readouterr().out


def test_commands_on_a_trace_without_gpu_work_say_so(tmp_path, capsys):
    from builders import TraceBuilder

    b = TraceBuilder()
    b.op("aten::mm", 0, 1_000, tid=1)
    b.runtime("cudaMalloc", 100, 50, tid=2)  # a thread with runtime calls only
    b.raw({"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": 1000, "tid": 3, "ts": 0, "dur": 1})
    path = b.write(tmp_path / "cpu.json.gz")
    assert main(["kernels", str(path), "--no-cache"]) == 0
    assert capsys.readouterr().out == "no GPU kernels in this trace\n"
    assert main(["gaps", str(path), "--no-cache"]) == 0
    assert "idle by cause\n  none: no GPU activity in this trace" in capsys.readouterr().out
    assert main(["info", str(path), "--json", "--no-cache"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)[0]["threads"] == 2  # the op's and the call's, not the profiler's


def test_a_failed_load_leaves_no_cycle_that_keeps_its_frames(tmp_path):
    """The error a background load raised is handed over, not kept: kept (or held by a
    local of the frame that raises it), its traceback made a cycle holding the loader's
    frames and buffers (80 MB of an unfinished string) until the collector ran, once per
    command in a process that runs several."""
    import gc

    from tracekit.cli.common import Loading
    from tracekit.errors import TraceError

    bad = tmp_path / "zeros.json"
    bad.write_bytes(bytes(4096))
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        try:
            Loading(str(bad), warn=False).result()
        except TraceError:
            pass
        else:
            pytest.fail("the file loaded")
        gc.collect()
        assert [o for o in gc.garbage if isinstance(o, (TraceError, Loading))] == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
