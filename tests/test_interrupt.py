"""Ctrl-C during a long command: exit 130 at once, one line, no traceback. Polars' import
installs its own SIGINT handler, which raised KeyboardInterrupt inside queries on worker
threads (tracebacks) and once left the command hanging; the CLI gives SIGINT back to Python."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import real_trace

ROOT = Path(__file__).resolve().parent.parent


def test_polars_import_leaves_python_handling_sigint():
    code = ("import signal, ctypes\n"
            "from tracekit.cli.interrupts import python_handles_sigint\n"
            "libc = ctypes.CDLL(None)\n"
            "def handler():\n"
            "    buf = (ctypes.c_void_p * 64)(); libc.sigaction(signal.SIGINT, None, buf); return buf[0]\n"
            "before = handler(); python_handles_sigint(); print(before == handler())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert out.stdout.strip() == "True"


@pytest.mark.real
@pytest.mark.slow
def test_ctrl_c_during_a_report_exits_130_within_a_second(tmp_path):
    path = real_trace("v100_ddp_mlp_memory_rank1.json.gz")
    interrupted = 0
    for delay in (0.4, 0.6, 0.8, 1.0):
        proc = subprocess.Popen([sys.executable, "-m", "tracekit", "report", str(path), "--no-cache", "-o",
                                 str(tmp_path / "r.html")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        time.sleep(delay)
        if proc.poll() is not None:  # done before the signal: a faster machine
            proc.communicate()
            continue
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        try:
            _, err = proc.communicate(timeout=10)
        finally:
            proc.kill()
        took = time.monotonic() - sent
        interrupted += 1
        assert proc.returncode == 130, (delay, err[-2000:])
        assert took < 1.0, (delay, took)
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, (delay, err[-2000:])
        assert err.strip() in ("tracekit: aborted", "tracekit: interrupted"), (delay, err)
    assert interrupted >= 2
