"""Values to text: the only place numbers become strings (renderers call these)."""

from __future__ import annotations

import re


def ns(value: int | float | None) -> str:
    """A duration in nanoseconds, in the unit that reads best: 812 ns, 3.41 µs, 12.8 ms, 1.52 s."""
    if value is None:
        return "–"
    v = float(value)
    a = abs(v)
    if a < 1_000:
        return f"{v:.0f} ns"
    if a < 1_000_000:
        return f"{v / 1e3:.3g} µs" if a < 100_000 else f"{v / 1e3:.0f} µs"
    if a < 1_000_000_000:
        return f"{v / 1e6:.3g} ms" if a < 100_000_000 else f"{v / 1e6:.0f} ms"
    return f"{v / 1e9:.3g} s"


def pct(value: float | None, digits: int = 1) -> str:
    """A fraction (0..1) as a percentage."""
    if value is None:
        return "–"
    return f"{value * 100:.{digits}f} %"


def size(n: int | None) -> str:
    if n is None:
        return "–"
    units = ["B", "KB", "MB", "GB", "TB"]
    v = float(n)
    for unit in units:
        if abs(v) < 1000 or unit == units[-1]:
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1000
    return f"{v:.1f} TB"


SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str) -> int:
    """A byte count from text: `10000000`, `512M`, `2G`, `1.5GiB` (K/M/G/T are powers of
    1024); ValueError for anything else, or a negative size."""
    body = str(text).strip().upper().removesuffix("B").removesuffix("I")
    unit = body[-1:] if body[-1:] in SIZE_UNITS else ""
    try:
        value = int(float(body[: len(body) - len(unit)]) * SIZE_UNITS[unit])
    except (ValueError, OverflowError):
        raise ValueError(f"{text!r} is not a size (e.g. 10000000, 512M, 2G)") from None
    if value < 0:
        raise ValueError(f"{text!r}: a size cannot be negative")
    return value


def count(n: int | float | str | None) -> str:
    if n is None:
        return "–"
    if isinstance(n, float):
        return f"{n:,.0f}" if n == int(n) else f"{n:,.2f}"
    return f"{n:,}" if isinstance(n, int) else str(n)


def counted(n: int, one: str, many: str | None = None) -> str:
    """`n` and the noun in the number it takes: `counted(1, "copy", "copies")` -> "1 copy"."""
    return f"{count(n)} {one if n == 1 else (many or one + 's')}"


_FORMS = re.compile(r"\[([^\[\]|]*)\|([^\[\]|]*)\]")


def agree(text: str, n: int) -> str:
    """`text` with each `[many|one]` in the form the number `n` takes; choose the forms in a
    template before its values go in (they could hold brackets of their own):
    `agree("{n} [events were|event was] dropped", 1).format(n=1)` -> "1 event was dropped"."""
    return _FORMS.sub(lambda m: m.group(2) if n == 1 else m.group(1), text)


_CONTROL = {i: f"\\x{i:02x}" for i in [*range(0, 9), *range(11, 32), 127]}


def printable(text: str) -> str:
    """Text safe to print to a terminal: control characters (ESC included) shown as \\xNN."""
    return text.translate(_CONTROL)


DISPLAY_CHARS = 4_000  # the most of one name a page shows (real kernel names reach ~3,000); JSON keeps it all


def clip_name(text: str, limit: int = DISPLAY_CHARS) -> str:
    """`text` cut to `limit` characters, the last one "…", where it is longer: a trace's
    names are unbounded, and a page that repeats a 50 MB one is useless and hundreds of MB."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
