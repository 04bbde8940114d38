"""Per attention call: the GPU work it launched, its CPU cost, its backend (inputs: `inputs`).

A call (see `find`) has a *scope*: its core (the SDPA/flex/library/serving op,
the `*FlashAttn*Func` autograd op, or the eager chain) when one was found, else the whole
call. GPU work belongs to the scope whose thread launched it while the launch call ran
inside it (`links.gpu_links`: correlation -> launch call; rows without a launch call use
their op's start). A call with no core (a module or range whose attention op is not
recognised) keeps only its attention-class kernels in scope: its projection GEMMs, rotary
and norm kernels are in the whole-call (`range_*`) figures, never in the attention ones.
`projection_leaks` checks that no scope holds a GEMM of a linear/addmm/mm op outside a core.

Each GPU event of a scope gets a *stage* from the outermost op between it and the scope:

| stage   | ops                                                                              |
|---------|----------------------------------------------------------------------------------|
| gemm    | matmul, bmm, baddbmm, mm, einsum                                                 |
| scale   | mul, div (and in-place forms)                                                    |
| mask    | ones, full, tril, triu, arange, where, masked_fill, add, logical_not             |
| softmax | softmax, _softmax, _safe_softmax (its isneginf/all/where kernels included)       |
| copy    | to, _to_copy, contiguous, clone, copy_, type_as (casts: the FP32 upcast)         |
| dropout | dropout, native_dropout                                                          |
| fused   | none of those, and the kernel is an attention kernel (flash, fmha, cuDNN, ...)   |
| other   | anything else                                                                    |

Backends, from the op names in the scope first, then from the attention kernels' names:
eager, sdpa_math, sdpa_efficient, sdpa_flash, sdpa_cudnn, sdpa_cpu_flash, sdpa_other,
flex, flash_attn (the flash-attn package), ck, aiter, unknown.
"""

from __future__ import annotations

import polars as pl

from tracekit.analysis.attention.find import assign
from tracekit.analysis.launches import launch_family
from tracekit.analysis.nesting import ancestors
from tracekit.analysis.taxonomy import classify_names
from tracekit.model import Trace

I64, F64, STR, BOOL = pl.Int64, pl.Float64, pl.String, pl.Boolean

STAGE_OPS: dict[str, tuple[str, ...]] = {
    "gemm": ("matmul", "bmm", "baddbmm", "mm", "einsum"),
    "scale": ("mul", "mul_", "div", "div_"),
    "mask": (
        "ones",
        "ones_like",
        "full",
        "full_like",
        "tril",
        "triu",
        "tril_",
        "triu_",
        "arange",
        "where",
        "masked_fill",
        "masked_fill_",
        "add",
        "add_",
        "logical_not",
        "bitwise_not",
    ),
    "softmax": ("softmax", "_softmax", "_safe_softmax", "special_softmax", "log_softmax", "_log_softmax"),
    "copy": ("to", "_to_copy", "contiguous", "clone", "copy_", "type_as"),
    "dropout": ("dropout", "native_dropout", "feature_dropout"),
}
STAGES: tuple[str, ...] = (*STAGE_OPS, "fused", "other")
STAGE_OF_OP = {f"aten::{op}": stage for stage, ops in STAGE_OPS.items() for op in ops}
MASK_BUILD_OPS = tuple(
    f"aten::{op}"
    for op in ("ones", "ones_like", "full", "full_like", "tril", "triu", "tril_", "triu_", "arange")
)
BACKEND_OP_RULES: tuple[tuple[str, str], ...] = (
    ("sdpa_cpu_flash", r"aten::_scaled_dot_product_flash_attention_for_cpu\b"),
    ("sdpa_math", r"aten::_scaled_dot_product_attention_math"),
    ("sdpa_cudnn", r"aten::_scaled_dot_product_cudnn_attention\b|aten::_cudnn_attention_forward\b"),
    (
        "sdpa_efficient",
        r"aten::_scaled_dot_product_efficient_attention\b|aten::_efficient_attention_forward\b",
    ),
    ("sdpa_flash", r"aten::_scaled_dot_product_flash_attention\b|aten::_flash_attention_forward\b"),
    ("sdpa_other", r"aten::_scaled_dot_product_fused_attention_overrideable"),
    ("flex", r"(?i)flex_attention"),
    (
        "flash_attn",
        r"(?m)^(?:flash_attn\w*|_flash_attn\w*|vllm_flash_attn|_vllm_fa\d_C)::|^_?\w*FlashAttn\w*Func$",
    ),
    ("aiter", r"(?m)^aiter::"),
)
BACKENDS: tuple[str, ...] = (
    "eager",
    "sdpa_math",
    "sdpa_efficient",
    "sdpa_flash",
    "sdpa_cudnn",
    "sdpa_cpu_flash",
    "sdpa_other",
    "flex",
    "flash_attn",
    "ck",
    "aiter",
    "unknown",
)


def scopes(calls: pl.DataFrame, cores: pl.DataFrame) -> pl.DataFrame:
    """Calls with their core columns and `scope_ts_ns`/`scope_end_ns` (core, else the call)."""
    return calls.join(cores, on="call_id", how="left").with_columns(
        scope_ts_ns=pl.coalesce("scope_ts_ns", "ts_ns"),
        scope_end_ns=pl.coalesce("scope_end_ns", "end_ns"),
        core_kind=pl.col("core_kind").fill_null("none"),
        cores=pl.col("cores").fill_null(0),
    )


def gpu_events(links: pl.DataFrame, ops: pl.DataFrame, scoped: pl.DataFrame, *,
               classes: pl.DataFrame | None = None) -> pl.DataFrame:
    """GPU work rows placed in calls: `call_id`, `in_scope`, taxonomy columns (`classes`: as
    `taxonomy.classify_names`'s); unplaced rows dropped."""
    op_at = ops.select(
        pl.col("eid").alias("op_eid"),
        pl.col("pid").alias("_opid"),
        pl.col("tid").alias("_otid"),
        pl.col("ts_ns").alias("_ots"),
    )
    rows = (
        links.join(op_at, on="op_eid", how="left")
        .with_columns(
            pid=pl.coalesce("launch_pid", "_opid"),
            tid=pl.coalesce("launch_tid", "_otid"),
            _t=pl.coalesce("launch_ts_ns", "_ots"),
        )
        .drop("_opid", "_otid", "_ots")
        .filter(pl.col("_t").is_not_null())
    )
    placed = assign(rows, scoped, at="_t").filter(pl.col("call_id").is_not_null())
    bounds = scoped.select("call_id", "scope_ts_ns", "scope_end_ns", _core=pl.col("core_kind") != "none")
    taxonomy = classify_names(placed["name"], classes=classes).select(
        "name", "kernel_class", "library", "precision", "tensor_cores", "attention_backend"
    )
    placed = placed.join(taxonomy, on="name", how="left").with_columns(
        pl.col("kernel_class").fill_null("other"))
    inside = (pl.col("_t") >= pl.col("scope_ts_ns")) & (pl.col("_t") <= pl.col("scope_end_ns"))
    return (
        placed.join(bounds, on="call_id", how="left")
        .with_columns(in_scope=inside & (pl.col("_core") | (pl.col("kernel_class") == "attention")))
        .drop("scope_ts_ns", "scope_end_ns", "_core")
    )


PROJECTION_OPS = ("aten::linear", "aten::addmm", "aten::mm")


def projection_leaks(events: pl.DataFrame, ops: pl.DataFrame, scoped: pl.DataFrame) -> pl.DataFrame:
    """In-scope GEMM kernels launched by (or under) a linear/addmm/mm op that is not wholly
    inside its call's core: an invariant, so empty (a projection is never attention work)."""
    gemms = events.filter(pl.col("in_scope") & (pl.col("kernel_class") == "gemm")).select(
        "eid", "call_id", "op_eid", "name")
    if gemms.is_empty():
        return gemms.with_columns(pl.lit(None, STR).alias("projection_op"))
    nodes = ops.select("eid", "parent_eid")
    chain = pl.concat([nodes.select("eid", pl.col("eid").alias("ancestor_eid")), ancestors(nodes)])
    proj = ops.filter(pl.col("name").is_in(PROJECTION_OPS)).select(
        pl.col("eid").alias("ancestor_eid"), pl.col("name").alias("projection_op"), "ts_ns", "end_ns")
    core = scoped.select("call_id", "scope_ts_ns", "scope_end_ns", _core=pl.col("core_kind") != "none")
    hits = (
        gemms.join(chain, left_on="op_eid", right_on="eid", how="inner")
        .join(proj, on="ancestor_eid", how="inner")
        .join(core, on="call_id", how="left")
    )
    outside = ~pl.col("_core") | (pl.col("ts_ns") < pl.col("scope_ts_ns")) | (
        pl.col("end_ns") > pl.col("scope_end_ns"))
    return (  # per kernel, its outermost projection op (linear before the addmm below it)
        hits.filter(outside).sort("eid", "ts_ns").unique("eid", keep="first", maintain_order=True)
        .select("eid", "call_id", "op_eid", "name", "projection_op")
    )


def scope_ops(ops: pl.DataFrame, scoped: pl.DataFrame) -> pl.DataFrame:
    """The cpu ops lying wholly inside a call's scope, with `call_id` and `stage_name`."""
    placed = assign(ops, scoped, end="end_ns", span_start="scope_ts_ns", span_end="scope_end_ns")
    placed = placed.filter(pl.col("call_id").is_not_null())
    return placed.with_columns(
        stage_name=pl.col("name").replace_strict(STAGE_OF_OP, default=None, return_dtype=STR)
    )


def with_stages(events: pl.DataFrame, in_scope_ops: pl.DataFrame) -> pl.DataFrame:
    """`events` plus `stage` and `stage_op` (the outermost staged op above the launching op)."""
    nodes = in_scope_ops.select("eid", "parent_eid")
    pairs = pl.concat([nodes.select("eid", pl.col("eid").alias("ancestor_eid")), ancestors(nodes)])
    staged = in_scope_ops.filter(pl.col("stage_name").is_not_null()).select(
        pl.col("eid").alias("ancestor_eid"), "depth", "stage_name", pl.col("name").alias("stage_op")
    )
    best = (
        pairs.join(staged, on="ancestor_eid", how="inner")
        .sort("depth")
        .group_by("eid")
        .agg(pl.col("stage_name").first(), pl.col("stage_op").first())
        .rename({"eid": "op_eid"})
    )
    out = events.join(best, on="op_eid", how="left")
    return out.with_columns(
        stage=pl.when(~pl.col("in_scope"))
        .then(pl.lit(None, STR))
        .when(pl.col("stage_name").is_not_null())
        .then(pl.col("stage_name"))
        .when(pl.col("kernel_class") == "attention")
        .then(pl.lit("fused"))
        .otherwise(pl.lit("other"))
    ).drop("stage_name")


def _mode(col: str) -> pl.Expr:
    return pl.col(col).drop_nulls().mode().sort().first()


def gpu_metrics(events: pl.DataFrame) -> pl.DataFrame:
    """Per call: counts and times of the scope's GPU work, by stage and class, and range totals."""
    e = events
    scope = pl.col("in_scope")
    copy = scope & ((pl.col("cat") == "gpu_memcpy") | pl.col("kernel_class").is_in(["copy", "memcpy"]))
    gemm = scope & (pl.col("kernel_class") == "gemm")
    attn = scope & (pl.col("kernel_class") == "attention")
    stage_cols = [(scope & (pl.col("stage") == s)).sum().cast(I64).alias(f"stage_{s}") for s in STAGES]
    out = e.group_by("call_id").agg(
        *stage_cols,
        gpu_events=scope.sum().cast(I64),
        kernels=(scope & (pl.col("cat") == "kernel")).sum().cast(I64),
        memcpys=(scope & (pl.col("cat") == "gpu_memcpy")).sum().cast(I64),
        memsets=(scope & (pl.col("cat") == "gpu_memset")).sum().cast(I64),
        gpu_ns=pl.col("dur_ns").filter(scope).sum(),
        gpu_start_ns=pl.col("ts_ns").filter(scope).min(),
        gpu_end_ns=pl.col("end_ns").filter(scope).max(),
        mask_ns=pl.col("dur_ns").filter(scope & (pl.col("stage") == "mask")).sum(),
        copy_events=copy.sum().cast(I64),
        copy_ns=pl.col("dur_ns").filter(copy).sum(),
        masked_fill_copies=(copy & (pl.col("stage_op") == "aten::masked_fill")).sum().cast(I64),
        gemm_kernels=gemm.sum().cast(I64),
        gemm_ns=pl.col("dur_ns").filter(gemm).sum(),
        gemm_simt=(gemm & pl.col("tensor_cores").eq(False)).sum().cast(I64),
        gemm_simt_ns=pl.col("dur_ns").filter(gemm & pl.col("tensor_cores").eq(False)).sum(),
        gemm_precision=pl.col("precision").filter(gemm).drop_nulls().mode().sort().first(),
        attention_kernels=attn.sum().cast(I64),
        _taxonomy_backend=pl.col("attention_backend").filter(attn).drop_nulls().mode().sort().first(),
        flash_package=(
            attn
            & pl.col("name").str.contains(r"flash_fwd|flash::")
            & ~pl.col("name").str.contains("pytorch_flash")
        ).any(),
        vendor_aiter=(attn & pl.col("name").str.contains(r"(?i)aiter")).any(),
        vendor_ck=(attn & pl.col("name").str.contains(r"(?i)ck::|ck_tile|fmha_fwd|fmha_batch")).any(),
        range_gpu_events=pl.len().cast(I64),
        range_gpu_ns=pl.col("dur_ns").sum(),
    )
    out = out.with_columns(
        kernel_backend=pl.when(pl.col("vendor_aiter"))
        .then(pl.lit("aiter"))
        .when(pl.col("vendor_ck"))
        .then(pl.lit("ck"))
        .otherwise(pl.col("_taxonomy_backend"))
    )
    return out.drop("_taxonomy_backend").join(_class_lists(e.filter(scope)), on="call_id", how="left")


def _class_lists(events: pl.DataFrame) -> pl.DataFrame:
    """Per call: 'gemm×2, elementwise×1, ...' over the scope's GPU work (most first)."""
    counts = (
        events.group_by("call_id", "kernel_class")
        .agg(n=pl.len())
        .sort(["call_id", "n", "kernel_class"], descending=[False, True, False])
    )
    return counts.group_by("call_id", maintain_order=True).agg(
        classes=pl.concat_str(["kernel_class", pl.lit("×"), pl.col("n").cast(STR)]).str.join(", ")
    )


def cpu_metrics(trace: Trace, scoped: pl.DataFrame) -> pl.DataFrame:
    """Per call: runtime/driver API calls inside the scope (all, and the launches among them)."""
    rt = trace.runtime.with_columns(launch_family(pl.col("name")))
    placed = assign(rt, scoped, end="end_ns", span_start="scope_ts_ns", span_end="scope_end_ns")
    placed = placed.filter(pl.col("call_id").is_not_null())
    launch = pl.col("family").is_not_null()
    return placed.group_by("call_id").agg(
        runtime_ns=pl.col("dur_ns").sum(),
        launches=launch.sum().cast(I64),
        launch_api_ns=pl.col("dur_ns").filter(launch).sum(),
        launch_apis=pl.col("name").filter(launch).unique().sort().str.join(", "),
    )


def op_metrics(in_scope_ops: pl.DataFrame) -> pl.DataFrame:
    """Per call: backend from op names, mask build ops, softmax variant, op names."""
    names = in_scope_ops.group_by("call_id").agg(
        _names=pl.col("name").unique().sort().str.join("\n"),
        mask_build_ops=pl.col("name").is_in(list(MASK_BUILD_OPS)).sum().cast(I64),
        cpu_ops=pl.len().cast(I64),
    )
    n = pl.col("_names")
    backend = pl.when(pl.lit(False)).then(pl.lit(None, STR))
    for value, pattern in BACKEND_OP_RULES:
        backend = backend.when(n.str.contains(pattern)).then(pl.lit(value))
    softmax = (
        pl.when(n.str.contains(r"aten::_safe_softmax\b"))
        .then(pl.lit("_safe_softmax"))
        .when(n.str.contains(r"aten::_softmax\b|aten::softmax\b"))
        .then(pl.lit("_softmax"))
        .when(n.str.contains(r"aten::_?log_softmax\b"))
        .then(pl.lit("log_softmax"))
    )
    return names.with_columns(op_backend=backend.otherwise(pl.lit(None, STR)), softmax_op=softmax).drop(
        "_names"
    )


def backend_expr() -> pl.Expr:
    """The backend of a call from `op_backend`, `core_kind` and the attention kernels."""
    kb, fp = pl.col("kernel_backend"), pl.col("flash_package").fill_null(False)
    by_kernel = (
        pl.when(pl.col("vendor_aiter").fill_null(False))
        .then(pl.lit("aiter"))
        .when(kb.is_in(["flash", "flash3"]) & fp)
        .then(pl.lit("flash_attn"))
        .when(kb == "flash")
        .then(pl.lit("sdpa_flash"))
        .when(kb == "flash3")
        .then(pl.lit("flash_attn"))
        .when(kb == "efficient")
        .then(pl.lit("sdpa_efficient"))
        .when(kb == "cudnn")
        .then(pl.lit("sdpa_cudnn"))
        .when(kb == "flex")
        .then(pl.lit("flex"))
        .when(kb == "ck")
        .then(pl.lit("ck"))
    )
    return (
        pl.when(pl.col("op_backend").is_not_null())
        .then(pl.col("op_backend"))
        .when(pl.col("core_kind") == "eager")
        .then(pl.lit("eager"))
        .otherwise(pl.coalesce(by_kernel, pl.lit("unknown")))
    )


def backend_source() -> pl.Expr:
    has_kernel = pl.col("attention_kernels").fill_null(0) > 0
    return (
        pl.when(pl.col("op_backend").is_not_null() & has_kernel)
        .then(pl.lit("ops+kernels"))
        .when(pl.col("op_backend").is_not_null())
        .then(pl.lit("ops"))
        .when(pl.col("core_kind") == "eager")
        .then(pl.lit("op pattern"))
        .when(has_kernel)
        .then(pl.lit("kernels"))
        .otherwise(pl.lit(None, STR))
    )
