"""Hostile and broken input: every case of `hostile_corpus` ends cleanly; nothing is ever lost.

Each corpus case runs through the real CLI in a subprocess (`python -m tracekit info PATH`)
under a 2 GB address-space limit and a 20 s timeout, and through `tracekit.load` in this
process. The contract (see `hostile_corpus`): (a) exit 2 with one line on stderr saying
what is wrong and where, or (b) exit 0 with the problems counted in `trace.warnings` and
printed by `tracekit info`. Never a traceback, a hang or an unbounded allocation.

Nothing lost: the input's bytes, mtime, mode and directory are unchanged by `load` and by
every one-argument command; `report -o` (and `roofline --svg`) replace their output
atomically, even when the disk fills up mid-write.

Known failures are listed in KNOWN_CLI / KNOWN_LIB / KNOWN_MATRIX with the reason; they
are strict xfails, so a fix makes them fail until the entry is removed.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from builders import TraceBuilder
from hostile_corpus import (
    NULL_IS_ABSENT,
    SANDWICH,
    WRONG,
    Doc,
    Expect,
    bomb_cases,
    good,
    hostile_cases,
    sandwich,
    wrong_type_event,
)

import tracekit
from tracekit.errors import TraceError
from tracekit.loader.source import RATIO_ENV
from tracekit.model import SCHEMAS

ROOT = Path(tracekit.__file__).resolve().parents[1]  # the tracekit this process imported
MEMORY_LIMIT = 2 << 30
TIMEOUT_S = 20
CASES = hostile_cases()
EXPECT = {name: expect for name, _, expect in CASES}

# -- known failures (strict xfails: remove an entry when its fix lands) --------------------

KNOWN_CLI: dict[str, str] = {}
KNOWN_LIB: dict[str, str] = {}
KNOWN_MATRIX: dict[tuple[str, str], str] = {}


def _params(known: dict[str, str], *, lib: bool = False) -> list:
    out = []
    for name, _, expect in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=known[name])] if name in known else []
        if lib and not expect.in_process:
            marks.append(pytest.mark.skip(reason="never opened in the test process (would block or exhaust it)"))
        if not lib and name in NOT_RUN:  # known to fail, and running it costs 20 s of CPU
            marks = [pytest.mark.xfail(strict=True, run=False, reason=known[name])]
        out.append(pytest.param(name, id=name, marks=marks))
    return out


# -- running the CLI -----------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    rc: int | None  # None: killed after the timeout
    stdout: str
    stderr: str
    seconds: float


_LIBC = ctypes.CDLL(None, use_errno=True)
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2
CANNOT_DROP = 97


def _preexec(*, deny_reads: bool = False, fsize: int | None = None):
    """Child setup: 2 GB address space; optionally root's file-permission bypass dropped, a file-size cap."""

    def setup() -> None:
        if "libasan" not in os.environ.get("LD_PRELOAD", ""):  # ASan maps ~15 TB of shadow memory
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap fails with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if deny_reads and os.geteuid() == 0:
            # root reads chmod-000 files through CAP_DAC_*; drop them from the bounding set so the
            # exec'd interpreter runs without them and permissions apply as to anyone else
            for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
                if _LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                    os._exit(CANNOT_DROP)

    return setup


def run_cli(*args: str, deny_reads: bool = False, fsize: int | None = None, cwd: Path | None = None,
            timeout: float = TIMEOUT_S) -> Run:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "100"}
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "tracekit", *args], capture_output=True, env=env, check=False,
                              stdin=subprocess.DEVNULL, timeout=timeout, cwd=cwd or ROOT,
                              preexec_fn=_preexec(deny_reads=deny_reads, fsize=fsize))
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace"), (exc.stderr or b"").decode(errors="replace")
        return Run(None, *out, time.monotonic() - start)
    return Run(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"),
               time.monotonic() - start)


def read_denied(path: Path) -> bool:
    """Can this machine make a read of `path` fail with EACCES (dropping root's bypass if need be)?"""
    probe = subprocess.run([sys.executable, "-c", f"open({str(path)!r}, 'rb')"], capture_output=True, check=False,
                           preexec_fn=_preexec(deny_reads=True), timeout=TIMEOUT_S)
    return probe.returncode not in (0, CANNOT_DROP) and b"PermissionError" in probe.stderr


def cli_options(command: str) -> set[str]:
    from tracekit.cli.main import cli

    cmd = cli.get_command(None, command)  # type: ignore[arg-type]
    return {opt for p in cmd.params for opt in getattr(p, "opts", ())} if cmd else set()


# a decompression limit for the bomb, once the CLI has a way to set one; until then the bomb
# is not run through the CLI (see KNOWN_CLI["gzip_bomb"])
EXTRA_ARGS = {"gzip_bomb": ("--max-bytes", "10000000")} if "--max-bytes" in cli_options("info") else {}
NOT_RUN = set() if EXTRA_ARGS else {"gzip_bomb"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("hostile")
    paths = {name: writer(base) for name, writer, _ in CASES}
    yield paths
    for p in (paths["unreadable_file"], paths["unreadable_directory"].parent):
        p.chmod(0o755)


@pytest.fixture(scope="module")
def cli_runs(request, corpus) -> dict[str, Run]:
    """Run the CLI on every selected case, several at a time (most of the time is start-up)."""
    wanted = {item.callspec.params["name"] for item in request.session.items
              if item.originalname == "test_cli_contract" and hasattr(item, "callspec")} - NOT_RUN

    def one(name: str) -> tuple[str, Run]:
        deny = EXPECT[name].needs_denied_read
        return name, run_cli("info", *EXTRA_ARGS.get(name, ()), str(corpus[name]), deny_reads=deny)

    order = sorted(wanted, key=lambda n: n not in ("fifo", "symlink_to_dev_zero", "gzip_bomb"))  # slow first
    with ThreadPoolExecutor(max_workers=max(4, (os.cpu_count() or 2) * 2)) as pool:
        return dict(pool.map(one, order))


# -- the contract --------------------------------------------------------------------------

POSITION = re.compile(r"\b(byte|event|offset)s? #?[\d,]+", re.IGNORECASE)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 (but tab, newline) and C1 controls


def check_error_line(run: Run, expect: Expect) -> None:
    assert run.rc == 2, f"exit {run.rc}, expected 2; stderr: {run.stderr[-300:]!r}"
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {run.stderr[:500]!r}"
    line = lines[0]
    assert line.startswith("tracekit: error: "), line
    for fragment in expect.says:
        assert fragment.lower() in line.lower(), f"{fragment!r} not in {line!r}"
    if expect.where:
        assert POSITION.search(line), f"no byte offset / event index in {line!r}"


def warnings_section(text: str) -> str | None:
    _, sep, rest = text.partition("\nwarnings\n")
    return rest if sep else None


def check_partial_run(run: Run, expect: Expect) -> None:
    assert run.rc == 0, f"exit {run.rc}, expected 0; stderr: {run.stderr[-300:]!r}"
    assert run.stderr.strip() == "", run.stderr[-300:]
    section = warnings_section(run.stdout)
    if expect.warns:
        assert section, f"`tracekit info` shows no warnings:\n{run.stdout[-800:]}"
    for code in expect.codes:
        assert section and code in section, f"warning {code!r} not shown by `tracekit info`:\n{section}"
    for fragment in expect.says:
        assert section and fragment.lower() in section.lower(), f"{fragment!r} not in the warnings:\n{section}"


@pytest.mark.parametrize("name", _params(KNOWN_CLI))
def test_cli_contract(name, cli_runs, corpus):
    expect = EXPECT[name]
    run = cli_runs[name]
    if expect.needs_denied_read and not read_denied(corpus[name]):
        pytest.skip("this machine cannot make the read fail (root without CAP_SETPCAP)")
    assert run.rc is not None, f"hung: killed after {TIMEOUT_S} s"
    assert "Traceback" not in run.stderr + run.stdout, run.stderr[-2000:]
    assert run.rc >= 0, f"killed by signal {-run.rc} (memory limit?)"
    raw = CONTROL.findall(run.stdout + run.stderr)
    assert not raw, f"raw control characters reach the terminal: {sorted(set(raw))!r}"
    if expect.outcome == "error":
        check_error_line(run, expect)
    elif expect.outcome == "partial":
        check_partial_run(run, expect)
    elif run.rc == 2:
        check_error_line(run, expect)
    else:
        check_partial_run(run, expect)


# -- the same cases through the library ----------------------------------------------------


def all_names(trace: tracekit.Trace) -> set[str]:
    frames = (trace.ops, trace.runtime, trace.gpu, trace.flows, trace.counters, trace.instants)
    return {n for f in frames for n in f["name"].drop_nulls().to_list()}


def check_invariants(trace: tracekit.Trace) -> None:
    """Documented schemas; every slice has `end_ns == ts_ns + dur_ns` exactly and `dur_ns >= 0`."""
    for name, schema in SCHEMAS.items():
        assert dict(getattr(trace, name).schema) == schema, name
    for frame in (trace.ops, trace.runtime, trace.gpu):
        for ts, dur, end in frame.select("ts_ns", "dur_ns", "end_ns").iter_rows():
            assert ts is not None and dur is not None and dur >= 0, (ts, dur)
            assert end == ts + dur, f"end_ns {end} != {ts} + {dur} (Int64 overflow?)"


def check_partial_trace(trace: tracekit.Trace, expect: Expect) -> None:
    check_invariants(trace)
    codes = dict(zip(trace.warnings["code"], trace.warnings["count"]))
    assert all(n > 0 for n in codes.values()), codes
    missing = [c for c in expect.codes if c not in codes]
    assert not missing, f"warnings {missing} not counted; got {codes}"
    if expect.warns:
        assert codes, "nothing counted in trace.warnings"
    messages = " ".join(trace.warnings["message"]).lower()
    for fragment in expect.says:
        assert fragment.lower() in messages, f"{fragment!r} not in the warnings: {messages[:300]}"
    lost = [n[:40] for n in expect.names if n not in all_names(trace)]
    assert not lost, f"sound events lost: {lost}"
    if expect.events is not None:
        assert trace.meta.event_count == expect.events
    if expect.min_events is not None:
        assert trace.meta.event_count >= expect.min_events


@pytest.mark.parametrize("name", _params(KNOWN_LIB, lib=True))
def test_library_contract(name, corpus):
    expect = EXPECT[name]
    path = corpus[name]
    if expect.needs_denied_read:
        try:
            path.open("rb").close()
            pytest.skip("running as root: the file can be read in this process")
        except PermissionError:
            pass
    kwargs = {"max_bytes": expect.max_bytes} if expect.max_bytes else {}
    try:
        trace = tracekit.load(path, **kwargs)
    except TraceError as exc:
        assert expect.outcome in ("error", "either"), f"raised {exc}"
        msg = str(exc)
        assert "\n" not in msg and msg.startswith(str(path)), msg
        for fragment in expect.says:
            assert fragment.lower() in msg.lower(), f"{fragment!r} not in {msg!r}"
        if expect.where:
            assert POSITION.search(msg), f"no position in {msg!r}"
        return
    except Exception as exc:  # noqa: BLE001  (the point: nothing but TraceError may escape)
        pytest.fail(f"raised {type(exc).__name__} (not TraceError): {str(exc)[:200]}")
    assert expect.outcome in ("partial", "either"), "loaded, but this input must be refused"
    check_partial_trace(trace, expect)


def test_truncation_keeps_exactly_the_complete_events(tmp_path):
    """Recovery keeps every event written before the cut, in order, and nothing else."""
    doc = Doc()
    checked = 0
    for name, writer, expect in CASES:
        if not name.startswith("truncated_") or expect.events is None:
            continue
        trace = tracekit.load(writer(tmp_path))
        x_names = [e["name"] for e in doc.events[: expect.events] if e["ph"] == "X"]
        got = pl.concat([trace.ops.select("eid", "name"), trace.runtime.select("eid", "name"),
                         trace.gpu.select("eid", "name")]).sort("eid")["name"].to_list()
        assert got == x_names, name
        assert 0 < expect.events < len(doc.events), name
        checked += 1
    assert checked >= 7


# -- wrong types, one field and one JSON type at a time ------------------------------------


def _kind(value) -> str:
    return type(value).__name__ if value is not None else "null"


MATRIX = [(field, value) for field, values in WRONG.items() for value in values]


@pytest.mark.parametrize(
    "field, value",
    [pytest.param(f, v, id=f"{f}-{_kind(v)}",
                  marks=[pytest.mark.xfail(strict=True, reason=KNOWN_MATRIX[(f, _kind(v))])]
                  if (f, _kind(v)) in KNOWN_MATRIX else [])
     for f, v in MATRIX],
)
def test_wrong_type_is_survived_and_counted(tmp_path, field, value):
    p = tmp_path / "t.json"
    p.write_bytes(sandwich(wrong_type_event(field, value)))
    trace = tracekit.load(p)
    check_invariants(trace)
    assert set(SANDWICH) <= all_names(trace), "sound events around the bad one were lost"
    if not (value is None and field in NULL_IS_ABSENT):
        assert trace.warnings["count"].sum() >= 1, f"{field}={value!r} was not counted in trace.warnings"


def test_sound_sandwich_has_no_warnings(tmp_path):
    """The matrix above is only meaningful if the sound events alone load without warnings."""
    p = tmp_path / "t.json"
    p.write_bytes(sandwich())
    assert tracekit.load(p).warnings.is_empty()


@pytest.mark.parametrize("name", [
    pytest.param("missing_file", id="missing_file"),
    pytest.param("directory", id="directory"),
    pytest.param("unreadable_file", id="unreadable_file"),
])
def test_single_trace_commands_also_answer_in_one_line(name, corpus):
    """`summary` (one TRACE argument, like kernels/ops/gaps/report) reports unreadable paths in one line too."""
    deny = EXPECT[name].needs_denied_read
    if deny and not read_denied(corpus[name]):
        pytest.skip("this machine cannot make the read fail (root without CAP_SETPCAP)")
    run = run_cli("summary", str(corpus[name]), deny_reads=deny)
    assert run.rc is not None and "Traceback" not in run.stderr
    check_error_line(run, EXPECT[name])


def test_corpus_is_large_and_named_uniquely():
    names = [name for name, _, _ in CASES]
    assert len(names) >= 40 and len(set(names)) == len(names)


# -- nothing lost: inputs are never modified; outputs are written atomically ----------------

ONE_ARG_COMMANDS = ("info", "summary", "kernels", "ops", "gaps", "attention", "roofline")


def _commands() -> list[str]:
    from tracekit.cli.main import cli

    return [c for c in cli.list_commands(None) if c in ONE_ARG_COMMANDS]


def _snapshot(path: Path) -> tuple:
    st = path.stat()
    listing = sorted(p.name for p in path.parent.iterdir())
    return path.read_bytes(), st.st_mtime_ns, st.st_mode, listing


@pytest.fixture
def inputs(tmp_path) -> list[Path]:
    doc = Doc()
    d = tmp_path / "in"
    d.mkdir()
    plain = d / "trace.json"
    plain.write_bytes(doc.data)
    crashed = d / "crashed.pt.trace.json.tmp"
    crashed.write_bytes(doc.data[: len(doc.data) * 2 // 3])
    b = TraceBuilder()
    b.launch_kernel("k", launch_ns=0, launch_dur_ns=1_000, start_ns=2_000, dur_ns=3_000)
    gz = b.write(d / "trace.json.gz")
    for p in (plain, crashed, gz):
        os.utime(p, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
        p.chmod(0o444)
    return [plain, crashed, gz]


def test_load_and_every_command_leave_the_input_untouched(inputs, tmp_path, monkeypatch, capsys):
    from tracekit.cli.main import main

    monkeypatch.chdir(tmp_path)
    commands = _commands()
    assert {"info", "summary"} <= set(commands)
    for path in inputs:
        before = _snapshot(path)
        tracekit.load(path)
        assert _snapshot(path) == before, f"load changed {path.name}"
        for cmd in commands:
            rc = main([cmd, str(path)])
            out = capsys.readouterr()
            assert rc == 0, f"{cmd} {path.name}: exit {rc}: {out.err[-300:]}"
            assert _snapshot(path) == before, f"`tracekit {cmd}` changed {path.name} or its directory"
        if "report" in _report_commands():
            out_file = tmp_path / f"{path.name}.report.html"
            assert main(["report", str(path), "-o", str(out_file)]) == 0, capsys.readouterr().err
            assert _snapshot(path) == before, f"`tracekit report` changed {path.name} or its directory"
            assert out_file.stat().st_size > 0


def _report_commands() -> list[str]:
    from tracekit.cli.main import cli

    return [c for c in cli.list_commands(None) if c == "report"]


needs_report = pytest.mark.skipif(not _report_commands(), reason="`tracekit report` does not exist yet")


def _dir_state(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


@needs_report
def test_report_failing_mid_write_leaves_no_partial_file(inputs, tmp_path, monkeypatch, capsys):
    """The rename that publishes the report fails: the old report stays, no temporary file is left."""
    from tracekit.cli.main import main

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    old = out_dir / "report.html"
    old.write_text("previous report")
    before = _dir_state(out_dir)

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device (simulated)")

    for name in ("replace", "rename"):
        monkeypatch.setattr(os, name, fail)
    monkeypatch.setattr(Path, "replace", fail)
    monkeypatch.setattr(Path, "rename", fail)
    rc = main(["report", str(inputs[0]), "-o", str(old)])
    err = capsys.readouterr().err
    assert rc != 0, "the report claimed success although it could not be written"
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert _dir_state(out_dir) == before, "a partial or temporary file was left behind"


@pytest.mark.parametrize("command", [
    pytest.param(["report", "{trace}", "-o", "{out}"], id="report", marks=needs_report),
    pytest.param(["roofline", "{trace}", "--svg", "{out}"], id="roofline-svg"),
])
def test_output_cut_short_by_the_disk_leaves_the_old_file(command, inputs, tmp_path):
    """The disk fills up mid-write (RLIMIT_FSIZE): the old output must survive whole, nothing partial."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / ("r.html" if command[0] == "report" else "r.svg")
    out.write_text("previous output")
    before = _dir_state(out_dir)
    args = [a.format(trace=inputs[0], out=out) for a in command]
    run = run_cli(*args, fsize=1024, cwd=tmp_path)
    assert run.rc is not None and "Traceback" not in run.stderr, run.stderr[-1000:]
    assert run.rc != 0, "claimed success although the output could not be written"
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert _dir_state(out_dir) == before, "a partial or temporary file was left behind"


def test_max_bytes_sizes_and_output_errors(tmp_path):
    """`--max-bytes` takes suffixes; a failed write is a one-line TraceError (exit 2), not exit 3."""
    from tracekit.atomic import write_output
    from tracekit.cli.options import Size
    from tracekit.errors import OutputError

    size = Size()
    assert [size.convert(v, None, None) for v in ("10000000", "512M", "2G", "1.5GiB", "4k")] == [
        10_000_000, 512 << 20, 2 << 30, 3 << 29, 4096]
    with pytest.raises(Exception, match="not a size"):
        size.convert("2X", None, None)
    with pytest.raises(OutputError, match="cannot write"):
        write_output(str(tmp_path / "missing" / "out.html"), "x")


BOMB_SECONDS, BOMB_RSS_MB = 10.0, 1024
_MEASURED = """
import resource, subprocess, sys, time
start = time.monotonic()
proc = subprocess.run(sys.argv[1:], capture_output=True, stdin=subprocess.DEVNULL)
seconds = time.monotonic() - start
rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
sys.stderr.write(proc.stderr.decode(errors="replace"))
print(proc.returncode, round(seconds, 2), round(rss_mb))
"""


@pytest.mark.parametrize("name", [name for name, _, _ in bomb_cases()])
def test_bombs_are_bounded(name, corpus):
    """A bomb ends as its case says (exit 2 with one line, or 0) in at most BOMB_SECONDS and
    BOMB_RSS_MB of peak memory, measured by getrusage in a parent of the command."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop(RATIO_ENV, None)
    proc = subprocess.run([sys.executable, "-c", _MEASURED, sys.executable, "-m", "tracekit", "info", "--no-cache",
                           str(corpus[name])], capture_output=True, env=env, check=False, timeout=60, cwd=ROOT)
    rc, seconds, rss = proc.stdout.split()
    expect = EXPECT[name]
    assert int(rc) == (2 if expect.outcome == "error" else 0), proc.stderr[-500:]
    assert float(seconds) <= BOMB_SECONDS, f"{seconds} s"
    assert int(rss) <= BOMB_RSS_MB, f"{rss} MB peak RSS"
    if expect.outcome == "error":
        check_error_line(Run(int(rc), "", proc.stderr.decode(errors="replace"), float(seconds)), expect)


def _deep_args(depth: int) -> bytes:
    return sandwich('{"ph": "X", "cat": "cpu_op", "name": "deep", "pid": 1, "tid": 1, "ts": 2, "dur": 1, '
                    '"args": {"x": ' + "[" * depth + "]" * depth + "}}")


def _exit_cases(tmp: Path) -> dict[str, tuple[tuple[str, ...], int, str]]:
    """name -> (tracekit arguments, exit code, a fragment of the output)."""
    (tmp / "deep5k.json").write_bytes(_deep_args(5_000))
    (tmp / "deep100k.json").write_bytes(_deep_args(100_000))
    (tmp / "nan.json").write_bytes(sandwich('{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, '
                                            '"ts": NaN, "dur": 1}'))
    (tmp / "devices.json").write_text(json.dumps({"deviceProperties": [{"id": 0, "sharedMemPerMultiprocessor": [1]}],
                                                  "traceEvents": [good("a"), good("b", ts=2)]}))
    os.mkfifo(tmp / "fifo.json")
    for name, text in {"paths": '[{"variant": "a", "path": 5}, {"variant": ["x"], "path": ["y"]}, 7]',
                       "deep": '[{"variant": "a", "path": "t.json", "x": ' + "[" * 100_000 + "]" * 100_000 + "}]"}.items():
        (tmp / name).mkdir()
        (tmp / name / "index.json").write_text(text)
    out = str(tmp / "out.json")
    return {
        "annotate_args_5000_deep": (("annotate", str(tmp / "deep5k.json"), "-o", out), 0, "3 original events"),
        "annotate_args_100000_deep": (("annotate", str(tmp / "deep100k.json"), "-o", out), 0, "3 original events"),
        "annotate_skips_a_nan_event": (("annotate", str(tmp / "nan.json"), "-o", out), 0, "2 original events"),
        "annotate_device_field_list": (("annotate", str(tmp / "devices.json"), "-o", out), 0, "2 original events"),
        "info_proc_self_mem": (("info", "/proc/self/mem"), 2, "input/output error"),
        "attention_fifo": (("attention", str(tmp / "fifo.json")), 2, "fifo"),
        "attention_index_paths_not_text": (("attention", str(tmp / "paths" / "index.json")), 0, "skipped"),
        "attention_index_nested_deep": (("attention", str(tmp / "deep" / "index.json")), 2, "cannot read the index"),
    }


EXIT_CASES = ("annotate_args_5000_deep", "annotate_args_100000_deep", "annotate_skips_a_nan_event",
              "annotate_device_field_list", "info_proc_self_mem", "attention_fifo", "attention_index_paths_not_text",
              "attention_index_nested_deep")


@pytest.mark.parametrize("name", EXIT_CASES)
def test_input_at_fault_exits_2_never_3(name, tmp_path):
    """Input the user must fix exits 2 with one line (or 0 where the input can be read in
    part); never 3 (internal error), never a hang."""
    args, code, says = _exit_cases(tmp_path)[name]
    run = run_cli(*args, "--no-cache", timeout=30)
    assert run.rc is not None, "hung"
    assert run.rc == code, f"exit {run.rc}: {run.stderr[-400:]!r}"
    assert "Traceback" not in run.stderr
    assert says.lower() in (run.stdout + run.stderr).lower(), run.stdout[-400:] + run.stderr[-400:]
    if code == 2:
        check_error_line(run, Expect("error"))
