"""Arrival skew at the collectives of a rank group (tracekit.batch.arrivals, docs/batch.md)."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import polars as pl
import pytest
from builders import BATCH_GEMM, TraceBuilder
from conftest import real_trace

from tracekit.batch import run_batch
from tracekit.batch.arrivals import arrival_skew, rank_events
from tracekit.loader import load_ranks

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
# Per rank: (clock offset, [(launch, kernel start) of collective 0 and 1]); both collectives
# end at 200 µs and 400 µs of true time on every rank.
RANKS = {
    0: (0, [(50_000, 100_000), (250_000, 300_000)]),
    1: (7_000, [(50_000, 120_000), (250_000, 302_000)]),
    2: (0, [(150_000, 160_000), (250_000, 301_000)]),
}


def write_skewed_job(folder: Path) -> list[Path]:
    """Three ranks; rank 2 enters collective 0 60 µs after rank 0 because a host op
    (`slow_host_op`, 95-150 µs) delays its launch; rank 1's clock runs 7 µs ahead."""
    folder.mkdir(parents=True)
    paths = []
    for rank, (off, colls) in RANKS.items():
        b = TraceBuilder(extra_top={"distributedInfo": {"rank": rank, "world_size": 3}})
        b.annotation("ProfilerStep#1", off, 450_000)
        ext = b.op("aten::mm", off + 1_000, 5_000)
        b.launch_kernel(BATCH_GEMM, launch_ns=off + 2_000, launch_dur_ns=2_000, start_ns=off + 10_000,
                        dur_ns=40_000, ext=ext)
        if rank == 2:
            b.op("slow_host_op", 95_000, 55_000)
        for (launch, start), end in zip(colls, (200_000, 400_000), strict=True):
            b.launch_kernel(ALLREDUCE, launch_ns=off + launch, launch_dur_ns=5_000, start_ns=off + start,
                            dur_ns=end - start, ext=ext, stream=8)
        paths.append(b.write(folder / f"rank-{rank}.json.gz"))
    return paths


def test_hand_built_late_rank(tmp_path):
    """Collective 0: arrivals 100, 120, 160 µs -> rank 2 late, skew 60 µs, lost 160 - 120 = 40 µs.
    Collective 1: 300, 302, 301 -> rank 1 last, skew 2 µs, lost 1 µs. Job lost 41 µs; rank 1's
    1 µs is under 5 % of it, so rank 2 alone is late."""
    write_skewed_job(tmp_path / "job")
    traces = load_ranks(tmp_path / "job")
    skew = arrival_skew([rank_events(t, r) for r, t in traces.items()])
    c = skew.collectives
    assert c["late_rank"].to_list() == [2, 1]
    assert c["skew_ns"].to_list() == [60_000, 2_000] and c["lost_ns"].to_list() == [40_000, 1_000]
    assert c["end_spread_ns"].to_list() == [0, 0] and c["latest_ranks"].to_list() == ["2,1,0", "1,2,0"]
    assert c["late_launched_late"].to_list() == [True, False]  # rank 2's kernel began 5 µs after its launch
    r = skew.ranks
    assert r["clock_offset_ns"].to_list() == [0, 7_000, 0]
    assert r["arrival_wait_ns"].to_list() == [62_000, 40_000, 1_000]
    assert r["late_ns"].to_list() == [0, 1_000, 40_000]
    assert r["times_last"].to_list() == [0, 1, 1] and r["lost_to_rank_ns"].to_list() == [0, 1_000, 40_000]
    assert r["late"].to_list() == [False, False, True] and skew.lost_ns == 41_000
    window = {(w["kind"], w["name"]): w["overlap_ns"] for w in skew.window}
    assert window == {("op", "ProfilerStep#1"): 60_000, ("op", "slow_host_op"): 50_000,
                      ("runtime", "cudaLaunchKernel"): 5_000}


def test_batch_rows_and_group_page(tmp_path):
    write_skewed_job(tmp_path / "job")
    result = run_batch(tmp_path / "job", out_dir=tmp_path / "out", jobs=1, group_ranks=True, reports=True)
    g = result.summary.row(0, named=True)
    assert (g["kind"], g["straggler_ranks"], g["straggler_lag_ns"], g["arrival_skew_ns"]) == ("ranks", "2", 41_000, 60_000)
    assert g["late_window"].startswith("rank 2: ProfilerStep#1 60 µs (op), slow_host_op 50 µs (op)")
    ranks = pl.read_parquet(tmp_path / "out" / "ranks.parquet").sort("rank")
    assert ranks["wait_ns"].to_list() == [62_000, 40_000, 1_000]
    assert ranks["straggler"].to_list() == [False, False, True]
    page = (tmp_path / "out" / g["report"]).read_text()
    assert "Arrival at each collective" in page and "slow_host_op" in page


def raw_collectives(folder: Path) -> dict[int, list[tuple[float, float]]]:
    """(start, end) µs of each rank's NCCL kernels in time order, straight from the JSON."""
    out = {}
    for path in sorted(folder.glob("worker*.json.gz")):
        doc = json.load(gzip.open(path))
        ks = sorted((e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"]
                    if e.get("cat") == "kernel" and e.get("name", "").startswith("ncclKernel_"))
        out[doc["distributedInfo"]["rank"]] = ks
    return out


@pytest.mark.real
def test_dlrm_8rank_late_ranks_against_raw_json():
    folder = real_trace("dlrm_8rank_v100/worker0.json.gz").parent
    raw = raw_collectives(folder)
    n = min(len(v) for v in raw.values())
    offset = {r: statistics.median(raw[r][k][1] - raw[0][k][1] for k in range(n)) for r in raw}
    lost, late = 0.0, []
    for k in range(n):
        arrival = {r: raw[r][k][0] - offset[r] for r in raw}
        order = sorted(arrival.values())
        late.append((max(arrival, key=arrival.get), order[-1] - order[0], order[-1] - order[(len(order) - 1) // 2]))
        lost += late[-1][2]
    skew = arrival_skew([rank_events(t, r) for r, t in load_ranks(folder, lean=True).items()])
    c = skew.collectives
    assert c.height == n == 8
    assert c["late_rank"].to_list() == [r for r, _, _ in late] == [7, 7, 7, 7, 7, 5, 5, 4]
    assert c["skew_ns"].to_list() == [round(s * 1000) for _, s, _ in late]
    assert c["lost_ns"].to_list() == [round(x * 1000) for _, _, x in late]
    assert skew.lost_ns == round(lost * 1000) == 8_005_000
    assert c["skew_ns"][0] == 7_624_500 and c["latest_ranks"][0] == "7,6,2"
    assert skew.ranks.filter("late")["rank"].to_list() == [4, 5, 7]
    waits = dict(skew.ranks.select("rank", "arrival_wait_ns").rows())
    assert waits[1] == 11_129_000 and max(waits, key=waits.get) == 1  # rank 1 waits longest


def test_unguarded_script_names_the_missing_guard(tmp_path):
    """A script calling run_batch(jobs=2) without the __main__ guard is refused at once, in
    the script's own process, with the guard named (before, its spawned workers re-ran it and
    every job became a 'worker failed' row); the same script with the guard runs."""
    import subprocess
    import sys

    for i in range(2):
        b = TraceBuilder()
        b.mm_add_step(0, 40_000)
        b.write(tmp_path / f"t{i}.json")
    script = tmp_path / "nightly.py"
    script.write_text(f"from tracekit.batch import run_batch\nprint(run_batch([{str(tmp_path)!r}], jobs=2).line())\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode != 0 and 'has no `if __name__ == "__main__":` guard' in done.stderr
    assert f"{script} calls run_batch with worker processes" in done.stderr and "worker failed" not in done.stdout
    guarded = tmp_path / "guarded.py"
    guarded.write_text("from tracekit.batch import run_batch\nif __name__ == '__main__':\n"
                       f"    print(run_batch([{str(tmp_path)!r}], jobs=2).line())\n")
    done = subprocess.run([sys.executable, str(guarded)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and "2 traces" in done.stdout and "0 failed" in done.stdout, done.stderr
