"""Load speed and peak memory against baselines measured in the same run.

    python benchmarks/load.py [TRACE] [--repeat N]

Each way of reading runs in a fresh child process (so its peak RSS is its own), N times;
the best time is kept. Printed: MB/s of JSON text (decompressed size / wall time,
gunzip included), peak RSS, and each ratio against tracekit.load.

Baselines:
  json.loads        gunzip + stdlib json.loads (GC on, as a script would do)
  msgspec typed     gunzip + msgspec decode into gc=False structs, args left raw: the floor
                    for any loader that must look at every event
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "v100_ddp_mlp_memory_rank1.json.gz"

CHILD = r'''
import gc, gzip, json, resource, sys, time
path, way = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if way == "tracekit":
    import tracekit
    trace = tracekit.load(path)
    n = trace.meta.event_count
elif way == "json":
    with gzip.open(path, "rb") as fh:
        doc = json.loads(fh.read())
    n = len(doc["traceEvents"] if isinstance(doc, dict) else doc)
elif way == "msgspec":
    import msgspec
    from typing import Any
    class Ev(msgspec.Struct, gc=False):
        ph: str = ""; cat: str = ""; name: str = ""; pid: Any = None; tid: Any = None
        ts: Any = None; dur: Any = None; id: Any = None; args: msgspec.Raw = msgspec.Raw(b"")
    class Doc(msgspec.Struct, gc=False):
        traceEvents: list[Ev] = []
    from tracekit.loader.source import read_source
    data = read_source(path).data
    gc.disable()
    n = len(msgspec.json.decode(data, type=Doc).traceEvents)
    gc.enable()
dt = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": dt, "rss": rss, "events": n}))
'''


def run(path: Path, way: str, repeat: int) -> dict:
    best = None
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", CHILD, str(path), way], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout)
        if best is None or r["seconds"] < best["seconds"]:
            best = r
    return best


def json_size(path: Path) -> int:
    from tracekit.loader.source import read_source

    return len(read_source(path).data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", help="write the figures to this JSON file")
    args = ap.parse_args()
    path = Path(args.trace)
    if not path.exists():
        print(f"trace not found: {path}", file=sys.stderr)
        return 2
    size = json_size(path)
    results = {way: run(path, way, args.repeat) for way in ("tracekit", "msgspec", "json")}
    tk = results["tracekit"]
    print(f"trace: {path.name}  JSON {size / 1e6:.1f} MB  events {tk['events']:,}")
    print(f"{'way':<12}{'seconds':>9}{'MB/s':>9}{'peak RSS MB':>13}{'RSS/JSON':>10}{'time vs tracekit':>18}")
    for way, r in results.items():
        print(f"{way:<12}{r['seconds']:>9.3f}{size / 1e6 / r['seconds']:>9.0f}{r['rss'] / 1e6:>13.0f}"
              f"{r['rss'] / size:>10.2f}{r['seconds'] / tk['seconds']:>17.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps({"json_bytes": size, **results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
