"""The cache: one folder of what the `tracekit` command and a batch can reuse, one object.

`Cache(folder)` (default `$XDG_CACHE_HOME/tracekit`, else `~/.cache/tracekit`) holds
- loaded traces (`cache.traces`): `cache.load(path)` is `tracekit.load(path)`, read back
  while the file is unchanged;
- finished analyses (`cache.analyses`, under `analyses/`): `cache.analyse(trace)` is
  `tracekit.analyse(trace)`, read back while the trace, the options and tracekit are unchanged;
- a batch's results (`cache.results`, `<sha256>.json`): `cache.results()`;
- the report's compiled templates (`cache.templates`, a folder the HTML renderer is given).

The library's `load` and `analyse` know nothing of it and write nothing: the CLI and
`run_batch` build one `Cache` and go through it. Written entries count towards one size
limit (`cache.entries`). Inside `writes.writes_behind()` (the `tracekit` command) the
entries are written on a background thread while the command goes on.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.cache import traces, writes
from tracekit.cache.entries import default_folder
from tracekit.loader.source import DEFAULT_MAX_BYTES

if TYPE_CHECKING:  # (Polars loads with the analyses, not with this module)
    from collections.abc import Callable

    from tracekit.pipeline import Analysis, AnalysisOptions, Runner
    from tracekit.cache.results import Results
    from tracekit.loader import Progress
    from tracekit.model import Trace

__all__ = ["Cache", "default_folder"]

OUTPUT_FOLDER = ".cache"  # a batch's cache in its output folder, unless it is given one


class Cache:
    """One cache folder, and loading and analysing through it."""

    def __init__(self, folder: str | os.PathLike[str] | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_folder()

    @classmethod
    def beside(cls, out_dir: str | os.PathLike[str]) -> Cache:
        """The cache a batch writing to `out_dir` keeps when given none: `out_dir/.cache`."""
        return cls(Path(out_dir) / OUTPUT_FOLDER)

    def __repr__(self) -> str:
        return f"Cache({str(self.folder)!r})"

    @property
    def templates(self) -> Path:
        """Where the report's compiled templates are kept (`render.html.render_html(template_cache=)`)."""
        return self.folder / "templates"

    def results(self) -> Results:
        """The batch result entries of this folder (`cache.results`; the folder is created)."""
        from tracekit.cache.results import Results

        return Results(self.folder)

    def load(self, path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES, workers: int | None = None,
             progress: Progress | None = None, lean: bool = False) -> Trace:
        """`tracekit.load(path, ...)` with the same arguments, read from the cache while the file
        is unchanged, else loaded and stored (whole: a lean load is made from the stored
        trace). The entry is written before this returns, or, inside `writes.writes_behind()`,
        on a background thread (in line still for a trace of `traces.WRITE_NOW_BYTES` or more).
        `progress` is not called on a hit: there is nothing to wait for."""
        from tracekit.loader import load

        key = traces.entry_key(path, max_bytes=max_bytes)
        trace = traces.read(self.folder, key, path=str(path))
        if trace is None:
            trace = load(path, max_bytes=max_bytes, workers=workers, progress=progress)
            writes.run(traces.write, self.folder, key, trace, now=traces.writes_now(path))
        if lean:
            from tracekit.loader.lean import lean_trace

            return lean_trace(trace)
        return trace

    def analyse(self, trace: Trace, *, options: AnalysisOptions | None = None,
                progress: Callable[[str, int, int], None] | None = None,
                runner: Runner | None = None) -> Analysis:
        """`tracekit.analyse(trace, ...)`, read from the cache while the trace's content, the
        options and tracekit's code are unchanged (`cache.analyses`), else run and stored.
        On a hit `progress("cache", 1, 1)` is called once. The entry is written before this
        returns, or, inside `writes.writes_behind()`, on a background thread."""
        from tracekit.pipeline import AnalysisOptions, analyse
        from tracekit.cache import analyses

        opts = options or AnalysisOptions()
        key = analyses.entry_key(trace, opts)
        hit = analyses.read(self.folder, key, trace)
        if hit is not None:
            if progress is not None:
                progress("cache", 1, 1)
            return hit
        result = analyse(trace, options=opts, progress=progress, runner=runner)
        writes.run(analyses.write, self.folder, key, result)
        return result

    def prune(self, *, limit: int | None | bool = True) -> int:
        """Delete the least recently used entries down to `limit` bytes (`entries.prune`)."""
        from tracekit.cache.entries import prune

        return prune(self.folder, limit=limit)

    def clear(self) -> None:
        """Delete the folder and everything in it."""
        shutil.rmtree(self.folder, ignore_errors=True)
