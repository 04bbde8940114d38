"""The loader's benchmark suite: speed, memory, the cache, against baselines in the same run.

    python benchmarks/run.py [--trace PATH] [--large [PATH] | --no-large] [--repeat N] [--out FILE] [--hta-python PY]

Traces: the 54 MB shared trace, and the 1 GB one made by `benchmarks/make_large.py`
(`--large`, or whenever it exists at its default path). Every way of reading runs in a
fresh child process, `--repeat` times (best kept), so each peak RSS is its own. Times are
of the load call itself; the import of each way is timed apart. Each time comes with the
CPU time (user + system, all threads) of the same span: on a shared machine a busy
neighbour stretches the wall time more than the work.

Ways:
  tracekit          tracekit.load(path): the native scanner, a second thread for large traces
  tracekit-cli      the same with the allocator settings of the `tracekit` command
                    (tracekit.runtime: freed memory handed back promptly)
  tracekit-serial   tracekit.load(path, workers=0): one thread decodes
  tracekit-python   the Python path only (TRACEKIT_NATIVE=0): msgspec on the main thread
  tracekit-cached   Cache(folder).load(path), the cache filled by an earlier child
  reanalysis        Cache(folder).load(path) then Cache(folder).analyse(trace): both
                    from the caches an earlier child filled (the trace's and the analysis's)
  msgspec           gunzip + msgspec decode into gc=False structs, args raw: the floor for
                    any loader that must look at every event
  json              gunzip + json.loads (skipped for traces over 200 MB unless --json-large)
  hta               HTA's TraceAnalysis, when --hta-python names an interpreter that has it
                    (HTA is never installed into .venv)
  report            the full `tracekit report TRACE -o r.html --no-cache` in a fresh process:
                    wall time with the process start (the best and the median of the
                    repeats), the process's CPU time, and its peak RSS
  report-cached     `tracekit report TRACE -o r.html --cache` in an empty cache folder (the
                    first run: it fills the caches), then again (best of the repeats)

Peak RSS: `rss` is the child's own peak; `rss_children` the peak of any process it started
(none since the loader decodes in-process; kept for older revisions).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

START_RJEM = os.environ.get("_RJEM_MALLOC_CONF")  # before anything here imports Polars
ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / ".." / "shared" / "traces" / "v100_ddp_mlp_memory_rank1.json.gz"
LARGE = Path("/tmp/tracekit-bench/v100_ddp_mlp_1gb.json")

CHILD = r'''
import gc, json, resource, sys, time
path, way, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t_import = time.perf_counter()
if way == "tracekit-cli":  # the settings the command line uses for this trace (tracekit.runtime)
    import tracekit.runtime
    tracekit.runtime.configure_allocators(tracekit.runtime.trace_bytes([path]), analyses=False)  # a load only
if way == "tracekit-python":
    import os
    os.environ["TRACEKIT_NATIVE"] = "0"
if way.startswith("tracekit") or way == "reanalysis":
    import tracekit
    # `import tracekit` is lazy, and the loader imports Polars only once it reads: import
    # both before the clock starts (a script pays for them at its imports)
    import tracekit.cache
    import tracekit.loader
    import tracekit.loader.columns
    import tracekit.model
if way == "reanalysis":
    import tracekit.cache.analyses
    import tracekit.pipeline
elif way == "msgspec":
    import msgspec
    from typing import Any
    from tracekit.loader.source import read_source
elif way == "json":
    from tracekit.loader.source import read_source
t0, c0 = time.perf_counter(), cpu()
if way in ("tracekit", "tracekit-cli", "tracekit-python"):
    n = tracekit.load(path).meta.event_count
elif way == "tracekit-serial":
    n = tracekit.load(path, workers=0).meta.event_count
elif way == "tracekit-cached":
    n = tracekit.Cache(extra["cache_dir"]).load(path).meta.event_count
elif way == "reanalysis":
    trace = tracekit.Cache(extra["cache_dir"]).load(path)
    n = tracekit.Cache(extra["cache_dir"]).analyse(trace).trace.meta.event_count
elif way == "json":
    doc = json.loads(read_source(path).data)
    n = len(doc["traceEvents"] if isinstance(doc, dict) else doc)
elif way == "msgspec":
    class Ev(msgspec.Struct, gc=False):
        ph: str = ""; cat: str = ""; name: str = ""; pid: Any = None; tid: Any = None
        ts: Any = None; dur: Any = None; id: Any = None; args: msgspec.Raw = msgspec.Raw(b"")
    class Doc(msgspec.Struct, gc=False):
        traceEvents: list[Ev] = []
    data = read_source(path).data
    gc.disable()
    n = len(msgspec.json.decode(data, type=Doc).traceEvents)
    gc.enable()
dt, dc = time.perf_counter() - t0, cpu() - c0
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"seconds": dt, "cpu_seconds": dc, "import_seconds": t0 - t_import, "rss": own, "rss_children": kids,
                  "events": n}))
'''

HTA_CHILD = r'''
import json, resource, shutil, sys, tempfile, time
from pathlib import Path
path = sys.argv[1]
tmp = Path(tempfile.mkdtemp())
shutil.copy(path, tmp / ("rank-0" + "".join(Path(path).suffixes)))
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=str(tmp))
dt = time.perf_counter() - t0
n = sum(len(df) for df in analysis.t.traces.values()) if hasattr(analysis, "t") else -1
print(json.dumps({"seconds": dt, "import_seconds": 0.0, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "rss_children": 0, "events": n}))
'''


def compile_tree(tree: Path) -> None:
    """Compile `tree`'s tracekit to bytecode, so that measured processes start from it as an
    installed package does: with PYTHONDONTWRITEBYTECODE set, a fresh checkout would compile
    every module in every run (0.1-0.3 s of a report), an edited tree its edited modules."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "tracekit"], cwd=tree, check=True, capture_output=True)


def child_env() -> dict[str, str]:
    """This process's environment as it was at start: importing Polars here (to measure the
    JSON's size) writes its allocator defaults into `_RJEM_MALLOC_CONF`, which the children
    would inherit."""
    env = dict(os.environ)
    if START_RJEM is None:
        env.pop("_RJEM_MALLOC_CONF", None)
    else:
        env["_RJEM_MALLOC_CONF"] = START_RJEM
    return env


def child(python: str, code: str, path: Path, way: str, extra: dict, repeat: int, timeout: int) -> dict:
    best: dict | None = None
    for _ in range(repeat):
        out = subprocess.run([python, "-c", code, str(path), way, json.dumps(extra)], capture_output=True,
                             text=True, timeout=timeout, check=False, env=child_env())
        if out.returncode:
            return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if best is None or r["seconds"] < best["seconds"]:
            best = r
    assert best is not None
    return best


def json_size(path: Path) -> int:
    sys.path.insert(0, str(ROOT))
    from tracekit.loader.source import Stream

    stream = Stream(path, threaded=False)
    try:
        return sum(len(p) for p in stream)
    finally:
        stream.close()


def bench_trace(path: Path, args: argparse.Namespace) -> dict:
    size = json_size(path)
    large = size > 200e6
    repeat = args.large_repeat if large else args.repeat
    ways = ["tracekit", "tracekit-cli", "tracekit-serial", "tracekit-python", "msgspec"]
    if not large or args.json_large:
        ways.append("json")
    results: dict[str, dict] = {}
    timeout = 3600
    with tempfile.TemporaryDirectory() as cache_dir:
        for way in ways:
            results[way] = child(sys.executable, CHILD, path, way, {}, repeat, timeout)
        fill = child(sys.executable, CHILD, path, "tracekit-cached", {"cache_dir": cache_dir}, 1, timeout)
        results["tracekit-cached"] = child(sys.executable, CHILD, path, "tracekit-cached", {"cache_dir": cache_dir},
                                           repeat, timeout)
        results["tracekit-cached"]["first_load_seconds"] = fill.get("seconds")
        fill = child(sys.executable, CHILD, path, "reanalysis", {"cache_dir": cache_dir}, 1, timeout)
        results["reanalysis"] = child(sys.executable, CHILD, path, "reanalysis", {"cache_dir": cache_dir},
                                      repeat, timeout)
        results["reanalysis"]["first_seconds"] = fill.get("seconds")
    if args.hta_python:
        results["hta"] = child(args.hta_python, HTA_CHILD, path, "hta", {}, 1, timeout)
    results["report"] = report_time(path, repeat)
    results["report-cached"] = report_time(path, repeat, cached=True)
    return summarise(path, size, results)


REPORT_CHILD = r'''
import json, resource, sys, time
t0 = time.perf_counter()
from tracekit.cli.main import main  # sets the allocators up, as the command does
code = main(["report", sys.argv[1], "-o", sys.argv[2], sys.argv[3]])
usage = resource.getrusage(resource.RUSAGE_SELF)  # the whole process: its start and imports too
print(json.dumps({"code": code, "seconds_in_process": time.perf_counter() - t0, "rss": usage.ru_maxrss * 1024,
                  "cpu_seconds": usage.ru_utime + usage.ru_stime}))
'''


def report_time(path: Path, repeat: int = 1, *, cached: bool = False) -> dict:
    """The full `tracekit report` (HTML): wall time with process start, and peak RSS. Without
    the cache; or (`cached`) with it, in an empty cache folder: a first run fills it
    (`first_seconds_with_startup`), then the best of `repeat` runs that read it. The median
    of the timed runs is `median_seconds_with_startup`."""
    best: dict | None = None
    walls: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**child_env(), "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        flag = "--cache" if cached else "--no-cache"
        first = None
        for i in range(repeat + (1 if cached else 0)):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", REPORT_CHILD, str(path), str(Path(tmp) / "r.html"), flag],
                                 capture_output=True, text=True, check=False, timeout=3600, env=env)
            wall = time.perf_counter() - t0
            if out.returncode:
                return {"skipped": f"`tracekit report` failed: {out.stderr.strip().splitlines()[-1:]}"}
            r = {**json.loads(out.stdout.strip().splitlines()[-1]), "seconds_with_startup": wall}
            if cached and i == 0:
                first = r
                continue
            walls.append(wall)
            if best is None or wall < best["seconds_with_startup"]:
                best = r
    assert best is not None
    best["median_seconds_with_startup"] = statistics.median(walls)
    best["runs"] = len(walls)
    if first is not None:
        best["first_seconds_with_startup"] = first["seconds_with_startup"]
        best["first_rss"] = first["rss"]
    return best


def summarise(path: Path, size: int, results: dict[str, dict]) -> dict:
    tk = results["tracekit"]
    floor = results.get("msgspec", {})
    js = results.get("json", {})
    for way, r in results.items():
        if "seconds" not in r or way.startswith("report"):
            continue
        r["mb_per_s"] = size / 1e6 / r["seconds"]
        r["rss_over_json"] = r["rss"] / size
        if "seconds" in floor:
            r["x_msgspec_floor"] = r["seconds"] / floor["seconds"]
        if "seconds" in js:
            r["x_json_loads"] = r["seconds"] / js["seconds"]
        if "seconds" in tk:
            r["x_tracekit"] = r["seconds"] / tk["seconds"]
    return {"trace": str(path), "json_bytes": size, "events": tk.get("events"), "ways": results}


def show(summary: dict) -> None:
    size = summary["json_bytes"]
    print(f"\ntrace: {Path(summary['trace']).name}  JSON {size / 1e6:,.1f} MB  events {summary['events'] or 0:,}")
    print(f"{'way':<17}{'seconds':>9}{'CPU s':>8}{'MB/s':>8}{'peak RSS MB':>13}{'helper MB':>11}{'RSS/JSON':>10}"
          f"{'x floor':>9}{'x json':>8}")
    for way, r in summary["ways"].items():
        if way.startswith("report") or way == "reanalysis":
            continue
        if "seconds" not in r:
            print(f"{way:<17}  {r.get('error') or r.get('skipped')}")
            continue
        print(f"{way:<17}{r['seconds']:>9.3f}{r.get('cpu_seconds', float('nan')):>8.3f}{r['mb_per_s']:>8.0f}"
              f"{r['rss'] / 1e6:>13.0f}"
              f"{r['rss_children'] / 1e6:>11.0f}{r['rss_over_json']:>10.2f}{r.get('x_msgspec_floor', float('nan')):>9.2f}"
              f"{r.get('x_json_loads', float('nan')):>8.2f}")
    cached = summary["ways"].get("tracekit-cached", {})
    if cached.get("first_load_seconds"):
        print(f"cache: first load (parse + write) {cached['first_load_seconds']:.3f}s, "
              f"then {cached['seconds']:.3f}s from the cache")
    again = summary["ways"].get("reanalysis", {})
    if "seconds" in again:
        print(f"re-analysis: load + analyse from the caches {again['seconds']:.3f}s "
              f"(the first, which filled them: {again['first_seconds']:.3f}s)")
    elif again:
        print("re-analysis:", again.get("error"))
    rep = summary["ways"].get("report", {})
    if "seconds_with_startup" in rep:
        print(f"report: `tracekit report` took {rep['seconds_with_startup']:.2f}s (process start included; "
              f"best of {rep['runs']}, median {rep['median_seconds_with_startup']:.2f}s), "
              f"CPU {rep['cpu_seconds']:.2f}s, peak RSS {rep['rss'] / 1e6:,.0f} MB")
    else:
        print("report:", rep.get("skipped"))
    rc = summary["ways"].get("report-cached", {})
    if "seconds_with_startup" in rc:
        print(f"report, cache on: first run {rc['first_seconds_with_startup']:.2f}s (peak {rc['first_rss'] / 1e6:,.0f} MB), "
              f"then {rc['seconds_with_startup']:.2f}s (peak {rc['rss'] / 1e6:,.0f} MB)")
    elif rc:
        print("report, cache on:", rc.get("skipped"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--large", nargs="?", const=str(LARGE), default=None,
                    help=f"also the large trace (default {LARGE}; make it with benchmarks/make_large.py)")
    ap.add_argument("--no-large", action="store_true", help="only --trace, even when the large trace exists")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--large-repeat", type=int, default=1, help="repeats for traces over 200 MB")
    ap.add_argument("--json-large", action="store_true", help="run json.loads on the large trace too (slow, big)")
    ap.add_argument("--hta-python", help="an interpreter with HTA installed (a side environment)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results.json"))
    args = ap.parse_args()
    traces = [Path(args.trace)]
    large = Path(args.large) if args.large else (LARGE if LARGE.exists() and not args.no_large else None)
    if large is not None:
        if not large.exists():
            print(f"large trace not found: {large} (python benchmarks/make_large.py makes it)", file=sys.stderr)
            return 2
        traces.append(large)
    compile_tree(ROOT)
    summaries = []
    for path in traces:
        if not path.exists():
            print(f"trace not found: {path}", file=sys.stderr)
            return 2
        summary = bench_trace(path, args)
        show(summary)
        summaries.append(summary)
    machine = {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": _cpus()}
    Path(args.out).write_text(json.dumps({"machine": machine, "traces": summaries}, indent=2))
    print(f"\nfigures written to {args.out}")
    return 0


def _cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count()


if __name__ == "__main__":
    sys.exit(main())
