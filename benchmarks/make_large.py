"""Make a large, valid Kineto trace by replicating a real one in time.

    python benchmarks/make_large.py [SOURCE] --size-gb 1 [-o OUT.json[.gz]]

Each replica is the source's events shifted later by the source's time span (plus a
gap), with fresh ids so links stay one-to-one: `External id`, `correlation` (and the
flow ids, which carry the correlation), `Python id`/`Python parent id`, `Ev Idx`,
`Sequence number`, `Record function id`. Metadata (`ph: M`) events are written once.
Fractional timestamps are shifted exactly (as decimals). The result is written in
Kineto's layout (one event per line, `},\\n  {` between events), gzip if the output name
ends in `.gz` (ISA-L level 1 when available).
"""

from __future__ import annotations

import argparse
import gzip
import math
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT / ".." / "shared" / "traces" / "v100_ddp_mlp_memory_rank1.json.gz"
DEFAULT_OUT = Path("/tmp/tracekit-bench/v100_ddp_mlp_1gb.json")
ID_KEYS = ("External id", "external id", "Python id", "Python parent id", "Ev Idx", "Sequence number",
           "Record function id")
CORRELATION_KEYS = ("correlation",)
GAP_US = 1000  # between replicas


def read_source(path: Path) -> tuple[dict[str, msgspec.Raw], list[dict[str, Any]]]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    events = msgspec.json.Decoder(float_hook=Decimal).decode(top["traceEvents"])
    return top, events


def spans(events: list[dict[str, Any]]) -> dict[str, int | Decimal]:
    """How far each replica moves: the time span, and one past the largest id of each kind."""
    lo, hi = None, None
    largest: dict[str, int] = {k: 0 for k in (*ID_KEYS, "correlation")}
    for e in events:
        ts = e.get("ts")
        if isinstance(ts, (int, Decimal)):
            end = ts + (e.get("dur") if isinstance(e.get("dur"), (int, Decimal)) else 0)
            lo = ts if lo is None or ts < lo else lo
            hi = end if hi is None or end > hi else hi
        args = e.get("args")
        if isinstance(args, dict):
            for k, top in largest.items():
                v = args.get(k)
                if isinstance(v, int) and not isinstance(v, bool) and v > top:
                    largest[k] = v
        fid = e.get("id")
        if e.get("ph") in ("s", "t", "f") and isinstance(fid, int) and fid > largest["correlation"]:
            largest["correlation"] = fid
    out: dict[str, int | Decimal] = {k: v + 1 for k, v in largest.items()}
    out["ts"] = (hi - lo if lo is not None else 0) + GAP_US
    return out


def shift(events: list[dict[str, Any]], step: dict[str, int | Decimal]) -> None:
    """Move every event one replica on, in place."""
    ts_step = step["ts"]
    keys = [k for k in (*ID_KEYS, "correlation") if step[k] > 1]
    corr = step["correlation"]
    for e in events:
        ts = e.get("ts")
        if isinstance(ts, (int, Decimal)) and not isinstance(ts, bool):
            e["ts"] = ts + ts_step
        args = e.get("args")
        if isinstance(args, dict):
            for k in keys:
                v = args.get(k)
                if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                    args[k] = v + step[k]
        if e.get("ph") in ("s", "t", "f") and isinstance(e.get("id"), int):
            e["id"] += corr


def open_out(path: Path, level: int):
    if path.name.endswith(".gz"):
        try:
            from isal import igzip

            return igzip.open(path, "wb", compresslevel=min(level, 3))
        except ImportError:
            return gzip.open(path, "wb", compresslevel=level)
    return open(path, "wb")


def make(source: Path, out: Path, size_bytes: int, level: int = 1) -> dict[str, Any]:
    t0 = time.perf_counter()
    top, events = read_source(source)
    step = spans(events)
    body = [e for e in events if e.get("ph") != "M"]
    meta = [e for e in events if e.get("ph") == "M"]
    enc = msgspec.json.Encoder(decimal_format="number")
    keys = list(top)  # the keys before traceEvents stay before it, the others after
    head = {k: top[k] for k in keys[: keys.index("traceEvents")]}
    tail = {k: top[k] for k in keys[keys.index("traceEvents") + 1 :]}
    out.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    replicas = 0
    with open_out(out, level) as fh:
        def put(b: bytes) -> None:
            nonlocal written
            fh.write(b)
            written += len(b)

        put(b"{\n" + b"".join(b'  "%s": %s,\n' % (k.encode(), bytes(v)) for k, v in head.items()))
        put(b'  "traceEvents": [\n  ')
        put(b",\n  ".join(enc.encode(e) for e in meta))
        n_per = None
        while written < size_bytes:
            if replicas:
                shift(body, step)
            text = b",\n  ".join(enc.encode(e) for e in body)
            put(b",\n  " + text)
            replicas += 1
            n_per = n_per or len(text)
            if replicas == 1:
                total = max(1, math.ceil((size_bytes - written) / n_per) + 1)
                print(f"replica size {n_per / 1e6:.1f} MB: writing about {total} replicas", file=sys.stderr)
        put(b"\n  ]" + b"".join(b',\n  "%s": %s' % (k.encode(), bytes(v)) for k, v in tail.items()) + b"\n}\n")
    return {"path": str(out), "json_bytes": written, "replicas": replicas,
            "events": len(meta) + replicas * len(body), "seconds": time.perf_counter() - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", nargs="?", default=str(DEFAULT_SOURCE))
    ap.add_argument("--size-gb", type=float, default=1.0, help="target size of the JSON text (GB, 1e9 bytes)")
    ap.add_argument("-o", "--out", default=str(DEFAULT_OUT), help="output file (.gz: gzip-compressed)")
    ap.add_argument("--level", type=int, default=1, help="gzip level (with .gz)")
    args = ap.parse_args()
    source = Path(args.source)
    if not source.exists():
        print(f"source trace not found: {source}", file=sys.stderr)
        return 2
    info = make(source, Path(args.out), int(args.size_gb * 1e9), args.level)
    print(msgspec.json.encode(info).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
