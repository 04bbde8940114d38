"""Errors tracekit raises on bad input (each maps to exit code 2 in the CLI), and the warning
it gives about a damaged cache entry."""

from __future__ import annotations


class TraceError(Exception):
    """A trace could not be read. The message says what is wrong and where."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path

    def __str__(self) -> str:
        msg = super().__str__()
        return f"{self.path}: {msg}" if self.path else msg


class TraceFormatError(TraceError):
    """The bytes are not a trace tracekit can read (not JSON, wrong shape, empty)."""


class TraceTooLargeError(TraceError):
    """Decompressing the file would exceed the configured limit (a gzip bomb guard)."""


class UsageError(TraceError):
    """The arguments given to an API or command are inconsistent."""


class OutputError(TraceError):
    """An output file could not be written (disk full, permission denied...); the old file is kept."""


class CacheWarning(UserWarning):
    """A cache entry failed its checksum: it was deleted and the trace read again."""
