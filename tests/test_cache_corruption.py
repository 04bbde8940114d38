"""Damaged cache entries: one flipped byte anywhere in any file of a trace entry or an analysis
entry gives the same answer, or a warning and a fresh read; never a wrong answer, an
exception, a Rust panic or an abort. The sweep runs in a subprocess, so that an abort fails
the test instead of killing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from report_fixtures import decode_trace

import tracekit
from tracekit.cache import Cache
from tracekit.cache import analyses as analysis_cache
from tracekit.cache import traces as trace_cache
from tracekit.errors import CacheWarning

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
EDGE = 12  # bytes flipped at each end of every file (headers, footers, magic numbers)
INSIDE = 24  # and at this many evenly spaced offsets between


def offsets(size: int) -> list[int]:
    spots = set(range(min(EDGE, size))) | set(range(max(0, size - EDGE), size))
    spots |= {EDGE + (size - 2 * EDGE) * i // INSIDE for i in range(INSIDE)} if size > 2 * EDGE else set()
    return sorted(spots)


def sweep(kind: str, cache: Path, trace_path: Path) -> dict:
    """Flip one byte (XOR 0xFF) at each of `offsets` of every file of the one entry of `kind`
    ("trace" or "analysis"), read it back, and sort the outcome: same, warned (None and a
    CacheWarning), wrong, silent (None without a warning), or the exception's name."""
    from test_analysis_cache import same

    trace = tracekit.load(trace_path)
    fresh_analysis = Cache(cache).analyse(trace)
    Cache(cache).load(trace_path)
    if kind == "trace":
        key = trace_cache.entry_key(trace_path, max_bytes=tracekit.loader.DEFAULT_MAX_BYTES)
        entry = cache / key

        def read():
            return trace_cache.read(cache, key, path=str(trace_path))

        def check(got):
            from test_analysis_cache import same

            for name, frame in trace.frames().items():
                assert frame.equals(got.frames()[name]), name
            same(trace.meta, got.meta)
    else:
        key = analysis_cache.entry_key(trace, fresh_analysis.options)
        entry = cache / analysis_cache.SUBDIR / key

        def read():
            return analysis_cache.read(cache, key, trace)

        def check(got):
            same(fresh_analysis.findings, got.findings)
            same(fresh_analysis, got)
    originals = {f.name: f.read_bytes() for f in sorted(entry.iterdir())}
    outcomes: dict[str, int] = {}
    for name, data in originals.items():
        for at in offsets(len(data)):
            entry.mkdir(exist_ok=True)
            for other, body in originals.items():
                (entry / other).write_bytes(body)
            flipped = bytearray(data)
            flipped[at] ^= 0xFF
            (entry / name).write_bytes(bytes(flipped))
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                try:
                    got = read()
                    if got is None:
                        outcome = "warned" if any(issubclass(w.category, CacheWarning) for w in said) else "silent"
                    else:
                        try:
                            check(got)
                            outcome = "same"
                        except AssertionError:
                            outcome = f"wrong {name}@{at}"
                except BaseException as exc:  # noqa: BLE001  (a PanicException is a BaseException)
                    outcome = f"{type(exc).__name__} {name}@{at}"
            key_out = outcome if outcome in ("same", "warned", "silent") else outcome.split()[0]
            outcomes[key_out] = outcomes.get(key_out, 0) + 1
            if key_out not in ("same", "warned"):
                outcomes.setdefault("bad", []).append(outcome)  # type: ignore[attr-defined]
    return {"files": sorted(originals), "outcomes": outcomes}


@pytest.mark.parametrize("kind", ["trace", "analysis"])
def test_one_flipped_byte_never_gives_a_wrong_answer(kind, tmp_path):
    path = decode_trace(3).write(tmp_path / "trace.json.gz")
    code = ("import json, sys; sys.path.insert(0, sys.argv[4]); from test_cache_corruption import sweep; "
            "from pathlib import Path; print(json.dumps(sweep(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, kind, str(tmp_path / "cache"), str(path), str(HERE)],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    result = json.loads(proc.stdout.splitlines()[-1])
    outcomes = result["outcomes"]
    print(kind, len(result["files"]), "files", outcomes)
    assert "bad" not in outcomes, outcomes["bad"][:20]
    # every file of the entry is covered, the index included, and each flip is caught
    assert (("meta.json" if kind == "trace" else "analysis.json") in result["files"]) and len(result["files"]) > 3
    assert outcomes.get("warned", 0) > 100


def test_a_damaged_entry_is_dropped_with_a_warning_and_read_again(tmp_path):
    path = decode_trace(3).write(tmp_path / "trace.json.gz")
    cache = tmp_path / "cache"
    fresh = Cache(cache).load(path)
    key = trace_cache.entry_key(path, max_bytes=tracekit.loader.DEFAULT_MAX_BYTES)
    ops = cache / key / "ops.parquet"
    data = bytearray(ops.read_bytes())
    data[len(data) // 2] ^= 0x01
    ops.write_bytes(bytes(data))
    with pytest.warns(CacheWarning, match="ops.parquet fails its checksum"):
        again = Cache(cache).load(path)
    assert again.ops.equals(fresh.ops)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the entry written again is whole
        hit = trace_cache.read(cache, key, path=str(path))
    assert hit is not None and hit.ops.equals(fresh.ops)


def test_cli_says_one_line_and_answers_from_the_trace(tmp_path):
    path = decode_trace(3).write(tmp_path / "trace.json.gz")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    cmd = [sys.executable, "-m", "tracekit", "summary", str(path), "--cache", "--json"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=True)
    [entry] = [p for p in (tmp_path / "xdg" / "tracekit").iterdir() if len(p.name) == 32]
    meta = entry / "meta.json"
    raw = bytearray(meta.read_bytes())
    raw[raw.index(b'"meta"') + 20] ^= 0x02
    meta.write_bytes(bytes(raw))
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert second.returncode == 0
    assert second.stdout == first.stdout
    said = (f"tracekit: warning: cache entry {entry.name} is damaged (meta.json fails its checksum): "
            "deleted, read again from the source")
    assert [line for line in second.stderr.splitlines() if "cache" in line] == [said]
    assert "Traceback" not in second.stderr
