"""The planner's search space is data (formulas/planner/space.toml and the options' `searched`
marks): a value added to a searched option in the data is enumerated and keyed with no code
change, and the option-combination key stays one-to-one whatever the value counts."""

from __future__ import annotations

import itertools
import math
import shutil

import numpy as np
import pytest

from symcalc.library.loading import default_library, formula_dir, load_library
from symcalc.planner.evaluate import combination_key, option_key, options_of
from symcalc.planner.space import RULES, STAGES, Shape, enumerate_space, searched_options, space_data

SHAPE = dict(n_gpus=8, gpus_per_node=4, n_heads=4, n_kv_heads=2, n_layers=6, seq_len=16, global_batch_size=8)


def test_searched_options_come_from_the_library_in_declared_order():
    assert searched_options(default_library()) == {
        "zero_stage": ("0", "1", "2", "3"), "recompute": ("none", "selective", "full"),
        "sequence_parallel": ("false", "true")}


def test_the_data_file_declares_every_rule_once_at_a_known_stage():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names)) == len(space_data()["rules"])
    assert all(r.stage in STAGES for r in RULES)
    # the reason is formatted with the stated defaults
    assert "at most 2 layer slots empty" in {r.name: r.reason for r in RULES}["pp_layers"]


@pytest.mark.parametrize("counts", [(4, 3, 2, 2), (5, 3, 2, 2), (2, 7, 1, 3), (9,), (1, 1), (3, 11, 4)])
def test_combination_key_is_one_to_one_for_any_value_counts(counts):
    """Brute force: every combination of digits below the counts gets its own key, in 0 ... prod - 1."""
    combos = np.array(list(itertools.product(*(range(c) for c in counts))), dtype=np.int64).reshape(-1, len(counts))
    names = [f"o{i}" for i in range(len(counts))]
    key = combination_key({n: combos[:, i] for i, n in enumerate(names)}, dict(zip(names, counts, strict=True)))
    assert sorted(key.tolist()) == list(range(math.prod(counts)))


@pytest.fixture(scope="module")
def library_with_zero4(tmp_path_factory):
    """The built-in library with a fifth ZeRO stage declared in options.toml (after "3")."""
    root = tmp_path_factory.mktemp("formulas") / "formulas"
    shutil.copytree(formula_dir(), root)
    path = root / "options.toml"
    text = path.read_text(encoding="utf-8")
    anchor = "[options.attention]\n"
    assert text.count(anchor) == 1 and text.index('[options.zero_stage.values."3"]') < text.index(anchor)
    path.write_text(text.replace(anchor, '[options.zero_stage.values."4"]\ndescription = "a stage the data adds"\n\n'
                                 + anchor), encoding="utf-8")
    return load_library([root], use_cache=False)


def test_a_value_added_in_the_data_is_searched_without_code(library_with_zero4):
    searched = searched_options(library_with_zero4)
    assert searched["zero_stage"] == ("0", "1", "2", "3", "4")
    four = enumerate_space(Shape(**SHAPE, searched=tuple(searched.items())))
    base = enumerate_space(Shape(**SHAPE, searched=tuple(searched_options(default_library()).items())))
    assert four.total * 4 == base.total * 5
    c = four.columns
    # the new stage is kept where the other sharded stages are (zero_dp: dp x cp > 1), and counted
    layouts = ("tp", "pp", "cp", "dp", "micro_batch_size", "virtual_stages", "recompute", "sequence_parallel")

    def rows(cols, z):
        return {tuple(int(cols[k][i]) for k in layouts) for i in np.flatnonzero(cols["zero_stage"] == z)}
    assert rows(c, 4) == rows(c, 3) == rows(base.columns, 3) and rows(c, 4)
    assert four.size + sum(four.rejected.values()) == four.total
    # every option combination its own key, and each key's options name the new value
    key = option_key(c, searched)
    combos = {(int(c["zero_stage"][i]), int(c["recompute"][i]), int(c["sequence_parallel"][i]),
               int(c["virtual_stages"][i] > 1)) for i in range(four.size)}
    assert len(np.unique(key)) == len(combos)
    i = int(np.flatnonzero(c["zero_stage"] == 4)[0])
    picked = {k: int(c[k][i]) for k in searched}
    assert options_of(picked, False, searched)["zero_stage"] == "4"
