"""The planner's dimensions are data (formulas/planner/space.toml, read by symcalc/planner/dims.py):
the label, the CSV columns, the questions a row asks and the regimes a layout is matched on follow
the declaration, and the declaration is whole (every dimension placed in the [layout] lists)."""

from __future__ import annotations

import numpy as np

from symcalc.planner import dims
from symcalc.planner.validation import DIMS, regime_shape
from symcalc.query.layout_rules import space_data


def test_every_declared_dimension_is_placed_in_the_layout_lists():
    # a dimension added to [dimensions] but left out of [layout] would vanish from labels and
    # from the questions a row asks: the declaration must be whole
    layout = space_data()["layout"]
    for d in dims.dimensions():
        assert d.name in layout["label"] and d.name in layout["given"], d.name
        assert d.kind in ("degree", "schedule", "batch"), d.name
    assert sum(d.kind == "schedule" for d in dims.dimensions()) == 1
    assert sum(d.rest for d in dims.dimensions()) == 1


def test_the_label_reads_the_declaration():
    # Megatron-style label: tp, pp, the virtual stages only when interleaved, cp, dp, ep only above 1
    lay = {"tp": 8, "pp": 4, "cp": 1, "dp": 16, "ep": 8, "micro_batch_size": 1, "virtual_stages": 2, "n_gpus": 512}
    opts = {"zero_stage": "1", "recompute": "selective", "sequence_parallel": "true", "pipeline_schedule": "interleaved"}
    assert dims.label(lay, opts) == "tp8 pp4 v2 cp1 dp16 ep8 mbs1 zero1 selective sp"
    dense = {**lay, "virtual_stages": 1}
    dense.pop("ep")
    assert dims.label(dense, {**opts, "sequence_parallel": "false", "recompute": "full"}) == \
        "tp8 pp4 cp1 dp16 mbs1 zero1 full-recompute"


def test_a_rows_questions_and_groups_follow_the_declaration():
    # a dense 1F1B row gives neither ep nor virtual_stages; a MoE interleaved one gives both
    lay = {"tp": 2, "pp": 2, "cp": 1, "dp": 4, "ep": 1, "micro_batch_size": 2, "virtual_stages": 1}
    assert dims.given_names(set(dims.present(False)), lay) == \
        ("tp", "pp", "cp", "dp", "n_gpus", "micro_batch_size", "global_batch_size", "seq_len")
    assert dims.given_names(set(dims.present(True)), {**lay, "virtual_stages": 3, "etp": 1})[-3:] == \
        ("virtual_stages", "ep", "etp")
    assert dims.grouped() == ("tp", "pp", "cp", "dp", "ep", "etp", "virtual_stages")
    assert dims.parallel() == ("tp", "pp", "cp", "ep", "etp")      # dp follows from the rest: not counted


def test_the_simplest_first_keys_count_parallel_dimensions_and_zero3():
    # two layouts: tp2 with ZeRO-3 (2 parallel dimensions: tp and FSDP's sharding) and tp1 pp1 ZeRO-1 (0)
    searched = {"zero_stage": ("0", "1", "2", "3"), "recompute": ("none", "selective", "full"),
                "sequence_parallel": ("false", "true")}
    cols = {"tp": np.array([2, 1]), "pp": np.array([1, 1]), "cp": np.array([1, 1]), "ep": np.array([1, 1]),
            "etp": np.array([1, 1]), "zero_stage": np.array([3, 1]), "recompute": np.array([0, 0]), "virtual_stages": np.array([1, 1]),
            "sequence_parallel": np.array([0, 0])}
    count, *rest = dims.simplest_order(cols, searched)
    assert list(count) == [2, 0]
    assert [list(r) for r in rest] == [[1, 1], [1, 1], [1, 1], [3, 1], [0, 0], [1, 1], [0, 0]]


def test_regimes_are_matched_on_the_declared_validation_keys():
    assert DIMS == ("tp", "pp", "cp", "ep")
    # a dense layout has no ep: its declared default (1) is used, so ep is "not used"
    assert regime_shape(0, {"tp": 8, "pp": 1, "cp": 2}) == (1, True, False, True, False)
    assert regime_shape(3, {"tp": 1, "pp": 4, "cp": 1, "ep": 16}) == (3, False, True, False, True)
