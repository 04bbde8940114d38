"""Where the attention calls are: one row per attention forward, from the strongest evidence.

Evidence, strongest first (a weaker region is dropped where it overlaps a stronger one):

| evidence        | what                                                                         |
|-----------------|------------------------------------------------------------------------------|
| `range`         | `record_function` ranges: `attention#<layer>` (tracekit capture), `attn_fwd` |
| `module`        | `python_function` `nn.Module: <Name>Attention<...>_<n>` (with_modules)       |
| `sdpa_op`       | `aten::scaled_dot_product_attention` and its backend ops                     |
| `flex_op`       | FlexAttention ops (`flex_attention`), Triton template kernels under them     |
| `external_op`   | library ops: `flash_attn::*` (the flash-attn package), `aiter::*`, xformers; |
|                 | serving engines' `vllm::unified_attention*`, `sglang::unified_attention*`;   |
|                 | autograd functions `*FlashAttn*Func` (`FlashAttnFunc`, `FlashAttnVarlenFunc`) |
| `eager_pattern` | matmul/bmm -> [mul/div] -> [masked_fill/add/where] -> softmax -> matmul/bmm  |
| (`compiled`)    | a `Torch-Compiled Region` op inside a range or module call (flex_attention   |
|                 | on CPU runs as one, with no flex-named op): a core, never a call of its own  |

The last four are also the *core* of a call: the part that computes attention itself
(a call found from a range or a module also holds projections, rotary embeddings, ...).
Kernel counts, GPU time and the backend are read from the core when one is found, never
from the enclosing module or range (whose projection GEMMs are not attention); nested core
ops (SDPA -> its backend op) make one core, the outermost of them.

The eager pattern is matched on the sequence of *token* ops of each thread (outermost
matmul/bmm/einsum = G, mul/div = S, masked_fill/add/where = M, softmax = X; `linear`,
`addmm` and the core ops above break a chain): an X whose last non-S/M token before it is a
G and whose next token is a G, the whole chain within `max_window_ns`, or, however long it
takes (a slow CPU), within one range or module call, which bounds it instead.

Regions on one thread are made disjoint by keeping the outermost: a region that starts
before an earlier region has ended is dropped. Calls on a thread are therefore disjoint,
and assigning a point in time to its call is an as-of join.
"""

from __future__ import annotations

import polars as pl

from tracekit.model import ENGINE, TEXT, Trace

I64, STR = pl.Int64, pl.String
THREAD = ["pid", "tid"]

RANGE_RE = r"^(?:attention#(\d+)|attn_fwd(?:#\d+)?)$"
MODULE_RE = r"^nn\.Module: (\w*Attention\w*?)_(\d+)$"
SDPA_RE = (
    r"^aten::(?:scaled_dot_product_attention|_scaled_dot_product_\w+|_flash_attention_forward"
    r"|_efficient_attention_forward|_cudnn_attention_forward)$"
)
FLEX_RE = r"(?i)(?:^|[:.])flex_attention$"
FLEX_PY_RE = r"flex_attention\.py\(\d+\): flex_attention$"
EXTERNAL_RE = (
    r"^(?:flash_attn(?:_\d)?|_flash_attn\w*|flash_attn_3|aiter|vllm_flash_attn|_vllm_fa\d_C|xformers)"
    r"::\w*(?:attn|attention|fwd|forward|mha)\w*$"
)
# the attention op of a serving engine's attention layer (vLLM's `Attention` module, SGLang's
# `RadixAttention`): cache write + the backend's kernel; not `vllm::unified_kv_cache_update`
SERVING_RE = r"^(?:vllm|sglang)::unified_(?:mla_)?attention(?:_with_output)?$"
# a custom autograd function's forward is recorded under its class name (flash-attn < 2.7,
# and models that wrap their own kernels): FlashAttnFunc, FlashAttnVarlenFunc, ...
AUTOGRAD_RE = r"^_?\w*FlashAttn\w*Func$"
BACKWARD_RE = r"(?i)backward"
COMPILED_RE = r"^Torch-Compiled Region: \d+/\d+$"
DEFAULT_MAX_WINDOW_NS = 100_000_000

TOKENS: dict[str, str] = {
    **dict.fromkeys(["aten::matmul", "aten::bmm", "aten::baddbmm", "aten::einsum", "aten::mm"], "G"),
    **dict.fromkeys(["aten::linear", "aten::addmm"], "L"),
    **dict.fromkeys(["aten::mul", "aten::mul_", "aten::div", "aten::div_"], "S"),
    **dict.fromkeys(
        ["aten::masked_fill", "aten::masked_fill_", "aten::add", "aten::add_", "aten::where"], "M"
    ),
    **dict.fromkeys(["aten::softmax", "aten::_softmax", "aten::_safe_softmax", "aten::special_softmax"], "X"),
}
EVIDENCE: tuple[str, ...] = ("range", "module", "sdpa_op", "flex_op", "external_op", "eager_pattern")
CORE_EVIDENCE = {"sdpa": "sdpa_op", "flex": "flex_op", "external": "external_op", "eager": "eager_pattern"}

REGION_SCHEMA: dict[str, pl.DataType] = {
    "region_eid": I64,
    "kind": STR,
    "name": STR,
    "pid": TEXT,
    "tid": TEXT,
    "ts_ns": I64,
    "end_ns": I64,
    "layer": I64,
}
CALL_SCHEMA: dict[str, pl.DataType] = {
    "call_id": I64,
    "evidence": STR,
    "name": STR,
    "layer": I64,
    "pid": TEXT,
    "tid": TEXT,
    "ts_ns": I64,
    "end_ns": I64,
    "region_eid": I64,
}
CORE_SCHEMA: dict[str, pl.DataType] = {
    "call_id": I64,
    "core_kind": STR,
    "cores": I64,
    "scope_ts_ns": I64,
    "scope_end_ns": I64,
    "root_eid": I64,
}


def _regions(frame: pl.DataFrame, kind: str | pl.Expr, layer: pl.Expr | None = None) -> pl.DataFrame:
    kind_expr = pl.lit(kind) if isinstance(kind, str) else kind
    return frame.select(
        pl.col("eid").alias("region_eid"),
        kind_expr.alias("kind"),
        "name",
        "pid",
        "tid",
        "ts_ns",
        pl.max_horizontal("ts_ns", "end_ns").alias("end_ns"),
        (layer if layer is not None else pl.lit(None, I64)).alias("layer"),
    ).cast(REGION_SCHEMA)


def range_regions(trace: Trace) -> pl.DataFrame:
    """`attention#<layer>` and `attn_fwd` record_function ranges (layer from the name)."""
    rows = trace.ops.filter(pl.col("cat") == "user_annotation").filter(pl.col("name").str.contains(RANGE_RE))
    return _regions(rows, "range", pl.col("name").str.extract(RANGE_RE, 1).cast(I64))


def module_regions(trace: Trace) -> pl.DataFrame:
    """`nn.Module: ...Attention..._<n>` slices (with_modules); the layer is the `_<n>` suffix."""
    rows = trace.ops.filter(pl.col("cat") == "python_function").filter(pl.col("name").str.contains(MODULE_RE))
    return _regions(rows, "module", pl.col("name").str.extract(MODULE_RE, 2).cast(I64))


def core_kind(name: pl.Expr) -> pl.Expr:
    """'sdpa' | 'flex' | 'external' for the ops that compute attention themselves, else null."""
    forward = ~name.str.contains(BACKWARD_RE)
    return (
        pl.when(forward & name.str.contains(SDPA_RE))
        .then(pl.lit("sdpa"))
        .when(forward & name.str.contains(FLEX_RE))
        .then(pl.lit("flex"))
        .when(forward & (name.str.contains(EXTERNAL_RE) | name.str.contains(SERVING_RE)
                         | name.str.contains(AUTOGRAD_RE)))
        .then(pl.lit("external"))
        .otherwise(pl.lit(None, STR))
    )


def op_regions(ops: pl.DataFrame, trace: Trace) -> pl.DataFrame:
    """SDPA, flex and library attention ops (cpu_op, and flex python functions)."""
    # the patterns run on the distinct names (a few dozen), which the rows then look up:
    # run on every row, they cost a regex scan per op
    name = pl.col("name")
    kinds = ops.select(name.unique()).filter(name.is_not_null()).with_columns(_kind=core_kind(name)).filter(
        pl.col("_kind").is_not_null())
    rows = ops.filter(name.is_in(kinds["name"].implode())).join(kinds, on="name", how="left",
                                                              maintain_order="left")
    flex_py = trace.ops.filter(pl.col("cat") == "python_function").filter(name.str.contains(FLEX_PY_RE))
    parts = [_regions(rows, pl.col("_kind"))]
    if flex_py.height:
        parts.append(_regions(flex_py, "flex"))
    return pl.concat(parts)


def outermost(regions: pl.DataFrame) -> pl.DataFrame:
    """Regions that start after every earlier-starting region on their thread has ended."""
    if regions.is_empty():
        return regions
    ordered = regions.sort(
        [*THREAD, "ts_ns", "end_ns", "region_eid"], descending=[False, False, False, True, False]
    )
    prev_end = pl.col("end_ns").cum_max().shift(1).over(THREAD)
    return ordered.filter(prev_end.is_null() | (pl.col("ts_ns") >= prev_end))


def drop_overlapping(candidates: pl.DataFrame, taken: pl.DataFrame) -> pl.DataFrame:
    """`candidates` that overlap no region of `taken` (disjoint per thread) on their thread."""
    if candidates.is_empty() or taken.is_empty():
        return candidates
    right = taken.select(*THREAD, pl.col("ts_ns").alias("_s"), pl.col("end_ns").alias("_e")).sort("_s")
    left = candidates.sort("ts_ns")
    back = left.join_asof(
        right, left_on="ts_ns", right_on="_s", by=THREAD, strategy="backward", check_sortedness=False
    )
    hit_back = pl.col("_e").is_not_null() & (pl.col("_e") > pl.col("ts_ns"))
    back = back.filter(~hit_back).drop("_s", "_e")
    fwd = back.sort("ts_ns").join_asof(
        right, left_on="ts_ns", right_on="_s", by=THREAD, strategy="forward", check_sortedness=False
    )
    hit_fwd = pl.col("_s").is_not_null() & (
        (pl.col("_s") < pl.col("end_ns")) | (pl.col("_s") == pl.col("ts_ns"))
    )
    return fwd.filter(~hit_fwd).drop("_s", "_e")


def assign(
    points: pl.DataFrame,
    spans: pl.DataFrame,
    *,
    at: str = "ts_ns",
    end: str | None = None,
    span_start: str = "ts_ns",
    span_end: str = "end_ns",
    key: str = "call_id",
) -> pl.DataFrame:
    """`points` plus `key` of the span (disjoint per thread) holding `at` (and `end`, if given).

    A point holds when `span_start <= at <= span_end` (and `end <= span_end`); else `key` is null.
    """
    if points.is_empty() or spans.is_empty():
        return points.with_columns(pl.lit(None, spans.schema.get(key, I64)).alias(key))
    right = spans.lazy().select(*THREAD, key, pl.col(span_start).alias("_s"), pl.col(span_end).alias("_e")).sort(
        "_s"
    )
    joined = points.lazy().sort(at).join_asof(
        right, left_on=at, right_on="_s", by=THREAD, strategy="backward", check_sortedness=False
    )
    inside = pl.col(at) <= pl.col("_e")
    if end is not None:
        inside = inside & (pl.col(end) <= pl.col("_e"))
    return joined.with_columns(pl.when(inside).then(pl.col(key)).alias(key)).drop("_s", "_e").collect(engine=ENGINE)


def _token_sequence(ops: pl.DataFrame, cores: pl.DataFrame) -> pl.DataFrame:
    """The outermost token ops (and core ops, as 'C') of each thread, numbered `_i` in time order."""
    tokens = ops.filter(pl.col("name").is_in(list(TOKENS))).with_columns(
        _tok=pl.col("name").replace_strict(TOKENS, return_dtype=STR)
    )
    blockers = cores.select("region_eid", "pid", "tid", "ts_ns", "end_ns", _tok=pl.lit("C"), name=pl.lit(""))
    seq = pl.concat(
        [
            tokens.select(
                pl.col("eid").alias("region_eid"),
                "pid",
                "tid",
                "ts_ns",
                pl.max_horizontal("ts_ns", "end_ns").alias("end_ns"),
                "_tok",
                "name",
            ),
            blockers,
        ]
    )
    return (
        outermost(seq)
        .sort([*THREAD, "ts_ns"])
        .with_columns(_i=pl.int_range(pl.len(), dtype=I64).over(THREAD))
    )


def compiled_regions(ops: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """`Torch-Compiled Region` ops lying inside a call of `calls`, as regions of kind 'compiled'."""
    rows = ops.filter(pl.col("name").str.contains(COMPILED_RE))
    if rows.is_empty() or calls.is_empty():
        return pl.DataFrame(schema=REGION_SCHEMA)
    regions = outermost(_regions(rows, "compiled"))
    spans = calls.with_columns(call_id=pl.col("region_eid"))
    placed = assign(regions, spans, end="end_ns")
    return placed.filter(pl.col("call_id").is_not_null()).select(list(REGION_SCHEMA)).cast(REGION_SCHEMA)


def eager_regions(
    ops: pl.DataFrame, cores: pl.DataFrame, *, max_window_ns: int, enclosing: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Eager attention chains G [S|M]* X G on each thread, as regions of kind 'eager': within
    `max_window_ns`, or inside one region of `enclosing` (range and module calls)."""
    if not ops["name"].is_in(list(TOKENS)).any():
        return pl.DataFrame(schema=REGION_SCHEMA)
    seq = _token_sequence(ops, cores)
    idx_if = lambda cond: pl.when(cond).then(pl.col("_i")).forward_fill().shift(1).over(THREAD)  # noqa: E731
    found = seq.with_columns(
        _prev_g=idx_if(pl.col("_tok") == "G"),
        _prev_break=idx_if(~pl.col("_tok").is_in(["S", "M"])),
        _next_tok=pl.col("_tok").shift(-1).over(THREAD),
        _next_end=pl.col("end_ns").shift(-1).over(THREAD),
    ).filter(
        (pl.col("_tok") == "X") & (pl.col("_prev_g") == pl.col("_prev_break")) & (pl.col("_next_tok") == "G")
    )
    starts = seq.select(
        *THREAD,
        pl.col("_i").alias("_prev_g"),
        pl.col("ts_ns").alias("_g_ts"),
        pl.col("region_eid").alias("_g_eid"),
    )
    chains = found.join(starts, on=[*THREAD, "_prev_g"], how="inner")
    fits = pl.col("_next_end") - pl.col("_g_ts") <= max_window_ns
    if enclosing is not None and not enclosing.is_empty():
        spans = enclosing.select(*THREAD, "ts_ns", "end_ns", _enc=pl.col("region_eid"))
        placed = assign(chains, spans, at="_g_ts", end="_next_end", key="_enc")
        chains = placed.filter(fits | pl.col("_enc").is_not_null()).drop("_enc")
    else:
        chains = chains.filter(fits)
    return chains.select(
        pl.col("_g_eid").alias("region_eid"),
        pl.lit("eager").alias("kind"),
        pl.lit("eager attention (matmul, softmax, matmul)").alias("name"),
        "pid",
        "tid",
        pl.col("_g_ts").alias("ts_ns"),
        pl.col("_next_end").alias("end_ns"),
        pl.lit(None, I64).alias("layer"),
    ).cast(REGION_SCHEMA)


def find_calls(
    trace: Trace, ops: pl.DataFrame, *, max_window_ns: int = DEFAULT_MAX_WINDOW_NS
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(calls, cores): one row per attention call (CALL_SCHEMA) and its core (CORE_SCHEMA)."""
    taken = outermost(range_regions(trace)).with_columns(evidence=pl.lit("range"))
    modules = drop_overlapping(outermost(module_regions(trace)), taken).with_columns(
        evidence=pl.lit("module")
    )
    taken = pl.concat([taken, modules])
    op_cores = op_regions(ops, trace)
    eager = eager_regions(ops, outermost(op_cores), max_window_ns=max_window_ns, enclosing=taken)
    cores = outermost(pl.concat([op_cores, eager]))
    compiled = drop_overlapping(compiled_regions(ops, taken.select(list(REGION_SCHEMA))), cores)
    loose = drop_overlapping(cores, taken).with_columns(
        evidence=pl.col("kind").replace_strict(CORE_EVIDENCE, return_dtype=STR)
    )
    calls = (
        pl.concat([taken, loose])
        .sort("ts_ns", "region_eid")
        .with_columns(call_id=pl.int_range(pl.len(), dtype=I64))
        .select(list(CALL_SCHEMA))
        .cast(CALL_SCHEMA)
    )
    return calls, _cores(pl.concat([cores, compiled]), calls)


def _cores(cores: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """Per call: its core kind (first core; 'mixed' if kinds differ), count and span."""
    if cores.is_empty() or calls.is_empty():
        return pl.DataFrame(schema=CORE_SCHEMA)
    placed = assign(cores, calls, end="end_ns").filter(pl.col("call_id").is_not_null()).sort("ts_ns")
    return (
        placed.group_by("call_id")
        .agg(
            core_kind=pl.when(pl.col("kind").n_unique() > 1)
            .then(pl.lit("mixed"))
            .otherwise(pl.col("kind").first()),
            cores=pl.len(),
            scope_ts_ns=pl.col("ts_ns").min(),
            scope_end_ns=pl.col("end_ns").max(),
            root_eid=pl.col("region_eid").first(),
        )
        .cast(CORE_SCHEMA)
        .sort("call_id")
    )
