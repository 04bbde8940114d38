"""Time of `analyse()` (every analysis of one trace), against the load of the same trace.

    python benchmarks/analyse.py [TRACE] [--repeat N] [--workers N]

Loads the trace once, runs `analyse()` once to warm up, then N times; prints the best wall
time and its CPU time, and the ratio to the best load time measured in the same run
(these machines are noisy: the ratio says more than the seconds). `--workers N` runs the
steps on N threads (default: what the command chooses, `runtime.sizing.runner_for`).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import TRACE


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def best(fn, repeat: int) -> tuple[float, float]:
    """(best wall seconds, CPU seconds of that run)"""
    out = (float("inf"), 0.0)
    for _ in range(repeat):
        c0, t0 = _cpu(), time.perf_counter()
        fn()
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
        if wall < out[0]:
            out = (wall, cpu)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", default=str(TRACE))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None, help="threads for the independent analyses")
    args = ap.parse_args()
    import tracekit
    from tracekit.pipeline import Threaded, analyse, sequential
    from tracekit.runtime.sizing import runner_for

    path = Path(args.trace)
    trace = tracekit.load(path)
    load_wall, _ = best(lambda: tracekit.load(path), args.repeat)
    runner = runner_for(trace) if args.workers is None else sequential if args.workers < 2 else Threaded(args.workers)
    analyse(trace, runner=runner)
    wall, cpu = best(lambda: analyse(trace, runner=runner), args.repeat)
    print(f"trace: {path.name}  events {trace.meta.event_count:,}")
    print(f"load     {load_wall:7.3f} s")
    print(f"analyse  {wall:7.3f} s  (CPU {cpu:.2f} s, {getattr(runner, 'workers', 1)} thread(s))  = {wall / load_wall:.1f}x the load")
    return 0


if __name__ == "__main__":
    sys.exit(main())
