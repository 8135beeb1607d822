"""Bundles (symcalc.cache.bundled): the entries of many questions asked together kept as one
cache entry, read back exactly, never for another question, and a plan's derivations among them."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import symcalc
from symcalc import cache
from symcalc.engine import derive
from symcalc.library.loading import load_library

# the unit registry built before a test points the cache elsewhere (conftest.unit_registry_built)
pytestmark = pytest.mark.usefixtures("unit_registry_built")


def entries(directory: Path, kind: str) -> list[Path]:
    return sorted(directory.glob(f"{kind}-*.pickle"))


def test_entries_made_in_a_block_are_one_file_read_back_by_their_own_keys(cache_dir):
    with cache.bundled("b" * 64):
        assert cache.load("derivation", "1" * 64) is None        # nothing stored yet
        cache.store("derivation", "1" * 64, {"one": 1})
        cache.store("unrouted", "2" * 64, "no route")
        cache.store("library", "3" * 64, "not a bundled kind")
    # the two bundled kinds went into one file; the library is a file of its own
    assert len(entries(cache_dir, "bundle")) == 1 and not entries(cache_dir, "derivation")
    assert not entries(cache_dir, "unrouted") and len(entries(cache_dir, "library")) == 1
    with cache.bundled("b" * 64):
        assert cache.load("derivation", "1" * 64) == {"one": 1}
        assert cache.load("unrouted", "2" * 64) == "no route"
        # a key it does not hold, or the same key as another kind: nothing
        assert cache.load("derivation", "2" * 64) is None and cache.load("unrouted", "1" * 64) is None
        # each entry is given out once (two loads of a file give two objects, never one shared)
        assert cache.load("derivation", "1" * 64) is None
    # outside a block (or in another bundle) the entries are not there
    assert cache.load("derivation", "1" * 64) is None
    with cache.bundled("c" * 64):
        assert cache.load("derivation", "1" * 64) is None


def test_an_object_shared_by_entries_is_stored_once_and_comes_back_shared(cache_dir):
    shared = list(range(20_000))          # ~100 kB pickled: a step many derivations share
    with cache.bundled("b" * 64):
        for k in "123":
            cache.store("derivation", k * 64, (k, shared))
    size = entries(cache_dir, "bundle")[0].stat().st_size
    # once, not three times: under 1.5 copies' bytes (the entries' keys and the MAC are small)
    assert size < 1.5 * len(pickle.dumps(shared, protocol=pickle.HIGHEST_PROTOCOL))
    with cache.bundled("b" * 64):
        got = [cache.load("derivation", k * 64) for k in "123"]
    assert [g[0] for g in got] == ["1", "2", "3"] and got[0][1] == shared
    assert got[0][1] is got[1][1] is got[2][1]


class _Unpicklable:
    def __reduce__(self):
        raise TypeError("never kept (as a derivation degraded for time)")


def test_an_entry_that_cannot_be_pickled_leaves_out_only_itself(cache_dir):
    with cache.bundled("b" * 64):
        cache.store("derivation", "1" * 64, "kept")
        cache.store("derivation", "2" * 64, _Unpicklable())
    with cache.bundled("b" * 64):
        assert cache.load("derivation", "1" * 64) == "kept" and cache.load("derivation", "2" * 64) is None


def test_a_block_that_makes_nothing_writes_nothing_and_keeps_the_others(cache_dir):
    with cache.bundled("b" * 64):
        cache.store("derivation", "1" * 64, "first plan's")
    first = entries(cache_dir, "bundle")[0].stat().st_mtime_ns
    with cache.bundled("b" * 64):
        assert cache.load("derivation", "1" * 64) == "first plan's"
    assert entries(cache_dir, "bundle")[0].stat().st_mtime_ns == first       # not written again
    with cache.bundled("b" * 64):
        cache.store("derivation", "2" * 64, "second plan's")     # (the first's not asked for)
    with cache.bundled("b" * 64):
        assert cache.load("derivation", "1" * 64) == "first plan's"
        assert cache.load("derivation", "2" * 64) == "second plan's"


def test_a_bundle_that_does_not_authenticate_is_not_read(cache_dir):
    with cache.bundled("b" * 64):
        cache.store("derivation", "1" * 64, "value")
    path = entries(cache_dir, "bundle")[0]
    path.write_bytes(path.read_bytes()[:-1] + b"\0")          # one byte changed: the MAC fails
    rejected = cache.stats["rejected"]
    with cache.bundled("b" * 64):
        assert cache.load("derivation", "1" * 64) is None
    assert cache.stats["rejected"] == rejected + 1


def _rows(result) -> list:
    out = result.as_dict()
    return [out["rows"], out.get("counts"), out.get("notes")]


def test_a_plan_keeps_its_derivations_in_one_bundle_and_reads_them_back_without_solving(cache_dir, monkeypatch):
    args = ("llama3-8b", "h100", 8)
    cold = symcalc.plan(*args, global_batch_size=64, top=3, library=load_library())
    assert len(entries(cache_dir, "bundle")) == 1 and not entries(cache_dir, "derivation")

    def no_solving(*a, **k):
        raise AssertionError("a derivation in the bundle must not be solved again")
    monkeypatch.setattr(derive, "_Builder", no_solving)
    # a new library object: its in-memory caches are empty, as in a new process
    warm = symcalc.plan(*args, global_batch_size=64, top=3, library=load_library())
    assert _rows(warm) == _rows(cold) and warm.rows


def test_bundles_are_counted_pruned_and_cleared_as_every_kind_is(cache_dir, monkeypatch):
    import os
    import time
    monkeypatch.setitem(cache.MAX_ENTRIES, "bundle", 2)
    old = time.time() - 100
    for k in "abc":
        with cache.bundled(k * 64):
            cache.store("derivation", "1" * 64, k)
        for path in entries(cache_dir, "bundle"):       # the earlier ones older (mtime order)
            if path.name != f"bundle-{k * 64}.pickle":
                os.utime(path, (old, old))
        old += 10
    # after the third, the oldest of three went (pruned to MAX_ENTRIES at the first store of a
    # kind in a process, and again every 1 + 2 // 16 = 1 store)
    assert [p.name for p in entries(cache_dir, "bundle")] == [f"bundle-{k * 64}.pickle" for k in "bc"]
    cache.store("evidence", "e" * 64, ["runs"])
    info = cache.info()["entries"]
    assert info["bundle"]["count"] == 2 and info["evidence"]["count"] == 1
    assert cache.clear() == 3 and not entries(cache_dir, "bundle") and not entries(cache_dir, "evidence")


def test_an_entry_read_from_its_own_file_joins_the_bundle(cache_dir):
    cache.store("derivation", "1" * 64, "a solve's")          # outside a block: a file of its own
    with cache.bundled("b" * 64):
        assert cache.load("derivation", "1" * 64) == "a solve's"
    entries(cache_dir, "derivation")[0].unlink()
    with cache.bundled("b" * 64):                             # now read from the bundle alone
        assert cache.load("derivation", "1" * 64) == "a solve's"
