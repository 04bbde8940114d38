"""The cache folder's size limit: least recently used entries go first, the one just
written never, and nothing that is not an entry is ever deleted."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from report_fixtures import decode_trace

from tracekit.cache import Cache
from tracekit.cache import entries as cache
from tracekit.format import parse_size


def fake_entry(folder: Path, key: str, size: int, age_s: float, index: str = "meta.json") -> Path:
    entry = folder / key
    entry.mkdir(parents=True)
    (entry / index).write_text("{}")
    (entry / "data.parquet").write_bytes(b"x" * (size - 2))  # 2 bytes of index
    stamp = time.time() - age_s
    os.utime(entry, (stamp, stamp))
    return entry


def key(i: int) -> str:
    return f"{i:032x}"


def test_least_recently_used_go_first_until_under_the_limit(tmp_path):
    old = fake_entry(tmp_path, key(1), 1000, age_s=300)
    older_analysis = fake_entry(tmp_path / cache.ANALYSES, key(2), 1000, age_s=400, index="analysis.json")
    mid = fake_entry(tmp_path, key(3), 1000, age_s=200)
    new = fake_entry(tmp_path / cache.ANALYSES, key(4), 1000, age_s=100, index="analysis.json")
    # 4000 bytes, limit 2500: the two least recently used go (one of each cache), then 2000 fit
    assert cache.prune(tmp_path, limit=2500) == 2000
    assert not older_analysis.exists() and not old.exists()
    assert mid.exists() and new.exists()
    assert cache.prune(tmp_path, limit=2500) == 0  # already under the limit


def test_the_entry_just_written_stays_even_alone_over_the_limit(tmp_path):
    big = fake_entry(tmp_path, key(1), 5000, age_s=500)  # the oldest, but just written
    other = fake_entry(tmp_path, key(2), 1000, age_s=10)
    assert cache.prune(tmp_path, keep=big, limit=3000) == 1000
    assert big.exists() and not other.exists()


def test_only_entries_and_stale_temporary_folders_are_deleted(tmp_path):
    mine = tmp_path / "notes"  # a user's folder, a file, a folder named like a key without an entry
    mine.mkdir()
    (mine / "keep.txt").write_text("x" * 5000)
    (tmp_path / "file.bin").write_bytes(b"x" * 5000)
    lookalike = tmp_path / key(7)
    lookalike.mkdir()
    (lookalike / "other.txt").write_text("x" * 5000)
    upper = fake_entry(tmp_path, key(8).upper().replace("0", "A"), 5000, age_s=900)  # not a key: hex is lower case
    stale = tmp_path / ".tmp-crashed"
    stale.mkdir()
    (stale / "half.parquet").write_bytes(b"x" * 100)
    os.utime(stale, (time.time() - 2 * cache.STALE_TMP_S,) * 2)
    fresh = tmp_path / cache.ANALYSES / ".tmp-writing"
    fresh.mkdir(parents=True)
    assert cache.prune(tmp_path, limit=0) == 100  # the stale temporary folder only
    assert mine.exists() and (tmp_path / "file.bin").exists() and lookalike.exists() and upper.exists()
    assert not stale.exists() and fresh.exists()


def test_size_limit_from_the_environment(monkeypatch):
    monkeypatch.delenv(cache.LIMIT_ENV, raising=False)
    assert cache.size_limit() == cache.DEFAULT_LIMIT == 4 * 1024**3
    for text, limit in [("20G", 20 * 1024**3), ("512M", 512 * 1024**2), ("1.5GiB", 1536 * 1024**2), ("0", None),
                        ("none", None), ("not a size", cache.DEFAULT_LIMIT), ("-3G", cache.DEFAULT_LIMIT)]:
        monkeypatch.setenv(cache.LIMIT_ENV, text)
        assert cache.size_limit() == limit, text


def test_parse_size():
    assert [parse_size(t) for t in ("10000000", "1K", "2kb", "3M", "1.5G", "1T")] == [
        10_000_000, 1024, 2048, 3 * 1024**2, 1536 * 1024**2, 1024**4]
    for bad in ("", "G", "12Q", "-1", "1e999"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_loads_and_analyses_evict_the_least_recently_used(tmp_path, monkeypatch):
    """Real entries: a read refreshes an entry; a write prunes, and keeps what it wrote."""
    folder = tmp_path / "cache"
    paths = [decode_trace(n).write(tmp_path / f"t{n}.json.gz") for n in (2, 3, 4)]
    a = Cache(folder).load(paths[0])
    [a_trace] = list(folder.iterdir())
    Cache(folder).analyse(a)
    [a_analysis] = list((folder / cache.ANALYSES).iterdir())
    Cache(folder).load(paths[1])
    [b_trace] = [p for p in folder.iterdir() if p not in (a_trace, folder / cache.ANALYSES)]
    for age, p in ((300, a_trace), (200, a_analysis), (100, b_trace)):  # in the order they were written
        os.utime(p, (time.time() - age,) * 2)
    Cache(folder).load(paths[0])  # a read: a's trace is now the most recent
    expected = cache._size(a_analysis) + cache._size(b_trace)
    assert cache.prune(folder, limit=cache._size(a_trace)) == expected > 0
    assert a_trace.exists() and not a_analysis.exists() and not b_trace.exists()
    monkeypatch.setenv(cache.LIMIT_ENV, "1")  # a write prunes down to the limit, but not what it wrote
    Cache(folder).load(paths[2])
    [c_trace] = [p for p in folder.iterdir() if p.name != cache.ANALYSES]
    assert c_trace != a_trace and (c_trace / "meta.json").is_file()
