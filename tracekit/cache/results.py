"""Batch results, one JSON file per analysed content: `<sha256>.json` in the cache folder.

A batch hashes each source's bytes (or a rank group's) and keeps the rows it made from them
under that hash, with the `fingerprint` of the tracekit that made them; a rerun serves
every unchanged content from here and analyses only new bytes. Each file is written to a
temporary name in the folder and renamed over the target, flushed to the disk first, so an
interrupted run leaves only whole entries (and temporary files, removed after an hour). A
folder that cannot be written is an `OutputError`: a batch that cannot keep its results
stops with one line, as for any output it writes.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from tracekit.atomic import file_mode, write_file, writing
from tracekit.errors import UsageError

HASH = re.compile(r"^[0-9a-f]{64}$")
TEMP_PREFIX = ".tracekit-tmp-"  # (the batch's output files use it too)
STALE_TEMP_S = 3600
NOT_KEPT = ("report_html", "cacheable")  # an entry's fields that are not stored


class Results:
    """The batch result entries of one folder (created on first use)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder).resolve()
        with writing(self.folder):
            self.folder.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(self.folder)
        self.mode = file_mode()  # what open() would give; mkstemp's 0600 is too strict

    def get(self, content_hash: str, fingerprint: str) -> dict[str, Any] | None:
        """The entry for this content, when written by the same kind of tracekit."""
        if not HASH.match(content_hash):
            return None
        try:
            entry = json.loads((self.folder / f"{content_hash}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = isinstance(entry, dict) and entry.get("fingerprint") == fingerprint and "summary" in entry
        return entry if ok else None

    def put(self, content_hash: str, entry: dict[str, Any]) -> Path:
        """Store `entry` (less its report and `cacheable`) under `content_hash`."""
        if not HASH.match(content_hash):
            raise UsageError(f"not a sha256 digest: {content_hash!r}")
        kept = {k: v for k, v in entry.items() if k not in NOT_KEPT}
        text = json.dumps(kept, ensure_ascii=False, sort_keys=True)
        target = self.folder / f"{content_hash}.json"
        with writing(target):
            self.folder.mkdir(parents=True, exist_ok=True)
            return write_file(target, text.encode("utf-8"), prefix=TEMP_PREFIX, mode=self.mode, sync=True)

    def hashes(self) -> set[str]:
        """The contents that have an entry."""
        return {p.stem for p in self.folder.glob("*.json") if HASH.match(p.stem)}


def _remove_stale_temps(folder: Path) -> None:
    """Temp files left by a killed run (older than an hour, so a concurrent run's are kept)."""
    cutoff = time.time() - STALE_TEMP_S
    for p in folder.glob(f"{TEMP_PREFIX}*"):
        try:
            if p.stat().st_mtime < cutoff:
                p.unlink()
        except OSError:
            pass
