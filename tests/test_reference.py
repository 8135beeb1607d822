"""The whole library as one LaTeX reference document, compiled by pdflatex."""

import subprocess

import symcalc


def test_library_reference_compiles(cli, tmp_path, pdflatex):
    tex = tmp_path / "library.tex"
    run = cli("formulas", "--latex", str(tex))
    assert run.code == 0 and "formulas" in run.out
    text = tex.read_text()
    lib = symcalc.default_library()
    # every formula and every quantity is in it
    assert text.count(r"\subsection*{") >= len(lib.formulas)
    assert all(f"\\texttt{{{q.replace('_', chr(92) + '_')}}}" in text for q in ("n_params", "mfu", "young_interval"))
    assert "Presets" in text and "H100" in text
    for _ in range(2):   # twice, for the table of contents
        out = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", tex.name], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-2000:]
    assert (tmp_path / "library.pdf").stat().st_size > 50_000
