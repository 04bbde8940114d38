"""Where one report's memory goes: RSS and jemalloc's active bytes, step by step.

    python benchmarks/phases.py [TRACE] [--interval MS] [--every S] [--out FILE]

Runs `tracekit report TRACE --no-cache` in this process, with the command's allocator
settings, while a thread samples the process's RSS and jemalloc's active bytes (the pages
Polars holds, `jemalloc_stats.active_bytes`) every `--interval` ms. Prints the highest
of each while each analysis step ran (two run at once, one per thread: a step's figures
are the process's, its neighbour's included), while the trace loaded (before the first
step) and after the last (the report), and the moment of the peak with
the steps running then. RSS less the active bytes is what the interpreter and the
libraries hold plus the freed pages jemalloc keeps for a while; the active bytes are
what the frames hold, and do not move with the allocator's timing, so they tell which
step a change made smaller when the peak itself is within the run-to-run spread.
`--every S` also prints the run in slices of S seconds (the highest of each in each, and
the steps that ran then). `--out` writes the figures as JSON. Speed figures: `benchmarks/run.py`, `benchmarks/ab.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import TRACE

MIB = 1 << 20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", default=str(TRACE))
    ap.add_argument("--interval", type=float, default=5.0, help="milliseconds between samples")
    ap.add_argument("--out", help="write the figures to this JSON file")
    ap.add_argument("--every", type=float, metavar="S",
                    help="also print the highest RSS and active bytes of every S seconds, with the steps running then")
    args = ap.parse_args(argv)
    if not Path(args.trace).exists():
        print(f"trace not found: {args.trace}", file=sys.stderr)
        return 2
    from tracekit import runtime

    runtime.configure(["report", args.trace])  # as the command does, before Polars is imported
    import jemalloc_stats as jemalloc

    from tracekit.cli.main import main as cli
    from tracekit.pipeline.run import Plan

    start = time.perf_counter()
    events: list[tuple[float, str, str]] = []  # (seconds, "start" | "end", step)
    run_step = Plan.execute

    def timed(self, step):  # every pipeline step passes here, on the thread that runs it
        events.append((time.perf_counter() - start, "start", step.name))
        try:
            return run_step(self, step)
        finally:
            events.append((time.perf_counter() - start, "end", step.name))

    samples: list[tuple[float, int, int, float]] = []  # (seconds, RSS, active bytes, CPU seconds so far)
    page = os.sysconf("SC_PAGE_SIZE")
    done = threading.Event()

    def sample() -> None:
        with open("/proc/self/statm", "rb", buffering=0) as statm:
            while not done.is_set():
                statm.seek(0)
                rss = int(statm.read().split()[1]) * page
                cpu = os.times()
                samples.append((time.perf_counter() - start, rss, jemalloc.active_bytes() or 0,
                                cpu.user + cpu.system))
                done.wait(args.interval / 1000)

    sampler = threading.Thread(target=sample, name="phases-sampler", daemon=True)
    Plan.execute = timed
    sampler.start()
    try:
        with tempfile.TemporaryDirectory(prefix="tracekit-phases-") as folder:
            code = cli(["report", args.trace, "--no-cache", "--no-progress", "-o", str(Path(folder) / "report.html")])
    finally:
        done.set()
        sampler.join()
        Plan.execute = run_step
    if code:
        return code
    figures = summarise(samples, events)
    print_figures(figures, Path(args.trace).name)
    if args.every:
        print_buckets(samples, events, args.every)
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def summarise(samples: list[tuple[float, int, int, float]], events: list[tuple[float, str, str]]) -> dict:
    """Per step (and before the first, after the last) the highest RSS and active bytes."""
    began, ended = _spans(events)
    first, last = min(began.values()), max(ended.values())

    def highest(t0: float, t1: float) -> dict:
        inside = [s for s in samples if t0 <= s[0] <= t1]
        return {"rss_mib": round(max(s[1] for s in inside) / MIB, 1) if inside else None,
                "active_mib": round(max(s[2] for s in inside) / MIB, 1) if inside else None}

    steps = [{"step": name, "start_s": round(t0, 3), "end_s": round(ended[name], 3), **highest(t0, ended[name])}
             for name, t0 in sorted(began.items(), key=lambda item: item[1])]
    peak = max(samples, key=lambda s: s[1])
    running = [name for name, t0 in began.items() if t0 <= peak[0] <= ended.get(name, peak[0])]
    return {
        "load": highest(0.0, first), "steps": steps, "after": highest(last, samples[-1][0]),
        "peak": {"at_s": round(peak[0], 3), "rss_mib": round(peak[1] / MIB, 1), "active_mib": round(peak[2] / MIB, 1),
                 "running": running},
        "samples": len(samples),
    }


def print_figures(figures: dict, name: str) -> None:
    print(f"trace: {name}  ({figures['samples']} samples)")
    print(f"{'':24} {'from':>7} {'to':>7} {'max RSS':>9} {'max active':>11}  (MiB)")
    rows = [{"step": "(load)", "start_s": 0.0, "end_s": figures["steps"][0]["start_s"], **figures["load"]},
            *figures["steps"],
            {"step": "(report)", "start_s": max(s["end_s"] for s in figures["steps"]), "end_s": None,
             **figures["after"]}]
    for row in rows:
        end = f"{row['end_s']:7.2f}" if row["end_s"] is not None else f"{'end':>7}"
        print(f"{row['step']:24} {row['start_s']:7.2f} {end} {_mib(row['rss_mib']):>9} {_mib(row['active_mib']):>11}")
    peak = figures["peak"]
    print(f"peak: {peak['rss_mib']:.0f} MiB RSS ({peak['active_mib']:.0f} MiB active) at {peak['at_s']:.2f} s, "
          f"while {', '.join(peak['running']) or 'no analysis step'} ran")


def print_buckets(samples: list[tuple[float, int, int, float]], events: list[tuple[float, str, str]],
                  every: float) -> None:
    """The run in slices of `every` seconds: the highest RSS and active bytes in each, the
    cores busy on average (the process's CPU time over the slice's time: 2.0 is both cores of
    this machine), and the steps that ran in it (a step that ended inside a slice counts)."""
    began, ended = _spans(events)
    print(f"{'from':>7} {'max RSS':>9} {'max active':>11} {'cores':>6}  steps (MiB)")
    for i in range(int(samples[-1][0] // every) + 1):
        t0, t1 = i * every, (i + 1) * every
        inside = [s for s in samples if t0 <= s[0] < t1]
        if inside:
            running = [name for name, t in began.items() if t < t1 and ended.get(name, float("inf")) >= t0]
            span = inside[-1][0] - inside[0][0]
            cores = f"{(inside[-1][3] - inside[0][3]) / span:6.2f}" if span > 0 else f"{'-':>6}"
            print(f"{t0:7.2f} {max(s[1] for s in inside) / MIB:9.0f} {max(s[2] for s in inside) / MIB:11.0f} {cores}  "
                  f"{', '.join(running)}")


def _spans(events: list[tuple[float, str, str]]) -> tuple[dict[str, float], dict[str, float]]:
    """({step: its start}, {step: its end}) of the steps' events."""
    return ({name: t for t, kind, name in events if kind == "start"},
            {name: t for t, kind, name in events if kind == "end"})


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


if __name__ == "__main__":
    raise SystemExit(main())
