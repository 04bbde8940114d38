"""Where the `tracekit` command keeps what it can reuse: one folder, `$XDG_CACHE_HOME/tracekit`
(else `~/.cache/tracekit`), holding the trace cache (`loader.cache`), the analysis cache
(`analysis_cache`) and the compiled report templates (`templates_folder`). The library
writes none of them unless asked: `load(cache=True)`, `analyse(cache=True)`, or a
`template_cache` folder given to the HTML renderer.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["folder", "templates_folder"]


def folder(given: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: `given`, else the default above (`loader.cache.cache_dir`)."""
    from tracekit.loader.cache import cache_dir

    return cache_dir(given)


def templates_folder(given: str | os.PathLike[str] | None = None) -> Path:
    """Where the compiled report templates are kept: `templates` in the cache folder."""
    return folder(given) / "templates"
