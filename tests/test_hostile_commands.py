"""Every hostile file through every command that reads one trace: exit 0 or 2 (one line on
stderr), never a traceback or an internal error, each command within 10 s, the whole child
within 1 GB of peak RSS. One child process per file runs the commands in turn through
`tracekit.cli.main.main`, under the same 2 GB address-space limit as the `info` contract
(`test_hostile.py`), and reports what each did as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hostile_corpus import hostile_cases
from test_hostile import EXTRA_ARGS, ROOT, _preexec

COMMANDS: tuple[tuple[str, ...], ...] = (
    ("info",), ("summary",), ("kernels",), ("ops",), ("gaps",), ("critical-path",), ("findings",),
    ("attention",), ("roofline",), ("report", "--format", "md", "-o", "{out}/report.md"),
    ("annotate", "-o", "{out}/annotated.json"),
)
MAX_S = 10.0
MAX_RSS_KB = 1 << 20  # 1 GB
CASES = {name: (writer, expect) for name, writer, expect in hostile_cases()}

CHILD = r"""
import contextlib, io, json, resource, sys, time
from tracekit.cli.main import main
path, out, extra, commands = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
done = []
for command in commands:
    args = [command[0], *extra, path, *(a.format(out=out) for a in command[1:])]
    err, start = io.StringIO(), time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except BaseException as exc:  # noqa: BLE001 (what escapes main is the finding)
            rc, err = -1, io.StringIO(f"escaped: {type(exc).__name__}: {exc}")
    done.append({"command": command[0], "rc": rc, "s": time.monotonic() - start, "stderr": err.getvalue()[-600:]})
print(json.dumps({"runs": done, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    base = tmp_path_factory.mktemp("hostile-commands")
    files = {name: writer(base) for name, (writer, _) in CASES.items()}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1",
           "XDG_CACHE_HOME": str(base / "cache")}

    def one(name: str) -> tuple[str, dict]:
        out = base / f"out-{name}"
        out.mkdir()
        deny = CASES[name][1].needs_denied_read
        try:
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, str(files[name]), str(out), json.dumps(list(EXTRA_ARGS.get(name, ()))),
                 json.dumps(COMMANDS)],
                capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, cwd=base,
                timeout=MAX_S * len(COMMANDS) + 30, preexec_fn=_preexec(deny_reads=deny))
        except subprocess.TimeoutExpired:
            return name, {"hung": True}
        if proc.returncode != 0:
            return name, {"crashed": proc.returncode, "stderr": proc.stderr[-2000:]}
        return name, json.loads(proc.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        yield dict(pool.map(one, CASES))
    for name in ("unreadable_file", "unreadable_directory"):
        if name in files:
            (files[name] if name == "unreadable_file" else files[name].parent).chmod(0o755)


def test_the_corpus_is_large():
    assert len(CASES) >= 80


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_command_on_a_hostile_file(name, results):
    got = results[name]
    assert not got.get("hung"), "a command hung"
    assert "crashed" not in got, f"the child died (signal or limit): {got}"
    assert got["maxrss_kb"] <= MAX_RSS_KB, f"peak RSS {got['maxrss_kb'] >> 10} MB"
    for run in got["runs"]:
        what = f"{run['command']}: exit {run['rc']}, {run['s']:.1f} s, stderr {run['stderr']!r}"
        assert run["rc"] in (0, 2), what
        assert "Traceback" not in run["stderr"], what
        assert run["s"] <= MAX_S, what
        if run["rc"] == 2:
            lines = run["stderr"].strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("tracekit: error: "), what
