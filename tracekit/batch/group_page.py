"""The report page of a rank group: its ranks side by side and the arrival skew at each
collective (`batch.arrivals`), rendered with the shared page template machinery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from tracekit import __version__
from tracekit import format as fmt
from tracekit.batch.schema import COLLECTIVES_SCHEMA, RANKS_SCHEMA, frame
from tracekit.render.html import render_page
from tracekit.report.tables import frame_table

RANK_COLUMNS = [
    ("rank", "rank", "count"),
    ("step_median_ns", "median step", "ns"),
    ("compute_ns", "compute", "ns"),
    ("communication_ns", "exposed comm.", "ns"),
    ("wait_ns", "waits for last arrival", "ns", "sum over collectives of (last arrival - this rank's arrival)"),
    ("late_ns", "arrives behind median", "ns", "sum over collectives of (arrival - median arrival), when > 0"),
    ("times_last", "times last", "count"),
    ("lost_to_rank_ns", "job time lost to it", "ns", "sum of (last - median arrival) where it arrived last"),
    ("clock_offset_ns", "clock offset", "ns", "median of (its collective ends - the lowest rank's)"),
    ("straggler", "late rank", "bool"),
]
COLLECTIVE_COLUMNS = [
    ("k", "#", "count"),
    ("family", "collective", "label"),
    ("late_rank", "last to arrive", "count"),
    ("latest_ranks", "latest ranks", "label", "the last three to arrive, latest first"),
    ("skew_ns", "arrival skew", "ns", "last arrival - first arrival"),
    ("lost_ns", "time lost", "ns", "last arrival - median arrival"),
    ("late_launched_late", "late rank launched late", "bool",
     "its kernel started within 10 µs of its launch call's end: the host, not the GPU queue, was late"),
    ("end_spread_ns", "end spread", "ns", "spread of the aligned ends (clock alignment residual)"),
]
WINDOW_COLUMNS = [("kind", "kind", "label"), ("name", "name", "text"), ("overlap_ns", "time in window", "ns"),
                  ("count", "events", "count")]


def render_group_page(source: str, summary: dict[str, Any], ranks: list[dict[str, Any]],
                      collectives: list[dict[str, Any]], window: list[dict[str, Any]]) -> str:
    """The HTML page of one rank group."""
    rank_frame = frame(ranks, RANKS_SCHEMA).sort("rank")
    coll = frame(collectives, COLLECTIVES_SCHEMA)
    lost, skew = summary.get("straggler_lag_ns"), summary.get("arrival_skew_ns")
    facts = [
        ("ranks", fmt.count(len(ranks))),
        ("collectives compared", fmt.count(coll.height)),
        ("late ranks", _ranks(summary.get("straggler_ranks"))),
        ("largest arrival skew", fmt.ns(skew) if skew is not None else "n/a"),
        ("job time lost to late arrivals", fmt.ns(lost) if lost is not None and coll.height else "n/a"),
    ]
    win = pl.DataFrame(window) if window else None
    return render_page(
        "rank_group.html.j2",
        title=f"tracekit rank group: {_shown(source)}",
        facts=facts,
        notes=[n for n in (summary.get("analysis_notes") or "").split("; ") if n],
        ranks=frame_table("ranks", "Ranks", rank_frame, RANK_COLUMNS, limit=None),
        collectives=frame_table("collectives", "Collectives", coll, COLLECTIVE_COLUMNS, limit=None)
        if coll.height else None,
        window=frame_table("window", f"What rank {window[0]['rank']} ran before arriving at collective "
                           f"#{window[0]['collective']}", win, WINDOW_COLUMNS, limit=None) if win is not None else None,
        generator=f"tracekit {__version__}",
    )


def _ranks(ids: str | None) -> str:
    """"7,5,4" as "ranks 7, 5, 4" ("rank 2"; "none")."""
    parts = [p.strip() for p in (ids or "").split(",") if p.strip()]
    return "none" if not parts else f"rank{'s' if len(parts) > 1 else ''} {', '.join(parts)}"


def _shown(source: str) -> str:
    """The group as its folder and pattern, not the absolute path of the machine that ran it."""
    path = Path(source)
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name
