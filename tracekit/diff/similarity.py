"""How alike the two workloads of a diff are, so unrelated traces are not diffed as if alike.

Measure (`similarity`): the *time-weighted coverage* of kernel families. A kernel's family
is its `names.kernel_base` (no template arguments, no architecture prefix) with every run
of digits replaced by `#` (tile sizes, vector widths) and lower-cased. For each side, the
share of its kernel time spent in families the other side also runs; the score is the
smaller of the two shares (0 = nothing in common, 1 = every kernel family runs on both
sides). Traces without kernels on a side are scored the same way on CPU op names, weighted
by self CPU time. The step structure is reported beside it: kernels per step on each side.

`THRESHOLD` = 0.6: on the shared traces the same model compares at 0.85 (DLRM, A100 vs
V100) and 0.87 (two DLRM captures on A100), while unrelated models score at most 0.56
(ResNet vs DLRM 0.20 and 0.07, a DDP CNN vs DLRM 0.27 and 0.39, an MLP vs DLRM 0.56). The
same CNN on V100 and on A100 under DDP scores 0.46 (cuDNN picks other convolution kernels
per GPU): such a pair is flagged, and `--allow-unrelated` compares it anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit import format as fmt
from tracekit.diff.profile import Profile

THRESHOLD = 0.6


@dataclass(frozen=True)
class Similarity:
    score: float | None  # None: nothing to compare (no kernels and no ops on a side)
    basis: str  # kernels | ops | none
    covered_before: float | None  # share of before's time in families after also runs
    covered_after: float | None
    shared: int  # families on both sides
    families_before: int
    families_after: int
    kernels_per_step_before: float
    kernels_per_step_after: float
    threshold: float = THRESHOLD

    @property
    def comparable(self) -> bool:
        return self.score is None or self.score >= self.threshold

    @property
    def reason(self) -> str | None:
        """Why the two traces are not comparable, in a sentence (None when they are)."""
        if self.comparable:
            return None
        what = "kernel" if self.basis == "kernels" else "CPU op"
        return (f"the two traces look like different workloads: only {fmt.pct(self.score)} of the "
                f"{'GPU' if self.basis == 'kernels' else 'CPU'} time runs {what} families both sides run "
                f"({self.shared} of {self.families_before} vs {self.families_after} {what} families in common; "
                f"similarity {self.score:.2f} < {self.threshold:g})")

    def to_dict(self) -> dict[str, object]:
        return {**vars(self), "comparable": self.comparable, "reason": self.reason}


def family(name: pl.Expr) -> pl.Expr:
    """A kernel base or op key with digit runs as `#`, lower-cased (module docstring)."""
    return name.str.to_lowercase().str.replace_all(r"\d+", "#")


def _weights(p: Profile) -> tuple[pl.DataFrame, pl.DataFrame]:
    k = p.kernels.join(p.kernel_names.select("key", "base"), on="key", how="left")
    kernels = k.group_by(family(pl.col("base")).alias("family")).agg(t=pl.col("total_ns").sum().cast(pl.Float64))
    ops = p.ops.group_by(family(pl.col("key")).alias("family")).agg(t=pl.col("cpu_self_ns").sum().cast(pl.Float64))
    return kernels.filter(pl.col("t") > 0), ops.filter(pl.col("t") > 0)


def _covered(x: pl.DataFrame, y: pl.DataFrame) -> float:
    total = x["t"].sum()
    return float(x.filter(pl.col("family").is_in(y["family"].implode()))["t"].sum() / total) if total else 0.0


def similarity(b: Profile, a: Profile) -> Similarity:
    (kb, ob), (ka, oa) = _weights(b), _weights(a)
    if kb.height and ka.height:
        basis, x, y = "kernels", kb, ka
    elif ob.height and oa.height:
        basis, x, y = "ops", ob, oa
    else:
        basis, x, y = "none", kb, ka
    per = {s: float(p.steps["kernels"].median() or 0) for s, p in (("b", b), ("a", a))}
    if basis == "none":
        return Similarity(None, basis, None, None, 0, x.height, y.height, per["b"], per["a"])
    cb, ca = _covered(x, y), _covered(y, x)
    shared = x.join(y, on="family", how="inner").height
    return Similarity(round(min(cb, ca), 3), basis, round(cb, 3), round(ca, 3), shared, x.height, y.height,
                      per["b"], per["a"])
