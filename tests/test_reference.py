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
    # names are typeset with escaped, breakable underscores: n_params -> n\_\allowbreak{}params
    for typeset in (r"\texttt{n\_\allowbreak{}params}", r"\texttt{mfu}", r"\texttt{young\_\allowbreak{}interval}"):
        assert typeset in text, typeset
    assert "Presets" in text and "H100" in text
    for _ in range(2):   # twice, for the table of contents
        out = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", tex.name], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-2000:]
    assert (tmp_path / "library.pdf").stat().st_size > 50_000
