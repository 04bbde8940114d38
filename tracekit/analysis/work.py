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
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import polars as pl

KEYS = ["name", "input_dims", "input_types", "concrete_inputs"]
WORK_SCHEMA: dict[str, pl.DataType] = {
    "work_class": pl.String, "flops": pl.Float64, "bytes": pl.Float64,
    "compute_dtype": pl.String, "causal": pl.Boolean, "unknown_reason": pl.String,
}
TENSOR_CLASSES = ("gemm", "attention", "conv")

DTYPE_BYTES: dict[str, int] = {
    "c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "long int": 8, "int": 4,
    "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1, "c10::Float8_e8m0fnu": 1, "c10::Float4_e2m1fn_x2": 1,
    "c10::qint8": 1, "c10::quint8": 1, "c10::qint32": 4, "unsigned short": 2,
    "unsigned int": 4, "unsigned long": 8, "c10::complex<c10::Half>": 4,
    "c10::complex<float>": 8, "c10::complex<double>": 16,
}
DTYPE_LABEL: dict[str, str] = {
    "c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8", "signed char": "int8", "c10::qint8": "int8",
    "unsigned char": "int8", "c10::quint8": "int8", "c10::Float4_e2m1fn_x2": "fp4",
}
# c10::ScalarType codes as Concrete Inputs write a `dtype=` argument.
SCALAR_TYPES: dict[str, str] = {
    "0": "unsigned char", "1": "signed char", "2": "short int", "3": "int", "4": "long int",
    "5": "c10::Half", "6": "float", "7": "double", "11": "bool", "15": "c10::BFloat16",
    "23": "c10::Float8_e5m2", "24": "c10::Float8_e4m3fn", "25": "c10::Float8_e5m2fnuz",
    "26": "c10::Float8_e4m3fnuz",
}


class Work(NamedTuple):
    work_class: str
    flops: float | None  # None only with `unknown_reason`
    bytes: float | None
    compute_dtype: str | None = None
    causal: bool | None = None
    unknown_reason: str | None = None


class Args:
    """One op's recorded inputs: `dims`, `types` and `concrete` lists, position by position."""

    def __init__(self, dims: list[Any], types: list[Any], concrete: list[Any]) -> None:
        self.dims, self.types, self.concrete = dims, types, concrete

    def shape(self, i: int) -> list[int] | None:
        d = self.dims[i] if i < len(self.dims) else None
        return d if isinstance(d, list) and all(isinstance(x, int) for x in d) else None

    def type(self, i: int) -> str:
        t = self.types[i] if i < len(self.types) else ""
        return t if isinstance(t, str) else ""

    def is_tensor(self, i: int) -> bool:
        return self.shape(i) is not None and self.type(i) in DTYPE_BYTES

    def numel(self, i: int) -> int | None:
        s = self.shape(i)
        return None if s is None else math.prod(s)

    def width(self, i: int) -> int | None:
        return DTYPE_BYTES.get(self.type(i))

    def nbytes(self, i: int) -> float | None:
        n, w = self.numel(i), self.width(i)
        return None if n is None or w is None else float(n * w)

    def text(self, i: int) -> str:
        c = self.concrete[i] if i < len(self.concrete) else ""
        return c.strip() if isinstance(c, str) else ""

    def tensors(self) -> list[int]:
        return [i for i in range(len(self.dims)) if self.is_tensor(i)]

    def input_bytes(self, *positions: int) -> float | None:
        """Bytes of the given inputs (all tensor inputs when none given); None if one is unknown."""
        idx = positions or tuple(self.tensors())
        sizes = [self.nbytes(i) for i in idx if self.shape(i) is not None]
        return None if any(s is None for s in sizes) else float(sum(sizes))  # type: ignore[arg-type]

    def label(self, i: int) -> str | None:
        return DTYPE_LABEL.get(self.type(i))


def _ints(text: str) -> list[int] | None:
    try:
        v = json.loads(text)
    except ValueError:
        return None
    if isinstance(v, int):
        return [v]
    return v if isinstance(v, list) and all(isinstance(x, int) for x in v) else None


def _broadcast(*shapes: list[int]) -> list[int]:
    n = max((len(s) for s in shapes), default=0)
    padded = [[1] * (n - len(s)) + list(s) for s in shapes]
    return [max(col) if min(col) != 0 else 0 for col in zip(*padded)]


def _plus(*parts: float | None) -> float | None:
    return None if any(p is None for p in parts) else float(sum(parts))  # type: ignore[arg-type]


# -- GEMM ---------------------------------------------------------------------------------
def matmul_dims(a: list[int], b: list[int]) -> tuple[int, int, int, int] | None:
    """(batch, M, K, N) of `a @ b` with torch.matmul's rules (1-D operands, batch broadcast)."""
    if not a or not b:
        return None
    a2 = [1, *a] if len(a) == 1 else a
    b2 = [*b, 1] if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        return None
    return math.prod(_broadcast(a2[:-2], b2[:-2])), a2[-2], a2[-1], b2[-1]


def _gemm(x: Args, i: int, j: int, *, extra: tuple[int, ...] = (), transpose_b: bool = False,
          out_type: str | None = None) -> Work | None:
    a, b = x.shape(i), x.shape(j)
    if a is None or b is None:
        return None
    dims = matmul_dims(a, list(reversed(b)) if transpose_b and len(b) == 2 else b)
    w = DTYPE_BYTES.get(out_type or x.type(i))
    if dims is None or w is None:
        return None
    batch, m, k, n = dims
    moved = _plus(x.input_bytes(i, j, *extra), float(batch * m * n * w))
    return Work("gemm", 2.0 * batch * m * k * n, moved, x.label(i))


def _scaled_mm(x: Args) -> Work | None:
    out = SCALAR_TYPES.get(x.text(6)) or "c10::BFloat16"
    return _gemm(x, 0, 1, extra=tuple(i for i in (2, 3, 4, 5) if x.is_tensor(i)), out_type=out)


# -- attention ----------------------------------------------------------------------------
# name -> (layout, index of is_causal / custom_mask_type in the schema)
ATTENTION: dict[str, tuple[str, int]] = {
    "scaled_dot_product_attention": ("bhsd", 5),
    "_scaled_dot_product_flash_attention": ("bhsd", 4),
    "_scaled_dot_product_flash_attention_for_cpu": ("bhsd", 4),
    "_scaled_dot_product_efficient_attention": ("bhsd", 6),
    "_scaled_dot_product_cudnn_attention": ("bhsd", 6),
    "_scaled_dot_product_fused_attention_overrideable": ("bhsd", 5),
    "_flash_attention_forward": ("bshd", 8),
    "_efficient_attention_forward": ("bshd", 9),
    "flex_attention": ("bhsd", -1),
}


def _attention(x: Args, layout: str, causal_at: int) -> Work | None:
    q, k, v = x.shape(0), x.shape(1), x.shape(2)
    if q is None or k is None or v is None or len(q) < 3 or len(k) != len(q) or len(v) != len(q):
        return None
    if layout == "bshd":  # (batch, seq, heads, dim); 3-D = variable-length batch: unknown
        if len(q) != 4:
            return None
        bh, sq, sk = q[0] * q[2], q[1], k[1]
    else:  # (..., heads, seq, dim)
        bh, sq, sk = math.prod(q[:-2]), q[-2], k[-2]
    flag = x.text(causal_at) if causal_at >= 0 else ""
    causal = flag in ("True", "1", "2")
    pairs = bh * sq * sk * (0.5 if causal else 1.0)
    flops = 2.0 * pairs * q[-1] + 2.0 * pairs * v[-1]
    w = x.width(0)
    out = None if w is None else float(bh * sq * v[-1] * w)
    return Work("attention", flops, _plus(x.input_bytes(), out), x.label(0), causal)


# -- convolution ----------------------------------------------------------------------------
# name -> (stride, padding, dilation, transposed, output_padding, groups) argument positions
CONV: dict[str, tuple[int, int, int, int | None, int | None, int]] = {
    "conv1d": (3, 4, 5, None, None, 6), "conv2d": (3, 4, 5, None, None, 6),
    "conv3d": (3, 4, 5, None, None, 6), "convolution": (3, 4, 5, 6, 7, 8),
    "_convolution": (3, 4, 5, 6, 7, 8), "conv_transpose1d": (3, 4, 7, -1, 5, 6),
    "conv_transpose2d": (3, 4, 7, -1, 5, 6), "conv_transpose3d": (3, 4, 7, -1, 5, 6),
    "cudnn_convolution": (3, 2, 4, None, None, 5),
}


CONV_ARGS = ("stride", "padding", "dilation", "transposed", "output_padding", "groups")


def _conv(x: Args, spec: tuple[int, int, int, int | None, int | None, int]) -> Work | None:
    """Conv work from the shapes and the recorded arguments; unknown (with the reason) when
    one of stride, padding, dilation, groups (and transposed, output_padding where the op
    takes them) is not in `Concrete Inputs` (traces before it existed, or a missing entry)."""
    s_at, p_at, d_at, t_at, op_at, g_at = spec
    inp, wt = x.shape(0), x.shape(1)
    if inp is None or wt is None or len(inp) < 3 or len(wt) != len(inp):
        return None
    missing = [name for name, at in zip(CONV_ARGS, spec) if at is not None and at >= 0 and not x.text(at)]
    if missing:
        where = "no Concrete Inputs" if not any(x.text(i) for i in range(len(x.concrete))) else "Concrete Inputs"
        return Work("conv", None, None, x.label(0), unknown_reason=f"{', '.join(missing)} not recorded ({where})")
    n_sp = len(inp) - 2
    transposed = t_at == -1 or (t_at is not None and x.text(t_at) == "True")

    def vec(at: int | None, default: int) -> list[int]:
        text = x.text(at) if at is not None and at >= 0 else ""
        got = _ints(text) if text else None
        return (got * n_sp if len(got) == 1 else got) if got else [default] * n_sp

    stride, dil, out_pad = vec(s_at, 1), vec(d_at, 1), vec(op_at, 0)
    pad_text = x.text(p_at)
    ksp = wt[2:]
    pad = [0] * n_sp if pad_text == "valid" else vec(p_at, 0)
    if pad_text == "same":
        pad = [d * (k - 1) // 2 for d, k in zip(dil, ksp)]
    groups = (_ints(x.text(g_at)) or [1])[0]
    if transposed:
        out_sp = [(i - 1) * s - 2 * p + d * (k - 1) + o + 1
                  for i, s, p, d, k, o in zip(inp[2:], stride, pad, dil, ksp, out_pad)]
        flops = 2.0 * inp[0] * math.prod(inp[2:]) * math.prod(wt)
        c_out = wt[1] * groups
    else:
        out_sp = [(i + 2 * p - d * (k - 1) - 1) // s + 1
                  for i, s, p, d, k in zip(inp[2:], stride, pad, dil, ksp)]
        flops = 2.0 * inp[0] * math.prod(out_sp) * math.prod(wt)
        c_out = wt[0]
    w = x.width(0)
    out = None if w is None else float(inp[0] * c_out * math.prod(out_sp) * w)
    return Work("conv", flops, _plus(x.input_bytes(), out), x.label(0))


# -- memory-bound families -------------------------------------------------------------------
def _elementwise(x: Args, *, per_element: float = 1.0, out_type: str | None = None) -> Work | None:
    idx = x.tensors()
    if not idx:
        return None
    out_shape = _broadcast(*(x.shape(i) or [] for i in idx))
    data = [i for i in idx if x.type(i) != "bool"] or idx  # a bool mask never sets the output type
    main = max(data, key=lambda i: (x.numel(i) or 0, -i))
    w = DTYPE_BYTES.get(out_type or x.type(main))
    numel = math.prod(out_shape)
    out = None if w is None else float(numel * w)
    return Work("elementwise", per_element * numel, _plus(x.input_bytes(), out), x.label(main))


def _rowwise(x: Args, work_class: str, per_element: float, out_type: str | None = None) -> Work | None:
    """Norms and softmax: output shaped like input 0; every tensor input read once."""
    n, w = x.numel(0), DTYPE_BYTES.get(out_type or x.type(0))
    if n is None or w is None:
        return None
    return Work(work_class, per_element * n, _plus(x.input_bytes(), float(n * w)), x.label(0))


def _softmax(x: Args) -> Work | None:
    flag = x.text(2)
    out = "float" if flag == "True" else SCALAR_TYPES.get(flag)
    return _rowwise(x, "softmax", 5.0, out)


def _reduction(x: Args, per_element: float, dim_at: int, out_type: str | None) -> Work | None:
    shape, w = x.shape(0), DTYPE_BYTES.get(out_type or x.type(0))
    if shape is None or w is None:
        return None
    dims = (_ints(x.text(dim_at)) or None) if x.text(dim_at) not in ("", "None") else None
    gone = set(range(len(shape))) if dims is None else {d % max(len(shape), 1) for d in dims}
    kept = [s for i, s in enumerate(shape) if i not in gone]
    out = float(math.prod(kept) * w)
    return Work("reduction", per_element * math.prod(shape), _plus(x.nbytes(0), out), x.label(0))


def _copy(x: Args, *, write_type: str | None = None, only_write: bool = False) -> Work | None:
    """Data movement: 0 FLOPs; read the source, write the destination."""
    n, w_in = x.numel(0), x.width(0)
    w_out = DTYPE_BYTES.get(write_type) if write_type else w_in
    if n is None or w_in is None or w_out is None:
        return None
    moved = float(n * w_out) + (0.0 if only_write else float(n * w_in))
    return Work("copy", 0.0, moved, x.label(0))


def _copy_into(x: Args) -> Work | None:  # copy_(self=destination, src)
    return Work("copy", 0.0, _plus(x.nbytes(0), x.nbytes(1)), x.label(1))


def _embedding(x: Args, weight: int, index: int, dim_at: int | None) -> Work | None:
    table, idx, w = x.shape(weight), x.numel(index), x.width(weight)
    if table is None or not table or idx is None or w is None:
        return None
    dim = 0 if dim_at is None else ((_ints(x.text(dim_at)) or [0])[0] % len(table))
    out = math.prod(table) // max(table[dim], 1) * idx
    kind = "embedding" if dim_at is None else "gather"
    return Work(kind, 0.0, _plus(x.nbytes(index), float(2 * out * w)), x.label(weight))


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
    "mm": lambda x: _gemm(x, 0, 1), "bmm": lambda x: _gemm(x, 0, 1),
    "matmul": lambda x: _gemm(x, 0, 1), "mv": lambda x: _gemm(x, 0, 1), "dot": lambda x: _gemm(x, 0, 1),
    "addmm": lambda x: _gemm(x, 1, 2, extra=(0,)), "baddbmm": lambda x: _gemm(x, 1, 2, extra=(0,)),
    "addmv": lambda x: _gemm(x, 1, 2, extra=(0,)), "_addmm_activation": lambda x: _gemm(x, 1, 2, extra=(0,)),
    "linear": lambda x: _gemm(x, 0, 1, extra=(2,) if x.is_tensor(2) else (), transpose_b=True),
    "_scaled_mm": _scaled_mm,
    **{n: (lambda spec: lambda x: _attention(x, *spec))(s) for n, s in ATTENTION.items()},
    **{n: (lambda spec: lambda x: _conv(x, spec))(s) for n, s in CONV.items()},
    **{n: _elementwise for n in ELEMENTWISE},
    **{n: (lambda x: _elementwise(x, out_type="bool")) for n in COMPARISONS},
    **{n: (lambda spec: lambda x: _reduction(x, *spec))(s) for n, s in REDUCTIONS.items()},
    **{n: (lambda per: lambda x: _rowwise(x, "normalization", per))(p) for n, p in NORMS.items()},
    **{n: _softmax for n in ("softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax")},
    "copy_": _copy_into, "clone": _copy, "contiguous": _copy,
    "_to_copy": lambda x: _copy(x, write_type=SCALAR_TYPES.get(x.text(1)) or x.type(0)),
    "fill_": lambda x: _copy(x, only_write=True), "zero_": lambda x: _copy(x, only_write=True),
    "embedding": lambda x: _embedding(x, 0, 1, None), "index_select": lambda x: _embedding(x, 0, 2, 1),
}


def handler_for(name: str) -> Handler | None:
    """The formula for an op name (`aten::` prefix and in-place `_` suffix optional)."""
    base = name.removeprefix("aten::")
    if base in ("max", "min"):  # two tensors: elementwise maximum/minimum; one: a reduction
        return lambda x: _elementwise(x) if len(x.tensors()) > 1 else _reduction(x, 1, 1, None)
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
