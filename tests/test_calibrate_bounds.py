"""`symcalc calibrate` keeps every fitted coefficient inside its quantity's domain (the domain
the --hardware profile reader checks, read from the same formulas/ data), says when a bound
binds, and writes a profile that --hardware then reads.

The hostile case: the example's seven llm-foundry runs made twice as fast as measured
(tokens/s x 2; still below 100 % MFU, about 82 % for the fastest, so calibrate accepts them).
With the base preset's coefficients the model predicts them about 90 % too slow; a clock
fraction can speed the compute up by at most 1.5 / 0.96 = 1.56 (its domain (0, 1.5] in
formulas/step_time.toml over the H100 preset's 0.96), so the fit must stop at 1.5.
Before the fix it wrote 2.36 (the fit's own limit, 0.96 x e^(6 x 0.15)), which --hardware refused.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import symcalc
from symcalc.library.records import Interval
from symcalc.query.calibfit import REACH, Coefficient
from helpers import RUN
from helpers import faster_runs as _fast

CLOCK = "sustained_clock_fraction"


def test_the_domain_is_the_library_s():
    # the bound the fit keeps to is the one the profile reader checks (formulas/step_time.toml)
    q = symcalc.default_library().quantities[CLOCK]
    assert (q.domain.lo, q.domain.hi, q.domain.lo_open, q.domain.hi_open) == (0.0, 1.5, True, False)


def test_runs_much_faster_than_the_model_hold_the_clock_at_its_bound(tmp_path, cli):
    runs, out = _fast(tmp_path), tmp_path / "fast_profile.toml"
    run = cli("calibrate", str(runs), "-o", str(out), "--fit", CLOCK, "--json")
    assert run.code == 0, run.err
    d = run.json()
    c = d["coefficients"][0]
    assert c["fitted"] == 1.5 and c["prior"] == pytest.approx(0.96)
    assert c["held"] == {"side": "upper", "bound": 1.5, "bound_text": "1.5", "by": "domain"}
    assert c["domain"] == "(0, 1.5]"
    assert len(d["notes"]) == 1
    assert d["notes"][0].startswith("sustained_clock_fraction held at its bound 1.5: the measurements ask for more; "
                                    "its domain is (0, 1.5]")
    assert "the runs are faster than the model reaches" in d["notes"][0]
    # every run is still predicted too slow (1.5 / 0.96 cannot make up a factor of 2): the errors say so
    assert all(r["error_after"] > 0.2 for r in d["runs"])
    # the text says the same, in the table and in the note
    text = cli("calibrate", str(runs), "-o", str(out), "--fit", CLOCK).out
    assert "0.96  ->  1.5  held at its bound" in text
    assert "\nsustained_clock_fraction held at its bound 1.5: the measurements ask for more;" in text
    # the profile holds 1.5, and --hardware reads it and answers with it
    assert 'values.sustained_clock_fraction = { value = "1.5"' in out.read_text()
    run = cli("solve", "step_time", "--hardware", str(out), *RUN, "--to", "s", "--json")
    assert run.code == 0, run.err
    answer = run.json()
    assert answer["from_presets"][CLOCK]["value"] == "1.5"
    # solve with the profile predicts what the fit said for that run (mpt7b_8gpu_noac)
    fitted = next(r for r in d["runs"] if r["id"] == "mpt7b_8gpu_noac")
    assert answer["value"] == pytest.approx(fitted["predicted_after_s"], rel=1e-6)


def test_all_four_coefficients_stay_in_their_domains_and_the_profile_loads(tmp_path, cli):
    lib = symcalc.default_library()
    out = tmp_path / "fast4.toml"
    run = cli("calibrate", str(_fast(tmp_path)), "-o", str(out), "--json")
    assert run.code == 0, run.err
    d = run.json()
    for c in d["coefficients"]:
        assert lib.quantities[c["name"]].domain.holds(c["fitted"]), c
    held = {c["name"]: c["held"] for c in d["coefficients"] if c["held"]}
    # faster runs: more clock (up to 1.5) and less contention (down to 0, a share's closed end)
    assert held[CLOCK]["side"] == "upper" and held[CLOCK]["bound"] == 1.5
    assert held["comm_contention"] == {"side": "lower", "bound": 0.0, "bound_text": "0", "by": "domain"}
    assert len(d["notes"]) == len(held)
    run = cli("solve", "step_time", "--hardware", str(out), *RUN, "--to", "s", "--json")
    assert run.code == 0, run.err


def test_a_slower_cluster_within_reach_is_not_held(tmp_path, cli):
    # 10 % slower runs: the coefficients move, no bound binds, no note
    run = cli("calibrate", str(_fast(tmp_path, 1 / 1.1)), "-o", str(tmp_path / "p.toml"), "--fit", CLOCK, "--json")
    assert run.code == 0, run.err
    d = run.json()
    assert d["coefficients"][0]["held"] is None and d["notes"] == []
    assert 0.5 < d["coefficients"][0]["fitted"] < 0.96


def test_parameter_ranges_by_hand():
    # a positive coefficient in log space: x = ln(end / prior) / spread
    c = Coefficient(name=CLOCK, scope="hardware", key="h", prior=0.96, spread=0.15, domain=Interval.parse("(0, 1.5]"))
    (lo, lo_by), (hi, hi_by) = c.x_bounds()
    assert (lo, lo_by) == (-REACH, "reach")                      # 0 is no log's end
    assert hi == pytest.approx(math.log(1.5 / 0.96) / 0.15) and hi_by == "domain"
    assert c.value(hi) == pytest.approx(1.5)
    # a share, linear: x = (end - prior) / spread; an open end stays OPEN_MARGIN inside
    s = Coefficient(name="comm_contention", scope="hardware", key="h", prior=0.4, spread=0.15, share=True,
                    domain=Interval.parse("[0, 1)"))
    (lo, _), (hi, _) = s.x_bounds()
    assert lo == pytest.approx(-0.4 / 0.15) and hi == pytest.approx((1 - 1e-3 - 0.4) / 0.15)
    assert s.value(hi) < 1
    # a prior outside its domain: the range starts at the domain's end, and reaches REACH below it
    out = Coefficient(name=CLOCK, scope="hardware", key="h", prior=2.0, spread=0.15, domain=Interval.parse("(0, 1.5]"))
    (lo, _), (hi, _) = out.x_bounds()
    assert hi == pytest.approx(math.log(0.75) / 0.15) and lo == pytest.approx(hi - REACH)
    assert np.isfinite(lo)
