"""How alike the two workloads of a diff are, so unrelated traces are not diffed as if alike.

Measure (`similarity`): the *time-weighted coverage* of the two sides' kernels and of their
CPU ops. A kernel's family is its `names.kernel_base` (no template arguments, no
architecture prefix) with every run of digits as `#` (tile sizes, vector widths),
lower-cased; an op's is its key, likewise. For each side, the share of its kernel time
(of its self CPU time, for ops) spent in families the other side also runs; a basis's score
is the smaller of the two shares (0 = nothing in common, 1 = everything runs on both sides).
The score is the better of the kernel and the op score: a change of precision or GPU
renames every GEMM kernel (sgemm -> s16816gemm) but keeps the ops (aten::mm), while an
unrelated model changes both. The step structure is reported beside it: kernels per step.

`THRESHOLD` = 0.7: on the shared traces the same model compares at 0.93 (DLRM, A100 vs V100:
kernels 0.85, ops 0.93), 0.90 (two DLRM captures on A100) and 1.00 (one CNN on V100 and under
DDP on A100: kernels 0.46, cuDNN picks other convolutions per GPU, ops 1.00), while unrelated
models score at most 0.61 (an MLP vs DLRM: kernels 0.56, ops 0.61; ResNet vs DLRM 0.54 and
0.47; a DDP CNN vs DLRM 0.52). Below it the diff says so, and `--allow-unrelated` compares
anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit import format as fmt
from tracekit.diff.profile import Profile

THRESHOLD = 0.7


@dataclass(frozen=True)
class Similarity:
    score: float | None  # None: nothing to compare (no kernels and no ops on a side)
    basis: str  # kernels | ops | none: the basis of the better score
    kernel_score: float | None  # None: no kernels on a side
    op_score: float | None  # None: no ops on a side
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
        if self.comparable or self.score is None:
            return None
        parts = [f"{fmt.pct(v)} of the {what} time runs {unit} both sides run"
                 for v, what, unit in ((self.kernel_score, "GPU", "kernel families"), (self.op_score, "CPU", "ops"))
                 if v is not None]
        return (f"the two traces look like different workloads: only {' and '.join(parts)} "
                f"(similarity {self.score:.2f} < {self.threshold:g})")

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
    scores = {basis: min(_covered(x, y), _covered(y, x)) for basis, x, y in (("kernels", kb, ka), ("ops", ob, oa))
              if x.height and y.height}
    per = {s: float(p.steps["kernels"].median() or 0) for s, p in (("b", b), ("a", a))}
    kernel, op = scores.get("kernels"), scores.get("ops")
    if not scores:
        return Similarity(None, "none", None, None, None, None, 0, kb.height, ka.height, per["b"], per["a"])
    basis = max(scores, key=lambda k: (scores[k], k == "kernels"))
    x, y = (kb, ka) if basis == "kernels" else (ob, oa)
    shared = x.join(y, on="family", how="inner").height
    return Similarity(round(scores[basis], 3), basis, _round(kernel), _round(op), round(_covered(x, y), 3),
                      round(_covered(y, x), 3), shared, x.height, y.height, per["b"], per["a"])


def _round(score: float | None) -> float | None:
    return None if score is None else round(score, 3)
