"""The library as a networkx dependency graph (issue 24, item 4): what a quantity depends on
and what depends on it, under the options, from the command line and in Python."""

from __future__ import annotations

import json

import matplotlib.image as mpimg

import symcalc
from symcalc.library.graph import as_dot, dependency_graph, neighbourhood
from symcalc.query.implied import resolve_options


def _graph(**options):
    lib = symcalc.default_library()
    return lib, dependency_graph(lib, resolve_options(lib, options, {}, {}).values)


def test_step_time_depends_on_tp_through_the_formulas(cli):
    """The issue's check: `symcalc graph step_time --json` lists nodes and edges, and tp is
    among the ancestors. step_time's own formula sums compute, the bubble and the exposed
    communications, so those are its direct dependencies; hfu is computed from it."""
    run = cli("graph", "step_time", "--json")
    assert run.code == 0
    out = json.loads(run.out)
    assert out["nodes"] and out["edges"]
    assert {"step_compute_time", "pipeline_bubble_time", "exposed_dp_comm_time"} <= set(out["depends_on"])
    assert "tp" in out["upstream"] and out["upstream"]["tp"] >= 2
    assert "hfu" in out["used_by"]
    ids = {n["id"] for n in out["nodes"]}
    assert all(e["source"] in ids and e["target"] in ids for e in out["edges"])
    assert {e["relation"] for e in out["edges"]} == {"appears in", "determines"}


def test_a_formula_out_of_force_is_not_in_the_graph():
    """A formula that holds only under some option values (its `when`) is a node under those
    values and absent under another."""
    lib, g = _graph()
    spec = next(f for f in lib.formulas.values() if f.when and not f.default_rule
                and any(len(v) < len(lib.options[k].values) for k, v in f.when.items()))
    opt, allowed = next((k, v) for k, v in spec.when.items() if len(v) < len(lib.options[k].values))
    other = next(v for v in lib.options[opt].values if v not in allowed)
    _, inside = _graph(**{opt: allowed[0]})
    _, outside = _graph(**{opt: other})
    assert f"f:{spec.id}" in inside or not spec.active(resolve_options(lib, {opt: allowed[0]}, {}, {}).values)
    assert f"f:{spec.id}" not in outside


def test_an_input_no_formula_gives_is_solved_from_its_formulas():
    """mfu is written as an input (achieved_flops_cluster = mfu x peak_flops x n_gpus): nothing
    gives it as written, and the neighbourhood names what solving each formula for it takes."""
    _, g = _graph()
    info = neighbourhood(g, "mfu")
    assert info["upstream"] == {} and info["depends_on"] == []
    assert set(info["solved_from"]["mfu_definition"]) == {"n_gpus", "peak_flops", "achieved_flops_cluster"}


def test_depth_bounds_the_hops_and_files_are_written(cli, tmp_path):
    _, g = _graph()
    near, far = neighbourhood(g, "step_time", depth=1), neighbourhood(g, "step_time")
    assert set(near["upstream"].values()) == {1} and len(far["upstream"]) > len(near["upstream"])
    dot, png = tmp_path / "g.dot", tmp_path / "g.png"
    run = cli("graph", "micro_step_time", "--depth", "2", "--dot", str(dot), "--plot", str(png))
    assert run.code == 0 and "Depends on directly:" in run.out
    text = dot.read_text()
    assert text.startswith("digraph symcalc {") and '"q:micro_step_time"' in text
    image = mpimg.imread(png)
    assert image.shape[1] == 1200 and image.shape[0] >= 400
    assert as_dot(g.subgraph([])).strip().endswith("}")


def test_unknown_name_is_one_line_with_suggestions(cli):
    run = cli("graph", "stp_time")
    assert run.code == 2 and "Did you mean: step_time" in run.err
