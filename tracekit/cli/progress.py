"""A status line on stderr for the commands that can take a while: reading the trace (a
share of its bytes), then each analysis as it ends, then the report's last steps.

On a terminal the line is redrawn in place and cleared at the end, so what the command
prints after it stays clean. Elsewhere (a CI log) it is off unless asked for, and then
writes a line per step, the reading's at most once a second.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

import click

from tracekit import format as fmt

READ_EVERY_S = 1.0  # off a terminal: one line per this much reading at most
DRAW_EVERY_S = 0.1  # on a terminal: a redraw per this much at most

progress_opt = click.option(
    "--progress/--no-progress", default=None,
    help="Show how far the reading and the analyses are, on stderr (default: when it is a terminal).")


class Status:
    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = _isatty(self.stream)
        self.enabled = self.terminal if enabled is None else enabled
        self.drawn = False
        self.label = ""  # put before each status (which trace, when a command reads two)
        self._last = float("-inf")
        self._text = ""  # the last status shown
        self._lock = threading.Lock()

    def reading(self, path: str, done: int, total: int) -> None:
        """Bytes of the file read so far, of its size."""
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < (DRAW_EVERY_S if self.terminal else READ_EVERY_S):
            return
        share = done / total if total else 1.0
        text = f"reading {os.path.basename(path)}: {fmt.pct(share, 0)} of {fmt.size(total)}"
        if text != self._text:  # (gzip: the compressed bytes are all read before the text is)
            self._show(text, now)

    def analysing(self, name: str, done: int, total: int) -> None:
        """An analysis ended (`done` of `total`)."""
        if self.enabled:
            text = "analysis read from the cache" if name == "cache" else f"{done}/{total} ({name.replace('_', ' ')} done)"
            self._show(f"analysing: {text}", time.monotonic())

    def step(self, text: str) -> None:
        if self.enabled:
            self._show(text, time.monotonic())

    def note(self, text: str) -> None:
        """A line of its own on the stream, whether the status is shown or not (on a terminal
        it replaces the status line, which the next update draws again)."""
        with self._lock:
            clear = "\r\x1b[K" if self.drawn and self.terminal else ""
            self.stream.write(f"{clear}{text}\n")
            self.stream.flush()
            self.drawn = False

    def close(self) -> None:
        """Clear the line (on a terminal), so the next output starts clean."""
        with self._lock:
            if self.drawn and self.terminal:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            self.drawn = False

    def _show(self, text: str, now: float) -> None:
        with self._lock:
            self._last, self._text = now, text
            text = self.label + text
            self.stream.write(f"\r{text}\x1b[K" if self.terminal else f"{text}\n")
            self.stream.flush()
            self.drawn = True


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a file
        return False
