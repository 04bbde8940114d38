"""The work formulas per op family (`work`): GEMM, attention, convolution and the
memory-bound families (elementwise, reductions, normalisations, softmax, copies, gathers).
Each takes an op's `Args` and returns its `Work`, or None where its inputs do not fit;
the counts are those of `docs/roofline.md`."""

from __future__ import annotations

import json
import math

from tracekit.analysis.op_inputs import DTYPE_BYTES, SCALAR_TYPES, Args, Work


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


def gemm(x: Args, i: int, j: int, *, extra: tuple[int, ...] = (), transpose_b: bool = False,
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


def scaled_mm(x: Args) -> Work | None:
    out = SCALAR_TYPES.get(x.text(6)) or "c10::BFloat16"
    return gemm(x, 0, 1, extra=tuple(i for i in (2, 3, 4, 5) if x.is_tensor(i)), out_type=out)


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


def attention(x: Args, layout: str, causal_at: int) -> Work | None:
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


def conv(x: Args, spec: tuple[int, int, int, int | None, int | None, int]) -> Work | None:
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
def elementwise(x: Args, *, per_element: float = 1.0, out_type: str | None = None) -> Work | None:
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


def rowwise(x: Args, work_class: str, per_element: float, out_type: str | None = None) -> Work | None:
    """Norms and softmax: output shaped like input 0; every tensor input read once."""
    n, w = x.numel(0), DTYPE_BYTES.get(out_type or x.type(0))
    if n is None or w is None:
        return None
    return Work(work_class, per_element * n, _plus(x.input_bytes(), float(n * w)), x.label(0))


def softmax(x: Args) -> Work | None:
    flag = x.text(2)
    out = "float" if flag == "True" else SCALAR_TYPES.get(flag)
    return rowwise(x, "softmax", 5.0, out)


def reduction(x: Args, per_element: float, dim_at: int, out_type: str | None) -> Work | None:
    shape, w = x.shape(0), DTYPE_BYTES.get(out_type or x.type(0))
    if shape is None or w is None:
        return None
    dims = (_ints(x.text(dim_at)) or None) if x.text(dim_at) not in ("", "None") else None
    gone = set(range(len(shape))) if dims is None else {d % max(len(shape), 1) for d in dims}
    kept = [s for i, s in enumerate(shape) if i not in gone]
    out = float(math.prod(kept) * w)
    return Work("reduction", per_element * math.prod(shape), _plus(x.nbytes(0), out), x.label(0))


def copy(x: Args, *, write_type: str | None = None, only_write: bool = False) -> Work | None:
    """Data movement: 0 FLOPs; read the source, write the destination."""
    n, w_in = x.numel(0), x.width(0)
    w_out = DTYPE_BYTES.get(write_type) if write_type else w_in
    if n is None or w_in is None or w_out is None:
        return None
    moved = float(n * w_out) + (0.0 if only_write else float(n * w_in))
    return Work("copy", 0.0, moved, x.label(0))


def copy_into(x: Args) -> Work | None:  # copy_(self=destination, src)
    return Work("copy", 0.0, _plus(x.nbytes(0), x.nbytes(1)), x.label(1))


def embedding(x: Args, weight: int, index: int, dim_at: int | None) -> Work | None:
    table, idx, w = x.shape(weight), x.numel(index), x.width(weight)
    if table is None or not table or idx is None or w is None:
        return None
    dim = 0 if dim_at is None else ((_ints(x.text(dim_at)) or [0])[0] % len(table))
    out = math.prod(table) // max(table[dim], 1) * idx
    kind = "embedding" if dim_at is None else "gather"
    return Work(kind, 0.0, _plus(x.nbytes(index), float(2 * out * w)), x.label(weight))
