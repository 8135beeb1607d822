"""Every worked example of the source documents (shared/spec/seed_examples.toml, copied to
tests/data/) that asks for a value, a label or an algorithm's result, asked as the seed asks it
(its `given` strings and `options`, no option of the suite's own) through the public API and
through the CLI (`symcalc solve ... --json`), and compared with its `expected` answer within its
`tolerance` (0 means exact). The 10 `comparison` examples (one quantity in two scenarios, side by
side) are run through `symcalc.query.compare` in tests/test_compare.py, each with its mapping to a
compare call; the one `informational` example has no answer. The terminal summary prints the
counts by kind."""

import pytest

import symcalc
from helpers import base, close, seed_examples

ALL, ERRATA = seed_examples()
SOLVED_KINDS = ("numeric", "qualitative", "algorithm")
EXAMPLES = [e for e in ALL if e["kind"] in SOLVED_KINDS]


def test_errata_are_few_and_explained():
    """Three worked examples of the sources are wrong (each reason says how, with the right
    figure): a fourth must be argued for here, not slipped in."""
    assert sorted(ERRATA) == ["s001_lr_sqrt_scaling", "s001_no_accum_comm_fraction", "s003_moe_total_params_claim"]
    assert set(ERRATA) <= {e["id"] for e in ALL}
    assert all(len(e["reason"]) > 80 for e in ERRATA.values())


def test_every_example_is_accounted_for():
    kinds = {}
    for e in ALL:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    assert len(ALL) == 210
    assert kinds == {"numeric": 194, "qualitative": 3, "algorithm": 2, "comparison": 10, "informational": 1}
    assert len(EXAMPLES) == 199


@pytest.mark.parametrize("e", EXAMPLES, ids=[e["id"] for e in EXAMPLES])
def test_seed_example(e, cli):
    """Asked as the seed asks it, with no option of the suite's own (a total of the parts a
    seed gives is the parts summed where the default figure needs shapes it does not give:
    memory_figure's fallback, formulas/peak_memory.toml), through the API and the CLI."""
    r = symcalc.solve(e["find"], e["given"], options=e.get("options", {}))
    expected = e["expected"]
    if isinstance(r.value, str):
        assert r.value == expected
    else:
        want = base(expected)
        if e["tolerance"] == 0:
            assert r.rounded_base == want, (r.rounded_base, expected)
        else:
            assert close(r.base_value, want, e["tolerance"]), (r.base_value, expected, e["tolerance"])
    options = [a for k, v in e.get("options", {}).items() for a in ("--option", f"{k}={v}")]
    run = cli("solve", e["find"], *(f"{k}={v}" for k, v in e["given"].items()), *options, "--json")
    assert run.code == 0, run.err
    d = run.json()
    if isinstance(d["value"], str):
        assert d["value"] == expected
        return
    # the JSON's value is shown in its display unit: the same number as the API's, read back
    shown = d["value"] if e["tolerance"] == 0 or d["exact"] is None else d["exact"]
    got = base(f"{shown!r} {d['unit']}".strip())
    assert close(got, base(expected), e["tolerance"] or 1e-12), (d["value"], d["unit"], expected)
