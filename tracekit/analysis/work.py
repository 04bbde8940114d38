"""Work per op: FLOPs and minimum bytes moved, from the shapes the profiler recorded.

With `record_shapes=True` every `cpu_op` carries `Input Dims`, `Input type` and
`Concrete Inputs`. For the ops listed in `HANDLERS` this module turns them into:

- `flops`: floating-point operations (a multiply-add is 2), by the formulas of
  `docs/roofline.md` (GEMM 2·M·K·N, attention 4·B·H·Sq·Sk·D halved when causal, ...);
- `bytes`: the compulsory traffic, every tensor input read once and the output written
  once (what a perfectly cached kernel would move; the real kernel moves at least this);
- `work_class` (gemm, attention, conv, elementwise, reduction, normalization, softmax,
  embedding, gather, copy), `compute_dtype` (bf16, fp16, fp32, fp64, fp8, int8, ...) and
  `causal` (attention only);
- `unknown_reason`: set (with null FLOPs and bytes) when the op's formula needs an argument
  the trace does not record (a convolution's stride, padding, dilation or groups): a
  default would be a guess, and a stride-2 conv counted at stride 1 has 4x its FLOPs.

The Python work is done once per unique (name, dims, types, concrete inputs) combination
(shapes repeat: a 24-layer model has a few dozen), then joined back to every call. Where
no formula applies, the profiler's own `flops` (`with_flops=True`) is used when present.
Which ops carry the work of a nested call (linear -> addmm) is decided by the roofline
(`roofline.py`), not here: every known op gets its work.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import polars as pl

from tracekit.analysis.op_inputs import DTYPE_BYTES, DTYPE_LABEL, SCALAR_TYPES, Args, Work
from tracekit.analysis.work_formulas import (
    ATTENTION,
    CONV,
    CONV_ARGS,
    attention,
    conv,
    copy,
    copy_into,
    elementwise,
    embedding,
    gemm,
    matmul_dims,
    reduction,
    rowwise,
    scaled_mm,
    softmax,
)

# the names other modules import from here (an op's inputs live in op_inputs, the
# formulas in work_formulas)
__all__ = [
    "ATTENTION", "CONV", "CONV_ARGS", "DTYPE_BYTES", "DTYPE_LABEL", "HANDLERS", "KEYS", "SCALAR_TYPES",
    "TENSOR_CLASSES", "WORK_SCHEMA", "Args", "Work", "handler_for", "matmul_dims", "op_work", "work_of",
]

KEYS = ["name", "input_dims", "input_types", "concrete_inputs"]
WORK_SCHEMA: dict[str, pl.DataType] = {
    "work_class": pl.String, "flops": pl.Float64, "bytes": pl.Float64,
    "compute_dtype": pl.String, "causal": pl.Boolean, "unknown_reason": pl.String,
}
TENSOR_CLASSES = ("gemm", "attention", "conv")


ELEMENTWISE = (
    "add sub rsub mul div true_divide floor_divide remainder fmod pow neg abs exp exp2 expm1 log "
    "log2 log10 log1p sqrt rsqrt reciprocal square sin cos tan tanh sigmoid silu gelu relu relu6 "
    "leaky_relu elu selu celu mish hardswish hardsigmoid hardtanh softplus erf erfc erfinv sign "
    "floor ceil round trunc frac clamp clamp_min clamp_max clip maximum minimum fmax fmin where "
    "masked_fill lerp addcmul addcdiv threshold nan_to_num tril triu dropout native_dropout "
    "_masked_scale bitwise_and bitwise_or bitwise_xor bitwise_not cumsum cumprod"
).split()
COMPARISONS = "eq ne lt le gt ge logical_and logical_or logical_xor logical_not isnan isinf isfinite".split()
REDUCTIONS: dict[str, tuple[float, int, str | None]] = {  # flops/element, dim position, output type
    "sum": (1, 1, None), "mean": (1, 1, None), "amax": (1, 1, None), "amin": (1, 1, None),
    "prod": (1, 1, None), "argmax": (1, 1, "long int"), "argmin": (1, 1, "long int"),
    "all": (1, 1, "bool"), "any": (1, 1, "bool"),
    "var": (3, 1, None), "std": (3, 1, None), "var_mean": (3, 1, None), "std_mean": (3, 1, None),
    "logsumexp": (4, 1, None), "norm": (2, 2, None), "linalg_vector_norm": (2, 2, None),
}
NORMS: dict[str, float] = {  # flops per input element (docs/roofline.md explains the counts)
    "layer_norm": 7, "native_layer_norm": 7, "group_norm": 7, "native_group_norm": 7,
    "batch_norm": 7, "native_batch_norm": 7, "_native_batch_norm_legit_no_training": 7,
    "_batch_norm_impl_index": 7, "cudnn_batch_norm": 7, "instance_norm": 7,
    "rms_norm": 4, "_fused_rms_norm": 4,
}

Handler = Callable[[Args], "Work | None"]
HANDLERS: dict[str, Handler] = {
    "mm": lambda x: gemm(x, 0, 1), "bmm": lambda x: gemm(x, 0, 1),
    "matmul": lambda x: gemm(x, 0, 1), "mv": lambda x: gemm(x, 0, 1), "dot": lambda x: gemm(x, 0, 1),
    "addmm": lambda x: gemm(x, 1, 2, extra=(0,)), "baddbmm": lambda x: gemm(x, 1, 2, extra=(0,)),
    "addmv": lambda x: gemm(x, 1, 2, extra=(0,)), "_addmm_activation": lambda x: gemm(x, 1, 2, extra=(0,)),
    "linear": lambda x: gemm(x, 0, 1, extra=(2,) if x.is_tensor(2) else (), transpose_b=True),
    "_scaled_mm": scaled_mm,
    **{n: (lambda spec: lambda x: attention(x, *spec))(s) for n, s in ATTENTION.items()},
    **{n: (lambda spec: lambda x: conv(x, spec))(s) for n, s in CONV.items()},
    **{n: elementwise for n in ELEMENTWISE},
    **{n: (lambda x: elementwise(x, out_type="bool")) for n in COMPARISONS},
    **{n: (lambda spec: lambda x: reduction(x, *spec))(s) for n, s in REDUCTIONS.items()},
    **{n: (lambda per: lambda x: rowwise(x, "normalization", per))(p) for n, p in NORMS.items()},
    **{n: softmax for n in ("softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax")},
    "copy_": copy_into, "clone": copy, "contiguous": copy,
    "_to_copy": lambda x: copy(x, write_type=SCALAR_TYPES.get(x.text(1)) or x.type(0)),
    "fill_": lambda x: copy(x, only_write=True), "zero_": lambda x: copy(x, only_write=True),
    "embedding": lambda x: embedding(x, 0, 1, None), "index_select": lambda x: embedding(x, 0, 2, 1),
}


def handler_for(name: str) -> Handler | None:
    """The formula for an op name (`aten::` prefix and in-place `_` suffix optional)."""
    base = name.removeprefix("aten::")
    if base in ("max", "min"):  # two tensors: elementwise maximum/minimum; one: a reduction
        return lambda x: elementwise(x) if len(x.tensors()) > 1 else reduction(x, 1, 1, None)
    found = HANDLERS.get(base)
    if found is None and base.endswith("_") and not base.endswith("__"):
        found = HANDLERS.get(base[:-1])
    return found


def work_of(name: str, dims: str | None, types: str | None, concrete: str | None) -> Work | None:
    """The work of one op call from its recorded inputs (JSON text as the loader keeps it)."""
    handler = handler_for(name)
    if handler is None or not dims:
        return None
    try:
        parsed = [json.loads(t) if t else [] for t in (dims, types, concrete)]
    except ValueError:
        return None
    if not all(isinstance(p, list) for p in parsed):
        return None
    try:
        work = handler(Args(*parsed))
    except (TypeError, ValueError, ZeroDivisionError, IndexError):
        return None
    return None if work is None or (work.flops == 0 and work.bytes is None) else work


def op_work(ops: pl.DataFrame) -> pl.DataFrame:
    """`ops` plus `WORK_SCHEMA` columns, `profiler_flops` (the trace's own) and `flops_source`.

    `flops` is the formula's count, else the profiler's; `flops_source` says which
    (`formula`, `profiler`, or null when neither is known). The profiler's count clears an
    `unknown_reason` (it was computed from the arguments the trace does not show).
    """
    ops = ops.rename({"flops": "profiler_flops"})
    names = [n for n in ops["name"].unique().drop_nulls().to_list() if handler_for(n) is not None]
    keys = ops.filter(pl.col("name").is_in(names)).select(KEYS).unique(maintain_order=True)
    rows = [work_of(*r) for r in keys.iter_rows()]
    table = pl.DataFrame(
        [tuple(r) if r is not None else (None,) * len(WORK_SCHEMA) for r in rows],
        schema=WORK_SCHEMA, orient="row",
    )
    if table.select(pl.all().is_null().all()).row(0) == (True,) * table.width:
        # no op's work is known (a trace without recorded shapes): the join on the four
        # text keys would give every op null columns, and copy every column of the ops at
        # once, beside the critical path's graph
        out = ops.with_columns(*(pl.lit(None, t).alias(c) for c, t in WORK_SCHEMA.items()))
    else:
        table = pl.concat([keys, table], how="horizontal")
        out = ops.join(table, on=KEYS, how="left", nulls_equal=True, maintain_order="left")
    return out.with_columns(
        flops_source=pl.when(pl.col("flops").is_not_null()).then(pl.lit("formula"))
        .when(pl.col("profiler_flops").is_not_null()).then(pl.lit("profiler")),
        flops=pl.coalesce("flops", "profiler_flops"),
        unknown_reason=pl.when(pl.col("flops").is_null() & pl.col("profiler_flops").is_null())
        .then("unknown_reason"),
    )
