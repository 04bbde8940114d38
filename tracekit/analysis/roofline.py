"""Roofline: how far each op and kernel is from what the GPU can do.

For every op call with known work (`work.op_work`) and the GPU time of the work it
launched (`links.gpu_links`), with the device's ceilings (`ceilings.py`), in the units
named by the columns (`docs/roofline.md` has the long form):

- `achieved_tflops` = FLOPs / GPU time, `achieved_gbps` = minimum bytes / GPU time;
- `intensity` = FLOPs / byte; `ridge` = peak FLOP/s / peak bytes/s; `bound` = compute if
  intensity >= ridge, else memory;
- `min_ns` = max(FLOPs / peak FLOP/s, bytes / peak bandwidth): the roofline's time;
  `efficiency` = min_ns / GPU time = achieved / min(peak, intensity x bandwidth);
  `time_lost_ns` = max(0, GPU time - min_ns) ("time left on the table").

Shapes left out of every total (`excluded`, with `reason`): `unknown` where the formula
needs an argument the trace does not record (`work.py`: a conv's stride), and `model
mismatch` where the shape's min_ns exceeds its GPU time (above 100 % of the ceiling cannot
happen: the counted work overstates what ran). The headline loss is the sum of the kept
shapes' losses, never netted against a negative one; its efficiency is min_ns / GPU time
over the kept shapes.

Which op carries the work: an op with known work carries it unless one of its descendant
ops also has known work (the innermost known op wins: `aten::linear` -> `aten::addmm`,
`scaled_dot_product_attention` -> `_flash_attention_forward`, `aten::clone` ->
`aten::copy_`), so FLOPs are never counted twice through the op tree. All GPU work
launched by a carrier or by ops below it is its GPU time: kernels, memsets and
device-to-device copies (host<->device and peer copies are bounded by the link, not by HBM,
and are left out); a call with no kernel counts only if it is a copy/fill. Per kernel, a
carrier's work is split over its kernels by time share, so every kernel of one call shows
the call's achieved rate; the call's memsets and copies get no work (0 % efficiency: they
are its overhead). GPU time is summed activity time: kernels overlapping on two streams
count twice. `roofline_findings` (its own module) turns the result into findings data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from tracekit.analysis.ceilings import device_ceilings
from tracekit.analysis.links import gpu_links, op_tree
from tracekit.analysis.nesting import OpTree, ancestors, frame_of
from tracekit.analysis.work import KEYS, TENSOR_CLASSES, op_work
from tracekit.model import ENGINE, Trace

try:  # the kernel taxonomy is optional: without it kernel classes read "other"
    from tracekit.analysis.taxonomy import classify_names
except ImportError:  # pragma: no cover
    classify_names = None  # type: ignore[assignment]

RATE_COLUMNS = ["achieved_tflops", "achieved_gbps", "intensity", "peak_tflops", "peak_gbps", "ridge",
                "bound", "attainable_tflops", "min_ns", "efficiency", "time_lost_ns"]
CALL_COLUMNS = ["eid", *KEYS, "pid", "tid", "ts_ns", "work_class", "compute_dtype", "causal", "flops",
                "profiler_flops", "flops_source", "bytes", "device", "gpu_ns", "gpu_events", "top_kernel",
                "kernel_precision", "kernel_tensor_cores", "peak_bf16_tflops", "covered_ns", "rated_ns",
                *RATE_COLUMNS, "excluded", "reason"]
# an op shape: the rows of `RooflineResult.ops`; a model mismatch is decided per shape
SHAPE_KEYS = ["name", "input_dims", "input_types", "concrete_inputs", "work_class", "compute_dtype", "causal"]


@dataclass(frozen=True)
class RooflineResult:
    """Result of `roofline`. Frames are typed and sorted by GPU time (largest first)."""

    calls: pl.DataFrame  # one row per op call carrying work, or of unknown work (CALL_COLUMNS)
    ops: pl.DataFrame  # per op shape (SHAPE_KEYS): the table to read; `excluded`/`reason` per shape
    op_types: pl.DataFrame  # per op name
    kernels: pl.DataFrame  # per kernel name: work split by time share; covered_ns < gpu_ns if partly unknown
    classes: pl.DataFrame  # per kernel class (taxonomy)
    devices: pl.DataFrame  # the ceilings used, per device (ceilings.CEILINGS_SCHEMA)
    gpu_ns: int  # all GPU work considered (kernels, memsets, device-to-device copies)
    covered_ns: int  # of which under an op with known work (excluded shapes not counted)
    unlinked_ns: int  # of which tied to no CPU op (the rest of the uncovered time: ops without a formula)
    rated_ns: int  # of which also with known ceilings (the denominator of `efficiency`)
    min_ns: float  # roofline time of the rated work
    flops: float
    bytes: float
    notes: tuple[str, ...] = ()

    @property
    def coverage(self) -> float | None:
        return self.covered_ns / self.gpu_ns if self.gpu_ns else None

    @property
    def efficiency(self) -> float | None:
        """Roofline time / GPU time over the kept shapes (at most 1)."""
        return self.min_ns / self.rated_ns if self.rated_ns else None

    @property
    def time_lost_ns(self) -> float:
        """The sum of the kept shapes' losses, each max(0, GPU time - min_ns)."""
        return float(self.ops["time_lost_ns"].sum() or 0.0)

    @property
    def excluded(self) -> pl.DataFrame:
        """The op shapes left out of every total, with `excluded` and `reason`."""
        return self.ops.filter(pl.col("excluded").is_not_null())

    @property
    def excluded_ns(self) -> int:
        return int(self.excluded["gpu_ns"].sum() or 0)

    def top_lost(self, n: int = 10) -> pl.DataFrame:
        """The op shapes with the most time left on the table."""
        return self.ops.filter(pl.col("time_lost_ns") > 0).sort(
            ["time_lost_ns", "name"], descending=[True, False], nulls_last=True).head(n)


def roofline(trace: Trace, *, peak_tflops: float | Mapping[str, float] | None = None,
             peak_gbps: float | None = None, ops: pl.DataFrame | OpTree | None = None,
             links: pl.DataFrame | None = None, classes: pl.DataFrame | None = None) -> RooflineResult:
    """Place every op call with known work on its device's roofline; see the module doc.

    `peak_tflops` (one figure for every dtype, or a mapping dtype -> TFLOP/s with keys
    fp32, fp32_matrix, tf32, bf16, fp16, fp8) and `peak_gbps` override the device table.
    `ops` (`links.op_tree`), `links` (`links.gpu_links`), `classes` (`taxonomy.classify_names`
    of the GPU names): computed when not given.
    """
    tree = op_tree(trace) if ops is None else ops
    links = gpu_links(trace, ops=tree) if links is None else links
    work = op_work(frame_of(tree).select("eid", "parent_eid", *KEYS, "pid", "tid", "ts_ns", "flops"))
    del tree, ops
    carrier_of = _carrier_map(work)
    rows = _gpu_rows(links, classes).join(carrier_of, left_on="op_eid", right_on="eid", how="left")
    device_ids = rows["device"].drop_nulls().unique().to_list()
    ceilings, notes = device_ceilings(trace.meta.devices, device_ids=device_ids,
                                      peak_tflops=peak_tflops, peak_gbps=peak_gbps)
    if work["input_dims"].is_null().all():
        notes.append("no op carries recorded shapes (profile with record_shapes=True): no work is known")
    calls = _calls(work, rows, ceilings)
    krows = _kernel_rows(rows, calls)
    gpu_ns = int(krows["gpu_ns"].sum())
    covered, rated = int(krows["covered_ns"].sum()), int(krows["rated_ns"].sum())
    return RooflineResult(
        calls=calls.sort(["gpu_ns", "eid"], descending=[True, False]),
        ops=_by_keys(calls, SHAPE_KEYS, "calls"),
        op_types=_by_keys(calls, ["name", "work_class"], "calls"),
        kernels=_by_keys(krows, ["kernel", "kernel_class"], "count"),
        classes=_by_keys(krows, ["kernel_class"], "count"),
        devices=ceilings, gpu_ns=gpu_ns, covered_ns=covered, rated_ns=rated,
        unlinked_ns=int(krows.filter(pl.col("op_eid").is_null())["gpu_ns"].sum()),
        min_ns=float(krows["min_ns"].sum()), flops=float(krows["flops"].sum()),
        bytes=float(krows["bytes"].sum()), notes=tuple(notes),
    )


def _carrier_map(work: pl.DataFrame) -> pl.DataFrame:
    """(eid, carrier_eid): every op that is a carrier or lies below one.

    Known work carries first (innermost known op); an op of unknown work (`unknown_reason`)
    carries its kernels only where no op with known work is above or below it, so that the
    time shows as unknown instead of vanishing into the uncovered rest."""
    known = work.filter(pl.col("flops").is_not_null()).select("eid")
    unknown = work.filter(pl.col("flops").is_null() & pl.col("unknown_reason").is_not_null()).select("eid")
    if known.is_empty() and unknown.is_empty():  # (the ops' closure, large, is not needed)
        return pl.DataFrame(schema={"eid": work.schema["eid"], "carrier_eid": work.schema["eid"]})
    pairs = ancestors(work)

    def innermost(cands: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        above = pairs.join(cands, on="eid", how="semi").select(pl.col("ancestor_eid").alias("eid")).unique()
        carriers = cands.join(above, on="eid", how="anti")
        below = pairs.join(carriers.rename({"eid": "ancestor_eid"}), on="ancestor_eid", how="semi")
        return carriers, below, above

    carriers, below, above = innermost(known)
    parts = [carriers.with_columns(carrier_eid=pl.col("eid")),
             below.select("eid", pl.col("ancestor_eid").alias("carrier_eid"))]
    unknown = unknown.join(pl.concat([carriers, below.select("eid"), above]), on="eid", how="anti")
    if not unknown.is_empty():
        u_carriers, u_below, _ = innermost(unknown)
        parts += [u_carriers.with_columns(carrier_eid=pl.col("eid")),
                  u_below.select("eid", pl.col("ancestor_eid").alias("carrier_eid"))]
    return pl.concat(parts)


def _gpu_rows(links: pl.DataFrame, classes: pl.DataFrame | None) -> pl.DataFrame:
    """GPU work that HBM bounds: kernels, memsets, device-to-device copies, with taxonomy."""
    # lazy: the filter copies only the columns kept (eager, every column of the GPU links)
    rows = links.lazy().filter(
        (pl.col("cat") != "gpu_memcpy") | pl.col("name").str.contains(r"(?i)\bDtoD\b")
    ).select("eid", pl.col("name").alias("kernel"), "cat", "device", "ts_ns", "dur_ns", "op_eid").collect(
        engine=ENGINE)
    classes = _taxonomy(rows["kernel"], classes).drop("attention_backend")
    return rows.join(classes, on="kernel", how="left").with_columns(pl.col("kernel_class").fill_null("other"))


def _taxonomy(names: pl.Series, classes: pl.DataFrame | None = None) -> pl.DataFrame:
    schema = {"kernel": pl.String, "kernel_class": pl.String, "kernel_precision": pl.String,
              "kernel_tensor_cores": pl.Boolean, "attention_backend": pl.String}
    if classify_names is None or names.drop_nulls().is_empty():
        return pl.DataFrame(schema=schema)
    c = classify_names(names, classes=classes).rename({"name": "kernel", "precision": "kernel_precision",
                                      "tensor_cores": "kernel_tensor_cores"})
    return c.select(list(schema)).cast(schema)


def _calls(work: pl.DataFrame, rows: pl.DataFrame, ceilings: pl.DataFrame) -> pl.DataFrame:
    per = rows.lazy().filter(pl.col("carrier_eid").is_not_null()).group_by("carrier_eid").agg(
        gpu_ns=pl.col("dur_ns").sum(), gpu_events=pl.len(), device=pl.col("device").min(),
        _kernels=(pl.col("cat") == "kernel").sum(),
        top_kernel=pl.col("kernel").sort_by("dur_ns", descending=True).first(),
        kernel_precision=pl.col("kernel_precision").sort_by("dur_ns", descending=True).first(),
        kernel_tensor_cores=pl.col("kernel_tensor_cores").sort_by("dur_ns", descending=True).first(),
    )
    # a call with no kernel is measured only if it is a copy/fill (memset, DtoD copy): a GEMM whose
    # only GPU row is its workspace memset (kernels lost, e.g. a sampled trace) says nothing
    calls = work.lazy().join(per, left_on="eid", right_on="carrier_eid", how="inner", maintain_order="left").filter(
        (pl.col("gpu_ns") > 0) & ((pl.col("_kernels") > 0) | (pl.col("work_class") == "copy")))
    calls = calls.with_columns(compute_dtype=pl.when(
        (pl.col("compute_dtype") == "fp32") & (pl.col("kernel_precision") == "tf32")).then(pl.lit("tf32"))
        .otherwise("compute_dtype")).join(ceilings.lazy(), on="device", how="left", maintain_order="left")
    dtype, tensor = pl.col("compute_dtype"), pl.col("work_class").is_in(TENSOR_CLASSES)
    peak = (pl.when(~tensor).then("fp32").when(dtype == "bf16").then("bf16").when(dtype == "fp16")
            .then("fp16").when(dtype == "fp8").then("fp8").when(dtype == "tf32").then("tf32")
            .when(dtype == "fp32").then(pl.coalesce("fp32_matrix", "fp32")))
    calls = calls.with_columns(peak_tflops=peak, peak_gbps="hbm_gbps", peak_bf16_tflops="bf16")
    flops, nbytes = pl.col("flops"), pl.col("bytes")
    compute_ns = pl.when(flops == 0).then(0.0).otherwise(flops / (pl.col("peak_tflops") * 1e3))
    memory_ns = pl.when(nbytes.is_null()).then(0.0).otherwise(nbytes / pl.col("peak_gbps"))
    calls = calls.with_columns(min_ns=pl.when(compute_ns.is_null() | memory_ns.is_null()).then(None)
                               .otherwise(pl.max_horizontal(compute_ns, memory_ns)))
    calls = _exclusions(calls.with_columns(rated_ns=_rated(pl.col("gpu_ns"))))
    keep = pl.col("excluded").is_null()
    calls = calls.with_columns(
        min_ns=pl.when(keep).then("min_ns"),
        covered_ns=pl.when(keep & pl.col("flops").is_not_null()).then(pl.col("gpu_ns")).otherwise(0),
    ).with_columns(rated_ns=_rated(pl.col("gpu_ns")))
    return _rates(calls).select(CALL_COLUMNS).collect(engine=ENGINE)


def _exclusions(calls: pl.LazyFrame) -> pl.LazyFrame:
    """`excluded` and `reason` per call: `unknown` (the formula lacks an argument) or, per op
    shape, `model mismatch` (the shape's roofline time exceeds its GPU time)."""
    rated = pl.col("rated_ns").sum().over(SHAPE_KEYS)
    ratio = pl.when(rated > 0).then(pl.col("min_ns").sum().over(SHAPE_KEYS) / rated)
    over = pl.col("unknown_reason").is_null() & (ratio > 1)
    why = pl.format("{} % of the ceiling computed: the work counted from the shapes overstates what ran",
                    (ratio * 100).round(1))
    return calls.with_columns(
        excluded=pl.when(pl.col("unknown_reason").is_not_null()).then(pl.lit("unknown"))
        .when(over).then(pl.lit("model mismatch")),
        reason=pl.when(pl.col("unknown_reason").is_not_null()).then("unknown_reason").when(over).then(why),
    )


def _rated(time: pl.Expr) -> pl.Expr:
    return pl.when(pl.col("min_ns").is_not_null()).then(time).otherwise(0)


def _kernel_rows(rows: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """Each GPU event with its share of its carrier's work (null work where unknown).

    A call's work is split over its kernels by time share; its memsets and copies get no
    work (they are overhead of the call) unless the call launched no kernel at all.
    """
    keep = pl.col("excluded").is_null()  # an excluded call's work counts in no total
    per_call = calls.lazy().select(carrier_eid="eid", _call_ns="gpu_ns", _f=pl.when(keep).then("flops"),
                                   _b=pl.when(keep).then("bytes"), _m="min_ns",
                                   peak_tflops="peak_tflops", peak_gbps="peak_gbps")
    is_kernel = pl.col("cat") == "kernel"
    out = rows.lazy().join(per_call, on="carrier_eid", how="left", maintain_order="left").with_columns(
        _k_ns=pl.col("dur_ns").filter(is_kernel).sum().over("carrier_eid"))
    share = (pl.when(pl.col("_k_ns") > 0).then(pl.when(is_kernel).then(pl.col("dur_ns") / pl.col("_k_ns"))
                                               .otherwise(0.0))
             .otherwise(pl.col("dur_ns") / pl.col("_call_ns")))
    return out.with_columns(
        gpu_ns=pl.col("dur_ns"), flops=pl.col("_f") * share, bytes=pl.col("_b") * share,
        min_ns=pl.col("_m") * share,
        covered_ns=pl.when(pl.col("_f").is_not_null()).then(pl.col("dur_ns")).otherwise(0),
    ).with_columns(rated_ns=_rated(pl.col("dur_ns"))).drop("_call_ns", "_f", "_b", "_m", "_k_ns").collect(
        engine=ENGINE)


def _by_keys(frame: pl.DataFrame, keys: list[str], count_name: str) -> pl.DataFrame:
    """Sum the work and times of `frame` per `keys`, then derive the rates from the sums."""
    extra = []
    if "top_kernel" in frame.columns:
        extra = [pl.col(c).sort_by("gpu_ns", descending=True).first().alias(c)
                 for c in ("top_kernel", "kernel_precision", "kernel_tensor_cores")]
        extra += [pl.col("eid").sort_by("ts_ns").head(3).alias("example_eids"),
                  pl.col("device").min().alias("device"), pl.col("peak_bf16_tflops").max()]
    if "excluded" in frame.columns and set(keys) >= set(SHAPE_KEYS):  # (one value per shape)
        extra += [pl.col("excluded").first(), pl.col("reason").first()]
    # text keys grouped as codes: on several keys Polars groups on a copy of each row's keys,
    # the whole text of every kernel name
    text = [k for k in keys if frame.schema[k] == pl.String]
    agg = frame.lazy().with_columns(pl.col(text).cast(pl.Categorical)).group_by(keys).agg(
        pl.len().alias(count_name), pl.col("ts_ns").min().alias("first_ts_ns"),
        *(pl.col(c).sum() for c in ("gpu_ns", "covered_ns", "rated_ns", "flops", "bytes", "min_ns")),
        *(pl.when(pl.col(c).min() == pl.col(c).max()).then(pl.col(c).min()).alias(c)
          for c in ("peak_tflops", "peak_gbps")),
        *extra,
    )
    agg = agg.with_columns(pl.col(text).cast(pl.String))
    return _rates(agg).sort(["gpu_ns", *keys], descending=[True, *([False] * len(keys))], nulls_last=True).collect(
        engine=ENGINE)


def _rates(frame: pl.LazyFrame) -> pl.LazyFrame:
    """Achieved rates, intensity, ridge, bound, attainable, efficiency, time lost."""
    covered, rated = pl.col("covered_ns"), pl.col("rated_ns")
    flops, nbytes = pl.col("flops"), pl.col("bytes")
    peak, bw = pl.col("peak_tflops"), pl.col("peak_gbps")
    frame = frame.with_columns(
        achieved_tflops=pl.when(covered > 0).then(flops / covered / 1e3),
        achieved_gbps=pl.when((covered > 0) & nbytes.is_not_null()).then(nbytes / covered),
        intensity=pl.when(nbytes > 0).then(flops / nbytes),
        ridge=peak * 1e3 / bw,
        min_ns=pl.when(rated > 0).then(pl.col("min_ns")),
    )
    intensity, ridge = pl.col("intensity"), pl.col("ridge")
    return frame.with_columns(
        bound=pl.when(intensity.is_null() | ridge.is_null()).then(None)
        .when(intensity >= ridge).then(pl.lit("compute")).otherwise(pl.lit("memory")),
        attainable_tflops=pl.when(intensity.is_not_null())
        .then(pl.min_horizontal(peak, intensity * bw / 1e3)),
        # never above 1: a shape above its ceiling is excluded upstream (`_exclusions`); a
        # per-kernel sum over calls of different speed may still be, and then reads null
        efficiency=pl.when((rated > 0) & (pl.col("min_ns") <= rated)).then(pl.col("min_ns") / rated),
        time_lost_ns=pl.when(rated > 0).then((rated - pl.col("min_ns")).clip(lower_bound=0.0)),
    )
