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


BAD_METADATA = ("{n:,} top-level [fields|field] (deviceProperties, distributedInfo, ...) had the wrong JSON "
                "type; [they were|it was] ignored")


def top_fields(top: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The TraceMeta fields that come from the top-level object, and how many of the fields
    read had the wrong JSON type (ignored: `bad_metadata_type`)."""
    bad = [0]
    dist = _typed(top, "distributedInfo", dict, {}, bad)
    metadata = _typed(top, "metadata", dict, {}, bad)
    fields = {
        "schema_version": _int_field(top, "schemaVersion", bad),
        "base_time_ns": _int_field(top, "baseTimeNanoseconds", bad) or 0,
        "display_time_unit": _str_field(top, "displayTimeUnit", bad),
        "trace_name": _str_field(top, "traceName", bad),
        "rank": _int_field(dist, "rank", bad),
        "world_size": _int_field(dist, "world_size", bad),
        "distributed_info": dist,
        "versions": {k: top[k] for k in VERSION_KEYS if k in top},
        "profiler_flags": {k: top[k] for k in FLAG_KEYS if k in top},
        "metadata": metadata,
        "extra": {k: v for k, v in top.items() if k not in KNOWN_KEYS},
        "devices": devices_frame(top.get("deviceProperties"), bad),
    }
    return fields, bad[0]


def devices_frame(props: Any, bad: list[int] | None = None) -> pl.DataFrame:
    """One row per device object; a value of the wrong JSON type (a list where a number
    belongs, say) is null and counted in `bad[0]`."""
    bad = [0] if bad is None else bad
    if props is not None and not isinstance(props, list):
        bad[0] += 1
    rows = []
    for p in props if isinstance(props, list) else []:
        if not isinstance(p, dict):
            bad[0] += 1
            continue
        rows.append({col: (_str_field if DEVICES_SCHEMA[col] == pl.String else _int_field)(p, key, bad)
                     for key, col in DEVICE_KEYS.items()})
    if not rows:
        return pl.DataFrame(schema=DEVICES_SCHEMA)
    frame = pl.DataFrame(rows, schema={c: DEVICES_SCHEMA[c] for c in DEVICE_KEYS.values()})
    return frame.select(list(DEVICES_SCHEMA)).unique("id", keep="first", maintain_order=True)


def _typed(obj: dict[str, Any], key: str, kind: type, default: Any, bad: list[int]) -> Any:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, kind):
        return value
    bad[0] += 1
    return default


def _int_field(obj: dict[str, Any], key: str, bad: list[int]) -> int | None:
    """An integer field: a number (or numeric string) in Int64's range, else None (counted)."""
    value = obj.get(key)
    if value is None:
        return None
    out = _int(value)
    if out is None or not -(2**63) <= out < 2**63:
        bad[0] += 1
        return None
    return out


def _str_field(obj: dict[str, Any], key: str, bad: list[int]) -> str | None:
    """A text field: a string, or a number written as text; anything else None (counted)."""
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    bad[0] += 1
    return None


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
