"""`analyze_attention(trace) -> AttentionResult`: every attention call, its backend and cost.

The calls are found by `find` (evidence: capture ranges, module names, SDPA/flex/library
ops, the eager op pattern), measured by `calls`, then summarised here per layer, per phase
(prefill / decode, from the capture's `prefill`/`decode#<i>` ranges, else from the query
length: 1 = decode), per backend and over all calls.

Denominators: `gpu_share` is the summed GPU time of the attention scopes (the core of each
call, see `calls`) over the summed time of all GPU work (kernels, memcpys, memsets) of the
trace; overlap between streams is not removed. `range_gpu_share` uses the whole call
(module or range: projections and rotary embeddings included).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import polars as pl

from tracekit.analysis.attention import calls as ac
from tracekit.analysis.attention import inputs
from tracekit.analysis.attention.find import DEFAULT_MAX_WINDOW_NS, assign, find_calls
from tracekit.analysis.attention.result import AttentionResult
from tracekit.analysis.links import gpu_links, launch_ops, op_tree
from tracekit.analysis.nesting import OpTree, tree_of
from tracekit.analysis.occupancy import occupancy_table
from tracekit.analysis.taxonomy import classify_names
from tracekit.model import ENGINE, TEXT, Trace

I64, F64, STR = pl.Int64, pl.Float64, pl.String
SDPA_PINNED = {
    "MATH": ("sdpa_math",),
    "EFFICIENT_ATTENTION": ("sdpa_efficient",),
    "FLASH_ATTENTION": ("sdpa_flash", "sdpa_cpu_flash"),
    "CUDNN_ATTENTION": ("sdpa_cudnn",),
}
EXPECTED_BACKENDS: dict[str, tuple[str, ...]] = {
    "eager": ("eager",),
    "sdpa": ("sdpa_math", "sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_cpu_flash", "sdpa_other"),
    "flash_attention_2": ("flash_attn",),
    "flash_attention_3": ("flash_attn",),
    "flex_attention": ("flex",),
}
STAT_METRICS = ("gpu_events", "gpu_ns", "cpu_ns", "launch_api_ns", "range_gpu_ns", "range_cpu_ns")
FUSED_SOFTMAX = (
    "sdpa_flash",
    "sdpa_efficient",
    "sdpa_cudnn",
    "sdpa_cpu_flash",
    "flash_attn",
    "flex",
    "ck",
    "aiter",
)


def analyze_attention(
    trace: Trace,
    *,
    max_window_ns: int = DEFAULT_MAX_WINDOW_NS,
    ops: pl.DataFrame | OpTree | None = None,
    launches: pl.DataFrame | None = None,
    links: pl.DataFrame | None = None,
    classes: pl.DataFrame | None = None,
) -> AttentionResult:
    """Find and measure every attention call of `trace` (see the module docstring).

    `ops` (`links.cpu_ops` or `links.op_tree`), `launches` (`links.launch_ops`) and `links`
    (`links.gpu_links`), `classes` (`taxonomy.classify_names` of the GPU names) may be passed
    in when the caller has them already; `max_window_ns`
    bounds an eager matmul -> softmax -> matmul chain.
    """
    tree = op_tree(trace) if ops is None else tree_of(ops)
    ops = tree.frame
    calls, cores = find_calls(trace, ops, max_window_ns=max_window_ns)
    scoped = ac.scopes(calls, cores)
    if links is None:
        links = gpu_links(trace, launches=launch_ops(trace, ops=tree) if launches is None else launches)
    del tree
    placed_in = trace
    if scoped.is_empty():  # no call: the per-call steps run on no rows (the same typed frames, at no cost)
        placed_in = replace(trace, ops=trace.ops.clear(), runtime=trace.runtime.clear())
        ops, links = ops.clear(), links.clear()
    in_scope_ops = ac.scope_ops(ops, scoped)
    events = ac.with_stages(ac.gpu_events(links, ops, scoped, classes=classes), in_scope_ops)
    has_gpu = trace.gpu_work.height > 0
    requested = capture_request(trace)
    table = _finish(scoped, events, in_scope_ops, ops, placed_in, has_gpu=has_gpu)
    table = _declared_flex(table, requested).join(_steps(placed_in, scoped), on="call_id", how="left")
    attention_kernels = _attention_kernels(trace, classes)
    orphans = attention_kernels.join(events.select("eid"), on="eid", how="anti")
    return AttentionResult(
        calls=table,
        events=events.sort("call_id", "ts_ns"),
        by_layer=_by_layer(table),
        by_phase=_by_phase(table),
        by_backend=_by_backend(table),
        stats=_stats(table),
        occupancy=occupancy_table(
            events.filter(pl.col("in_scope") & (pl.col("cat") == "kernel")), trace.meta.devices
        ),
        has_gpu=has_gpu,
        gpu_total_ns=int(trace.gpu_work["dur_ns"].sum() or 0),
        attention_gpu_ns=int(table["gpu_ns"].sum() or 0),
        range_gpu_ns=int(table["range_gpu_ns"].sum() or 0),
        attention_kernel_ns=int(attention_kernels["dur_ns"].sum() or 0),
        orphan_kernels=orphans.height,
        orphan_ns=int(orphans["dur_ns"].sum() or 0),
        requested=requested,
        warnings=tuple(backend_warnings(requested, table) + _leak_warnings(events, ops, scoped)),
    )


def _declared_flex(table: pl.DataFrame, requested: dict[str, Any]) -> pl.DataFrame:
    """Calls whose only core is a compiled region are flex when the capture declared
    flex_attention (on CPU flex runs as a compiled region with no flex-named op)."""
    if requested.get("requested") != "flex_attention" or table.is_empty():
        return table
    hit = (pl.col("core_kind") == "compiled") & (pl.col("backend") == "unknown")
    return table.with_columns(
        backend=pl.when(hit).then(pl.lit("flex")).otherwise("backend"),
        backend_source=pl.when(hit).then(pl.lit("compiled region + metadata")).otherwise("backend_source"),
    )


def _steps(trace: Trace, scoped: pl.DataFrame) -> pl.DataFrame:
    """Per call: `step`, the N of the `ProfilerStep#N` range holding it (null outside one)."""
    rows = trace.ops.filter(
        (pl.col("cat") == "user_annotation") & pl.col("name").str.contains(r"^ProfilerStep#\d+$")
    )
    spans = rows.select(
        pl.col("name").str.extract(r"(\d+)$").cast(I64).alias("step"), "pid", "tid", "ts_ns", "end_ns"
    )
    schema = {"call_id": I64, "step": I64}
    if spans.is_empty() or scoped.is_empty():
        return pl.DataFrame(schema=schema)
    placed = assign(scoped.select("call_id", "pid", "tid", "ts_ns", "end_ns"), spans, key="step")
    return placed.select("call_id", "step").cast(schema)


def _leak_warnings(events: pl.DataFrame, ops: pl.DataFrame, scoped: pl.DataFrame) -> list[str]:
    """The scope invariant (`calls.projection_leaks`): said, should it ever fail."""
    leaks = ac.projection_leaks(events, ops, scoped)
    if leaks.is_empty():
        return []
    return [f"{leaks.height} GEMM kernel(s) of {', '.join(sorted(set(leaks['projection_op'])))} outside an "
            "attention core were counted as attention work"]


def _finish(
    scoped: pl.DataFrame,
    events: pl.DataFrame,
    in_scope_ops: pl.DataFrame,
    ops: pl.DataFrame,
    trace: Trace,
    *,
    has_gpu: bool,
) -> pl.DataFrame:
    """One row per call with every per-call column."""
    table = (
        scoped.join(ac.gpu_metrics(events), on="call_id", how="left")
        .join(ac.cpu_metrics(trace, scoped), on="call_id", how="left")
        .join(ac.op_metrics(in_scope_ops), on="call_id", how="left")
        .join(inputs.input_metrics(ops, scoped), on="call_id", how="left")
        .join(inputs.phases(trace, scoped), on="call_id", how="left")
    )
    counts = [
        c
        for c in table.columns
        if c.endswith(("_events", "_kernels", "_ops", "_copies"))
        or c.startswith("stage_")
        or c in ("kernels", "memcpys", "memsets", "launches", "gemm_simt", "cpu_ops")
    ]
    gpu_times = ["gpu_ns", "mask_ns", "copy_ns", "gemm_ns", "gemm_simt_ns", "range_gpu_ns"]
    table = table.with_columns(
        *(pl.col(c).fill_null(0).cast(I64) for c in counts),
        *(pl.col(c).fill_null(0) if has_gpu else pl.lit(None, I64).alias(c) for c in gpu_times),
        pl.col("runtime_ns").fill_null(0),
        pl.col("launch_api_ns").fill_null(0),
        range_cpu_ns=pl.col("end_ns") - pl.col("ts_ns"),
        cpu_ns=pl.col("scope_end_ns") - pl.col("scope_ts_ns"),
        gpu_span_ns=pl.col("gpu_end_ns") - pl.col("gpu_start_ns"),
    ).with_columns(backend=ac.backend_expr(), backend_source=ac.backend_source())
    return _derived(table)


def _derived(table: pl.DataFrame) -> pl.DataFrame:
    """Softmax variant, tensor-core use of the GEMMs, and the phase (from ranges, else the
    query length, else a serving op's name: `aiter::mha_batch_prefill`, `..._decode`)."""
    root = pl.col("root_op").fill_null("")
    by_name = (
        pl.when(root.str.contains(r"(?i)prefill")).then(pl.lit("prefill"))
        .when(root.str.contains(r"(?i)decode")).then(pl.lit("decode"))
    )
    return (
        table.with_columns(
            softmax=pl.coalesce(
                "softmax_op", pl.when(pl.col("backend").is_in(FUSED_SOFTMAX)).then(pl.lit("fused"))
            ),
            gemm_tensor_cores=pl.when(pl.col("gemm_kernels") > 0).then(pl.col("gemm_simt") == 0),
            phase_source=pl.when(pl.col("phase").is_not_null())
            .then(pl.lit("range"))
            .when(pl.col("q_len").is_not_null())
            .then(pl.lit("shape"))
            .when(by_name.is_not_null())
            .then(pl.lit("op name")),
            phase=pl.coalesce(
                "phase",
                pl.when(pl.col("q_len") == 1)
                .then(pl.lit("decode"))
                .when(pl.col("q_len") > 1)
                .then(pl.lit("prefill")),
                by_name,
            ),
        )
        .drop("softmax_op")
        .sort("call_id")
    )


def _attention_kernels(trace: Trace, known: pl.DataFrame | None) -> pl.DataFrame:
    # (the three columns filtered: `Trace.kernels` copied every column of every kernel first)
    kernels = trace.gpu.lazy().filter(pl.col("cat") == "kernel").select("eid", "name", "dur_ns").collect(engine=ENGINE)
    classes = classify_names(kernels["name"], classes=known).filter(pl.col("kernel_class") == "attention").select("name")
    return kernels.join(classes, on="name", how="semi")


def capture_request(trace: Trace) -> dict[str, Any]:
    """What the capture asked for (`tracekit_capture` metadata): implementation, SDPA backend."""
    meta = trace.meta.extra.get("tracekit_capture") or {}
    if not isinstance(meta, dict):
        return {}
    requested = meta.get("attn_implementation_requested") or meta.get("attn_implementation")
    pinned = meta.get("sdpa_backend")
    expected = SDPA_PINNED.get(str(pinned)) if pinned else EXPECTED_BACKENDS.get(str(requested))
    return {
        "variant": meta.get("variant"),
        "requested": requested,
        "actual": meta.get("attn_implementation"),
        "sdpa_backend": pinned,
        "expected_backends": list(expected) if expected else None,
        "dtype": meta.get("dtype"),
        "device": meta.get("device"),
        "model": (meta.get("model") or {}).get("id")
        if isinstance(meta.get("model"), dict)
        else meta.get("model"),
    }


def backend_warnings(requested: dict[str, Any], calls: pl.DataFrame) -> list[str]:
    """Where what ran differs from what the capture asked for."""
    out = []
    asked, actual = requested.get("requested"), requested.get("actual")
    if asked and actual and asked != actual:
        out.append(f"the capture asked for attn_implementation={asked!r}, the model ran with {actual!r}")
    expected = requested.get("expected_backends")
    seen = sorted(set(calls["backend"].to_list()) - {"unknown"}) if calls.height else []
    unexpected = [b for b in seen if expected and b not in expected]
    what = f"sdpa_kernel({requested['sdpa_backend']})" if requested.get("sdpa_backend") else repr(asked)
    if unexpected:
        out.append(
            f"asked for {what}; the trace shows {', '.join(unexpected)} "
            f"(expected {', '.join(expected or [])})"
        )
    unknown = int((calls["backend"] == "unknown").sum()) if calls.height else 0
    if expected and unknown:
        out.append(
            f"asked for {what}; {unknown} of {calls.height} calls show no recognisable backend "
            f"(expected {', '.join(expected)}): their times are of the whole call, not of attention"
        )
    return out


def _med(col: str) -> pl.Expr:
    return pl.col(col).median().alias(f"{col}_median")


def _by_layer(calls: pl.DataFrame) -> pl.DataFrame:
    rows = calls.filter(pl.col("layer").is_not_null())
    return (
        rows.group_by("layer")
        .agg(
            *(_med(c) for c in ("gpu_events", "gpu_ns", "cpu_ns")),
            calls=pl.len().cast(I64),
            backend=pl.col("backend").mode().sort().first(),
            gpu_ns_total=pl.col("gpu_ns").sum(),
        )
        .sort("layer")
    )


def _by_phase(calls: pl.DataFrame) -> pl.DataFrame:
    return (
        calls.with_columns(pl.col("phase").fill_null("unknown"))
        .group_by("phase")
        .agg(
            *(_med(c) for c in ("gpu_events", "gpu_ns", "cpu_ns", "launch_api_ns")),
            calls=pl.len().cast(I64),
            steps=pl.col("decode_step").drop_nulls().n_unique().cast(I64),
            gpu_ns_total=pl.col("gpu_ns").sum(),
            cpu_ns_total=pl.col("cpu_ns").sum(),
            cpu_above_gpu=(pl.col("cpu_ns") > pl.col("gpu_ns")).sum().cast(I64),
        )
        .sort("phase")
    )


def _by_backend(calls: pl.DataFrame) -> pl.DataFrame:
    return (
        calls.group_by("backend")
        .agg(
            *(_med(c) for c in ("gpu_events", "gpu_ns", "cpu_ns")),
            calls=pl.len().cast(I64),
            gpu_ns_total=pl.col("gpu_ns").sum(),
        )
        .sort(["calls", "backend"], descending=[True, False])
    )


def _stats(calls: pl.DataFrame) -> pl.DataFrame:
    schema = {
        "metric": STR,
        "count": I64,
        "mean": F64,
        "median": F64,
        "p10": F64,
        "p90": F64,
        "min": F64,
        "max": F64,
    }
    parts = []
    for metric in STAT_METRICS:
        c = pl.col(metric).drop_nulls().cast(F64)
        parts.append(
            calls.select(
                metric=pl.lit(metric),
                count=c.len().cast(I64),
                mean=c.mean(),
                median=c.median(),
                p10=c.quantile(0.1, "linear"),
                p90=c.quantile(0.9, "linear"),
                min=c.min(),
                max=c.max(),
            )
        )
    return pl.concat(parts).cast(schema) if parts else pl.DataFrame(schema=schema)


def critical_path_share(result: AttentionResult, path: Any) -> dict[str, Any]:
    """How much of a critical path (`critical_path.critical_path(trace)`) is attention.

    Counted: GPU segments of the attention scopes' GPU work (by eid), and host segments
    that start inside a call's scope on the call's thread. `share` is of the path's window.
    """
    segs = path.segments
    in_scope = result.events.filter(pl.col("in_scope")).select("eid")
    # the lanes' text is read once per distinct lane (the path holds them as a Categorical)
    lanes = segs.select(pl.col("lane").unique()).drop_nulls().with_columns(
        _text=pl.col("lane").cast(pl.String))
    text = pl.col("_text")
    gpu_lanes = lanes.filter(text.str.starts_with("gpu:"))["lane"]
    cpu_lanes = lanes.filter(text.str.starts_with("cpu:")).select(
        "lane", pid=text.str.extract(r"^cpu:([^:]*):", 1).cast(TEXT),
        tid=text.str.extract(r"^cpu:[^:]*:(.*)$", 1).cast(TEXT))
    gpu = segs.filter(pl.col("lane").is_in(gpu_lanes.implode())).join(in_scope, on="eid", how="semi")
    host = segs.join(cpu_lanes, on="lane", how="inner", maintain_order="left")
    host = assign(host, result.calls, at="start_ns", span_start="scope_ts_ns", span_end="scope_end_ns")
    gpu_ns = int(gpu["dur_ns"].sum() or 0)
    host_ns = int(host.filter(pl.col("call_id").is_not_null())["dur_ns"].sum() or 0)
    window = int(path.window_ns)
    return {
        "window_ns": window,
        "attention_ns": gpu_ns + host_ns,
        "gpu_ns": gpu_ns,
        "host_ns": host_ns,
        "share": (gpu_ns + host_ns) / window if window else None,
    }
