"""Kernel taxonomy: what a GPU kernel is, read from its name alone.

Kernel names are fingerprints. Libraries encode the operation, the precision, the use of
tensor cores, the tile shape, the target architecture and the operand layout in them
(`sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_..._cublas`). This module
turns those fingerprints into columns with ordered, table-driven rules: for every attribute
the first rule whose regular expression matches the name wins. The rules are evaluated as
Polars expressions over the *unique* names of a trace, so a trace with 200k kernels and 300
distinct names costs 300 regex scans per rule.

Attributes (one row per unique name, see `classify_names`):

| column            | values                                                          |
|-------------------|-----------------------------------------------------------------|
| kernel_class      | `KERNEL_CLASSES`; `other` when no rule matches                  |
| library           | `LIBRARIES`; `unknown` when no rule matches                     |
| precision         | fp8, int8, bf16, fp16, tf32, fp32, fp64, or null (unknown)      |
| tensor_cores      | True (MMA units), False (CUDA cores/VALU), null (unknown)       |
| tile              | "MxN" or "MxNxK" for gemm/conv/attention, else null             |
| arch              | "sm80", "sm90", "gfx90a", ... as named by the kernel, else null |
| layout            | tn/nt/nn/tt (BLAS column-major convention) for gemm, else null  |
| attention_backend | flash, flash3, efficient, cudnn, flex, ck for attention, else null |

Class rules, in order (first match wins; `CLASS_RULES` below is the full table and
`docs/kernel-taxonomy.md` explains every token):

1. memcpy, memset: activity names `Memcpy ...`, `Memset ...`; ROCm `__amd_rocclr_fill*`
2. communication: `nccl`, `rccl`, `msccl`, `nvshmem`, DeepEP dispatch/combine, custom and
   symmetric-memory all-reduce (never a `hip` prefix); `is_communication` is the one definition
   that the breakdown, the critical path and the findings use
3. attention: FlashAttention, `fmha`, `sdpa`, flex, `attention` (fused kernels only)
4. Triton by kind: `triton_tem_*mm` gemm, `triton_poi_` elementwise, `triton_red_`/`_per_`
   reduction (softmax/norm when named), any other `triton_` -> `triton`
5. softmax, normalization (layer/RMS/batch/group norm), conv (`convolve`, `fprop`/`dgrad`/
   `wgrad`, `scudnn`, Winograd, FFT), gemm (`gemm`, `gemv`, `Cijk_`, cuBLAS `nvjet_`,
   trtllm-gen `bmm_`, cuBLAS helpers)
6. embedding, indexing, copy, sort_scan, pooling, reduction, elementwise; else `other`
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from tracekit.analysis.kernel_rules import (  # noqa: F401  (re-exported: the tables are part of the API)
    ARCH_EXTRACTS, ATTENTION_BACKENDS, ATTENTION_BACKEND_RULES, CLASS_RULES, Extract, KERNEL_CLASSES,
    LAYOUT_EXTRACTS, LIBRARIES, LIBRARY_RULES, NO_MMA_CLASSES, PRECISIONS, PRECISION_RULES, Rule,
    TENSOR_CORE_RULES, TILED_CLASSES, TILE_EXTRACTS,
)
from tracekit.model import ENGINE

CLASSIFICATION_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.String(), "kernel_class": pl.String(), "library": pl.String(),
    "precision": pl.String(), "tensor_cores": pl.Boolean(), "tile": pl.String(),
    "arch": pl.String(), "layout": pl.String(), "attention_backend": pl.String(),
}
KERNEL_TABLE_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.String(), "kernel_class": pl.String(), "library": pl.String(),
    "precision": pl.String(), "tensor_cores": pl.Boolean(), "count": pl.Int64(),
    "total_ns": pl.Int64(), "mean_ns": pl.Float64(), "median_ns": pl.Float64(),
    "min_ns": pl.Int64(), "max_ns": pl.Int64(), "std_ns": pl.Float64(), "cv": pl.Float64(),
    "share": pl.Float64(),
}
CLASS_TABLE_SCHEMA: dict[str, pl.DataType] = {
    "kernel_class": pl.String(), "count": pl.Int64(), "total_ns": pl.Int64(), "share": pl.Float64(),
}
_MEMORY_CATS = ("gpu_memcpy", "gpu_memset", "memcpy", "memset")


def _first_match(
    rules: Iterable[Rule], default: Any, dtype: pl.DataType, column: str = "name"
) -> pl.Expr:
    """`when(rule 1).then(value 1).when(rule 2)...otherwise(default)` over `column`."""
    name = pl.col(column)
    chain: Any = pl
    for rule in rules:
        chain = chain.when(name.str.contains(rule.pattern)).then(pl.lit(rule.value, dtype=dtype))
    return chain.otherwise(pl.lit(default, dtype=dtype))


def _first_extract(extracts: Iterable[Extract]) -> pl.Expr:
    """The first extract that captures something, rewritten and prefixed."""
    parts = []
    for ex in extracts:
        got = pl.col("name").str.extract(ex.pattern, 1)
        if ex.sub is not None:
            got = got.str.replace(ex.sub[0], ex.sub[1])
        parts.append(pl.concat_str([pl.lit(ex.prefix), got]) if ex.prefix else got)
    return pl.coalesce(parts)


def _tensor_cores() -> pl.Expr:
    by_name = _first_match(TENSOR_CORE_RULES, None, pl.Boolean())
    attention_mma = (pl.col("kernel_class") == "attention") & (
        pl.col("precision").is_in(["bf16", "fp16", "fp8"])
        | pl.col("attention_backend").is_in(["flash", "flash3", "cudnn"])
    )
    return (
        pl.when(by_name.is_not_null()).then(by_name)
        .when(attention_mma).then(pl.lit(True))
        .when(pl.col("kernel_class").is_in(NO_MMA_CLASSES)).then(pl.lit(False))
        .otherwise(pl.lit(None, dtype=pl.Boolean()))
    )


def classify_names(names: pl.Series | Iterable[str | None], *,
                   classes: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per unique non-null name, sorted by name, with every taxonomy attribute.

    classes: rows classified before (this function's answer for other names, e.g. every GPU
    name of the trace): those names are taken from it, the others classified.
    """
    series = names if isinstance(names, pl.Series) else pl.Series(list(names), dtype=pl.String())
    # distinct values first: a Categorical column (the critical path's names) becomes text
    # for those alone
    frame = series.to_frame().lazy().select(pl.first().unique().cast(pl.String()).alias("name")).drop_nulls()
    frame = frame.sort("name").collect(engine=ENGINE)
    if classes is None:
        return _classify(frame)
    new = frame.join(classes.select("name"), on="name", how="anti")
    if new.height:
        classes = pl.concat([classes.select(list(CLASSIFICATION_SCHEMA)), _classify(new)])
    return frame.join(classes, on="name", how="left", maintain_order="left").select(list(CLASSIFICATION_SCHEMA))


def _classify(frame: pl.DataFrame) -> pl.DataFrame:
    """The taxonomy attributes of a frame of unique names (CLASSIFICATION_SCHEMA)."""
    tiled = pl.col("kernel_class").is_in(TILED_CLASSES)
    return (
        frame.lazy().with_columns(_key=pl.col("name").str.replace_all(r"(?i)fbgemm", "fbg"))
        .with_columns(
            kernel_class=_first_match(CLASS_RULES, "other", pl.String(), "_key"),
            library=_first_match(LIBRARY_RULES, "unknown", pl.String()),
            precision=_first_match(PRECISION_RULES, None, pl.String()),
            arch=_first_extract(ARCH_EXTRACTS),
        )
        .with_columns(
            attention_backend=pl.when(pl.col("kernel_class") == "attention")
            .then(_first_match(ATTENTION_BACKEND_RULES, None, pl.String())),
            tile=pl.when(tiled).then(_first_extract(TILE_EXTRACTS)),
            layout=pl.when(pl.col("kernel_class") == "gemm").then(
                _first_extract(LAYOUT_EXTRACTS).str.to_lowercase()),
        )
        .with_columns(tensor_cores=_tensor_cores())
        .select(list(CLASSIFICATION_SCHEMA))
        .cast(CLASSIFICATION_SCHEMA)
        .collect(engine=ENGINE)
    )


def classify_name(name: str) -> dict[str, Any]:
    """The taxonomy attributes of one name, as a dict (convenience for tests and REPLs)."""
    return classify_names(pl.Series([name], dtype=pl.String())).row(0, named=True)


def communication_names(names: pl.Series | Iterable[str | None], *,
                        classes: pl.DataFrame | None = None) -> list[str]:
    """The distinct names among `names` whose class is `communication`: the one definition of a
    communication kernel, classified over the distinct names only (`classes`: as `classify_names`)."""
    classes = classify_names(names, classes=classes)
    return classes.filter(pl.col("kernel_class") == "communication")["name"].to_list()


def is_communication(names: pl.Series, column: str = "name", *, classes: pl.DataFrame | None = None) -> pl.Expr:
    """True where `column` holds a communication kernel's name, False elsewhere (null too).

    `names` is the column the expression will run over (or a superset): its distinct names are
    classified once (`classes`: as `classify_names`), and the expression is a plain membership test.
    """
    return pl.col(column).is_in(communication_names(names, classes=classes)).fill_null(False)


def category_in(*cats: str) -> pl.Expr:
    """Rows whose `cat` is one of `cats` (lower case), in any case: a category outside the
    loader's vocabulary stays as written. `cat` is a Categorical (`model.TEXT`): read as text."""
    return pl.col("cat").cast(pl.String).str.to_lowercase().is_in(cats)


def _kernel_rows(gpu: pl.DataFrame, *, include_memory: bool = False) -> pl.DataFrame:
    cats = ("kernel", *_MEMORY_CATS) if include_memory else ("kernel",)
    return gpu.filter(category_in(*cats))


def _with_classes(rows: pl.DataFrame, classes: pl.DataFrame | None) -> pl.LazyFrame:
    """`rows` with the taxonomy columns joined on by name (null names: other/unknown)."""
    classes = classify_names(rows["name"], classes=classes)
    return rows.lazy().join(classes.lazy(), on="name", how="left", maintain_order="left").with_columns(
        pl.col("kernel_class").fill_null("other"), pl.col("library").fill_null("unknown")
    )


def _share(total: pl.Expr) -> pl.Expr:
    grand = total.sum()
    return pl.when(grand > 0).then(total / grand).otherwise(pl.lit(0.0))


def kernel_table(gpu: pl.DataFrame, *, classes: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per kernel name: taxonomy, call count and duration statistics, sorted by total time.

    Rows are `gpu` rows with `cat == "kernel"` (any case). `std_ns` is the population
    standard deviation over the calls in the trace, `cv = std_ns / mean_ns` (0 for one call
    or an all-zero duration), `share` = `total_ns` / total kernel time of the frame.
    `classes`: `classify_names` of the GPU names, when the caller has it.
    """
    stats = _kernel_rows(gpu).lazy().group_by("name").agg(
        count=pl.len(),
        total_ns=pl.col("dur_ns").sum(),
        mean_ns=pl.col("dur_ns").mean(),
        median_ns=pl.col("dur_ns").median(),
        min_ns=pl.col("dur_ns").min(),
        max_ns=pl.col("dur_ns").max(),
        std_ns=pl.col("dur_ns").std(ddof=0),
    )
    table = _with_classes(stats.collect(engine=ENGINE), classes)
    return (
        table.with_columns(
            cv=pl.when(pl.col("mean_ns") > 0).then(pl.col("std_ns") / pl.col("mean_ns"))
            .otherwise(pl.lit(0.0)),
            share=_share(pl.col("total_ns")),
        )
        .select(list(KERNEL_TABLE_SCHEMA))
        .cast(KERNEL_TABLE_SCHEMA)
        .sort(["total_ns", "name"], descending=[True, False], nulls_last=True)
        .collect(engine=ENGINE)
    )


def class_table(gpu: pl.DataFrame, *, include_memory: bool = False,
                classes: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per kernel class: count, total time and share, sorted by total time.

    The denominator of `share` is the total time of the rows counted: kernels only by
    default; kernels + memcpy + memset (classes `memcpy`, `memset`) with `include_memory`.
    Overlap between streams is not removed: this is summed GPU time, not busy time.
    `classes`: `classify_names` of the GPU names, when the caller has it.
    """
    rows = _with_classes(_kernel_rows(gpu, include_memory=include_memory), classes)
    return (
        rows.group_by("kernel_class")
        .agg(count=pl.len(), total_ns=pl.col("dur_ns").sum())
        .with_columns(share=_share(pl.col("total_ns")))
        .select(list(CLASS_TABLE_SCHEMA))
        .cast(CLASS_TABLE_SCHEMA)
        .sort(["total_ns", "kernel_class"], descending=[True, False])
        .collect(engine=ENGINE)
    )


def tensor_core_share(gpu: pl.DataFrame, *, classes: pl.DataFrame | None = None) -> float | None:
    """Fraction of GEMM + conv kernel time spent in tensor-core kernels.

    Kernels whose tensor-core use is unknown count as not on tensor cores. None when the
    frame has no GEMM or conv kernel time. `classes`: `classify_names` of the GPU names.
    """
    rows = _with_classes(_kernel_rows(gpu), classes).filter(
        pl.col("kernel_class").is_in(["gemm", "conv"])
    ).select("dur_ns", "tensor_cores").collect(engine=ENGINE)
    total = rows["dur_ns"].sum()
    if rows.is_empty() or not total:
        return None
    on_tc = rows.filter(pl.col("tensor_cores").fill_null(False))["dur_ns"].sum()
    return float(on_tc) / float(total)
