"""Terminal output fits its width (issue 40): `solve` text wrapped at COLUMNS (default 80)
with a hanging indent, never splitting a number or parting it from its unit; `symcalc list
hardware` fits 80 columns without cutting a figure."""

from __future__ import annotations

import re

from symcalc.render.wrap import wrap_text

NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
SOLVE = ["solve", "step_time", "--model", "llama3-8b", "--hardware", "h100", "tp=1", "pp=1", "dp=64",
         "micro_batch_size=2", "global_batch_size=512", "--stack", "fsdp"]


def test_a_number_stays_with_its_unit_and_the_rest_hangs_under_the_indent():
    # "  " + 66 x's + " 362 GB/s ..." : "362" would end the first line at 72 columns and "GB/s"
    # start the next; glued, both go to the continuation, indented 2 + 4
    line = "  " + "x" * 66 + " 362 GB/s across nodes"
    assert wrap_text(line, 74).split("\n") == ["  " + "x" * 66, "      362 GB/s across nodes"]
    assert wrap_text("short line", 74) == "short line"      # a line that fits is left alone


def test_a_closed_form_with_no_spaces_breaks_after_an_operator_never_inside_a_number():
    form = "t = " + "*".join(["alpha_beta_gamma"] * 6) + "*1.5e+10*" + "*".join(["delta_eps"] * 4)
    lines = wrap_text(form, 40).split("\n")
    assert all(len(x) <= 40 for x in lines) and all(x.startswith("    ") for x in lines[1:])
    assert "".join(x.strip() for x in lines).replace(" ", "") == form.replace(" ", "")
    assert any("1.5e+10" in x for x in lines)             # the number whole on one line


def test_solve_fits_80_columns_and_prints_the_same_numbers_as_unwrapped(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100000")
    wide = cli(*SOLVE).out
    monkeypatch.setenv("COLUMNS", "80")
    narrow = cli(*SOLVE).out
    assert max(len(x) for x in wide.splitlines()) > 200     # the lines ran to 702 columns
    assert max(len(x) for x in narrow.splitlines()) <= 80
    assert NUMBER.findall(narrow) == NUMBER.findall(wide)   # no number split or lost
    assert narrow.split("\n")[0] == wide.split("\n")[0] == "step_time = 6.784 s"


def test_list_hardware_fits_80_columns_with_every_figure_whole(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = cli("list", "hardware").out
    assert max(len(x) for x in out.splitlines()) <= 80 and "…" not in out
    (h100,) = [x for x in out.splitlines() if "h100_sxm" in x]
    # nvidia-smi's 81559 MiB = 85.52 GB; NVIDIA's H100 SXM datasheet: 3.35 TB/s HBM3, 989.4 TFLOP/s dense BF16, 1979 FP8,
    # NVLink 900 GB/s both ways (450 a direction), 400 Gb/s NIC, 700 W
    assert NUMBER.findall(h100.replace("h100", "")) == ["85.52", "3350", "989.4", "1979", "450", "400", "700"]
    assert "TFLOP/s" in out and "GB/s" in out                # the units, in the headers


def test_list_models_fits_80_columns_with_every_figure_whole(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = cli("list", "models").out
    assert max(len(x) for x in out.splitlines()) <= 80 and "…" not in out
    (row,) = [x for x in out.splitlines() if x.startswith("llama3_405b")]
    # Llama 3 405B (Dubey et al. 2024, Table 3): 405.85e9 parameters, 126 layers, width 16,384, 128
    # heads with 8 KV heads, FFN 53,248, a vocabulary of 128,256 tokens: as people say them
    assert row.split()[1:8] == ["406B", "126", "16384", "128/8", "53248", "128k", "-"]


PLAN = ["plan", "--model", "llama3-8b", "--hardware", "h100", "--gpus", "8", "--top", "3", "--global-batch-size", "512"]


def test_plan_fits_80_columns_and_its_recheck_still_pastes_as_one_command(cli, monkeypatch):
    # the table drops columns (and names them), the sentences wrap, and the re-check command is
    # cut at words with the shell's continuation: its lines joined are the command of the row
    # --json gives (as a shell reads them: a backslash-newline is nothing)
    import shlex
    monkeypatch.setenv("COLUMNS", "80")
    out = cli(*PLAN).out
    assert max(len(x) for x in out.splitlines()) <= 80
    assert "(left out to fit 80 columns:" in out
    lines = out.splitlines()
    first = next(i for i, x in enumerate(lines) if x.startswith("Re-check #1: "))
    last = next(i for i in range(first, len(lines)) if not lines[i].endswith(" \\"))
    assert last > first                                     # the command did not fit one line
    pasted = "".join(x[:-1] if x.endswith("\\") else x for x in lines[first:last + 1])
    command = cli(*PLAN, "--json").json()["rows"][0]["command"]
    assert shlex.split(pasted.removeprefix("Re-check #1: ")) == shlex.split(command)
    # compare's text wraps as well (unwrapped, its side-by-side line runs past 80 columns)
    compare = ["compare", "step_time", "--model", "llama3-8b", "--hardware", "h100", "tp=8", "dp=1",
               "global_batch_size=64", "micro_batch_size=1", "--vs", "tp=4"]
    assert max(len(x) for x in cli(*compare).out.splitlines()) <= 80
    monkeypatch.setenv("COLUMNS", "100000")
    assert max(len(x) for x in cli(*compare).out.splitlines()) > 80


def test_list_options_and_quantities_fold_long_words_instead_of_cutting_them(cli, monkeypatch):
    # a description with an unbroken identifier longer than its column ("(PYTORCH_CUDA_ALLOC_CONF"
    # in allocator_segments, "checkpoint_every_k_layers") was cut with an ellipsis at 80 columns;
    # folded, every word is whole across lines
    monkeypatch.setenv("COLUMNS", "80")
    for what in ("options", "quantities", "formulas"):
        out = cli("list", what).out
        assert max(len(x) for x in out.splitlines()) <= 80 and "…" not in out, what
    assert "PYTORCH_CUDA_ALLOC_CO" in cli("list", "options").out
