"""Load speed and peak memory against baselines measured in the same run.

    python benchmarks/load.py [TRACE] [--repeat N] [--out FILE]

Each way of reading runs in a fresh child process, N times; the best time is kept.
Printed: MB/s of JSON text (decompressed size / wall time of the load call, gunzip
included; imports are timed apart), the CPU time of the call (user + system, all threads),
peak RSS (the child's own, and any process it started), and each ratio against tracekit.load.
`benchmarks/run.py` is the fuller suite (cache, the 1 GB trace, a JSON file of figures).

Ways: tracekit.load as a script calls it; `tracekit-cli` with the allocator settings of the
`tracekit` command; `tracekit-serial` with workers=0; `tracekit-python` without the native
scanner (TRACEKIT_NATIVE=0).

Baselines:
  json.loads        gunzip + stdlib json.loads (GC on, as a script would do)
  msgspec typed     gunzip + msgspec decode into gc=False structs, args left raw: the floor
                    for any loader that must look at every event
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import CHILD, TRACE, child, json_size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", default=str(TRACE))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", help="write the figures to this JSON file")
    args = ap.parse_args()
    path = Path(args.trace)
    if not path.exists():
        print(f"trace not found: {path}", file=sys.stderr)
        return 2
    size = json_size(path)
    ways = ("tracekit", "tracekit-cli", "tracekit-serial", "tracekit-python", "msgspec", "json")
    results = {way: child(sys.executable, CHILD, path, way, {}, args.repeat, 3600) for way in ways}
    tk = results["tracekit"]
    print(f"trace: {path.name}  JSON {size / 1e6:.1f} MB  events {tk['events']:,}")
    print(f"{'way':<17}{'seconds':>9}{'CPU s':>8}{'MB/s':>8}{'import s':>10}{'peak RSS MB':>13}{'helper MB':>11}"
          f"{'RSS/JSON':>10}{'time vs tracekit':>18}")
    for way, r in results.items():
        print(f"{way:<17}{r['seconds']:>9.3f}{r['cpu_seconds']:>8.3f}{size / 1e6 / r['seconds']:>8.0f}"
              f"{r['import_seconds']:>10.3f}"
              f"{r['rss'] / 1e6:>13.0f}{r['rss_children'] / 1e6:>11.0f}{r['rss'] / size:>10.2f}"
              f"{r['seconds'] / tk['seconds']:>17.2f}x")
    floor, js = results["msgspec"]["seconds"], results["json"]["seconds"]
    print(f"tracekit: {tk['seconds'] / floor:.2f}x the msgspec floor, {tk['seconds'] / js:.2f}x json.loads")
    if args.out:
        Path(args.out).write_text(json.dumps({"json_bytes": size, **results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
