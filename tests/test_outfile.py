"""Output files are written whole or not at all, and names that cannot be files are refused
before any work (symcalc.outfile, and every writer of the command line)."""

from __future__ import annotations

import os
import stat

import pytest

from symcalc.errors import OutputError
from symcalc.outfile import write_file

MFU = ("solve", "mfu", "n_params=7e9", "tokens_per_second=150000 token/s", "n_gpus=64", "peak_flops=1979 TFLOP/s")
SWEEP = ("sweep", "train_time", "n_params=70e9", "n_tokens=2e12 token", "peak_flops=989 TFLOP/s", "mfu=40%",
         "--vary", "n_gpus=64:128:3")


def test_a_new_file_is_written_whole(tmp_path):
    target = tmp_path / "out.tex"
    write_file(target, "\\documentclass{article}\n")
    assert target.read_text() == "\\documentclass{article}\n"
    assert os.listdir(tmp_path) == ["out.tex"]          # no temporary file left


def test_a_failed_write_leaves_the_old_file_as_it_was(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("the good old content\n")

    def half_then_fail(fh):
        fh.write(b"half of the new con")
        raise OSError(28, "No space left on device")
    with pytest.raises(OutputError, match="cannot write the output .*out.csv: No space left on device"):
        write_file(target, half_then_fail)
    assert target.read_text() == "the good old content\n"
    assert os.listdir(tmp_path) == ["out.csv"]


def test_ctrl_c_during_a_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "out.md"
    target.write_text("old\n")

    def interrupted(fh):
        fh.write(b"# half")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        write_file(target, interrupted)
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["out.md"]


def test_an_existing_file_keeps_its_permissions(tmp_path):
    target = tmp_path / "shared.tex"
    target.write_text("old")
    os.chmod(target, 0o640)
    write_file(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(os.stat(target).st_mode) == 0o640


@pytest.mark.parametrize("name, message", [
    ("", "--latex needs a file name (got an empty one)"),
    ("   ", "--latex needs a file name (got an empty one)"),
    ("no/such/dir/out.tex", "cannot write --latex no/such/dir/out.tex: the directory no/such/dir does not exist"),
    (".", "cannot write --latex .: it is a directory"),
    ("x" * 300 + ".tex", "File name too long"),
])
def test_names_that_cannot_be_files_are_refused_before_any_work(cli, tmp_path, monkeypatch, name, message):
    monkeypatch.chdir(tmp_path)
    r = cli(*MFU, "--latex", name)
    assert r.code == 2 and r.out == "" and message in r.err and r.err.count("\n") == 1
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("args, option", [
    (("solve", *MFU[1:], "--markdown", ""), "--markdown"),
    (("formulas", "--latex", ""), "--latex"),
    ((*SWEEP, "--csv", ""), "--csv"),
    ((*SWEEP, "--plot", ""), "--plot"),
])
def test_every_writer_refuses_an_empty_name(cli, args, option):
    r = cli(*args)
    assert r.code == 2 and r.err == f"error: {option} needs a file name (got an empty one)\n"


def test_every_writer_replaces_an_existing_file(cli, tmp_path):
    files = {name: tmp_path / name for name in ("d.tex", "d.md", "lib.tex", "s.csv", "s.png")}
    for path in files.values():
        path.write_text("stale")
    assert cli(*MFU, "--latex", str(files["d.tex"]), "--markdown", str(files["d.md"])).code == 0
    assert cli("formulas", "--latex", str(files["lib.tex"])).code == 0
    assert cli(*SWEEP, "--csv", str(files["s.csv"]), "--plot", str(files["s.png"])).code == 0
    assert files["d.tex"].read_text().startswith("\\documentclass")
    assert files["d.md"].read_text().startswith("# mfu")
    assert files["lib.tex"].read_text().rstrip().endswith("\\end{document}")
    assert files["s.csv"].read_text().splitlines()[0] == "n_gpus,train_time [day],feasible"
    assert files["s.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(tmp_path)) == sorted(files)


def test_a_stream_is_written_directly(cli, tmp_path):
    # /dev/stdout or a pipe from >(...) is not a document to replace: it is written to
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        r = cli(*MFU, "--markdown", str(fifo), "--brief")
        assert r.code == 0 and r.out == "mfu = 4.974 %\n"
        assert os.read(reader, 1 << 16).startswith(b"# mfu")
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
