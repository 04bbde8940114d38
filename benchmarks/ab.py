"""A/B of two revisions of tracekit on one job, in alternating fresh processes.

    python benchmarks/ab.py BASE [NEW] [--job load|analyse|report|first|cached] [--trace PATH] [--rounds N]
                            [--out FILE]

BASE and NEW are git revisions; NEW defaults to the working tree as it is (uncommitted
changes included). Each revision other than the working tree is checked out into a
temporary git worktree and its C parts are built there with this interpreter; every run
imports tracekit from its tree (PYTHONPATH) and nothing else differs.

Timing on a shared machine drifts by half within minutes, so one side's best against the
other's says little. The rounds alternate the order (A B, B A, A B, ...) so that drift hits
both sides alike, and the medians, spreads and the ratio NEW / BASE of the medians are
printed, with the CPU time (user + system, every thread) of the same span, which a busy
neighbour inflates less than the wall time. Jobs, each in a fresh process with the
`tracekit` command's allocator settings (`tracekit.runtime`; not its collector threshold):

  load      tracekit.load(trace): seconds of the call
  analyse   the load, then analyse(): seconds of analyse() alone
  report    `python -m tracekit report TRACE --no-cache -o FILE`: wall seconds, imports included
            (its CPU time: the whole process's)
  first     `python -m tracekit report TRACE --cache -o FILE` with an empty cache folder: the
            report of a new trace, both caches written
  cached    the same command again, on the entries `first` wrote: the second report

Peak RSS is each process's own (`wait4`), in MB (10^6 bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ROOT, TRACE, child_env, compile_tree

WORKTREE = "worktree"
REPORTS = {"report": "--no-cache", "first": "--cache", "cached": "--cache"}  # report jobs: the cache option
JOB = r'''
import json, resource, sys, time
job, path = sys.argv[1], sys.argv[2]
# the command's settings for this trace and job (older trees: `tracekit.allocator`, with one
# setting for every size, or for every job)
try:
    import tracekit.runtime as runtime
    runtime.configure_allocators(runtime.trace_bytes([path]), analyses=job != "load")  # (not the collector)
except ImportError:
    import tracekit.allocator as allocator
    size = [allocator.trace_bytes([path])] if hasattr(allocator, "trace_bytes") else []
    if hasattr(allocator, "analyses"):
        allocator.configure(*size, analyses=job != "load")
    else:
        allocator.configure(*size)
import tracekit
import tracekit.loader
import polars  # (the loader imports it only when it reads: not part of the timed call)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t, c = time.perf_counter(), cpu()
trace = tracekit.load(path)  # (no cache, in this revision as in older ones)
if job == "analyse":
    try:
        from tracekit.pipeline import analyse
    except ImportError:  # (trees before the pipeline)
        from tracekit.analyse import analyse
    t, c = time.perf_counter(), cpu()
    analyse(trace)
print(json.dumps({"seconds": time.perf_counter() - t, "cpu_seconds": cpu() - c}))
'''


def checkout(rev: str, into: Path) -> Path:
    """The tree of `rev` (the working tree itself for WORKTREE), with its C parts built and
    its modules compiled to bytecode."""
    if rev == WORKTREE:
        tree = ROOT
    else:
        tree = into / rev.replace("/", "_")
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree), rev], check=True,
                       capture_output=True)
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, check=True,
                       capture_output=True)
    compile_tree(tree)  # both sides start from bytecode
    return tree


def run_once(tree: Path, job: str, trace: Path, scratch: Path) -> tuple[float, float, float]:
    """(seconds, peak RSS in MB, CPU seconds) of one fresh process running `job` with `tree`'s tracekit."""
    env = {**child_env(), "PYTHONPATH": str(tree)}
    if job in REPORTS:
        cache = scratch / "cache"
        if job == "cached":  # an untimed first run fills the cache
            shutil.rmtree(cache, ignore_errors=True)
            run_once(tree, "first", trace, scratch)
        elif job == "first":
            shutil.rmtree(cache, ignore_errors=True)
        env["XDG_CACHE_HOME"] = str(cache)
        cmd = [sys.executable, "-m", "tracekit", "report", str(trace), REPORTS[job], "-o", str(scratch / "r.html")]
    else:
        cmd = [sys.executable, "-c", JOB, job, str(trace)]
    out_file, err_file = scratch / "out.txt", scratch / "err.txt"
    with out_file.open("wb") as out, err_file.open("wb") as err:  # files, not pipes: wait4 reaps the child
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=scratch, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    if code:
        raise SystemExit(f"{tree}: {job} failed ({code}): {err_file.read_text(errors='replace')[-2000:]}")
    if job in REPORTS:
        seconds, cpu = wall, usage.ru_utime + usage.ru_stime
    else:
        timed = json.loads(out_file.read_text().strip().splitlines()[-1])
        seconds, cpu = timed["seconds"], timed["cpu_seconds"]
    return seconds, usage.ru_maxrss * 1024 / 1e6, cpu


def summary(runs: list[tuple[float, float, float]]) -> dict:
    out: dict = {}
    for i, key in enumerate(("seconds", "peak_mb", "cpu_seconds")):
        values = [r[i] for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return {**out, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="git revision to compare against")
    ap.add_argument("new", nargs="?", default=WORKTREE, help="git revision (default: the working tree as it is)")
    ap.add_argument("--job", choices=("load", "analyse", *REPORTS), default="report")
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, help="write the figures to this JSON file")
    args = ap.parse_args()
    if not args.trace.exists():
        raise SystemExit(f"no trace at {args.trace}")
    with tempfile.TemporaryDirectory(prefix="tracekit-ab-") as tmp:
        tmp_path = Path(tmp)
        trees = {}
        try:
            for side, rev in (("base", args.base), ("new", args.new)):
                trees[side] = checkout(rev, tmp_path)
            runs: dict[str, list[tuple[float, float, float]]] = {"base": [], "new": []}
            for i in range(args.rounds):
                for side in (("base", "new") if i % 2 == 0 else ("new", "base")):
                    runs[side].append(run_once(trees[side], args.job, args.trace, tmp_path))
                    seconds, peak, cpu = runs[side][-1]
                    print(f"round {i + 1}/{args.rounds} {side:4s} {seconds:7.3f} s {peak:7.0f} MB {cpu:7.3f} s CPU",
                          file=sys.stderr, flush=True)
        finally:
            for tree in trees.values():
                if tree != ROOT:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                                   check=False, capture_output=True)
    result = {"job": args.job, "trace": str(args.trace), "rounds": args.rounds, "base_rev": args.base, "new_rev": args.new,
              **{side: summary(r) for side, r in runs.items()}}
    for key, unit in (("seconds", "s"), ("peak_mb", "MB"), ("cpu_seconds", "s")):
        b, n = result["base"][key], result["new"][key]
        result[f"{key}_ratio"] = n["median"] / b["median"] if b["median"] else None
        fmt = "{:.3f}" if unit == "s" else "{:.0f}"
        print(f"{key:11s} base median {fmt.format(b['median'])} {unit} ({fmt.format(b['min'])}-{fmt.format(b['max'])})   "
              f"new median {fmt.format(n['median'])} {unit} ({fmt.format(n['min'])}-{fmt.format(n['max'])})   "
              f"new/base {result[f'{key}_ratio']:.3f}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
