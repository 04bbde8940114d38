"""The delta frames of a diff: per-step figures, kernels, classes, ops, launches, syncs,
copies and annotation windows. Each compares per-window samples of two `Profile`s with
`stats.compare` (medians per step, spread, significance); see the package docstring."""

from __future__ import annotations

import polars as pl

from tracekit.diff import stats
from tracekit.diff.names import match_keys
from tracekit.diff.profile import (
    COPY_VALUES,
    KERNEL_VALUES,
    LAUNCH_VALUES,
    OP_VALUES,
    STEP_VALUES,
    SYNC_VALUES,
    Profile,
)

I64, F64, STR = pl.Int64, pl.Float64, pl.String
FIGURE_LABELS: dict[str, str] = {
    "step_ns": "step time", "gpu_busy_ns": "GPU busy within the step", "gpu_idle_ns": "GPU idle",
    "idle_launch_bound_ns": "idle: launch-bound (CPU late)", "idle_cpu_work_ns": "idle: CPU work",
    "idle_sync_stall_ns": "idle: sync stall", "idle_cross_stream_wait_ns": "idle: cross-stream wait",
    "idle_profiler_overhead_ns": "idle: profiler overhead", "idle_before_first_ns": "idle: before first",
    "idle_after_last_ns": "idle: after last", "idle_other_ns": "idle: other", "idle_short_ns": "idle: short gaps",
    "compute_ns": "compute", "communication_ns": "exposed communication", "memory_ns": "memory (copies only)",
    "kernels": "kernels", "kernel_ns": "kernel time (summed)", "gpu_events": "GPU activities",
    "launches": "launch calls", "launch_api_ns": "launch API time (CPU)", "syncs": "blocking syncs",
    "sync_ns": "time blocked in syncs", "memcpys": "memcpys", "memcpy_bytes": "bytes copied",
    "memcpy_ns": "memcpy time", "memsets": "memsets",
}


def _unit(figure: pl.Expr) -> pl.Expr:
    return (pl.when(figure.str.ends_with("_ns")).then(pl.lit("ns"))
            .when(figure.str.ends_with("_bytes")).then(pl.lit("bytes")).otherwise(pl.lit("count")))


def summary(b: Profile, a: Profile) -> pl.DataFrame:
    """One row per per-step figure (STEP_VALUES): medians, spread, delta, significance."""
    def side(p: Profile) -> pl.DataFrame:
        long = p.steps.unpivot(index="window_eid", on=list(STEP_VALUES), variable_name="figure")
        return stats.summarise(long, ["figure"], ["value"])

    out = stats.compare(side(b), side(a), ["figure"], ["value"], spread_columns=True)
    out = out.rename({c: c.removeprefix("value_") for c in out.columns if c.startswith("value_")})
    order = {f: i for i, f in enumerate(STEP_VALUES)}
    out = out.with_columns(label=pl.col("figure").replace_strict(FIGURE_LABELS, default=pl.col("figure")),
                           unit=_unit(pl.col("figure")),
                           _order=pl.col("figure").replace_strict(order, default=len(order), return_dtype=I64))
    first = ["figure", "label", "unit", "n_before", "n_after", "before", "after", "delta", "delta_pct", "noise",
             "significant"]
    return out.sort("_order").select(first + [c for c in out.columns if c not in first and c != "_order"])


def _keyed(b: Profile, a: Profile, attr: str, values: tuple[str, ...], *, sort: str) -> pl.DataFrame:
    fb, fa = getattr(b, attr), getattr(a, attr)
    sb = stats.summarise(stats.zero_filled(fb, b.window_ids, ["key"], values), ["key"], values)
    sa = stats.summarise(stats.zero_filled(fa, a.window_ids, ["key"], values), ["key"], values)
    out = stats.compare(sb, sa, ["key"], values, n_before=len(b.window_ids), n_after=len(a.window_ids))
    first = values[0]
    status = (pl.when(pl.col(f"{first}_before_sum") == 0).then(pl.lit("appeared"))
              .when(pl.col(f"{first}_after_sum") == 0).then(pl.lit("disappeared")).otherwise(pl.lit("matched")))
    return out.with_columns(status=status).sort(pl.col(f"{sort}_delta").abs(), "key", descending=[True, False])


def kernels(b: Profile, a: Profile) -> pl.DataFrame:
    """Per kernel (matched by `names.kernel_key`, then by a unique base): per-step count and
    time (medians), mean time per call over the counted steps, status, significance."""
    mapping = match_keys(b.kernel_names, a.kernel_names)
    remap = {r["after_key"]: r["before_key"] for r in mapping.iter_rows(named=True)}
    a_long = a.kernels.with_columns(key=pl.col("key").replace(remap))
    a_names = a.kernel_names.with_columns(key=pl.col("key").replace(remap))
    out = _keyed(b, _with(a, kernels=a_long), "kernels", KERNEL_VALUES, sort="total_ns")
    names_b = b.kernel_names.select("key", name_before="name", _cls_b="kernel_class")
    names_a = a_names.select("key", name_after="name", _cls_a="kernel_class")
    out = out.join(names_b, on="key", how="left").join(names_a, on="key", how="left")
    mean = {s: pl.when(pl.col(f"count_{s}_sum") > 0).then(pl.col(f"total_ns_{s}_sum") / pl.col(f"count_{s}_sum"))
            for s in ("before", "after")}
    match = (pl.when(pl.col("key").is_in(list(remap.values()))).then(pl.lit("base"))
             .when(pl.col("status") == "matched").then(pl.lit("exact")))
    out = out.with_columns(kernel_class=pl.coalesce("_cls_b", "_cls_a"), match=match,
                           mean_ns_before=mean["before"], mean_ns_after=mean["after"])
    out = out.with_columns(mean_ns_delta=pl.col("mean_ns_after") - pl.col("mean_ns_before"))
    lead = ["key", "name_before", "name_after", "kernel_class", "status", "match"]
    return out.select(lead + [c for c in out.columns if c not in lead and not c.startswith("_")])


def kernel_classes(b: Profile, a: Profile) -> pl.DataFrame:
    """Per kernel class: per-step count and time (medians)."""
    def by_class(p: Profile) -> pl.DataFrame:
        cls = p.kernels.join(p.kernel_names.select("key", "kernel_class"), on="key", how="left")
        return cls.group_by("window_eid", pl.col("kernel_class").fill_null("other").alias("key")).agg(
            count=pl.col("count").sum(), total_ns=pl.col("total_ns").sum())

    out = _keyed(_with(b, kernels=by_class(b)), _with(a, kernels=by_class(a)), "kernels", KERNEL_VALUES,
                 sort="total_ns")
    return out.rename({"key": "kernel_class"})


def ops(b: Profile, a: Profile) -> pl.DataFrame:
    """Per CPU op name (addresses and hashes normalised): per-step calls, CPU and GPU time;
    `change_ns` is the larger (in size) of the CPU and inclusive-GPU deltas, `significant`
    whether either is beyond the noise."""
    out = _keyed(b, a, "ops", OP_VALUES, sort="gpu_incl_ns")
    names = pl.concat([b.op_names, a.op_names]).unique("key", keep="first")
    cpu, gpu = pl.col("cpu_ns_delta"), pl.col("gpu_incl_ns_delta")
    change = pl.when(cpu.abs() > gpu.abs()).then(cpu).otherwise(gpu)
    either = pl.col("cpu_ns_significant") | pl.col("gpu_incl_ns_significant")  # Kleene: null only if unknown
    out = out.join(names, on="key", how="left").with_columns(change_ns=change, significant=either)
    return out.sort(pl.col("change_ns").abs(), "key", descending=[True, False])


def launches(b: Profile, a: Profile) -> pl.DataFrame:
    return _keyed(b, a, "launches", LAUNCH_VALUES, sort="api_ns").rename({"key": "api"})


def syncs(b: Profile, a: Profile) -> pl.DataFrame:
    return _keyed(b, a, "syncs", SYNC_VALUES, sort="blocked_ns").rename({"key": "call"})


def copies(b: Profile, a: Profile) -> pl.DataFrame:
    return _keyed(b, a, "copies", COPY_VALUES, sort="dur_ns").rename({"key": "activity"})


def windows(b: Profile, a: Profile) -> pl.DataFrame:
    """Per annotation kind (`ProfilerStep`, every record_function name): one sample per
    instance (warm-up excluded), medians of CPU time, GPU projection and GPU busy."""
    values = ("cpu_ns", "gpu_ns", "gpu_busy_ns")

    def side(p: Profile) -> pl.DataFrame:
        inst = p.analysis.windows.instances.filter(~pl.col("warmup"))
        return stats.summarise(inst.rename({"kind": "key"}), ["key"], values)

    out = stats.compare(side(b), side(a), ["key"], values)
    return out.rename({"key": "kind"}).sort(pl.col("cpu_ns_delta").abs(), "kind", descending=[True, False])


def window_samples(p: Profile, name: str) -> pl.DataFrame:
    """CPU times of the annotation instances matching `name` (exact name, else kind, else a
    regular expression searched in the name), warm-up excluded: columns `name`, `cpu_ns`."""
    inst = p.analysis.windows.instances.filter(~pl.col("warmup"))
    for rule in (pl.col("name") == name, pl.col("kind") == name):
        chosen = inst.filter(rule)
        if chosen.height:
            return chosen.select("name", "cpu_ns")
    try:
        return inst.filter(pl.col("name").str.contains(name)).select("name", "cpu_ns")
    except pl.exceptions.ComputeError:
        return inst.clear().select("name", "cpu_ns")


def _with(p: Profile, **frames: pl.DataFrame) -> Profile:
    from dataclasses import replace

    return replace(p, **frames)
