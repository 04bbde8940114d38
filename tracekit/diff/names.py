"""Matching kernels and ops across two traces by name.

Two runs of the same code give the same kernel names except for a few tokens that change
from run to run or from build to build. `kernel_key` removes only those, so two kernels
match when they are the same code:

1. a leading `void ` and surrounding whitespace (some Kineto versions omit the `void`);
2. a trailing parameter list `(...)` after the name (written by some Kineto versions and
   not by others; `(anonymous namespace)` inside the name is kept);
3. hexadecimal addresses `0x7f3a…` -> `0x…`;
4. hash-like tokens -> `…`: 16 or more lowercase hex digits, or 32 or more lowercase letters
   and digits with no separator (Inductor's base32 compiled-graph hashes);
5. the numeric index Triton/Inductor appends to a kernel (`triton_poi_fused_add_0`
   -> `triton_poi_fused_add`), which changes whenever the graph is recompiled.

Template arguments are *kept* in the key: they carry the functor and the tile shape
(`CUDAFunctor_add` vs `CUDAFunctor_mul`, `Flash_fwd_kernel_traits<128, …>`), so stripping
them everywhere would merge different kernels. Instead `match_keys` runs a second, one-to-one
pass over the kernels left unmatched: it compares their `kernel_base` (the key without
template arguments and without an architecture prefix such as `volta_`, `ampere_`, `sm80_`)
and pairs two kernels only when that base is unique among the unmatched kernels of *both*
sides (`volta_sgemm_128x32_nn` ↔ `ampere_sgemm_128x32_nn`; `kernel<…, 2ul>` ↔ `kernel<…, 5ul>`).
A base shared by several unmatched kernels pairs nothing: they are listed as appeared and
disappeared instead.

Op names get rules 3 and 4 only (`## Call CompiledFxGraph <hash> ##`).
"""

from __future__ import annotations

import polars as pl

STR = pl.String
_PARAMS = r"([\w>\]])\s*\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\s*$"
_HEX_ADDR = r"0x[0-9A-Fa-f]+"
_HASH = r"\b(?:[0-9a-f]{16,}|[a-z0-9]{32,})\b"
_TRITON_INDEX = r"^(triton_\w*?)_\d+$"
_ARCH = r"(?i)^(?:maxwell|pascal|volta|turing|ampere|ada|hopper|blackwell)_|(?:^|_)sm_?\d{2,3}a?(?:_|$)"
_TEMPLATE = r"<[^<>]*>"
TEMPLATE_DEPTH = 8  # nesting levels of template arguments removed


def _common(name: pl.Expr) -> pl.Expr:
    return name.str.replace_all(_HEX_ADDR, "0x…").str.replace_all(_HASH, "…")


def kernel_key(name: pl.Expr) -> pl.Expr:
    """The matching key of a kernel name (rules 1–5 of the module docstring)."""
    s = name.str.strip_chars().str.replace(r"^void\s+", "")
    s = s.str.replace(_PARAMS, "${1}")
    s = _common(s).str.replace_all(r"\s+", " ")
    return s.str.replace(_TRITON_INDEX, "${1}")


def kernel_base(key: pl.Expr) -> pl.Expr:
    """A key without template arguments and architecture prefixes (second matching pass)."""
    s = key
    for _ in range(TEMPLATE_DEPTH):
        s = s.str.replace_all(_TEMPLATE, "")
    return s.str.replace_all(_ARCH, "_").str.strip_chars("_ ")


def op_key(name: pl.Expr) -> pl.Expr:
    """The matching key of a CPU op name (addresses and hashes only)."""
    return _common(name.str.strip_chars())


def match_keys(before: pl.DataFrame, after: pl.DataFrame) -> pl.DataFrame:
    """The second pass: `after_key -> before_key` for unmatched keys paired by a unique base.

    `before`, `after`: frames with `key` and `base` (one row per key). Returns columns
    `after_key`, `before_key`; empty when nothing pairs.
    """
    schema = {"after_key": STR, "before_key": STR}
    if before.is_empty() or after.is_empty():
        return pl.DataFrame(schema=schema)
    b = before.select("key", "base").unique("key").join(after.select("key"), on="key", how="anti")
    a = after.select("key", "base").unique("key").join(before.select("key"), on="key", how="anti")
    b = b.filter(pl.len().over("base") == 1)
    a = a.filter(pl.len().over("base") == 1)
    pairs = a.join(b, on="base", how="inner", suffix="_b")
    return pairs.select(pl.col("key").alias("after_key"), pl.col("key_b").alias("before_key")).cast(schema)
