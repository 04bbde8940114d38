"""A cache of finished analyses, beside the trace cache: a second report, diff or batch run
of an unchanged trace skips the analyses as well as the parsing.

An entry's name is a hash of what decides the result:
- the trace's content: each frame's schema, height and row hashes (Polars `hash_rows`
  with each row's position, so the order counts too), and the metadata (its frames the
  same way, the rest as JSON), the file's path included;
- the options (`AnalysisOptions` as JSON; options that are not JSON are not cached);
- the code: a hash of tracekit's own source and compiled files, and the Polars and
  Python versions, so an upgrade or an edit invalidates every entry.

An entry is a folder under `analyses/` in the cache folder: `analysis.json`, the result
tree, and one Arrow IPC file per frame in it (`f0.arrow`, ...). The tree holds numbers,
text, lists, tuples, dicts (as pairs: keys need not be text), Polars frames and series
(by file), and tracekit's own dataclasses and Enums by class name. Nothing is unpickled:
reading imports only classes of the `tracekit` package, only dataclasses and Enums, and
sets only their declared fields. An entry is written into a temporary folder and renamed
into place; one that cannot be read back is ignored (and replaced by the next write).
`analysis.json` is checked, and each frame file's bytes against the SHA-256 it lists, before
any of them is parsed (as the trace cache's: `cache.entries.read_checked`); an entry
that fails is deleted with a `CacheWarning`, and the analyses run again.

Entries count towards the cache folder's size limit, with the traces' own (least recently
used first: `cache.entries.prune`).

Not cached: an `Analysis` with notes (an analysis that failed may not fail next time: a
lack of memory, say), one that keeps the critical path's dependency graph
(`AnalysisOptions.keep_graph`), or one that holds any other kind of value (`Unstorable`).
`Cache.clear` (or deleting the folder) empties both caches.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import importlib
import json
import math
import platform
import shutil
import struct
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.cache import entries
from tracekit.model import DERIVED_FROM_TRACE, Trace, constant_columns

FORMAT = "1"  # bump when the entry layout changes
SUBDIR = entries.ANALYSES
TREE = "analysis.json"
ROW = "__tracekit_row"
COMPRESSION = "zstd"  # the smallest entries of the codecs tried, and quick to read back


class Unstorable(TypeError):
    """A value in the analysis that the cache does not know how to store."""


@lru_cache(maxsize=1)
def code_version() -> str:
    """A hash of tracekit's installed source and compiled files (any edit or upgrade
    invalidates every entry), the entry format, and the Polars and Python versions."""
    root = Path(__file__).resolve().parent.parent  # the tracekit package
    files = sorted(f for suffix in ("*.py", "*.c", "*.h", "*.so", "*.pyd") for f in root.rglob(suffix))
    return entries.files_digest(f"{FORMAT}\0{pl.__version__}\0{platform.python_version()}", files, root)


def entry_key(trace: Trace, options: Any) -> str | None:
    """The entry name of this trace analysed with these options; None when it cannot be
    named (options that are not JSON, a frame Polars cannot hash)."""
    h = hashlib.sha256(code_version().encode())
    try:
        h.update(json.dumps(dataclasses.asdict(options), sort_keys=True, allow_nan=True).encode())
        for name, frame in trace.frames().items():
            _digest_frame(h, name, frame)
        for f in dataclasses.fields(trace.meta):
            value = getattr(trace.meta, f.name)
            if isinstance(value, pl.DataFrame):
                _digest_frame(h, f.name, value)
            else:
                h.update(f"{f.name}={json.dumps(value, sort_keys=True, allow_nan=True)}\0".encode())
    except (TypeError, ValueError, pl.exceptions.PolarsError):
        return None
    return h.hexdigest()[:32]


def _digest_frame(h: Any, name: str, frame: pl.DataFrame) -> None:
    h.update(f"{name}:{frame.height}:{frame.schema}\0".encode())
    if frame.height:
        rows = frame.with_row_index(ROW).hash_rows(seed=0)
        h.update(struct.pack("<QQ", rows.sum() & (2**64 - 1), rows.max()))


def read(directory: Path, key: str | None, trace: Trace) -> Any:
    """The cached `Analysis` of `trace`, or None (no entry, or one that cannot be trusted)."""
    if key is None:
        return None
    entry = directory / SUBDIR / key
    try:
        doc = json.loads(entries.read_index(entry / TREE))
        if doc.get("key") != key or doc.get("version") != code_version():
            return None
        data = entries.read_checked(entry, [f"f{i}.arrow" for i in range(doc["frames"])],
                                    doc.get(entries.DIGESTS))
    except entries.CorruptEntry as exc:
        entries.drop(entry, str(exc))
        return None
    except (OSError, ValueError, AttributeError, KeyError, TypeError):  # no entry, or one being replaced
        return None
    try:
        # one plan for all: Polars unpacks the files in parallel
        frames = pl.collect_all([pl.scan_ipc(d) for d in data])
        frames = [constant_columns(f) for f in frames]
        analysis = _decode(doc["tree"], frames, trace)
        entries.touch(entry)
        return dataclasses.replace(analysis, trace=trace)
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, ImportError,
            pl.exceptions.PolarsError):
        return None


def write(directory: Path, key: str | None, analysis: Any) -> bool:
    """Store an `Analysis`; False when it was not stored (the cache is only an
    optimisation: an unstorable value or a full disk loses nothing but time)."""
    if key is None or analysis.options.keep_graph or analysis.notes:
        return False
    tmp = None
    try:
        frames: list[pl.DataFrame] = []
        tree = _encode(dataclasses.replace(analysis, trace=None), frames, {})  # the trace is the caller's
        base = directory / SUBDIR
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=base))
        for i, frame in enumerate(frames):
            write_frame(frame, tmp / f"f{i}.arrow")
        digests = {f"f{i}.arrow": entries.digest((tmp / f"f{i}.arrow").read_bytes()) for i in range(len(frames))}
        doc = {"key": key, "version": code_version(), "frames": len(frames), entries.DIGESTS: digests,
               "tree": tree}
        body = json.dumps(doc, allow_nan=True).encode()
        (tmp / TREE).write_bytes(entries.index_bytes(body))  # last: it vouches for the rest
        entries.publish(tmp, base / key, directory)
        return True
    except (OSError, Unstorable, ValueError, pl.exceptions.PolarsError):
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return False


def write_frame(frame: pl.DataFrame, path: Path) -> None:
    """One frame of an entry, as one record batch. A text column's values may point into
    large buffers shared with other frames (names gathered from the trace's), and each
    batch writes every buffer its rows point into: one batch writes them once (and reads
    back as one chunk, which later gathers of text want)."""
    frame.write_ipc(path, compression=COMPRESSION, record_batch_size=max(frame.height, 1))


# the tree: JSON values, with tagged objects for what JSON has no form of


def _encode(value: Any, frames: list[pl.DataFrame], seen: dict[int, int]) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):  # before int: an IntEnum is an int too
        return {"$e": _class_name(type(value)), "name": value.name}
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$f": repr(value)}
    if isinstance(value, (pl.DataFrame, pl.Series)):
        index = seen.get(id(value))
        if index is None:
            index = seen[id(value)] = len(frames)
            frames.append(value if isinstance(value, pl.DataFrame) else value.to_frame())
        return {"$df" if isinstance(value, pl.DataFrame) else "$s": index}
    if isinstance(value, list):
        return [_encode(v, frames, seen) for v in value]
    if isinstance(value, tuple) and type(value) is tuple:
        return {"$t": [_encode(v, frames, seen) for v in value]}
    if isinstance(value, dict) and type(value) is dict:
        return {"$m": [[_encode(k, frames, seen), _encode(v, frames, seen)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"$dc": _class_name(type(value)),
                "fields": [[f.name, None if f.metadata.get(DERIVED_FROM_TRACE) else _encode(getattr(value, f.name), frames, seen)]
                           for f in dataclasses.fields(value)]}
    raise Unstorable(f"cannot store a {type(value).__module__}.{type(value).__qualname__}")


def _class_name(cls: type) -> str:
    if not cls.__module__.startswith("tracekit.") or "<locals>" in cls.__qualname__:
        raise Unstorable(f"cannot store a {cls.__module__}.{cls.__qualname__}: not a tracekit class")
    return f"{cls.__module__}:{cls.__qualname__}"


def _decode(value: Any, frames: list[pl.DataFrame], trace: Trace | None = None) -> Any:
    """The value `_encode` stored; `trace` goes to the fields marked `DERIVED_FROM_TRACE`."""
    if isinstance(value, list):
        return [_decode(v, frames, trace) for v in value]
    if not isinstance(value, dict):
        return value
    if "$t" in value:
        return tuple(_decode(v, frames, trace) for v in value["$t"])
    if "$m" in value:
        return {_decode(k, frames, trace): _decode(v, frames, trace) for k, v in value["$m"]}
    if "$df" in value:
        return frames[value["$df"]]
    if "$s" in value:
        return frames[value["$s"]].to_series()
    if "$f" in value:
        return float(value["$f"])
    if "$e" in value:
        cls = _tracekit_class(value["$e"])
        if not issubclass(cls, enum.Enum):
            raise TypeError(f"{value['$e']} is not an Enum")
        return cls[value["name"]]
    if "$dc" in value:
        cls = _tracekit_class(value["$dc"])
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{value['$dc']} is not a dataclass")
        declared = {f.name: f for f in dataclasses.fields(cls)}
        if {name for name, _ in value["fields"]} != set(declared):
            raise TypeError(f"{value['$dc']}: the stored fields differ from the class's")
        fields = {name: trace if declared[name].metadata.get(DERIVED_FROM_TRACE) else _decode(v, frames, trace)
                  for name, v in value["fields"]}
        obj = cls.__new__(cls)  # no __init__: the values were checked when they were made
        for name, v in fields.items():  # frozen classes and init=False fields alike
            object.__setattr__(obj, name, v)
        return obj
    raise TypeError(f"unknown tag in {sorted(value)}")


def _tracekit_class(name: str) -> type:
    module, _, qualname = name.partition(":")
    if module != "tracekit" and not module.startswith("tracekit."):
        raise TypeError(f"{name}: not a tracekit class")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise TypeError(f"{name}: not a class")
    return obj

