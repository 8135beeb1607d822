"""Hardware profiles read from a TOML file (what `symcalc calibrate` will write), and preset values
that were not measured.

A profile is one table of formulas/presets/hardware.toml in a file of its own, optionally on a
built-in preset (``base``). The MFU question below is seed 000's: 6 x 7e9 x 150,000 token/s of
work on 64 GPUs, over their peak.
"""

from __future__ import annotations

import textwrap

import pytest

import symcalc
from symcalc.errors import MalformedValueError, UnknownNameError
from symcalc.library.presets import load_table, find_preset, hardware_from_file

WORK = 6 * 7e9 * 150_000                     # FLOP/s of useful work
MFU = dict(n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64)
MFU_ARGS = ("solve", "mfu", "n_params=7e9", "tokens_per_second=150000 token/s", "n_gpus=64")

PROFILE = """
[my_gpu]
title = "A GPU measured in our own cluster"
source = "our benchmarks, 2025-06"
values.gpu_memory = { value = "96 GB", source = "nvidia-smi", basis = "measured" }
values.hbm_bandwidth = { value = "3.9 TB/s", source = "vendor sheet", basis = "datasheet" }
peak_flops.bf16 = { value = "800 TFLOP/s", source = "a guess until we measure it", basis = "assumed" }
"""


def write(tmp_path, text: str, name: str = "profile.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_a_profile_file_is_a_hardware_preset(tmp_path, cli):
    path = write(tmp_path, PROFILE)
    r = symcalc.solve("mfu", hardware=path, **MFU)
    assert r.value == pytest.approx(100 * WORK / (64 * 800e12), rel=1e-12)        # 8.203 %
    assert r.given["peak_flops"].origin == "hardware my_gpu: a guess until we measure it"
    assert r.presets == {"hardware": "my_gpu"}
    d = cli(*MFU_ARGS, "--hardware", path, "--json").json()
    assert d["value"] == pytest.approx(r.value, rel=1e-12)
    assert d["from_presets"]["peak_flops"] == {"value": "800 TFLOP/s", "source": "hardware my_gpu: a guess until "
                                               "we measure it"}


def test_a_profile_on_a_built_in_preset_overrides_only_what_it_gives(tmp_path):
    path = write(tmp_path, """
        [h100_in_our_racks]
        base = "h100"
        values.nic_bandwidth = { value = "200 Gb/s", source = "our racks have one 200 Gb/s port a GPU" }
        """)
    p = hardware_from_file(path)
    h100 = find_preset("hardware", "h100")
    assert p.key == "h100_in_our_racks" and p.file == path and "h100_sxm" in p.source
    assert p.values["nic_bandwidth"] == ("200 Gb/s", "our racks have one 200 Gb/s port a GPU")
    assert {k: v for k, v in p.values.items() if k != "nic_bandwidth"} == \
        {k: v for k, v in h100.values.items() if k != "nic_bandwidth"}
    assert p.peak_flops == h100.peak_flops
    peak = float(h100.peak_flops["bf16"][0].split()[0]) * 1e12
    assert symcalc.solve("mfu", hardware=path, **MFU).value == pytest.approx(100 * WORK / (64 * peak), rel=1e-12)


def test_an_answer_says_which_preset_values_it_used_were_not_measured(tmp_path, cli):
    path = write(tmp_path, PROFILE.replace('basis = "measured"', 'basis = "derived"'))
    r = symcalc.solve("mfu", hardware=path, **MFU)
    # the peak is used and assumed; gpu_memory is derived but this answer does not use it
    unmeasured = [f for f in r.findings if f.kind == "unmeasured"]
    assert [f.quantity for f in unmeasured] == ["peak_flops"]
    assert unmeasured[0].values == {"value": "800 TFLOP/s", "preset": "hardware my_gpu", "basis": "assumed",
                                    "source": "a guess until we measure it"}
    line = "peak_flops = 800 TFLOP/s from hardware my_gpu is assumed, not measured: a guess until we measure it"
    assert line in r.warnings
    run = cli(*MFU_ARGS, "--hardware", path)
    assert run.code == 0 and f"warning: {line}" in run.err.splitlines()
    d = cli(*MFU_ARGS, "--hardware", path, "--json").json()
    assert line in d["warnings"] and [f["kind"] for f in d["findings"]] == ["unmeasured"]
    # measured and datasheet figures, and figures of unstated basis, say nothing
    measured = write(tmp_path, PROFILE.replace('"assumed"', '"measured"'), "measured.toml")
    assert not [f for f in symcalc.solve("mfu", hardware=measured, **MFU).findings if f.kind == "unmeasured"]


def test_a_looked_up_value_that_was_not_measured_says_so(tmp_path):
    path = write(tmp_path, PROFILE)
    r = symcalc.solve("peak_flops", hardware=path)          # nothing given determines it: looked up
    assert r.value == pytest.approx(800) and r.looked_up
    assert [f.kind for f in r.findings] == ["looked_up", "unmeasured"]


def test_built_in_presets_read_the_basis_of_each_value():
    p = load_table("hardware", "x", {"title": "x", "source": "s", "values": {
        "gemm_efficiency": {"value": "0.8", "source": "the H100's, for want of a measurement", "basis": "assumed"}},
        "peak_flops": {"bf16": {"value": "1 PFLOP/s", "source": "sheet", "basis": "datasheet"}}}, "hardware.toml")
    assert p.basis == {"gemm_efficiency": "assumed"} and p.peak_basis == {"bf16": "datasheet"}
    assert p.basis_of("gemm_efficiency", "bf16") == "assumed" and p.basis_of("peak_flops", "bf16") == "datasheet"
    assert p.basis_of("peak_flops", "fp8") is None
    with pytest.raises(Exception, match="basis is one of measured, datasheet, fitted, derived, assumed"):
        load_table("hardware", "x", {"values": {"gpu_memory": {"value": "80 GB", "source": "s", "basis": "guessed"}}},
              "hardware.toml")


BAD = [
    ("no such file", None, "malformed_value", "no such file"),
    ("not TOML", "[my_gpu\n", "malformed_value", "not valid TOML"),
    ("two tables", PROFILE + "\n[other]\nvalues.gpu_memory = { value = \"80 GB\", source = \"s\" }\n",
     "malformed_value", "2 tables; a profile holds exactly one table [name]"),
    ("a key outside the table", 'title = "x"\n' + PROFILE, "malformed_value", "top-level key 'title' outside a table"),
    ("unknown key", PROFILE.replace("values.gpu_memory", "valuse.gpu_memory"), "malformed_value",
     "[my_gpu]: unknown key 'valuse'. Did you mean: values"),
    ("unknown key of a value", PROFILE.replace('basis = "measured"', 'basics = "measured"'), "malformed_value",
     "values.gpu_memory: unknown key 'basics'. Did you mean: basis?"),
    ("no source", PROFILE.replace('source = "nvidia-smi", ', ""), "malformed_value",
     "values.gpu_memory needs a source (where the value comes from)"),
    ("unknown basis", PROFILE.replace('"measured"', '"guessed"'), "malformed_value",
     "values.gpu_memory: basis is one of measured, datasheet, fitted, derived, assumed; got 'guessed'"),
    ("unknown quantity", PROFILE.replace("values.gpu_memory", "values.gpu_memroy"), "unknown_name",
     "values.gpu_memroy: the library defines no quantity 'gpu_memroy'. Did you mean: gpu_memory"),
    ("wrong dimension", PROFILE.replace('"96 GB"', '"96 GB/s"'), "dimension", "values.gpu_memory: "),
    ("unknown dtype", PROFILE.replace("peak_flops.bf16", "peak_flops.bf61"), "malformed_value",
     "peak_flops.bf61: no option or built-in GPU computes in 'bf61'. Did you mean: bf16"),
    ("unknown base", '[mine]\nbase = "h10"\nvalues.gpu_memory = { value = "80 GB", source = "s" }\n', "unknown_name",
     "[mine]: base = 'h10' is not a built-in hardware preset. Did you mean: h100"),
    ("too large", PROFILE + "#" * (1 << 20), "malformed_value", "larger than 1 MB"),
    # aliases were accepted and never checked (a number passed); now a list of names, kept
    ("aliases not names", PROFILE.replace("[my_gpu]\n", "[my_gpu]\naliases = 5\n"), "malformed_value",
     "[my_gpu]: aliases is a list of names"),
    # one name per fact: a dense peak is peak_flops.DTYPE, never a value beside it
    ("a peak as a value", PROFILE.replace("values.gpu_memory", "values.peak_flops_bf16"), "malformed_value",
     "values.peak_flops_bf16: a dense peak is written peak_flops.bf16"),
]


@pytest.mark.parametrize("case,text,kind,needle", BAD, ids=[b[0] for b in BAD])
def test_a_bad_profile_file_is_one_line_and_exit_2(tmp_path, cli, case, text, kind, needle):
    path = str(tmp_path / "missing.toml") if text is None else write(tmp_path, text)
    run = cli(*MFU_ARGS, "--hardware", path)
    assert run.code == 2 and "Traceback" not in run.out + run.err
    lines = run.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: hardware profile '{path}'") and needle in lines[0]
    run = cli(*MFU_ARGS, "--hardware", path, "--json")
    err = run.json()["error"]
    assert run.code == 2 and err["kind"] == kind and needle in err["message"]


def test_a_bad_profile_file_raises_in_python(tmp_path):
    with pytest.raises(MalformedValueError, match="no such file"):
        symcalc.solve("mfu", hardware=str(tmp_path / "nothing.toml"), **MFU)
    with pytest.raises(UnknownNameError) as e:
        symcalc.solve("mfu", hardware=write(tmp_path, PROFILE.replace("values.gpu_memory", "values.gpu_memroy")),
                      **MFU)
    assert e.value.suggestions[0] == "gpu_memory"
