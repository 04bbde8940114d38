"""Batch throughput: the same generated traces with --jobs 1 and --jobs N, wall time and ratio.

    python benchmarks/batch.py [--traces 100] [--jobs 2]

Each run is a fresh `tracekit batch` process with an empty output folder (no cache), so
the wall time includes start-up and, for N > 1, spawning the worker processes. Printed:
the wall time of each run, traces per second, and jobs-1 time / jobs-N time (the speed-up).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from builders import TraceBuilder


def make_trace(i: int) -> TraceBuilder:
    """Eight steps of a GEMM, an elementwise kernel and a copy: a few hundred events."""
    b = TraceBuilder(base_time_ns=1_790_000_000_000_000_000 + i * 3_600_000_000_000)
    for step in range(8):
        t0 = step * 200_000
        b.annotation(f"ProfilerStep#{step + 1}", t0, 180_000 + (i % 7) * 1_000)
        b.mm_add_step(t0, 40_000 + (i % 11) * 500)
        b.launch_copy(
            "HtoD (Pageable -> Device)",
            launch_ns=t0 + 80_000,
            launch_dur_ns=3_000,
            start_ns=t0 + 90_000,
            dur_ns=4_000,
            nbytes=1 << 20,
        )
    return b


def run(src: Path, out: Path, jobs: int) -> float:
    cmd = [sys.executable, "-m", "tracekit", "batch", str(src), "-o", str(out), "--jobs", str(jobs)]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - start
    print(f"  jobs={jobs}: {seconds:7.1f} s  ({done.stdout.strip()})")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tracekit-batch-bench-") as tmp:
        src = Path(tmp) / "traces"
        src.mkdir()
        for i in range(args.traces):
            make_trace(i).write(src / f"trace-{i:03d}.json.gz")
        print(f"{args.traces} generated traces in {src}")
        one = run(src, Path(tmp) / "out1", 1)
        many = run(src, Path(tmp) / f"out{args.jobs}", args.jobs)
    print(f"traces/s: jobs=1 {args.traces / one:.2f}, jobs={args.jobs} {args.traces / many:.2f}")
    print(f"wall-time ratio jobs=1 / jobs={args.jobs}: {one / many:.2f}x")


if __name__ == "__main__":
    main()
