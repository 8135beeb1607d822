"""No code and no file reads from text: what a formula file says never runs in TeX.

A quantity's LaTeX symbol is checked against a whitelist at load (it is math, written
unescaped); every text field (title, source, notes, description) is escaped wherever it
reaches LaTeX or Markdown. The end-to-end test compiles what symcalc wrote with shell escape
*on*, and looks for the file that ``\\input`` would have read and the one ``\\write18`` would have
made."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from symcalc.errors import LibraryError
from symcalc.library.loading import load_library
from symcalc.library.texcheck import UnsafeTeX, check_latex

QUANTITY = """
[quantities.gpu_power_draw]
unit = "W"
display_unit = "kW"
latex = {latex}
description = {description}

[quantities.run_energy]
unit = "J"
display_unit = "MWh"
latex = "E"
description = "energy of the run"

[[formulas]]
id = "energy_of_the_run"
title = {title}
equation = "run_energy = n_gpus * gpu_power_draw * train_time"
source = {source}
notes = {notes}
"""


def formula_file(tmp_path, latex='"P"', description='"power"', title='"Energy"', source='"test"', notes='""'):
    path = tmp_path / "mine.toml"
    path.write_text(QUANTITY.format(latex=latex, description=description, title=title, source=source, notes=notes))
    return path


@pytest.mark.parametrize("symbol", [
    r"\input{/etc/passwd}", r"\include{secret}", r"\write18{touch pwned}", r"\immediate\write18{id}",
    r"\openin5=secret", r"\read5 to \x", r"\catcode`\^^5c=0", r"\def\x{y}", r"\edef\x{y}", r"\let\x\input",
    r"\csname input\endcsname{f}", r"\expandafter\input", r"\newcommand{\x}{y}", r"\renewcommand\mathrm{x}",
    r"\usepackage{shellesc}", r"\ShellEscape{id}", r"\directlua{os.execute('id')}", r"\scantokens{x}",
    r"\special{x}", r"\openout1=f", r"\lowercase{x}", r"\makeatletter", r"\verb|x|", r"\begin{document}",
    "^^5cinput{/etc/passwd}", "P^^5c", "x % the rest of the line is a comment", "$x$", "a & b", "#1", "a~b",
    r"P\\x", "{unbalanced", "unbalanced}", r"\left( x", "x\ny", "P\u202e", "\u00e9",
])
def test_a_symbol_outside_the_whitelist_is_refused(symbol):
    with pytest.raises(UnsafeTeX):
        check_latex(symbol)


@pytest.mark.parametrize("symbol", [
    r"T_{\mathrm{AR}}^{\mathrm{hier}}", r"\hat{\theta}_{\mathrm{opt}}", r"G_{\max}^{\$}", r"\Delta t",
    r"M_{\mathrm{states}}^{\mathrm{no\,master}}", r"\left(\frac{a}{b}\right)", r"k_{\mathrm{ckpt}}^{*}",
    r"\mathcal{L}", r"\text{50\% of } x", r"\operatorname{bw}_{\mathrm{eff}}",
])
def test_the_notation_of_mathematics_passes(symbol):
    check_latex(symbol)


def test_a_file_with_an_unsafe_symbol_fails_its_load_naming_the_field(tmp_path):
    path = formula_file(tmp_path, latex=r"'\input{/etc/passwd}'")
    with pytest.raises(LibraryError) as e:
        load_library(extra=[path])
    assert e.value.message.startswith("mine.toml: quantity 'gpu_power_draw': 'latex' uses '\\input', which is not "
                                      "among the allowed macros")


@pytest.mark.parametrize("field", ["title", "source", "notes", "description"])
def test_a_text_field_with_a_control_character_fails_its_load(tmp_path, field):
    path = formula_file(tmp_path, **{field: '"evil \\u001b[2J wipes the terminal"'})
    with pytest.raises(LibraryError, match=f"'{field}' contains the control character U\\+001B"):
        load_library(extra=[path])


def test_tex_in_text_fields_never_runs(cli, tmp_path, pdflatex):
    """Titles, sources, notes and descriptions full of TeX that would read a file and run a
    command: escaped in --latex, formulas --latex and --markdown; pdflatex with shell escape on
    neither reads the file nor runs the command."""
    secret = tmp_path / "secret.tex"
    secret.write_text("THE-SECRET-CONTENT\n")
    attack = rf"\input{{{secret}}}\immediate\write18{{touch {tmp_path / 'pwned'}}}$\input{{{secret}}}$"
    toml = '"""' + attack.replace("\\", "\\\\") + '"""'
    path = formula_file(tmp_path, title=toml, source=toml, notes=toml, description=toml)
    args = ("solve", "run_energy", "n_gpus=1000", "gpu_power_draw=0.7 kW", "train_time=1848 hour",
            "--formulas", str(path))
    assert cli(*args, "--latex", str(tmp_path / "d.tex"), "--markdown", str(tmp_path / "d.md")).code == 0
    assert cli("formulas", "--latex", str(tmp_path / "lib.tex"), "--formulas", str(path)).code == 0
    markdown = (tmp_path / "d.md").read_text()
    assert "### 1. \\\\input{" in markdown and "\\$\\\\input" in markdown       # shown, escaped
    for doc in ("d.tex", "lib.tex"):
        tex = (tmp_path / doc).read_text()
        assert r"\textbackslash{}input\{" in tex and r"\input{" + str(secret) not in tex
        run = subprocess.run([pdflatex, "-shell-escape", "-interaction=nonstopmode", "-halt-on-error", doc],
                             cwd=tmp_path, capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stdout[-2000:]
        log = (tmp_path / doc).with_suffix(".log").read_text(errors="replace")
        assert f"({secret}" not in log and "(./secret.tex" not in log      # TeX logs each file it opens so
    assert not (tmp_path / "pwned").exists()


def test_the_built_in_symbols_all_pass():
    lib = load_library(use_cache=False)
    for q in lib.quantities.values():
        check_latex(q.latex)
    assert len(lib.quantities) > 200


def test_an_option_value_that_is_not_a_name_fails_its_load(tmp_path):
    path = tmp_path / "opt.toml"
    path.write_text(textwrap.dedent("""
        [options.evil]
        description = "x"
        default = "a"
        values = { a = "fine", "b`$\\\\input{x}" = "not a name" }
    """))
    with pytest.raises(LibraryError, match="option 'evil': value .* is not a name"):
        load_library(extra=[path])
