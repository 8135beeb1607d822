"""Derivations out: plain text, LaTeX (compiled by pdflatex), Markdown, JSON, number formats."""

import json
import subprocess

import pytest

import symcalc
from symcalc.units.format import fmt, fmt_latex


def mfu_result():
    return symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64,
                         peak_flops="1979 TFLOP/s")


QUERIES = {
    "mfu": lambda: mfu_result(),
    "gpus_for_deadline": lambda: symcalc.solve("n_gpus", n_params=30e9, n_tokens="600e9 token",
                                               train_time="30 day", mfu="45%", peak_flops="989 TFLOP/s"),
    "hidden_size_block": lambda: symcalc.solve("d_model", n_params=1.291059e10, n_layers=40, vocab_size=32000),
    "zero3": lambda: symcalc.solve("model_state_memory", n_params=7e9, n_gpus=64, options={"zero_stage": 3}),
    "young_inverse": lambda: symcalc.solve("mtbf", checkpoint_interval="30 min", checkpoint_write_time="98 s"),
    "ring_numeric": lambda: symcalc.solve("n_gpus", message_size="2 GB", allreduce_time="70 ms",
                                          link_bandwidth="50 GB/s", link_latency="0 s"),
    "price_in_dollars": lambda: symcalc.solve("total_cost", gpu_hours="500000 hour", gpu_hour_price="$4/hour"),
    "decode_step": lambda: symcalc.solve("decode_step_time", model="llama3-70b", hardware="h100", tp=8, batch_size=32,
                                         seq_len="8192 token"),
    "wall_clock": lambda: symcalc.solve("wall_clock_time", train_time="54 day", n_gpus=16384,
                                        checkpoint_write_time="60 s", recovery_time="15 min"),
}


def test_number_formats():
    assert fmt(150000) == "150000"
    assert fmt(4.2e10) == "4.2e10"
    assert fmt(4.97412) == "4.974"
    assert fmt(0.0001234) == "1.234e-4"
    assert fmt(9.99999e9) == "1e10"
    assert fmt_latex(4.2e10) == r"4.2 \times 10^{10}"
    assert fmt_latex(1e15) == "10^{15}"


def test_text_shows_formula_rearranged_form_and_numbers():
    text = mfu_result().text()
    assert text.splitlines()[0] == "mfu = 4.974 %"
    assert "achieved_flops_cluster = mfu * peak_flops * n_gpus" in text      # as cited
    assert "-> mfu = achieved_flops_cluster/(n_gpus*peak_flops)" in text     # rearranged
    assert "(6 FLOP/token)*7e9 = 4.2e10 FLOP/token" in text                  # numbers with units
    assert "flops_per_param_per_token = 6 FLOP/token" in text                # default reported


@pytest.mark.parametrize("name", QUERIES)
def test_standalone_latex_compiles(name, tmp_path, pdflatex):
    r = QUERIES[name]()
    tex = tmp_path / f"{name}.tex"
    tex.write_text(r.latex(standalone=True))
    run = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", tex.name],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:]
    pdf = tmp_path / f"{name}.pdf"
    assert pdf.exists() and pdf.read_bytes().startswith(b"%PDF")


def test_latex_shows_each_part_of_a_step():
    tex = QUERIES["gpus_for_deadline"]().latex()
    # (the route: compute -> GPU-hours at this MFU -> GPUs over the deadline)
    assert r"C = \mathrm{MFU} F_{\mathrm{peak}} H_{\mathrm{GPU}}" in tex              # as cited
    assert r"H_{\mathrm{GPU}} &= \frac{C}{\mathrm{MFU} F_{\mathrm{peak}}}" in tex     # rearranged
    assert r"\mathrm{TFLOP/s}" in tex and r"45\,\%" in tex                           # numbers with units
    assert "93.6224" in tex and "rounded up" in tex


def test_markdown_has_given_table_and_math():
    md = QUERIES["zero3"]().markdown()
    assert md.startswith("# model_state_memory")
    assert "| `n_params` | 7e9 |" in md
    assert "$$" in md and "zero_stage=3" in md


def test_json_object_has_the_documented_fields():
    d = json.loads(mfu_result().json())
    assert set(d) >= {"target", "value", "unit", "exact", "given", "options", "defaults_used", "steps",
                      "expression", "latex"}
    assert d["target"] == "mfu" and d["unit"] == "%" and d["exact"] is None
    assert d["value"] == pytest.approx(4.9741, rel=1e-4)
    assert d["given"]["peak_flops"] == "1979 TFLOP/s"
    assert d["defaults_used"]["flops_per_param_per_token"]["value"] == "6 FLOP/token"
    assert [s["formula"] for s in d["steps"]] == ["all_params_active", "flops_per_token_train",
                                                  "achieved_flops_from_throughput", "mfu_definition"]
    assert all({"formula", "solves_for", "latex"} <= set(s) for s in d["steps"])
    assert d["latex"].startswith(r"\mathrm{MFU} = ")


def test_json_keeps_the_shape_of_a_grid():
    import numpy as np
    r = symcalc.solve("train_time", n_params=70e9, n_tokens="2e12 token", n_gpus=np.array([[64], [128]]),
                      mfu=np.array([0.3, 0.4]), peak_flops="989 TFLOP/s")
    value = json.loads(r.json())["value"]
    # 6 * 70e9 * 2e12 / (64 * 0.3 * 989e12) s = 512.0 days
    assert len(value) == 2 and len(value[0]) == 2
    assert value[0][0] == pytest.approx(6 * 70e9 * 2e12 / (64 * 0.3 * 989e12) / 86400, rel=1e-12)


def test_latex_breakdown_nests_compute_shows_the_hidden_part_and_what_the_stack_set(tmp_path, pdflatex):
    """GPT-3 175B under Megatron-LM 2021 (every TP collective exposed): compute split by kind,
    indented under it; the TP time beside its whole with 0 s hidden; the options the stack set."""
    r = symcalc.solve("step_time", dict(d_model=12288, n_layers=96, n_heads=96, vocab_size=51200,
                                        seq_len="2048 token", tp=8, pp=8, dp=16, n_gpus=1024,
                                        global_batch_size=1536, micro_batch_size=1),
                      options={"stack": "megatron-lm-2021", "recompute": "full"}, hardware="a100-80gb")
    tex = r.latex(standalone=True)
    assert "\\quad $T_{\\mathrm{GEMM}}$" in tex                      # a part of compute, indented
    tp = next(p for p in r.breakdown["parts"] if p["name"] == "step_tp_comm_time")
    assert tp["hidden"] == 0 and tp["whole"] == pytest.approx(tp["value"], rel=1e-12)   # nothing overlaps in 2021
    assert "Set by \\texttt{stack=megatron-lm-2021}:" in tex and "attention\\_\\allowbreak{}kernel=eager" in tex
    (tmp_path / "bd.tex").write_text(tex)
    run = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", "bd.tex"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:]

