"""Configuration changes between the two sides of a diff, named as such.

A diff of two runs mixes what the code changed with what the environment changed. These
are the environment's changes the diff can see, each a `Change(kind, text)`:

- `hardware`: different device names (deviceProperties);
- `job size`: a different world size (distributed info);
- `tensor cores`: the share of matrix-multiply time on tensor-core kernels
  (`Analysis.tensor_core_share`) moved by more than TC_SHIFT (a dtype or TF32 switch);
- `compile`: torch.compile on one side only (compiled regions or Triton kernels);
- `attention`: a different attention backend.

Under such a change the kernel-level deltas (another GEMM kernel, slower convolutions) are
what the environment does; call counts of ops and copies are what the code does. `verdict`
ranks the two apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit import format as fmt
from tracekit.pipeline import Analysis
from tracekit.diff.extras import Side

TC_SHIFT = 0.2


@dataclass(frozen=True)
class Change:
    kind: str  # hardware | job size | tensor cores | compile | attention
    text: str


def _devices(s: Side) -> str:
    return ", ".join(s.devices) or "unknown device"


def _ranks(s: Side) -> str:
    n = s.world_size or 1
    return f"{n} rank" if n == 1 else f"{n} ranks"


def _compiled(a: Analysis) -> bool:
    c = a.compile
    return bool(c is not None and (c.regions_outer or c.triton_events))


def configuration(b: Analysis, a: Analysis, sb: Side, sa: Side, attention: pl.DataFrame) -> list[Change]:
    """The configuration changes between `b` and `a` (module docstring), hardware first."""
    out = []
    if sb.devices != sa.devices:
        out.append(Change("hardware", f"hardware {_devices(sb)} → {_devices(sa)}"))
    if (sb.world_size or 1) != (sa.world_size or 1):
        out.append(Change("job size", f"job size {_ranks(sb)} → {_ranks(sa)}"))
    tb, ta = b.tensor_core_share, a.tensor_core_share
    if tb is not None and ta is not None and abs(ta - tb) > TC_SHIFT:
        out.append(Change("tensor cores", f"tensor-core share of matmul time {fmt.pct(tb, 0)} → {fmt.pct(ta, 0)} "
                                          "(dtype or TF32 setting)"))
    cb, ca = _compiled(b), _compiled(a)
    if cb != ca:
        out.append(Change("compile", "torch.compile " + ("switched off" if cb else "switched on")))
    rows = {r["side"]: r["backend"] for r in attention.iter_rows(named=True)}
    if rows.get("before") and rows.get("after") and rows["before"] != rows["after"]:
        out.append(Change("attention", f"attention backend {rows['before']} → {rows['after']}"))
    return out
