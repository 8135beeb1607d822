"""The on-disk cache: used when valid, rebuilt when not, and invisible in the answers."""

from __future__ import annotations

import os
import pickle
import shutil
import sys
import stat
from pathlib import Path

import numpy as np
import pytest
import sympy

import symcalc
from symcalc import cache
from symcalc.library import build as library_module
from symcalc.engine import derive
from symcalc.library.loading import formula_dir, load_library

# the unit registry built before a test points the cache elsewhere (conftest.unit_registry_built)
pytestmark = pytest.mark.usefixtures("unit_registry_built")

EXTRA = """
[quantities.gpu_power_draw]
unit = "W"
display_unit = "kW"
latex = "P"
description = "average power draw of one GPU"

[[formulas]]
id = "energy_of_the_run"
title = "Energy of the run"
equation = "run_energy = n_gpus * gpu_power_draw * train_time"
source = "test"

[quantities.run_energy]
unit = "J"
display_unit = "MWh"
latex = "E"
description = "energy of the run"
"""

QUESTIONS = [
    ("n_gpus", dict(n_params=30e9, n_tokens="600e9 token", train_time="30day", mfu="45%",
                    peak_flops="989 TFLOP/s"), {}),
    ("d_model", dict(n_params=1.291059e10, n_layers=40, vocab_size=32000), {}),          # a quadratic
    ("model_state_memory", dict(n_params=7e9, n_gpus=64), {"options": {"zero_stage": 3}}),
    ("checkpoint_interval", dict(checkpoint_write_time="98 s", mtbf="24h"), {}),
    ("train_time", dict(n_params=70e9, n_tokens="2e12 token", n_gpus=np.array([64.0, 128.0]),
                        mfu=np.array([0.3, 0.4]), peak_flops="989 TFLOP/s"), {}),
]


@pytest.fixture
def formulas(tmp_path) -> Path:
    """A private copy of the built-in formula files, free to edit."""
    return Path(shutil.copytree(formula_dir(), tmp_path / "formulas"))


def entries(directory: Path, kind: str) -> list[Path]:
    return sorted(directory.glob(f"{kind}-*.pickle"))


def test_second_load_comes_from_the_cache_without_parsing(cache_dir, formulas, monkeypatch):
    first = load_library([formulas])
    assert len(entries(cache_dir, "library")) == 1
    hits = cache.stats["hits"]

    def no_parsing(*args, **kwargs):
        raise AssertionError("a cached library must not be parsed again")
    monkeypatch.setattr(library_module, "_load_formula", no_parsing)
    second = load_library([formulas])
    assert cache.stats["hits"] == hits + 1
    assert second is not first and second.fingerprint == first.fingerprint
    assert set(second.formulas) == set(first.formulas) and set(second.quantities) == set(first.quantities)


def test_an_edited_formula_file_is_a_new_key(cache_dir, formulas):
    before = load_library([formulas])
    path = formulas / "compute.toml"
    text = path.read_text()
    assert 'title = "Training time from throughput"' in text
    path.write_text(text.replace('title = "Training time from throughput"', 'title = "Edited title"'))
    after = load_library([formulas])
    assert after.fingerprint != before.fingerprint
    assert after.formulas["train_time_from_throughput"].title == "Edited title"
    assert len(entries(cache_dir, "library")) == 2


def test_extra_formula_files_are_part_of_the_key(cache_dir, tmp_path):
    extra = tmp_path / "mine.toml"
    extra.write_text(EXTRA)
    base = load_library()
    mine = load_library(extra=[extra])
    assert "energy_of_the_run" in mine.formulas and "energy_of_the_run" not in base.formulas
    assert mine.fingerprint != base.fingerprint
    extra.write_text(EXTRA.replace("Energy of the run", "Energy, edited"))
    assert load_library(extra=[extra]).formulas["energy_of_the_run"].title == "Energy, edited"
    r = symcalc.solve("run_energy", n_gpus=1000, gpu_power_draw="0.7 kW", train_time="1848 hour",
                      library=load_library(extra=[extra]))
    assert r.unit == "MWh" and abs(r.value - 1293.6) < 1e-6


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped", "other key"])
def test_a_damaged_entry_is_ignored_and_rebuilt(cache_dir, formulas, tmp_path, damage):
    good = load_library([formulas])
    [entry] = entries(cache_dir, "library")
    data = entry.read_bytes()
    if damage == "garbage":
        entry.write_bytes(b"not a cache file at all")
    elif damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":
        entry.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
    else:   # a valid entry of another key put under this name
        (tmp_path / "mine.toml").write_text(EXTRA)
        other = load_library([formulas], extra=[tmp_path / "mine.toml"])
        other_entry = next(p for p in entries(cache_dir, "library") if p != entry)
        assert other.fingerprint != good.fingerprint
        entry.write_bytes(other_entry.read_bytes())
    rejected = cache.stats["rejected"]
    again = load_library([formulas])
    assert cache.stats["rejected"] == rejected + 1
    assert set(again.formulas) == set(good.formulas)
    # ... and the entry was rewritten: the next load is a hit
    hits = cache.stats["hits"]
    load_library([formulas])
    assert cache.stats["hits"] == hits + 1


def test_a_directory_that_cannot_be_written_means_no_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(cache.ENV_DIR, str(blocker / "cache"))
    monkeypatch.delenv(cache.ENV_OFF, raising=False)
    errors = cache.stats["errors"]
    lib = load_library()
    assert cache.stats["errors"] == errors + 1
    assert symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64,
                         peak_flops="1979 TFLOP/s", library=lib).unit == "%"


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_a_directory_others_can_write_is_not_trusted(cache_dir, formulas):
    load_library([formulas])
    os.chmod(cache_dir, 0o777)
    rejected, hits = cache.stats["rejected"], cache.stats["hits"]
    lib = load_library([formulas])
    # neither read (a file there may have been planted) nor written
    assert cache.stats["rejected"] == rejected + 2 and cache.stats["hits"] == hits and lib.formulas


def test_the_cache_can_be_turned_off(cache_dir, formulas, monkeypatch):
    monkeypatch.setenv(cache.ENV_OFF, "1")
    lib = load_library([formulas])
    symcalc.solve("n_gpus", library=lib, **QUESTIONS[0][1])
    assert not cache_dir.exists()
    assert lib.fingerprint is None
    monkeypatch.delenv(cache.ENV_OFF)
    load_library([formulas], use_cache=False)
    assert not cache_dir.exists()


def test_expressions_come_back_exactly_as_stored(cache_dir, formulas):
    built = load_library([formulas], use_cache=False)
    load_library([formulas])
    cached = load_library([formulas])
    for fid, f in built.formulas.items():
        g = cached.formulas[fid]
        for side in ("lhs", "rhs", "display_lhs", "display_rhs"):
            # display_* are kept as written (unevaluated): they must not come back reordered
            assert sympy.srepr(getattr(g, side)) == sympy.srepr(getattr(f, side)), (fid, side)
    for name, q in built.quantities.items():
        assert cached.quantities[name].symbol == q.symbol
        assert cached.quantities[name].symbol.assumptions0 == q.symbol.assumptions0


def test_a_cached_derivation_is_used_without_solving_again(cache_dir, formulas, monkeypatch):
    target, values, kwargs = QUESTIONS[1]
    cold = symcalc.solve(target, library=load_library([formulas]), **values, **kwargs)
    assert entries(cache_dir, "derivation")

    def no_solving(*args, **kwargs):
        raise AssertionError("a cached derivation must not be solved again")
    monkeypatch.setattr(derive, "_Builder", no_solving)
    hits = cache.stats["hits"]
    warm = symcalc.solve(target, library=load_library([formulas]), **values, **kwargs)
    assert cache.stats["hits"] == hits + 2        # the library and the derivation
    assert warm.value == cold.value and warm.text() == cold.text()


def test_answers_are_identical_with_and_without_the_cache(cache_dir, formulas, monkeypatch):
    def answers(lib):
        out = []
        for target, values, kwargs in QUESTIONS:
            r = symcalc.solve(target, library=lib, **values, **kwargs)
            out.append((np.asarray(r.value).tolist(), r.unit, r.text(), r.json(), r.latex(standalone=True),
                        r.markdown(), str(r.closed_form)))
        return out
    cold = answers(load_library([formulas]))                  # builds the entries
    warm = answers(load_library([formulas]))                  # reads them
    assert cache.stats["hits"] >= len(QUESTIONS) + 1
    monkeypatch.setenv(cache.ENV_OFF, "1")
    off = answers(load_library([formulas]))
    assert cold == warm == off


def test_clear_removes_every_entry(cache_dir, formulas):
    load_library([formulas])
    assert cache.clear() == 1 and not entries(cache_dir, "library")
    assert cache.clear() == 0


def test_the_cli_caches_a_library_with_extra_files(cache_dir, cli, tmp_path):
    (tmp_path / "mine.toml").write_text(EXTRA)
    args = ("solve", "run_energy", "n_gpus=1000", "gpu_power_draw=0.7 kW", "train_time=1848 hour",
            "--formulas", str(tmp_path / "mine.toml"))
    first = cli(*args)
    assert first.code == 0, first.err
    assert entries(cache_dir, "library") and entries(cache_dir, "derivation")
    hits = cache.stats["hits"]
    second = cli(*args)
    assert second.out == first.out and cache.stats["hits"] == hits + 2


# ---- a cache that cannot be forged from outside ----------------------------------------------


class _Touch:
    """Unpickling this creates a file: what a forged entry would do if it were ever unpickled."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def library_entry_name(formulas: Path, cache_dir: Path) -> Path:
    """Where load_library([formulas]) keeps its library (the name it will read)."""
    lib = load_library([formulas])
    [entry] = entries(cache_dir, "library")
    assert lib.fingerprint in entry.name
    return entry


@pytest.mark.parametrize("forgery", ["sha256 header", "random mac", "other key"])
def test_a_forged_entry_is_never_unpickled(cache_dir, formulas, tmp_path, forgery):
    import hashlib
    import hmac
    entry = library_entry_name(formulas, cache_dir)
    marker = tmp_path / "forged-entry-ran"
    payload = pickle.dumps(("library", entry.name[8:-7], _Touch(marker)))
    if forgery == "sha256 header":          # integrity is not authorship: anyone can hash a pickle
        mac = hashlib.sha256(payload).digest()
    elif forgery == "random mac":
        mac = os.urandom(32)
    else:                                   # authenticated, but with a key that is not the cache's
        mac = hmac.new(os.urandom(32), payload, hashlib.sha256).digest()
    entry.write_bytes(cache.MAGIC + mac + payload)
    rejected = cache.stats["rejected"]
    lib = load_library([formulas])
    assert not marker.exists()
    assert cache.stats["rejected"] == rejected + 1 and "young_interval" in lib.formulas


def test_the_key_and_the_directory_are_private(cache_dir, formulas):
    load_library([formulas])
    key = cache.key_dir() / cache.KEY_FILE
    assert stat.S_IMODE(os.stat(cache_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cache.key_dir()).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(key).st_mode) == 0o600 and len(key.read_bytes()) == 32
    # the key is not in the cache folder: the folder holds the entries only
    assert sorted(p.name for p in cache_dir.iterdir()) == sorted(p.name for p in entries(cache_dir, "library"))


def test_a_directory_only_readable_by_others_is_used_and_left_as_it_is(cache_dir, formulas):
    # SYMCALC_CACHE_DIR pointed at a 0755 folder: used (nobody else may write it), never chmod-ed
    load_library([formulas])
    os.chmod(cache_dir, 0o755)
    hits = cache.stats["hits"]
    load_library([formulas])
    assert cache.stats["hits"] == hits + 1 and stat.S_IMODE(os.stat(cache_dir).st_mode) == 0o755


def test_a_copied_cache_with_its_key_authenticates_nothing(tmp_path, monkeypatch, formulas):
    # a cache filled elsewhere (CI, a container layer, a tarball) and copied in, the key of
    # that machine included: this user's key is another, so nothing in it is unpickled
    monkeypatch.delenv(cache.ENV_OFF, raising=False)
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "theirs" / "cache"))
    monkeypatch.setenv(cache.ENV_KEY_DIR, str(tmp_path / "theirs" / "key"))
    load_library([formulas])
    shutil.copytree(tmp_path / "theirs", tmp_path / "mine")
    shutil.copy(tmp_path / "theirs" / "key" / cache.KEY_FILE, tmp_path / "mine" / "cache" / cache.KEY_FILE)
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "mine" / "cache"))
    monkeypatch.setenv(cache.ENV_KEY_DIR, str(tmp_path / "my-key"))      # this user's own key
    hits, stores = cache.stats["hits"], cache.stats["stores"]
    lib = load_library([formulas])
    # not read (this user has no key yet: nothing can authenticate), rebuilt and stored anew
    assert cache.stats["hits"] == hits and cache.stats["stores"] == stores + 1 and "young_interval" in lib.formulas
    hits = cache.stats["hits"]
    load_library([formulas])
    assert cache.stats["hits"] == hits + 1          # now under this user's key


def test_a_key_others_may_read_is_reported_once_and_not_used(cache_dir, formulas, capsys):
    load_library([formulas])
    key = cache.key_dir() / cache.KEY_FILE
    os.chmod(key, 0o644)
    cache._said.clear()
    rejected, hits = cache.stats["rejected"], cache.stats["hits"]
    load_library([formulas])
    load_library([formulas])
    err = capsys.readouterr().err
    assert err.count("symcalc: the cache is not used:") == 1 and str(key) in err and "delete it" in err
    assert cache.stats["hits"] == hits and cache.stats["rejected"] >= rejected + 2


def test_a_folder_others_may_write_is_reported_once(cache_dir, formulas, capsys):
    load_library([formulas])
    os.chmod(cache_dir, 0o777)
    cache._said.clear()
    load_library([formulas])
    load_library([formulas])
    err = capsys.readouterr().err
    assert err.count("symcalc: the cache is not used:") == 1 and "others may write" in err
    assert stat.S_IMODE(os.stat(cache_dir).st_mode) == 0o777


def test_a_symlink_at_the_cache_path_is_not_followed(tmp_path, monkeypatch, formulas):
    elsewhere = tmp_path / "someone-elses"
    elsewhere.mkdir(mode=0o700)
    precious = elsewhere / "precious.pickle"
    precious.write_bytes(b"not the cache's")
    link = tmp_path / "cache-link"
    link.symlink_to(elsewhere, target_is_directory=True)
    monkeypatch.setenv(cache.ENV_DIR, str(link))
    monkeypatch.delenv(cache.ENV_OFF, raising=False)
    rejected = cache.stats["rejected"]
    lib = load_library([formulas])
    assert "young_interval" in lib.formulas
    assert cache.stats["rejected"] == rejected + 2                  # neither read nor written
    assert cache.clear() == 0
    assert sorted(p.name for p in elsewhere.iterdir()) == ["precious.pickle"]


def test_a_symlinked_entry_is_not_followed(cache_dir, formulas, tmp_path):
    entry = library_entry_name(formulas, cache_dir)
    real = tmp_path / "real-entry"
    real.write_bytes(entry.read_bytes())         # a valid entry, but reached through a link
    entry.unlink()
    entry.symlink_to(real)
    rejected = cache.stats["rejected"]
    load_library([formulas])
    assert cache.stats["rejected"] == rejected + 1
    assert not entry.is_symlink() and entry.is_file()     # replaced by a real entry of its own
    assert real.read_bytes()                            # the link's target untouched


def test_a_fifo_in_the_cache_does_not_hang_a_run(cache_dir, formulas):
    import time
    entry = library_entry_name(formulas, cache_dir)
    entry.unlink()
    os.mkfifo(entry)
    start = time.monotonic()
    rejected = cache.stats["rejected"]
    lib = load_library([formulas])
    assert time.monotonic() - start < 30 and "young_interval" in lib.formulas
    assert cache.stats["rejected"] == rejected + 1


def test_a_planted_key_link_is_not_trusted(cache_dir, formulas, tmp_path):
    load_library([formulas])
    key = cache.key_dir() / cache.KEY_FILE
    theirs = tmp_path / "their-key"
    theirs.write_bytes(os.urandom(32))
    os.chmod(theirs, 0o600)
    key.unlink()
    key.symlink_to(theirs)
    rejected = cache.stats["rejected"]
    load_library([formulas])
    assert cache.stats["rejected"] == rejected + 2      # no entry read, none written with their key


def test_clear_deletes_only_what_the_cache_wrote(cache_dir, formulas, tmp_path):
    load_library([formulas])
    outside = tmp_path / "outside.pickle"
    outside.write_bytes(b"precious")
    planted = {
        "notes.pickle": b"a file of the user's",
        "derivation-" + "0" * 64 + ".pickle": cache.MAGIC + b"\0" * 32 + b"not authenticated",
    }
    for name, data in planted.items():
        (cache_dir / name).write_bytes(data)
    (cache_dir / ("library-" + "1" * 64 + ".pickle")).symlink_to(outside)
    assert cache.clear() == 1                           # the one library entry it wrote
    assert outside.read_bytes() == b"precious"
    left = sorted(p.name for p in cache_dir.iterdir())
    assert left == sorted([*planted, "library-" + "1" * 64 + ".pickle"])


def test_stale_temporary_files_are_cleaned_up(cache_dir, formulas):
    import time
    load_library([formulas])
    import subprocess
    import sys
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    gone = int(dead.stdout)                  # a process that has ended: its half-written file is litter
    stale = cache_dir / f".library-{os.getpid()}-0123456789abcdef.tmp"
    killed = cache_dir / f".library-{gone}-0123456789abcdef.tmp"
    fresh = cache_dir / f".library-{os.getppid()}-fedcba9876543210.tmp"
    for path in (stale, killed, fresh):
        path.write_bytes(b"half an entry of a run that was killed")
    old = time.time() - 2 * cache.STALE_SECONDS
    os.utime(stale, (old, old))
    cache.store("derivation", "a" * 64, {"any": "value"})
    # an hour old, or of a run that has ended, is removed at once; a fresh one of a live
    # process (here pytest's parent) may be another run's, still writing
    assert not stale.exists() and not killed.exists() and fresh.exists()


def test_pruning_keeps_the_newest_and_only_its_own(cache_dir, monkeypatch):
    import time
    monkeypatch.setitem(cache.MAX_ENTRIES, "derivation", 2)
    cache.store("derivation", "a" * 64, 1)
    foreign = cache_dir / ("derivation-" + "f" * 64 + ".pickle")
    foreign.write_bytes(b"not written by the cache")
    old = time.time() - 100
    for name in ("derivation-" + "a" * 64 + ".pickle", foreign.name):
        os.utime(cache_dir / name, (old, old))
    cache.store("derivation", "b" * 64, 2)
    cache.store("derivation", "c" * 64, 3)
    assert cache.load("derivation", "a" * 64) is None and foreign.exists()
    assert (cache.load("derivation", "b" * 64), cache.load("derivation", "c" * 64)) == (2, 3)


def test_processes_racing_on_a_cold_cache_share_one_key_and_agree(tmp_path, monkeypatch):
    """Eight runs start together on an empty cache: each creates the key or uses the one that
    won the race (a link never replaces), and every entry any of them wrote authenticates."""
    import subprocess
    import sys
    env = dict(os.environ, SYMCALC_CACHE_DIR=str(tmp_path / "cache"), SYMCALC_KEY_DIR=str(tmp_path / "key"))
    env.pop(cache.ENV_OFF, None)
    args = [sys.executable, "-m", "symcalc", "solve", "d_model", "n_params=1.291059e10", "n_layers=40",
            "vocab_size=32000", "--brief"]
    runs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(8)]
    outputs = [run.communicate(timeout=240) for run in runs]
    assert [run.returncode for run in runs] == [0] * 8, outputs
    assert {out for out, _ in outputs} == {outputs[0][0]} and outputs[0][0].startswith("d_model = ")
    names = sorted(p.name for p in (tmp_path / "cache").iterdir())
    keys = sorted(p.name for p in (tmp_path / "key").iterdir())
    assert keys == [cache.KEY_FILE] and not [n for n in names if n.endswith(".tmp")]
    rerun = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
    assert rerun.stdout == outputs[0][0]
    # counted after the rerun: a derivation built under the race's load may have run into the
    # symbolic limit (not kept on disk), and the quiet rerun keeps it
    entries_written = [p.name for p in (tmp_path / "cache").iterdir() if p.name.endswith(".pickle")]
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "cache"))
    monkeypatch.setenv(cache.ENV_KEY_DIR, str(tmp_path / "key"))
    assert len(entries_written) >= 2 and cache.clear() == len(entries_written)     # all authenticate


SYMPY_PROBE = """
import sys
from symcalc import cli

sys.argv = ["symcalc", *sys.argv[1:]]
try:
    cli.main()
except SystemExit:
    pass
print("sympy imported:", "sympy" in sys.modules, file=sys.stderr)
"""


@pytest.mark.parametrize("question", [
    ("solve", "n_gpus", "n_params=30e9", "n_tokens=600e9 token", "train_time=30day", "mfu=45%",
     "peak_flops=989 TFLOP/s"),
    ("solve", "mfu", "n_params=7e9", "tokens_per_second=150000 token/s", "n_gpus=64", "--hardware", "h100-sxm",
     "--json"),
])
def test_a_cached_question_answers_without_importing_sympy(cache_dir, question):
    # the first run builds the library and the derivation (sympy); the second reads them frozen
    # (symcalc.lazy), runs their compiled source (symcalc.compiled) and shows their printed forms
    import subprocess
    import sys
    env = {**os.environ, cache.ENV_DIR: str(cache_dir)}
    env.pop(cache.ENV_OFF, None)
    runs = [subprocess.run([sys.executable, "-c", SYMPY_PROBE, *question], env=env, capture_output=True, text=True)
            for _ in range(2)]
    assert runs[0].stdout == runs[1].stdout and runs[1].stdout.strip()
    assert runs[0].stderr.strip().endswith("sympy imported: True")
    assert runs[1].stderr.strip().endswith("sympy imported: False")


class _Planted:
    """A pickle that, when loaded, creates ``marker`` (open(marker, "w")): code run by reading."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _pint_folder_as_before(cache_dir: Path) -> Path:
    """pint's own cache folder as symcalc had pint keep it before issue 34, filled by pint
    itself (so its files have the names pint looks for)."""
    import pint

    from symcalc import units
    folder = cache_dir / f"pint-{pint.__version__}"
    pint.UnitRegistry(str(units.DEFINITIONS), autoconvert_offset_to_baseunit=False, cache_folder=folder)
    assert sorted(folder.glob("*.pickle"))
    return folder


SOLVE = ["-m", "symcalc", "solve", "d_model", "n_params=1.291059e10", "n_layers=40", "vocab_size=32000", "--brief"]


def test_a_planted_pint_pickle_runs_nothing(cache_dir, tmp_path):
    # issue 34: pint kept unauthenticated pickles in symcalc's cache folder; one planted there
    # ran code when a new process built its unit registry. Now pint reads no file: its parsed
    # definitions are symcalc cache entries, authenticated. Planted: pint's old folder, every
    # pickle replaced, and each of symcalc's pint entries replaced by the same payload behind a
    # forged header; run with the user's key and with a fresh one (as a copied cache meets it).
    import subprocess
    env = {**os.environ, cache.ENV_DIR: str(cache_dir)}
    env.pop(cache.ENV_OFF, None)
    first = subprocess.run([sys.executable, *SOLVE], env=env, capture_output=True, text=True, timeout=240)
    assert first.returncode == 0 and first.stdout.startswith("d_model = 5120")
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Planted(marker))
    ours = entries(cache_dir, "pint")
    assert len(ours) == 2                       # the parsed file and pint's derived tables
    for p in ours:
        p.write_bytes(cache.MAGIC + b"\0" * 32 + payload)
    for p in _pint_folder_as_before(cache_dir).glob("*.pickle"):
        p.write_bytes(payload)
    pickle.loads(payload)                       # (the payload does what it says)
    assert marker.exists()
    marker.unlink()
    for key_dir in (tmp_path / "key", tmp_path / "fresh-key"):
        run = subprocess.run([sys.executable, *SOLVE], env={**env, cache.ENV_KEY_DIR: str(key_dir)},
                             capture_output=True, text=True, timeout=240)
        assert (run.returncode, run.stdout, run.stderr) == (0, first.stdout, "")
        assert not marker.exists()


def test_pints_parsed_units_are_authenticated_entries_of_the_cache(cache_dir):
    # two entries of kind "pint" (authenticated, as every entry), written by the first build
    # and read by the next; nothing else is written, no folder of pint's own
    from symcalc import units
    from symcalc.units import pintcache
    stores, hits = cache.stats["stores"], cache.stats["hits"]
    first = pintcache.build(str(units.DEFINITIONS), autoconvert_offset_to_baseunit=False)
    assert cache.stats["stores"] == stores + 2 and len(entries(cache_dir, "pint")) == 2
    assert sorted(p.name for p in cache_dir.iterdir()) == [p.name for p in entries(cache_dir, "pint")]
    second = pintcache.build(str(units.DEFINITIONS), autoconvert_offset_to_baseunit=False)
    assert cache.stats["hits"] == hits + 2 and cache.stats["stores"] == stores + 2
    # the same units either way: a gigabyte is 8 gigabits, a day 86,400 s (by definition)
    for ureg in (first, second):
        assert ureg.Quantity(1, "GB").to("Gb").magnitude == pytest.approx(8)
        assert ureg.Quantity(1, "day").to("s").magnitude == pytest.approx(86400)
    assert cache.info()["entries"]["pint"]["count"] == 2


def test_clear_removes_pints_entries_and_its_old_folders(cache_dir, tmp_path):
    from symcalc import units
    from symcalc.units import pintcache
    pintcache.build(str(units.DEFINITIONS), autoconvert_offset_to_baseunit=False)
    old = _pint_folder_as_before(cache_dir)
    old_pickles = len(list(old.glob("*.pickle")))
    # another old folder holding a file pint did not write: the file and its folder stay
    kept = cache_dir / "pint-0.1"
    kept.mkdir(mode=0o700)
    (kept / "notes.txt").write_text("mine")
    # a link named like one: not followed, what it points at stays
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ("0" * 40 + ".pickle")).write_bytes(b"x")
    os.symlink(elsewhere, cache_dir / "pint-0.2")
    assert cache.clear() == 2 + old_pickles
    assert not entries(cache_dir, "pint") and not old.exists()
    assert (kept / "notes.txt").read_text() == "mine"
    assert (elsewhere / ("0" * 40 + ".pickle")).exists() and (cache_dir / "pint-0.2").is_symlink()


@pytest.mark.parametrize("inside", [False, True])
def test_a_key_in_the_cache_folder_is_refused_in_one_line(cache_dir, tmp_path, monkeypatch, capsys, inside):
    # the key authenticates the entries only when a copy of the cache does not carry it
    cache.store("derivation", "a" * 64, 1)
    assert cache.load("derivation", "a" * 64) == 1
    key_dir = cache_dir / "key" if inside else cache_dir
    key_dir.mkdir(mode=0o700, exist_ok=True)
    shutil.copy2(tmp_path / "key" / cache.KEY_FILE, key_dir / cache.KEY_FILE)
    monkeypatch.setenv(cache.ENV_KEY_DIR, str(key_dir))
    cache._said.clear()
    rejected = cache.stats["rejected"]
    assert cache.load("derivation", "a" * 64) is None and cache.load("derivation", "a" * 64) is None
    cache.store("derivation", "b" * 64, 2)
    assert cache.stats["rejected"] == rejected + 3 and not entries(cache_dir, "derivation")[1:]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "SYMCALC_KEY_DIR" in err
    assert ("inside the cache folder" if inside else "is the cache folder") in err
    assert cache.clear() == 1 and not entries(cache_dir, "derivation")     # clearing still works


def test_the_default_place_is_the_platforms_and_info_counts_entries(cache_dir, formulas, monkeypatch, tmp_path):
    """Without SYMCALC_CACHE_DIR the directory is the platform's user cache (platformdirs: on
    Linux $XDG_CACHE_HOME/symcalc), the key's the user configuration directory; info() counts
    what load_library stored: one library entry of its file's size."""
    load_library([formulas])
    got = cache.info()
    assert got["enabled"] and got["directory"] == str(cache.cache_dir())
    assert got["entries"]["library"]["count"] == 1
    size = sum(p.stat().st_size for p in cache.cache_dir().glob("library-*.pickle"))
    assert got["entries"]["library"]["bytes"] == size and got["bytes"] >= size
    monkeypatch.delenv(cache.ENV_DIR, raising=False)
    monkeypatch.delenv(cache.ENV_KEY_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xc"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xk"))
    if os.name == "posix" and not sys.platform.startswith("darwin"):
        assert cache.cache_dir() == tmp_path / "xc" / "symcalc"
        assert cache.key_dir() == tmp_path / "xk" / "symcalc"


def test_the_cache_commands_say_a_key_in_the_cache_folder_and_clear_pints_files(cache_dir, tmp_path, monkeypatch, cli):
    from symcalc import units
    from symcalc.units import pintcache
    pintcache.build(str(units.DEFINITIONS), autoconvert_offset_to_baseunit=False)      # 2 entries
    old = _pint_folder_as_before(cache_dir)
    old_pickles = len(list(old.glob("*.pickle")))
    inside = cache_dir / "key"
    monkeypatch.setenv(cache.ENV_KEY_DIR, str(inside))
    cache._said.clear()
    got = cli("cache", "info", "--json")
    assert got.code == 0 and got.json()["enabled"] is False and "inside" in got.json()["refused"]
    assert got.err.count("\n") == 1 and "SYMCALC_KEY_DIR" in got.err
    monkeypatch.setenv(cache.ENV_KEY_DIR, str(tmp_path / "key"))
    got = cli("cache", "clear", "--json")
    assert got.code == 0 and got.json()["removed"] == 2 + old_pickles
    assert not entries(cache_dir, "pint") and not old.exists()
