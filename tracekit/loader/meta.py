"""Top-level keys and `M` events -> `TraceMeta`."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import polars as pl

from tracekit.loader.args import NameArgs
from tracekit.model import DEVICES_SCHEMA, PROCESSES_SCHEMA, THREADS_SCHEMA

VERSION_KEYS = ("schemaVersion", "cuda_runtime_version", "cuda_driver_version", "cupti_version",
                "roctracer_version", "hip_runtime_version", "pytorch_version", "torch_version")
FLAG_KEYS = ("record_shapes", "with_stack", "with_flops", "with_modules", "profile_memory")
KNOWN_KEYS = {"traceEvents", "deviceProperties", "distributedInfo", "baseTimeNanoseconds",
              "displayTimeUnit", "traceName", "metadata", *VERSION_KEYS, *FLAG_KEYS}

DEVICE_KEYS = {
    "id": "id", "name": "name", "totalGlobalMem": "total_global_mem", "computeMajor": "compute_major",
    "computeMinor": "compute_minor", "numSms": "num_sms", "maxThreadsPerBlock": "max_threads_per_block",
    "maxThreadsPerMultiprocessor": "max_threads_per_sm", "regsPerBlock": "regs_per_block",
    "regsPerMultiprocessor": "regs_per_sm", "warpSize": "warp_size", "sharedMemPerBlock": "shared_mem_per_block",
    "sharedMemPerBlockOptin": "shared_mem_per_block_optin", "sharedMemPerMultiprocessor": "shared_mem_per_sm",
}


def top_fields(top: dict[str, Any]) -> dict[str, Any]:
    """The TraceMeta fields that come from the top-level object."""
    dist = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else {}
    metadata = top.get("metadata") if isinstance(top.get("metadata"), dict) else {}
    return {
        "schema_version": _int(top.get("schemaVersion")),
        "base_time_ns": _int(top.get("baseTimeNanoseconds")) or 0,
        "display_time_unit": _str(top.get("displayTimeUnit")),
        "trace_name": _str(top.get("traceName")),
        "rank": _int(dist.get("rank")),
        "world_size": _int(dist.get("world_size")),
        "distributed_info": dist,
        "versions": {k: top[k] for k in VERSION_KEYS if k in top},
        "profiler_flags": {k: top[k] for k in FLAG_KEYS if k in top},
        "metadata": metadata,
        "extra": {k: v for k, v in top.items() if k not in KNOWN_KEYS},
        "devices": devices_frame(top.get("deviceProperties")),
    }


def devices_frame(props: Any) -> pl.DataFrame:
    rows = []
    for p in props if isinstance(props, list) else []:
        if isinstance(p, dict):
            rows.append({col: p.get(key) for key, col in DEVICE_KEYS.items()})
    if not rows:
        return pl.DataFrame(schema=DEVICES_SCHEMA)
    frame = pl.DataFrame(rows, infer_schema_length=None, strict=False)
    cols = [pl.col(c).cast(t, strict=False) if c in frame.columns else pl.lit(None, t).alias(c)
            for c, t in DEVICES_SCHEMA.items()]
    return frame.select(cols).unique("id", keep="first", maintain_order=True)


def name_metadata(rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """process/thread names, labels and sort indexes from `M` events; count conflicting repeats.

    `rows`: the M events in file order (columns name, pid, tid, args).
    """
    procs: dict[str, dict[str, Any]] = {}
    threads: dict[tuple[str, str], dict[str, Any]] = {}
    conflicts = 0
    for kind, pid, tid, args in rows.select("name", "pid", "tid", "args").iter_rows():
        if kind not in _KINDS:
            continue
        a = _name_args(args)
        if kind.startswith("process"):
            rec = procs.setdefault(pid, {"pid": pid, "name": None, "labels": None, "sort_index": None})
            key, value = {"process_name": ("name", a.name), "process_labels": ("labels", a.labels),
                          "process_sort_index": ("sort_index", a.sort_index)}[kind]
        else:
            rec = threads.setdefault((pid, tid), {"pid": pid, "tid": tid, "name": None, "sort_index": None})
            key, value = ("name", a.name) if kind == "thread_name" else ("sort_index", a.sort_index)
        value = _str(value) if key in ("name", "labels") else _int(value)
        if rec[key] is not None and value is not None and rec[key] != value:
            conflicts += 1
        if value is not None:
            rec[key] = value
    return (
        pl.DataFrame(list(procs.values()), schema=PROCESSES_SCHEMA),
        pl.DataFrame(list(threads.values()), schema=THREADS_SCHEMA),
        conflicts,
    )


_KINDS = frozenset({"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"})
_NAME_ARGS = msgspec.json.Decoder(NameArgs)


def _name_args(text: str | None) -> NameArgs:
    if text is None:
        return NameArgs()
    try:
        return _NAME_ARGS.decode(text)
    except msgspec.DecodeError:
        return NameArgs()


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v) and abs(v) < 2**63:
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            return None
    return None


def _str(v: Any) -> str | None:
    if v is None:
        return None
    return v if isinstance(v, str) else str(v)
