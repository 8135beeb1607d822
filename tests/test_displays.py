"""What Jupyter shows (issue 25, item 2): a Result as its answer, derivation and assumptions; a
Sweep as a table and a small plot, not its dataclass fields; a Comparison as a table."""

from __future__ import annotations

import base64
import io
import re

import matplotlib
import matplotlib.image as mpimg

import symcalc

GPUS = dict(n_params=30e9, n_tokens="600e9 token", train_time="30 day", mfu=0.45, peak_flops="989 TFLOP/s")


def test_a_result_shows_its_answer_derivation_and_assumptions():
    """Seed 000's question: 94 GPUs (6 x 30e9 x 600e9 / (0.45 x 989e12 x 30 days) = 93.6, up);
    the derivation's steps in a table, the default 6 FLOP/token said with its source."""
    r = symcalc.solve("n_gpus", **GPUS)
    h = r._repr_html_()
    assert "<b>n_gpus = 94 </b>" in h and "<caption style='text-align:left'>Derivation</caption>" in h
    assert h.count("<tr>") - 1 == len(r.steps)
    assert "flops_per_param_per_token = 6 FLOP/token (2 FLOP forward" in h
    assert r._repr_latex_().startswith("$$")


def test_a_sweep_shows_a_table_and_an_inline_plot_and_leaves_the_backend():
    before = matplotlib.get_backend()
    s = symcalc.sweep("train_time", {"n_tokens": "15e12 token", "mfu": "40%", "n_params": "8e9",
                                     "peak_flops": "989 TFLOP/s"}, vary={"n_gpus": "256:4096:5:log"})
    h = s._repr_html_()
    assert "QuantitySpec(" not in h and "QuantitySpec(" not in repr(s)
    assert repr(s) == "<Sweep train_time over n_gpus: 5 points>"
    assert h.count("<tr>") == 1 + 5                               # the header and the five points
    # 6 x 8e9 x 15e12 / (0.4 x 989e12 x 256) / 86400 = 82.2 days on 256 GPUs, as in the table
    assert re.search(r"<td style='padding:2px 8px'>256</td><td style='padding:2px 8px'>82\.2[0-9]", h)
    png = base64.b64decode(re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", h).group(1))
    assert mpimg.imread(io.BytesIO(png)).shape[1] == 540          # 7.5 in at 72 dpi
    assert matplotlib.get_backend() == before


def test_a_comparison_shows_both_sides():
    """ZeRO-2 against ZeRO-3 for 7B on 64 GPUs: 2 + (2 + 12) / 64 = 2.22 bytes a parameter
    against 16 / 64 = 0.25: 15.53 GB against 1.75 GB."""
    c = symcalc.compare("model_state_memory", {"n_params": 7e9, "dp": 64}, options={"zero_stage": "2"},
                        vs_options={"zero_stage": "3"})
    h = c._repr_html_()
    assert "zero_stage: 2 → 3" in h and "15.53 GB" in h and "1.75 GB" in h
