"""Op-tree helpers for rules: ancestors, GPU work under ops, eager attention chains (the
generic rules in `rules/transformer.py`; the attention analysis, `analysis/attention/`, finds
its own calls)."""

from __future__ import annotations

import polars as pl

from tracekit.analysis.intervals import stab

I64 = pl.Int64
MATMUL = r"^aten::(matmul|bmm|baddbmm|einsum)$"
SOFTMAX = r"^aten::(_?softmax|_safe_softmax)(\.int)?$"
SDPA = r"^aten::(scaled_dot_product_attention|_scaled_dot_product_attention_math)$"


def ancestor_map(nested: pl.DataFrame, eids: pl.Series, targets: pl.Series, *, outermost: bool = False,
                 max_depth: int = 256) -> pl.DataFrame:
    """(eid, root_eid): for each eid, its nearest (or outermost) ancestor-or-self in `targets`."""
    schema = {"eid": I64, "root_eid": I64}
    parent = nested.select("eid", "parent_eid").filter(pl.col("parent_eid").is_not_null())
    wanted = pl.DataFrame({"_t": targets.cast(I64)}).unique()
    cur = pl.DataFrame({"eid": eids.cast(I64)}).drop_nulls().unique().with_columns(_at=pl.col("eid"))
    found = []
    for _ in range(max_depth):
        if cur.is_empty():
            break
        hit = cur.join(wanted, left_on="_at", right_on="_t", how="semi")
        found.append(hit.select("eid", root_eid="_at"))
        if not outermost:
            cur = cur.join(hit, on="eid", how="anti")
        cur = cur.join(parent, left_on="_at", right_on="eid", how="inner").select("eid", _at="parent_eid")
    if not found:
        return pl.DataFrame(schema=schema)
    keep = "last" if outermost else "first"
    return pl.concat(found).unique("eid", keep=keep, maintain_order=True).cast(schema)


def gpu_under(links: pl.DataFrame, nested: pl.DataFrame, roots: pl.Series) -> pl.DataFrame:
    """GPU work rows launched by the `roots` ops or ops below them, with `root_eid`."""
    mapping = ancestor_map(nested, links["op_eid"].drop_nulls(), roots)
    return links.join(mapping.rename({"eid": "op_eid"}), on="op_eid", how="inner")


def eager_attention_chains(nested: pl.DataFrame, *, max_gap_ns: int) -> pl.DataFrame:
    """matmul/bmm -> softmax -> matmul/bmm on one thread, outside SDPA: one row per softmax
    with `mm1_eid`, `softmax_eid`, `mm2_eid`, `ts_ns`, `dur_ns` (first start to last end)."""
    name = pl.col("name")
    rows = nested.filter(name.str.contains(MATMUL) | name.str.contains(SOFTMAX)).sort("pid", "tid", "ts_ns", "eid")
    thread = ["pid", "tid"]
    rows = rows.with_columns(_cover=pl.col("end_ns").cum_max().shift(1).over(thread))
    rows = rows.filter(pl.col("_cover").is_null() | (pl.col("end_ns") > pl.col("_cover")))  # outermost only
    sdpa = nested.filter(name.str.contains(SDPA)).select("pid", "tid", "ts_ns", "end_ns")
    inside = stab(rows.select("eid", _p="pid", _t="tid", t="ts_ns"), sdpa).filter(
        (pl.col("_p") == pl.col("pid")) & (pl.col("_t") == pl.col("tid")))
    rows = rows.join(inside.select("eid"), on="eid", how="anti").with_columns(
        _mm=name.str.contains(MATMUL)).sort("pid", "tid", "ts_ns", "eid")

    def prev(col: str, k: int) -> pl.Expr:
        return pl.col(col).shift(k).over(thread)

    out = rows.with_columns(
        mm1_eid=prev("eid", 1), _m1=prev("_mm", 1), _e1=prev("end_ns", 1), _t1=prev("ts_ns", 1),
        mm2_eid=prev("eid", -1), _m2=prev("_mm", -1), _s2=prev("ts_ns", -1), _e2=prev("end_ns", -1),
    ).filter(~pl.col("_mm") & pl.col("_m1").fill_null(False) & pl.col("_m2").fill_null(False)
             & (pl.col("_s2") - pl.col("_e1") <= max_gap_ns))
    return out.select("mm1_eid", softmax_eid="eid", mm2_eid="mm2_eid", ts_ns="_t1", dur_ns=pl.col("_e2") - pl.col("_t1"),
                      pid="pid", tid="tid")
