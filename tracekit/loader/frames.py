"""Decoded events -> the typed frames of a `Trace`."""

from __future__ import annotations

from typing import Any

import msgspec
import polars as pl

from tracekit.loader import args as A
from tracekit.loader.chrome import pair_spans
from tracekit.loader.columns import (
    GPU_CATS,
    RUNTIME_CATS,
    args_text,
    decode_args,
    dims,
    first_of,
    normalise_category,
    typed,
)
from tracekit.loader.decode import Event
from tracekit.model import (
    COUNTERS_SCHEMA,
    FLOWS_SCHEMA,
    GPU_SCHEMA,
    INSTANTS_SCHEMA,
    MEMORY_SCHEMA,
    OPS_SCHEMA,
    RUNTIME_SCHEMA,
)

Note = tuple[str, str, int, str, int | None]  # level, code, count, message, first eid
INFO_CODES = frozenset({"zero_duration", "out_of_order", "ignored_phase"})

INSTANT_PHASES = ("i", "I", "n", "R", "T", "p")
FLOW_PHASES = ("s", "t", "f")
KNOWN_PHASES = {"X", "B", "E", "b", "e", "S", "F", "C", "M", "P", "O", "N", "D", "c", "(", ")", *INSTANT_PHASES, *FLOW_PHASES}


class Builder:
    """Holds the events and the base frame while the typed frames are built."""

    def __init__(self, events: list[Event], base: pl.DataFrame) -> None:
        self.events = events
        self.base = base
        self.notes: list[Note] = []

    def note(self, code: str, rows: pl.DataFrame | int, message: str) -> None:
        count = rows if isinstance(rows, int) else rows.height
        if count:
            first = None if isinstance(rows, int) else int(rows["eid"].min())
            level = "info" if code in INFO_CODES else "warning"
            self.notes.append((level, code, count, message.format(n=count), first))

    def raws(self, eids: pl.Series, field: str = "args") -> list[msgspec.Raw]:
        ev = self.events
        return [getattr(ev[i], field) for i in eids.to_list()]

    # -- slices -------------------------------------------------------------------------

    def slices(self) -> pl.DataFrame:
        """X events plus paired B/E, b/e and S/F events, with clean integer times."""
        b = self.base
        no_ts = b.filter(pl.col("ts_ns").is_null() & ~pl.col("ph").is_in(["M"]))
        self.note("missing_ts", no_ts, "{n:,} events had no usable 'ts' and were dropped")
        b = b.filter(pl.col("ts_ns").is_not_null())
        x = b.filter(pl.col("ph") == "X")
        self.note("missing_duration", x.filter(pl.col("dur_ns").is_null()), "{n:,} complete events had no usable 'dur'; treated as 0")
        self.note("negative_duration", x.filter(pl.col("dur_ns") < 0), "{n:,} complete events had a negative 'dur'; treated as 0")
        self.note("zero_duration", x.filter(pl.col("dur_ns") == 0), "{n:,} complete events have zero duration")
        parts = [x.with_columns(dur_ns=pl.col("dur_ns").fill_null(0).clip(lower_bound=0))]
        for begin, end, keys, label in (
            ("B", "E", ["pid", "tid"], "B/E"),
            ("b", "e", ["pid", "cat", "_id"], "async b/e"),
            ("S", "F", ["pid", "cat", "_id", "name"], "async S/F"),
        ):
            if not b["ph"].is_in([begin, end]).any():
                continue
            rows = b.filter(pl.col("ph").is_in([begin, end]))
            ids = [_id_text(self.events[i].id) for i in rows["eid"].to_list()]
            rows = rows.with_columns(_id=pl.Series(ids, dtype=pl.String))
            pairs, lone_b, lone_e = pair_spans(rows, begin, end, keys)
            self.note(f"unmatched_{begin}", lone_b, f"{{n:,}} '{begin}' events ({label}) had no matching end; dropped")
            self.note(f"unmatched_{end}", lone_e, f"{{n:,}} '{end}' events ({label}) had no matching begin; dropped")
            parts.append(pairs.drop("_id"))
        out = pl.concat(parts, how="vertical_relaxed")
        return out.with_columns(end_ns=pl.col("ts_ns") + pl.col("dur_ns"))

    def ops(self, slices: pl.DataFrame) -> pl.DataFrame:
        rows = slices.filter(~pl.col("cat").is_in([*GPU_CATS, *RUNTIME_CATS]))
        raws = self.raws(rows["eid"])
        a = decode_args(raws, A.OpArgs)
        cols = {
            "external_id": first_of(pl.Int64, [x.external_id for x in a], [x.external_id_old for x in a]),
            "sequence_nr": typed([x.sequence_nr for x in a], pl.Int64),
            "fwd_tid": typed([x.fwd_tid for x in a], pl.Int64),
            "python_id": typed([x.python_id for x in a], pl.Int64),
            "python_parent_id": typed([x.python_parent_id for x in a], pl.Int64),
            "input_dims": args_text([x.input_dims if len(x.input_dims) else x.input_dims_old for x in a]),
            "input_types": args_text([x.input_types for x in a]),
            "input_strides": args_text([x.input_strides for x in a]),
            "concrete_inputs": args_text([x.concrete_inputs for x in a]),
            "flops": typed([x.flops for x in a], pl.Float64),
            "args": args_text(raws),
        }
        compact = [pl.col(c).str.replace_all(r"\s*\n\s*", "") for c in ("input_types", "concrete_inputs")]
        numeric = [pl.col(c).str.replace_all(r"\s+", "") for c in ("input_dims", "input_strides")]
        return _finish(rows.with_columns(**cols).with_columns(*compact, *numeric), OPS_SCHEMA)

    def runtime(self, slices: pl.DataFrame) -> pl.DataFrame:
        rows = slices.filter(pl.col("cat").is_in(RUNTIME_CATS))
        raws = self.raws(rows["eid"])
        a = decode_args(raws, A.RuntimeArgs)
        cols = {
            "correlation": typed([x.correlation for x in a], pl.Int64),
            "external_id": first_of(pl.Int64, [x.external_id for x in a], [x.external_id_old for x in a]),
            "cbid": typed([x.cbid for x in a], pl.Int64),
            "args": args_text(raws),
        }
        return _finish(rows.with_columns(**cols), RUNTIME_SCHEMA)

    def gpu(self, slices: pl.DataFrame) -> pl.DataFrame:
        rows = slices.filter(pl.col("cat").is_in(GPU_CATS))
        raws = self.raws(rows["eid"])
        a = decode_args(raws, A.GpuArgs)
        grid = dims([x.grid for x in a])
        block = dims([x.block for x in a])
        cols: dict[str, Any] = {
            "device": pl.coalesce(typed([x.device for x in a], pl.Int64), _int_in(rows["pid"])),
            "stream": pl.coalesce(typed([x.stream for x in a], pl.Int64), _int_in(rows["tid"])),
            "correlation": typed([x.correlation for x in a], pl.Int64),
            "external_id": first_of(pl.Int64, [x.external_id for x in a], [x.external_id_old for x in a]),
            "registers_per_thread": typed([x.registers for x in a], pl.Int64),
            "shared_memory": typed([x.shared_memory for x in a], pl.Int64),
            "blocks_per_sm": typed([x.blocks_per_sm for x in a], pl.Float64),
            "warps_per_sm": typed([x.warps_per_sm for x in a], pl.Float64),
            "est_occupancy_pct": typed([x.occupancy for x in a], pl.Float64),
            "bytes": typed([x.bytes for x in a], pl.Int64),
            "bandwidth_gbps": typed([x.bandwidth for x in a], pl.Float64),
            "sync_kind": typed([x.sync_kind for x in a], pl.String),
            "args": args_text(raws),
        }
        for i, axis in enumerate("xyz"):
            cols[f"grid_{axis}"] = grid[i]
            cols[f"block_{axis}"] = block[i]
        return _finish(rows.with_columns(**cols), GPU_SCHEMA)

    # -- points -------------------------------------------------------------------------

    def flows(self) -> pl.DataFrame:
        rows = self.base.filter(pl.col("ph").is_in(FLOW_PHASES) & pl.col("ts_ns").is_not_null())
        ids = [_id_int(self.events[i].id) for i in rows["eid"].to_list()]
        bps = [self.events[i].bp for i in rows["eid"].to_list()]
        rows = rows.with_columns(
            flow_id=pl.Series(ids, dtype=pl.Int64),
            binding_point=pl.Series(bps, dtype=pl.String).replace("", None),
        )
        self.note("bad_flow_id", rows.filter(pl.col("flow_id").is_null()), "{n:,} flow events had no usable 'id'")
        return _finish(rows, FLOWS_SCHEMA)

    def instants(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        rows = self.base.filter(pl.col("ph").is_in(INSTANT_PHASES) & pl.col("ts_ns").is_not_null())
        is_mem = pl.col("name") == "[memory]"
        mem = rows.filter(is_mem)
        a = decode_args(self.raws(mem["eid"]), A.MemoryArgs)
        mem = mem.with_columns(
            device_type=typed([x.device_type for x in a], pl.Int64),
            device_id=typed([x.device_id for x in a], pl.Int64),
            addr=typed([x.addr for x in a], pl.Int64),
            bytes=typed([x.bytes for x in a], pl.Int64),
            total_allocated=typed([x.total_allocated for x in a], pl.Int64),
            total_reserved=typed([x.total_reserved for x in a], pl.Int64),
        )
        inst = rows.filter(~is_mem)
        scopes = [self.events[i].s for i in inst["eid"].to_list()]
        inst = inst.with_columns(
            scope=pl.Series(scopes, dtype=pl.String).replace("", None),
            args=args_text(self.raws(inst["eid"])),
        )
        return _finish(inst, INSTANTS_SCHEMA), _finish(mem, MEMORY_SCHEMA)

    def counters(self) -> pl.DataFrame:
        rows = self.base.filter((pl.col("ph") == "C") & pl.col("ts_ns").is_not_null())
        decoded = decode_args(self.raws(rows["eid"]), dict)
        eids, series, values = [], [], []
        for eid, obj in zip(rows["eid"].to_list(), decoded):
            for key, value in obj.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    eids.append(eid)
                    series.append(str(key))
                    values.append(float(value))
        samples = pl.DataFrame({"eid": eids, "series": series, "value": values},
                               schema={"eid": pl.Int64, "series": pl.String, "value": pl.Float64})
        joined = samples.join(rows, on="eid", how="left")
        return _finish(joined, COUNTERS_SCHEMA)

    def phase_notes(self) -> None:
        b = self.base
        unknown = b.filter(~pl.col("ph").is_in(list(KNOWN_PHASES)))
        self.note("unknown_phase", unknown, "{n:,} events had an unknown or missing 'ph'; ignored")
        other = b.filter(pl.col("ph").is_in(["P", "O", "N", "D", "c", "(", ")"]))
        self.note("ignored_phase", other, "{n:,} sample/object/context events (ph P, O, N, D, c, parentheses) are not analysed")


def _finish(frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Select the schema's columns (missing ones null), cast, and sort by time."""
    cols = [
        (pl.col(name) if name in frame.columns else pl.lit(None)).cast(dtype).alias(name)
        for name, dtype in schema.items()
    ]
    out = frame.select(cols)
    order = [c for c in ("ts_ns", "eid") if c in schema]
    return out.sort(order, nulls_last=True)


def _int_in(text: pl.Series) -> pl.Series:
    """The integer in a pid/tid such as '7' or 'stream 7' (null when there is none)."""
    return text.str.extract(r"(-?\d+)\s*$", 1).cast(pl.Int64, strict=False)


def _id_text(v: Any) -> str | None:
    if v is None:
        return None
    return str(v)


def _id_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else None
    if isinstance(v, str):
        s = v.strip().lower()
        try:
            n = int(s, 16) if s.startswith("0x") else int(s)
        except ValueError:
            return None
        return n if -(2**63) <= n < 2**63 else None
    return None


__all__ = ["Builder", "normalise_category"]
