"""Batch faults with real processes: a killed worker is replaced and its jobs run again; a
killed batch takes its workers with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import real_trace
from report_fixtures import decode_trace

from tracekit.batch import run_batch

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def workers_of(pid: int) -> list[int]:
    """The multiprocessing (spawn) workers whose parent is `pid`, the resource tracker left out."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"spawn_main" in cmdline and b"resource_tracker" not in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_killed_worker_is_replaced_and_its_jobs_run_again(tmp_path):
    traces = [decode_trace(steps).write(tmp_path / f"t{steps}.json.gz") for steps in range(2, 10)]
    killed: list[int] = []

    def kill_one(done, total, row):
        if not killed:
            victims = workers_of(os.getpid())
            assert victims
            os.kill(victims[0], signal.SIGKILL)
            killed.append(victims[0])

    result = run_batch(traces, jobs=2, progress=kill_one)
    assert killed
    assert result.summary.height == 8
    assert result.summary["error"].to_list() == [None] * 8
    assert result.failed == 0
    assert sorted(result.summary["steps"].to_list()) == list(range(2, 10))


@pytest.mark.real
@pytest.mark.slow
def test_killing_the_batch_kills_its_workers(tmp_path):
    names = ["v100_ddp_mlp_memory_rank1.json.gz", "chrome_browser_lthi_generic.json.gz",
             "diff_control_a100_dlrm.json.gz", "diff_test_v100_dlrm.json.gz"]
    files = [real_trace(name) for name in names]
    proc = subprocess.Popen([sys.executable, "-m", "tracekit", "batch", *map(str, files), "-o", str(tmp_path / "out"),
                             "--jobs", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            workers = workers_of(proc.pid)
        assert len(workers) == 2, "the pool did not start"
        time.sleep(1.0)  # the workers are importing or analysing
    finally:
        proc.kill()
        proc.wait()
    gone_by = time.monotonic() + 3
    while any(alive(w) for w in workers) and time.monotonic() < gone_by:
        time.sleep(0.05)
    left = [w for w in workers if alive(w)]
    for w in left:  # leave no process behind, whatever the outcome
        os.kill(w, signal.SIGKILL)
    assert not left, f"workers {left} outlived their batch"
