"""The roofline as a self-contained SVG: log-log axes, the device's ceilings, ops as points.

x = arithmetic intensity (FLOP/byte), y = achieved TFLOP/s. The memory roof is the line
y = x · bandwidth up to the ridge point, then each compute ceiling is a flat line. One
point per op shape (`RooflineResult.ops`), its area proportional to its GPU time, its
colour its work class. Ops with 0 FLOPs (copies, gathers) cannot sit on a log axis and are
counted in the caption instead. Pure and deterministic: same result in, same bytes out;
every string from the trace is escaped.
"""

from __future__ import annotations

import math
from html import escape

import polars as pl

from tracekit import format as fmt
from tracekit.analysis.roofline import RooflineResult

COLOURS = {"gemm": "#1f77b4", "attention": "#d62728", "conv": "#9467bd", "elementwise": "#2ca02c",
           "normalization": "#ff7f0e", "softmax": "#8c564b", "reduction": "#e377c2", "embedding": "#7f7f7f",
           "gather": "#bcbd22", "copy": "#17becf"}
CEILING_LABELS = (("fp8", "FP8 tensor"), ("bf16", "BF16/FP16 tensor"), ("tf32", "TF32 tensor"),
                  ("fp32", "FP32"))
MARGIN = {"left": 70, "right": 150, "top": 40, "bottom": 60}


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _num(v: float) -> str:
    return f"{v:.2f}"


def _decade_label(k: int) -> str:
    v = 10.0 ** k
    return f"{v:g}" if -3 <= k <= 4 else f"1e{k}"


class _Axes:
    def __init__(self, x_lim: tuple[int, int], y_lim: tuple[int, int], width: int, height: int) -> None:
        self.x_lim, self.y_lim = x_lim, y_lim
        self.x0, self.x1 = MARGIN["left"], width - MARGIN["right"]
        self.y0, self.y1 = height - MARGIN["bottom"], MARGIN["top"]

    def x(self, v: float) -> float:
        lo, hi = self.x_lim
        return self.x0 + (math.log10(v) - lo) / (hi - lo) * (self.x1 - self.x0)

    def y(self, v: float) -> float:
        lo, hi = self.y_lim
        return self.y0 - (math.log10(v) - lo) / (hi - lo) * (self.y0 - self.y1)


def roofline_svg(result: RooflineResult, *, width_px: int = 760, height_px: int = 460, max_points: int = 200,
                 title: str = "Roofline") -> str:
    """The chart as an SVG document string."""
    ops = result.ops.filter(_positive("intensity") & _positive("achieved_tflops")).head(max_points)
    points = ops.to_dicts()
    ceil = next((r for r in result.devices.to_dicts() if r.get("hbm_gbps")), None)
    peaks = [(label, ceil[key]) for key, label in CEILING_LABELS if ceil and ceil.get(key)]
    peaks = [p for i, p in enumerate(peaks) if p[1] not in {q[1] for q in peaks[:i]}]
    xs = [p["intensity"] for p in points] + [v * 1e3 / ceil["hbm_gbps"] for _, v in peaks]
    ys = [p["achieved_tflops"] for p in points] + [v for _, v in peaks]
    axes = _Axes(_limits(xs, (-2, 3)), _limits(ys, (-3, 3)), width_px, height_px)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width_px}" height="{height_px}" '
             f'viewBox="0 0 {width_px} {height_px}" role="img" font-family="sans-serif" font-size="11">',
             f"<title>{_e(title)}</title>",
             f'<text x="{MARGIN["left"]}" y="20" font-size="14" font-weight="bold">{_e(title)}</text>']
    parts += _grid(axes)
    if ceil:
        parts += _ceilings(axes, ceil["hbm_gbps"], peaks)
    max_ns = max((p["gpu_ns"] for p in points), default=0)
    parts += [_point(axes, p, max_ns) for p in points]
    parts += _legend(axes, sorted({p["work_class"] for p in points}))
    parts.append(_caption(result, ceil, len(points), axes, height_px))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _positive(name: str) -> pl.Expr:
    return pl.col(name).is_not_null() & (pl.col(name) > 0)


def _limits(values: list[float], default: tuple[int, int]) -> tuple[int, int]:
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not vals:
        return default
    lo, hi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)) + 0.15)
    return (lo, hi if hi > lo else lo + 1)


def _grid(axes: _Axes) -> list[str]:
    out = [f'<rect x="{axes.x0}" y="{axes.y1}" width="{axes.x1 - axes.x0}" height="{axes.y0 - axes.y1}" '
           'fill="none" stroke="#444"/>']
    for k in range(axes.x_lim[0], axes.x_lim[1] + 1):
        x = _num(axes.x(10.0 ** k))
        out.append(f'<line x1="{x}" y1="{axes.y0}" x2="{x}" y2="{axes.y1}" stroke="#ddd"/>')
        out.append(f'<text x="{x}" y="{axes.y0 + 16}" text-anchor="middle">{_decade_label(k)}</text>')
    for k in range(axes.y_lim[0], axes.y_lim[1] + 1):
        y = _num(axes.y(10.0 ** k))
        out.append(f'<line x1="{axes.x0}" y1="{y}" x2="{axes.x1}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{axes.x0 - 6}" y="{y}" text-anchor="end" dominant-baseline="middle">'
                   f"{_decade_label(k)}</text>")
    mid_x, mid_y = (axes.x0 + axes.x1) / 2, (axes.y0 + axes.y1) / 2
    out.append(f'<text x="{_num(mid_x)}" y="{axes.y0 + 36}" text-anchor="middle">'
               "arithmetic intensity (FLOP/byte)</text>")
    out.append(f'<text x="18" y="{_num(mid_y)}" text-anchor="middle" '
               f'transform="rotate(-90 18 {_num(mid_y)})">achieved TFLOP/s</text>')
    return out


def _ceilings(axes: _Axes, gbps: float, peaks: list[tuple[str, float]]) -> list[str]:
    out = []
    x_lo, x_hi = 10.0 ** axes.x_lim[0], 10.0 ** axes.x_lim[1]
    y_lo = 10.0 ** axes.y_lim[0]
    for label, tflops in peaks:
        ridge = tflops * 1e3 / gbps
        start = max(x_lo, y_lo * 1e3 / gbps)
        path = (f"M{_num(axes.x(start))},{_num(axes.y(start * gbps / 1e3))} "
                f"L{_num(axes.x(min(ridge, x_hi)))},{_num(axes.y(min(ridge, x_hi) * gbps / 1e3))} "
                f"L{_num(axes.x(x_hi))},{_num(axes.y(tflops if ridge <= x_hi else x_hi * gbps / 1e3))}")
        out.append(f'<path d="{path}" fill="none" stroke="#333" stroke-width="1.5"/>')
        out.append(f'<text x="{_num(axes.x1 - 4)}" y="{_num(axes.y(tflops) - 4)}" text-anchor="end">'
                   f"{_e(label)} {tflops:g} TFLOP/s</text>")
    out.append(f'<text x="{_num(axes.x0 + 6)}" y="{_num(axes.y1 + 14)}">HBM {gbps:g} GB/s</text>')
    return out


def _point(axes: _Axes, p: dict, max_ns: int) -> str:
    r = 3 + 17 * math.sqrt(p["gpu_ns"] / max_ns) if max_ns else 3
    colour = COLOURS.get(p["work_class"], "#555")
    what = fmt.clip_name(f"{p['name']} {p['input_dims'] or ''}")
    tip = (f"{what} [{p['compute_dtype'] or '?'}]: {fmt.counted(p['calls'], 'call')}, "
           f"{fmt.ns(p['gpu_ns'])}, {p['achieved_tflops']:.3g} TFLOP/s, {p['intensity']:.3g} FLOP/B, "
           f"{fmt.pct(p['efficiency'])} of ceiling")
    return (f'<circle cx="{_num(axes.x(p["intensity"]))}" cy="{_num(axes.y(p["achieved_tflops"]))}" '
            f'r="{_num(r)}" fill="{colour}" fill-opacity="0.6" stroke="{colour}">'
            f"<title>{_e(tip)}</title></circle>")


def _legend(axes: _Axes, classes: list[str]) -> list[str]:
    out = []
    for i, cls in enumerate(classes):
        y = axes.y1 + 12 + 16 * i
        out.append(f'<circle cx="{axes.x1 + 16}" cy="{y}" r="5" fill="{COLOURS.get(cls, "#555")}"/>'
                   f'<text x="{axes.x1 + 26}" y="{y}" dominant-baseline="middle">{_e(cls)}</text>')
    return out


def _caption(result: RooflineResult, ceil: dict | None, shown: int, axes: _Axes, height: int) -> str:
    hidden = len(result.ops) - shown
    device = fmt.clip_name(f"{ceil['product']} ({ceil['device_name']})") if ceil else "no ceilings known"
    text = (f"{device}; {shown} op shapes, point area ∝ GPU time"
            + (f"; {hidden} not shown (0 FLOPs or over the limit)" if hidden > 0 else ""))
    return f'<text x="{axes.x0}" y="{height - 8}" fill="#555">{_e(text)}</text>'
