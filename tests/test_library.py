"""Loading the formula library: names, dimensions, and clear failures for bad files."""

import textwrap

import pytest

import symcalc
from symcalc.errors import LibraryError
from symcalc.library.loading import load_library

# shared/spec/quantities.md: the public names, to be kept exactly
SPEC_NAMES = """n_params n_active_params n_layers d_model n_heads n_kv_heads d_ffn vocab_size seq_len
n_experts micro_batch_size grad_accum_steps global_batch_size global_batch_tokens n_microbatches n_gpus
tp pp dp cp ep virtual_stages flops_per_token total_flops n_tokens peak_flops mfu tokens_per_second
step_time train_time gpu_hours weight_memory gradient_memory optimizer_memory model_state_memory
activation_memory total_memory_per_gpu gpu_memory message_size link_bandwidth link_latency
allreduce_time comm_overlap_fraction bubble_fraction bubble_ratio checkpoint_size
checkpoint_write_bandwidth checkpoint_write_time mtbf checkpoint_interval gpu_hour_price total_cost
hbm_bandwidth""".split()

SPEC_DIMENSIONS = {  # quantities.md "unit" column, as base units
    "n_params": "count", "seq_len": "token", "flops_per_token": "FLOP/token", "total_flops": "FLOP",
    "n_tokens": "token", "peak_flops": "FLOP/s", "mfu": "count", "tokens_per_second": "token/s",
    "step_time": "s", "train_time": "s", "gpu_hours": "s", "weight_memory": "byte",
    "model_state_memory": "byte", "message_size": "byte", "link_bandwidth": "byte/s",
    "link_latency": "s", "allreduce_time": "s", "checkpoint_write_time": "s", "mtbf": "s",
    "checkpoint_interval": "s", "gpu_hour_price": "USD/s", "total_cost": "USD", "hbm_bandwidth": "byte/s",
}


def test_every_public_name_is_declared():
    lib = symcalc.default_library()
    missing = [n for n in SPEC_NAMES if n not in lib.quantities]
    assert missing == []


@pytest.mark.parametrize("name,dimension", SPEC_DIMENSIONS.items())
def test_public_quantities_have_the_specified_dimension(name, dimension):
    from symcalc.units import describe_dimension as show
    assert show(symcalc.default_library().quantities[name].dim) == dimension


def test_builtin_library_is_consistent():
    lib = symcalc.default_library()
    assert len(lib.formulas) >= 25
    # aliases from the seeds resolve to the public names
    assert lib.quantity("Psi").name == "n_params"
    assert lib.quantity("MFU").name == "mfu"
    # each formula knows its quantities and how it can be solved for each (what routing reads)
    young = lib.formulas["young_interval"]
    assert {"mtbf", "checkpoint_interval"} <= set(young.quantities)
    assert young.solvability["checkpoint_interval"] == "explicit"


def write(tmp_path, body: str, name: str = "extra.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def load_error(tmp_path, body: str, name: str = "extra.toml") -> str:
    """The message of the LibraryError that loading the library plus this file raises."""
    path = write(tmp_path, body, name)
    with pytest.raises(LibraryError) as e:
        load_library(extra=[path])
    return e.value.message


def test_dimensionally_wrong_formula_names_id_file_and_both_sides(tmp_path):
    msg = load_error(tmp_path, """
        [[formulas]]
        id = "bad_flops"
        title = "forgot the 6 FLOP/token"
        equation = "total_flops = n_params * n_tokens"
        source = "test"
    """, "wrong.toml")
    assert "wrong.toml" in msg and "bad_flops" in msg
    assert "left is FLOP" in msg and "right is token" in msg


def test_a_default_rule_cannot_be_a_consequence(tmp_path):
    msg = load_error(tmp_path, """
        [[formulas]]
        id = "both"
        title = "t"
        equation = "d_ffn = 4 * d_model"
        source = "test"
        default = true
        consequence = true
    """)
    assert "both" in msg and "consequence" in msg


@pytest.mark.parametrize("extra,needle", [
    ("approximate = true", "'approximate'"),                       # only a consequence is approximate
    ("forward_only = true\nsolved_for = [\"d_modl\"]", "'solved_for'"),   # not an input of the law
    ("solved_for = [\"d_model\"]", "'solved_for'"),               # only a forward_only law has exceptions
])
def test_approximate_and_solved_for_are_checked(tmp_path, extra, needle):
    msg = load_error(tmp_path, f"""
        [[formulas]]
        id = "marked"
        title = "t"
        equation = "d_ffn = 4 * d_model"
        source = "test"
        {extra}
    """)
    assert "marked" in msg and needle in msg


@pytest.mark.parametrize("fits_in,needle", [("gpu_memroy", "not a declared quantity"),
                                             ("step_time", "byte but fits_in step_time is s")])
def test_a_capacity_must_exist_and_match(tmp_path, fits_in, needle):
    msg = load_error(tmp_path, f"""
        [quantities.spare_buffer]
        unit = "GB"
        latex = "B_s"
        description = "t"
        fits_in = "{fits_in}"
    """)
    assert "spare_buffer" in msg and needle in msg


def test_mismatched_terms_of_a_sum_are_named(tmp_path):
    msg = load_error(tmp_path, """
        [[formulas]]
        id = "bytes_plus_flops"
        title = "t"
        equation = "weight_memory = gpu_memory + total_flops"
        source = "test"
    """)
    assert "bytes_plus_flops" in msg and "byte" in msg and "FLOP" in msg


def test_unknown_symbol_is_reported_with_suggestion(tmp_path):
    msg = load_error(tmp_path, """
        [[formulas]]
        id = "typo"
        title = "t"
        equation = "weight_memory = 2 * byte * n_param"
        source = "test"
    """)
    assert "typo" in msg and "n_param" in msg and "n_params" in msg


@pytest.mark.parametrize("body,needle", [
    ("[[formulas]]\nid = 'x'\n", "equation"),
    ("this is not toml", "not valid TOML"),
    ("[[formulas]]\nid = 'w'\ntitle='t'\nsource='s'\nequation='mfu = 0.5'\nwhen = { zero = '1' }\n", "zero_stage"),
    ("[[formulas]]\nid = 'w'\ntitle='t'\nsource='s'\nequation='mfu = 0.5'\nwhen = { zero_stage = '9' }\n", "no value '9'"),
    ("[quantities.day]\nunit='s'\nlatex='d'\ndescription='x'\n", "collides"),
    ("[quantities.new_q]\nunit='GB'\ndisplay_unit='s'\nlatex='q'\ndescription='x'\n", "display_unit"),
    ("[quantities.n_params]\nunit=''\nlatex='N'\ndescription='x'\n", "already declared"),
    ("[quantities.q2]\nunit=''\nlatex='q'\ndescription='x'\nuntis='s'\n", "unknown key 'untis'"),
    ("[[formulas]]\nid = 'w'\ntitle='t'\nsource='s'\nequation='mfu = __import__(1)'\n", "not allowed"),
])
def test_malformed_files_fail_with_a_reason(tmp_path, body, needle):
    msg = load_error(tmp_path, body)
    assert needle in msg


def test_a_user_formula_file_extends_the_library(tmp_path):
    # A new domain is one data file: energy of the run.
    path = write(tmp_path, """
        [quantities.rack_power]
        unit = "W"
        display_unit = "kW"
        latex = "P_{rack}"
        description = "average power draw of one rack of GPUs"

        [quantities.rack_energy]
        unit = "J"
        display_unit = "MWh"
        latex = "E_{rack}"
        description = "energy the racks draw over the run"

        [[formulas]]
        id = "rack_energy_of_run"
        title = "Energy of the racks"
        equation = "rack_energy = n_gpus * rack_power * train_time"
        source = "seed 001 (16384 x 0.7 kW x 1848 h = 21.2 GWh)"
    """)
    lib = load_library(extra=[path])
    r = symcalc.solve("rack_energy", n_gpus=16384, rack_power="0.7 kW", train_time="1848 hour", library=lib)
    # hand: 16384 * 0.7 kW * 1848 h = 21,194.8 MWh
    assert r.value == pytest.approx(16384 * 0.7 * 1848 / 1000, rel=1e-12)
    assert r.unit == "MWh"


@pytest.mark.parametrize("table,needle", [
    ('limit = "0 s"\nlimit_meaning = "at the limit"', "limit: "),          # seconds for a memory
    ('limit = "0 GB"', "limit_meaning"),                                   # a limit says what it asks
])
def test_a_slack_limit_is_checked_at_load(tmp_path, table, needle):
    msg = load_error(tmp_path, f"""
        [quantities.spare_memory]
        unit = "byte"
        latex = "s"
        description = "spare memory"
        domain = "[0, inf)"
        {table.splitlines()[0]}
        {table.splitlines()[1] if len(table.splitlines()) > 1 else ""}
    """)
    assert "spare_memory" in msg and needle in msg


@pytest.mark.parametrize("fallback,needle", [
    ('{ value = "a", summary = "s", reason = "r" }', "other than the default"),     # the default itself
    ('{ value = "c", summary = "s", reason = "r" }', "other than the default"),     # no such value
    ('{ value = "b", summary = "s" }', "needs a summary"),                          # the answer says both
    ('{ value = "b", summary = "s", reason = "r", why = "x" }', "unknown key 'why'"),
])
def test_an_option_fallback_is_another_of_its_values_with_both_texts(tmp_path, fallback, needle):
    # query.question.pose answers with it where the default cannot, and the answer's first lines
    # say what it means (summary) and what the default would add and how to get it (reason)
    msg = load_error(tmp_path, f"""
        [options.toy_choice]
        description = "t"
        default = "a"
        fallback = {fallback}

        [options.toy_choice.values]
        a = "A"
        b = "B"
    """)
    assert "toy_choice" in msg and needle in msg, msg


def test_a_quantity_answered_for_another_cannot_itself_answer_for_a_third(tmp_path):
    # solve asks a question in the related quantity's name once: a chain (or a cycle) of
    # answers_for would ask again and again, so the data is refused at load, naming the link
    msg = load_error(tmp_path, """
        [quantities.tokens_per_param_of_run]
        unit = "token"
        latex = "r"
        description = "a test quantity"
        answers_for = "training_tokens_per_param"
    """, "chain.toml")
    assert "chain.toml" in msg and "tokens_per_param_of_run" in msg and "itself answers for another" in msg
    # ratio_of names a figure and the datasheet figure it is a fraction of, for a fraction
    msg = load_error(tmp_path, """
        [quantities.odd_fraction]
        unit = "s"
        latex = "f"
        description = "a test quantity"
        ratio_of = ["decode_hbm_bandwidth", "hbm_bandwidth"]
    """, "ratio.toml")
    assert "odd_fraction" in msg and "dimensionless" in msg
