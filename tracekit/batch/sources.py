"""Where a batch's traces come from: files, directories, globs, fsspec URLs and rank groups.

`expand(sources)` turns what the user gave into `Item`s (cheap: nothing is read);
`prepare(item)` reads and hashes one item into a `Job`, the small picklable value a
worker receives. Local files travel as paths (the worker reads them itself); a URL is
read once, here, and travels as bytes, so `memory://` works across processes and an
object store is downloaded once.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from tracekit.errors import TraceError
from tracekit.loader import load, loads, trace_files
from tracekit.loader.source import DEFAULT_MAX_BYTES, open_regular, os_error
from tracekit.model import Trace
from tracekit.report import redact

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
GLOB_CHARS = re.compile(r"[*?\[]")
TRACE_SUFFIXES = (".json", ".json.gz", ".json.tmp")
SAFE = re.compile(r"[^A-Za-z0-9._-]+")
LAST_NUMBER = re.compile(r"\d+(?=\D*$)")


@dataclass(frozen=True)
class Item:
    """One row-to-be: a file, a URL or a group of rank files (`paths` of several files)."""

    source: str
    paths: tuple[str, ...] = ()
    url: str | None = None
    error: str | None = None  # the source could not even be listed
    label: str = ""  # the path under the folder, glob or URL given (`relative_label`); the source when empty

    @property
    def group(self) -> bool:
        return len(self.paths) > 1


@dataclass(frozen=True)
class Job:
    """What a worker receives: small, picklable, self-contained."""

    source: str
    name: str
    content_hash: str
    size_bytes: int
    paths: tuple[str, ...] = ()
    data: bytes | None = None
    group: bool = False
    report: bool = False
    max_bytes: int = DEFAULT_MAX_BYTES  # the loader's decompressed-size limit
    label: str = ""  # `Item.label`


def expand(sources: str | os.PathLike[str] | list, *, group_ranks: bool = False) -> list[Item]:
    """Every trace named by `sources`, once each, in the order given (directories sorted)."""
    given = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    items: list[Item] = []
    for src in given:
        text = os.fspath(src)
        if URL.match(text) and not text.startswith("file://"):
            items += _expand_url(text)
        else:
            items += _expand_local(unquote(text[len("file://") :]) if text.startswith("file://") else text)
    items = _unique(items)
    return _group_ranks(items) if group_ranks else items


def _expand_local(text: str) -> list[Item]:
    path = Path(text)
    if path.is_dir():
        return [Item(str(f), (str(f),), label=relative_label(str(f), str(path))) for f in trace_files(path)]
    if not path.exists() and GLOB_CHARS.search(text):
        found: list[Path] = []
        for match in sorted(glob.glob(text, recursive=True)):
            m = Path(match)
            found += trace_files(m) if m.is_dir() else ([m] if _is_trace_name(m.name) else [])
        root = glob_root(text)
        return [Item(str(f), (str(f),), label=relative_label(str(f), root)) for f in found]
    return [Item(text, (text,), label=text)]


def _expand_url(url: str) -> list[Item]:
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(url)
        if GLOB_CHARS.search(path):
            names = [p for p in sorted(fs.glob(path)) if _is_trace_name(p)]
            root = glob_root(path)
        elif fs.isdir(path):
            names = [p for p in sorted(fs.find(path)) if _is_trace_name(p)]
            root = path
        else:
            return [Item(url, url=url, label=url)]
    except ImportError as exc:
        return [Item(url, error=f"cannot read {url.split('://')[0]}:// URLs: {exc}")]
    except Exception as exc:  # noqa: BLE001  (any backend failure becomes this source's error row)
        return [Item(url, error=f"cannot list: {type(exc).__name__}: {exc}")]
    return [Item(fs.unstrip_protocol(p), url=fs.unstrip_protocol(p), label=relative_label(p, root)) for p in names]


def glob_root(pattern: str) -> str:
    """The folder part of a glob before its first wildcard: `runs/*/w*.json` -> `runs`."""
    head = pattern[: GLOB_CHARS.search(pattern).start()]
    cut = max(head.rfind("/"), head.rfind(os.sep))
    return head[:cut] if cut > 0 else ("/" if cut == 0 else ".")


def relative_label(path: str, root: str) -> str:
    """`path` under `root`, `/`-separated (`dlrm_8rank_v100/worker0.json.gz` for the folder
    `traces`): the row keeps its folder, which the file name alone loses."""
    rel = os.path.relpath(path, root)
    return path if rel.startswith("..") else rel.replace(os.sep, "/")


def _is_trace_name(name: str) -> bool:
    return name.lower().endswith(TRACE_SUFFIXES)


def _unique(items: list[Item]) -> list[Item]:
    seen: set[str] = set()
    out = []
    for item in items:
        key = os.path.realpath(item.paths[0]) if item.paths else item.source
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _group_ranks(items: list[Item]) -> list[Item]:
    """Local files in one directory whose names differ only in their last number form a group."""
    groups: dict[tuple[str, str], list[Item]] = {}
    for item in items:
        if item.paths and not item.error:
            p = Path(item.paths[0])
            if LAST_NUMBER.search(p.name.split(".")[0]):
                groups.setdefault((str(p.parent), rank_pattern(p.name)), []).append(item)
    grouped = {i.source for members in groups.values() if len(members) > 1 for i in members}
    out = [i for i in items if i.source not in grouped]
    for (parent, pattern), members in groups.items():
        if len(members) > 1:
            folder = members[0].label.rpartition("/")[0]
            out.append(Item(str(Path(parent) / pattern), tuple(i.paths[0] for i in members),
                            label=f"{folder}/{pattern}" if folder else pattern))
    return out


def rank_pattern(filename: str) -> str:
    """`worker3.json.gz` -> `worker*.json.gz`: the glob that names every rank of the job."""
    stem, dot, rest = filename.partition(".")
    return LAST_NUMBER.sub("*", stem, count=1) + dot + rest


def prepare(item: Item, *, report: bool = False, max_bytes: int = DEFAULT_MAX_BYTES) -> Job:
    """Read and hash an item. Raises `TraceError` when it cannot be read."""
    if item.error:
        raise TraceError(item.error)
    if item.url:
        data = _read_url(item.url)
        digest = hashlib.sha256(data).hexdigest()
        return Job(item.source, safe_name(item, digest), digest, len(data), data=data, report=report,
                   max_bytes=max_bytes, label=item.label or item.source)
    hashes = [(_hash_file(p), p) for p in item.paths]
    if item.group:
        lines = sorted(f"{Path(p).name}\0{h}\n" for (h, _), p in hashes)
        digest = hashlib.sha256("".join(lines).encode()).hexdigest()
    else:
        digest = hashes[0][0][0]
    size = sum(size for (_, size), _ in hashes)
    return Job(
        item.source, safe_name(item, digest), digest, size, paths=item.paths, group=item.group, report=report,
        max_bytes=max_bytes, label=item.label or item.source,
    )


def _hash_file(path: str) -> tuple[str, int]:
    try:
        with open_regular(path, path) as fh:  # a FIFO or a device is refused, never read
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
            return digest, fh.tell()
    except OSError as exc:
        raise os_error(exc, path) from None


def _read_url(url: str) -> bytes:
    try:
        import fsspec

        with fsspec.open(url, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        raise TraceError("no such file", path=url) from None
    except Exception as exc:  # noqa: BLE001  (backend errors vary by protocol)
        raise TraceError(f"cannot read: {type(exc).__name__}: {exc}", path=url) from None


def safe_name(item: Item, content_hash: str | None) -> str:
    """A file-name-safe, unique, stable name: readable stem + hash of (source, content)."""
    if item.group:
        parent = Path(item.paths[0]).parent.name
        stem = f"{parent}-{rank_pattern(Path(item.paths[0]).name).split('.')[0].replace('*', '')}"
    else:
        stem = re.split(r"[/\\]", item.source.rstrip("/\\"))[-1]
        for suffix in (".gz", ".tmp", ".json", ".pt.trace"):
            stem = stem[: -len(suffix)] if stem.lower().endswith(suffix) else stem
    stem = SAFE.sub("_", redact.text(stem)).strip("._-")[:60] or "trace"  # (names a report file: always redacted)
    tag = hashlib.sha256(f"{item.source}\0{content_hash or ''}".encode()).hexdigest()[:12]
    return f"{stem}-{tag}"


def load_job_trace(job: Job) -> Trace:
    """The trace of a single-file job, from its path or from the bytes `prepare` read.

    `workers=0`: the batch already runs one job per core, so the loader starts no decoding thread.
    Lean (`loader.lean`): the batch only analyses it.
    """
    from tracekit.loader.lean import lean_trace

    if job.data is None:
        return load(job.paths[0], workers=0, max_bytes=job.max_bytes, lean=True)
    return lean_trace(loads(job.data, path=job.source, workers=0, max_bytes=job.max_bytes))


__all__ = ["Item", "Job", "expand", "prepare", "safe_name", "rank_pattern", "load_job_trace"]
