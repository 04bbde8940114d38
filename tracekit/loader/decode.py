"""Compatibility with the loader's old two-step API: `build_trace(decode_trace(data), src)`.

The loader now streams (`tracekit.loader.read`); `decode_trace` only wraps the bytes so
that `build_trace` can load them. New code should call `tracekit.loads(data, path=...)`,
which also takes gzip bytes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Decoded:
    data: bytes
    path: str = "<bytes>"


def decode_trace(data: bytes, path: str = "") -> Decoded:
    return Decoded(data, path or "<bytes>")
