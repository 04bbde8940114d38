"""`AttentionResult`: what `analyze_attention` returns (typed frames, totals, capture request)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl


@dataclass(frozen=True)
class AttentionResult:
    """Result of `analyze_attention`. Frames are typed even when empty."""

    calls: pl.DataFrame  # one row per attention call (see `_finish` for the columns)
    events: pl.DataFrame  # GPU work of the calls: call_id, in_scope, stage, stage_op, name, class, ...
    by_layer: pl.DataFrame  # per layer: calls, backend, medians
    by_phase: pl.DataFrame  # per phase (prefill / decode / unknown)
    by_backend: pl.DataFrame  # per backend
    stats: pl.DataFrame  # per metric over calls: count, mean, median, p10, p90, min, max
    occupancy: pl.DataFrame  # in-scope kernels: Kineto's figure vs recomputed (occupancy_table)
    has_gpu: bool  # the trace has GPU work
    gpu_total_ns: int  # summed duration of all GPU work of the trace
    attention_gpu_ns: int  # summed GPU time of the attention scopes
    range_gpu_ns: int  # summed GPU time of the whole calls
    attention_kernel_ns: int  # all attention-class kernels of the trace, in a call or not
    orphan_kernels: int  # attention-class kernels launched outside every call
    orphan_ns: int
    requested: dict[str, Any] = field(default_factory=dict)  # capture metadata about the implementation
    warnings: tuple[str, ...] = ()

    @property
    def call_count(self) -> int:
        return self.calls.height

    @property
    def gpu_share(self) -> float | None:
        return self.attention_gpu_ns / self.gpu_total_ns if self.gpu_total_ns else None

    @property
    def range_gpu_share(self) -> float | None:
        return self.range_gpu_ns / self.gpu_total_ns if self.gpu_total_ns else None

    @property
    def backends(self) -> dict[str, int]:
        return {r["backend"]: r["calls"] for r in self.by_backend.iter_rows(named=True)}

    @property
    def backend(self) -> str | None:
        """The backend of most calls (ties: alphabetical)."""
        return self.by_backend["backend"][0] if self.by_backend.height else None

    @property
    def layers(self) -> int:
        return self.by_layer.height

    @property
    def calls_per_layer(self) -> float | None:
        return float(self.by_layer["calls"].median()) if self.by_layer.height else None  # type: ignore[arg-type]

    def median(self, metric: str) -> float | None:
        row = self.stats.filter(pl.col("metric") == metric)
        return row["median"][0] if row.height else None

    def to_dict(self, *, limit: int = 200) -> dict[str, Any]:
        return {
            "calls": self.call_count,
            "layers": self.layers,
            "calls_per_layer": self.calls_per_layer,
            "backend": self.backend,
            "backends": self.backends,
            "has_gpu": self.has_gpu,
            "gpu_total_ns": self.gpu_total_ns,
            "attention_gpu_ns": self.attention_gpu_ns,
            "gpu_share": self.gpu_share,
            "range_gpu_ns": self.range_gpu_ns,
            "range_gpu_share": self.range_gpu_share,
            "attention_kernel_ns": self.attention_kernel_ns,
            "orphan_kernels": self.orphan_kernels,
            "orphan_ns": self.orphan_ns,
            "requested": self.requested,
            "warnings": list(self.warnings),
            "stats": self.stats.to_dicts(),
            "by_layer": self.by_layer.to_dicts(),
            "by_phase": self.by_phase.to_dicts(),
            "by_backend": self.by_backend.to_dicts(),
            "occupancy": self.occupancy.to_dicts(),
            "call_rows": self.calls.head(limit).to_dicts(),
        }
