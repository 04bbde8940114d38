"""Per attention call, from its ops: query shape, dtype and SDPA arguments (`input_metrics`),
and the phase it ran in (`phases`: the capture's `prefill` / `decode#<i>` ranges)."""

from __future__ import annotations

import polars as pl

from tracekit.analysis.attention.find import FLEX_RE, THREAD, assign, outermost
from tracekit.model import Trace

I64, F64 = pl.Int64, pl.Float64
DTYPES = {
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "float": "fp32",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
}


def input_metrics(ops: pl.DataFrame, scoped: pl.DataFrame) -> pl.DataFrame:
    """Per call, from its root op (outermost SDPA op, or the first matmul of an eager chain):
    query shape (`batch`, `heads`, `q_len`, `head_dim`), `kv_heads`, `dtype`, and for
    `aten::scaled_dot_product_attention` also `attn_mask`, `dropout_p`, `is_causal`."""
    roots = scoped.select("call_id", pl.col("root_eid").alias("eid")).drop_nulls("eid").join(ops, on="eid")
    dims = pl.col("input_dims").str.extract_all(r"\[[\d,\s]*\]")
    q = dims.list.get(0, null_on_oob=True).str.extract_all(r"\d+").cast(pl.List(I64))
    k = dims.list.get(1, null_on_oob=True).str.extract_all(r"\d+").cast(pl.List(I64))
    types = pl.col("input_types").str.extract_all(r'"[^"]*"').list.eval(pl.element().str.strip_chars('"'))
    conc = pl.col("concrete_inputs").str.extract_all(r'"[^"]*"').list.eval(pl.element().str.strip_chars('"'))
    is_sdpa = pl.col("name") == "aten::scaled_dot_product_attention"
    four = q.list.len() == 4
    # library, serving and autograd ops take (batch, seq, heads, dim), or (tokens, heads, dim)
    # for a packed variable-length batch (no single q_len); aten's SDPA and flex (..., heads, seq, dim)
    lib = ~pl.col("name").str.starts_with("aten::") & ~pl.col("name").str.contains(FLEX_RE)
    bshd = four & (lib | pl.col("name").is_in(["aten::_flash_attention_forward",
                                                "aten::_efficient_attention_forward"]))
    thd = lib & (q.list.len() == 3)
    at = lambda x, i: x.list.get(i, null_on_oob=True)  # noqa: E731
    return roots.select(
        "call_id",
        root_op=pl.col("name"),
        batch=pl.when(four).then(at(q, 0)),
        heads=pl.when(bshd).then(at(q, 2)).when(four | thd).then(at(q, 1)),
        q_len=pl.when(bshd).then(at(q, 1)).when(~thd).then(at(q, -2)),
        head_dim=at(q, -1),
        kv_heads=pl.when(bshd & (k.list.len() == 4)).then(at(k, 2))
        .when((four & (k.list.len() == 4)) | (thd & (k.list.len() == 3))).then(at(k, 1)),
        dtype=types.list.get(0, null_on_oob=True).replace(DTYPES),
        attn_mask=pl.when(is_sdpa).then(dims.list.get(3, null_on_oob=True).str.contains(r"\d")),
        dropout_p=pl.when(is_sdpa).then(
            conc.list.get(4, null_on_oob=True).str.strip_chars().cast(F64, strict=False)
        ),
        is_causal=pl.when(is_sdpa).then(conc.list.get(5, null_on_oob=True) == "True"),
    )


def phases(trace: Trace, calls: pl.DataFrame) -> pl.DataFrame:
    """Per call: `phase` and `decode_step` from the capture's `prefill`/`decode#<i>` ranges."""
    rows = trace.ops.filter(
        (pl.col("cat") == "user_annotation") & pl.col("name").str.contains(r"^(?:prefill|decode#\d+)$")
    )
    spans = outermost(rows.select(pl.col("eid").alias("region_eid"), "name", *THREAD, "ts_ns", "end_ns"))
    spans = spans.with_columns(phase_eid=pl.col("region_eid"))
    placed = assign(calls.select("call_id", *THREAD, "ts_ns", "end_ns"), spans, key="phase_eid")
    named = placed.join(spans.select("phase_eid", "name"), on="phase_eid", how="inner")
    return named.select(
        "call_id",
        phase=pl.when(pl.col("name") == "prefill").then(pl.lit("prefill")).otherwise(pl.lit("decode")),
        decode_step=pl.col("name").str.extract(r"^decode#(\d+)$").cast(I64),
    )
