"""Every field a hardware profile may set reaches every formula that reads it, under one name.

Issue 34: the README's own profile example sets ``peak_flops.bf16``; MFU used it, the step time
did not (it read ``bf16_peak_flops``, a second name for the same fact that the built-in table
also set under ``values``). Now a dtype's dense peak has one entry, ``peak_flops.DTYPE``, which
reaches a question as ``peak_flops`` (the precision's compute dtype: what MFU divides by and
the linear layers run at) and as ``peak_flops_DTYPE``. Each family of fields below is changed
in a profile on the built-in h100 and every formula that reads it is shown to move by the
ratio worked out by hand; the structural tests keep the data to one name per fact.
"""

from __future__ import annotations

import pytest

import symcalc
from symcalc.errors import LibraryError, MalformedValueError, UnknownNameError
from symcalc.library.presets import all_presets, find_preset, hardware_from_file, load_table
from symcalc.query.presetvalues import check_profile

# the built-in h100's figures the hand computations use (formulas/presets/hardware.toml)
PEAK_BF16, PEAK_FP8 = 989.4e12, 1978.9e12          # datasheet dense peaks, FLOP/s
EFF_BF16, EFF_FP8 = 0.803, 0.709                   # measured GEMM fractions of the peak
CLOCK = 0.96                                       # fitted sustained clock fraction
HBM = 2.97e12                                      # achievable HBM bandwidth, byte/s
R_BF16 = EFF_BF16 * PEAK_BF16 * CLOCK              # a large 16-bit GEMM as trained

EIGHT = dict(n_gpus=8, tp=1, pp=1, micro_batch_size=1, global_batch_size=64, seq_len=4096)


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """A profile on the built-in h100 that sets the given TOML lines, as a path."""
    folder = tmp_path_factory.mktemp("profiles")
    made: dict[str, str] = {}

    def make(*lines: str) -> str:
        text = "\n".join(lines)
        if text not in made:
            path = folder / f"p{len(made)}.toml"
            path.write_text(f'[ours]\ntitle = "ours"\nsource = "a test"\nbase = "h100"\n{text}\n')
            made[text] = str(path)
        return made[text]
    return make


def value(target: str, hardware: str, model: str = "llama3-8b", options: dict | None = None, **given) -> float:
    return symcalc.solve(target, model=model, hardware=hardware, options=options or {}, **given).base_value


def ratio(target: str, hardware: str, **kw) -> float:
    """``target`` on the profile over ``target`` on the built-in h100, the rest equal."""
    return value(target, hardware, **kw) / value(target, "h100", **kw)


HALF_BF16 = 'peak_flops.bf16 = { value = "494.7 TFLOP/s", source = "half the datasheet" }'


def test_the_readme_profiles_bf16_peak_reaches_the_step_time_as_it_reaches_mfu(profile):
    half = profile(HALF_BF16)
    # the GEMM rates are efficiency x peak x clock: half the peak, half the rate, exactly
    assert value("linear_gemm_rate", half, **EIGHT) == pytest.approx(EFF_BF16 * 494.7e12 * CLOCK, rel=1e-12)
    assert ratio("half_precision_gemm_rate", half, **EIGHT) == pytest.approx(0.5, rel=1e-12)
    # MFU at a given throughput is achieved / peak: twice as large on half the peak
    assert ratio("mfu", half, tokens_per_second="40000 token/s", n_gpus=8) == pytest.approx(2, rel=1e-12)
    # a layer's linear time is F/R + B/beta (the additive roofline): only F/R doubles
    flops, traffic = value("layer_linear_flops", "h100", **EIGHT), value("layer_linear_bytes", "h100", **EIGHT)
    a, b = flops / R_BF16, traffic / HBM
    assert value("layer_linear_time", "h100", **EIGHT) == pytest.approx(a + b, rel=1e-9)
    assert ratio("layer_linear_time", half, **EIGHT) == pytest.approx((2 * a + b) / (a + b), rel=1e-9)


@pytest.mark.parametrize("model", ["llama3-70b", "llama3-405b"])
def test_a_compute_bound_step_slows_by_its_gemm_share_when_the_peak_halves(profile, model):
    # one GPU (no communication), 512-token sequences (attention, at its own kernel rate, is
    # under 1 % of the FLOPs), 16 sequences a micro-batch (launches hide behind the GEMMs): the
    # GEMMs take 6 (N - V d) FLOPs a token (forward and backward over every matrix but the
    # embedding lookup) at R_BF16; half the peak doubles that part and nothing else, so the
    # step grows by 1 + T_gemm / T_step
    given = dict(n_gpus=1, tp=1, pp=1, micro_batch_size=16, global_batch_size=1024, seq_len=512)
    preset = find_preset("model", model)
    n_params = value("n_params", "h100", model=model)
    embedding = float(preset.values["vocab_size"][0]) * float(preset.values["d_model"][0])
    step = value("step_time", "h100", model=model, **given)
    gemm = 6 * (n_params - embedding) * 1024 * 512 / R_BF16
    assert 0.85 < gemm / step < 1          # compute-bound: the GEMMs are most of the step
    assert ratio("step_time", profile(HALF_BF16), model=model, **given) == pytest.approx(1 + gemm / step, rel=1e-3)


def test_a_peak_given_on_the_command_line_is_the_same_fact_as_the_profiles(profile, cli):
    # peak_flops=494.7 TFLOP/s with the built-in h100 and the profile's peak_flops.bf16 =
    # 494.7 are one value of one fact: the same step time and the same MFU, to the last digit
    half = profile(HALF_BF16)
    given = dict(EIGHT, peak_flops="494.7 TFLOP/s")
    assert value("step_time", "h100", **given) == value("step_time", half, **EIGHT)
    assert value("mfu", "h100", **given) == value("mfu", half, **EIGHT)
    # under either of its names (peak_flops_bf16 is the compute dtype's peak here)
    assert value("step_time", "h100", **dict(EIGHT, peak_flops_bf16="494.7 TFLOP/s")) == \
        value("step_time", half, **EIGHT)
    run = cli("solve", "step_time", "--model", "llama3-8b", "--hardware", half, "n_gpus=8", "tp=1", "pp=1",
              "micro_batch_size=1", "global_batch_size=64", "seq_len=4096", "--json")
    assert run.code == 0 and run.json()["value"] == pytest.approx(value("step_time", half, **EIGHT), rel=1e-9)


FP8 = {"precision": "fp8"}


@pytest.mark.parametrize("line, target, expected", [
    # under FP8 the linear layers run at peak_flops = the FP8 peak; the 16-bit GEMMs (LM head,
    # eager attention) at the BF16 one: each peak moves its own rate, by half, and not the other
    ('peak_flops.fp8 = { value = "989.45 TFLOP/s", source = "half" }', "linear_gemm_rate", 0.5),
    ('peak_flops.fp8 = { value = "989.45 TFLOP/s", source = "half" }', "half_precision_gemm_rate", 1.0),
    (HALF_BF16, "linear_gemm_rate", 1.0),
    (HALF_BF16, "half_precision_gemm_rate", 0.5),
    ('values.fp8_gemm_efficiency = { value = "0.3545", source = "half" }', "linear_gemm_rate", 0.5),
])
def test_under_fp8_each_dtypes_peak_reaches_its_own_gemms(profile, line, target, expected):
    assert ratio(target, profile(line), options=FP8, **EIGHT) == pytest.approx(expected, rel=1e-12)
    if target == "linear_gemm_rate" and expected == 0.5 and "peak" in line:
        # and MFU under FP8 divides by the FP8 peak: twice as large on half of it
        assert ratio("mfu", profile(line), options=FP8, tokens_per_second="40000 token/s", n_gpus=8) == \
            pytest.approx(2, rel=1e-12)


def test_under_fp32_the_tf32_peak_is_the_linear_layers(profile):
    half = profile('peak_flops.tf32 = { value = "247.35 TFLOP/s", source = "half" }')
    assert ratio("linear_gemm_rate", half, options={"precision": "fp32_adam"}, **EIGHT) == pytest.approx(0.5, rel=1e-12)


# field family: (a profile line that halves or doubles the h100's figure, what reads it, the
# context it is read in, the expected ratio and why)
FAMILIES = [
    # compute rates: efficiency x peak x clock; the attention kernels' rates x clock
    ('values.bf16_gemm_efficiency = { value = "0.4015", source = "half" }', "linear_gemm_rate", {}, 0.5),
    ('values.bf16_gemm_efficiency = { value = "0.4015", source = "half" }', "half_precision_gemm_rate", {}, 0.5),
    ('values.sustained_clock_fraction = { value = "0.48", source = "half" }', "linear_gemm_rate", {}, 0.5),
    ('values.sustained_clock_fraction = { value = "0.48", source = "half" }', "half_precision_gemm_rate", {}, 0.5),
    ('values.sustained_clock_fraction = { value = "0.48", source = "half" }', "attention_rate", {}, 0.5),
    ('values.cudnn_attention_rate = { value = "252.5 TFLOP/s", source = "half" }', "attention_rate", {}, 0.5),
    ('values.flash1_attention_rate = { value = "74 TFLOP/s", source = "half" }', "attention_rate",
     {"attention_kernel": "flash1"}, 0.5),
    ('values.flash2_attention_rate = { value = "170 TFLOP/s", source = "half" }', "attention_rate",
     {"attention_kernel": "flash"}, 0.5),
    ('values.flash3_attention_rate = { value = "288 TFLOP/s", source = "half" }', "attention_rate",
     {"attention_kernel": "flash3"}, 0.5),
    # memory: bytes / bandwidth, twice as long on half of it; the roofline's balance is peak / bandwidth
    ('values.achievable_hbm_bandwidth = { value = "1.485 TB/s", source = "half" }', "layer_elementwise_time", {}, 2.0),
    ('values.hbm_bandwidth = { value = "1.675 TB/s", source = "half" }', "machine_balance", {}, 2.0),
    # the network: a node's NICs x their rate; the collectives' bus bandwidth and latency
    ('values.nic_bandwidth = { value = "200 Gb/s", source = "half" }', "node_network_bandwidth", {}, 0.5),
    ('values.nics_per_node = { value = "4", source = "half" }', "node_network_bandwidth", {}, 0.5),
    ('values.intra_node_bus_bandwidth = { value = "238 GB/s", source = "half" }', "tp_bus_bandwidth", {}, 0.5),
    ('values.intra_node_ring_bus_bandwidth = { value = "181 GB/s", source = "half" }', "dp_ring_bus_bandwidth", {}, 0.5),
    ('values.intra_node_step_latency = { value = "15.76 us", source = "double" }', "tp_step_latency", {}, 2.0),
    # the node: 8 data-parallel ranks (tp = pp = 1) share a node of 8 GPUs, 4 of a node of 4
    ('values.gpus_per_node = { value = "4", source = "half" }', "dp_ranks_per_node", {}, 0.5),
    # contention: the compute an overlapped DP collective costs is proportional to it
    ('values.comm_contention = { value = "0.2305", source = "half" }', "dp_comm_contention", {}, 0.5),
]


@pytest.mark.parametrize("line, target, options, expected", FAMILIES,
                         ids=[f"{line.split(' ')[0]}->{target}" for line, target, _, _ in FAMILIES])
def test_each_field_family_reaches_the_formulas_that_read_it(profile, line, target, options, expected):
    assert ratio(target, profile(line), options=options, **EIGHT) == pytest.approx(expected, rel=1e-9)


def test_power_and_serving_fields_reach_energy_and_decoding(profile):
    # energy = power x GPU-hours: half the power, half the energy
    half_power = profile('values.gpu_power = { value = "350 W", source = "half" }')
    assert ratio("cluster_gpu_energy", half_power, model="llama3-70b", n_gpus=64, tp=8, pp=1,
                 micro_batch_size=1, global_batch_size=512, seq_len=4096) == pytest.approx(0.5, rel=1e-9)
    # decoding at batch 1 reads the weights once a token at decode_hbm_bandwidth (the KV cache
    # streams at achievable_hbm_bandwidth, which the profile leaves as the H100's, as does the
    # token's activation traffic): half the decode bandwidth, twice the weights' part, the
    # streamed part the same
    slow = profile('values.decode_hbm_bandwidth = { value = "0.9525 TB/s", source = "half" }')
    kv = (value("kv_cache_memory", "h100", batch_size=1, seq_len=4096)
          + value("activation_traffic_per_token", "h100")) / 2.97e12
    base = value("decode_memory_time", "h100", batch_size=1, seq_len=4096)
    assert value("decode_memory_time", slow, batch_size=1, seq_len=4096) == pytest.approx(2 * (base - kv) + kv,
                                                                                         rel=1e-9)


def test_gpu_memory_reaches_the_memory_that_is_left(profile):
    # headroom = gpu_memory - what the run needs a GPU, which does not depend on the GPU's
    # memory: an H100's 81559 MiB -> 60 GB takes exactly 81559 x 2^20 - 60e9 bytes (25.52 GB) off
    # the headroom
    smaller = profile('values.gpu_memory = { value = "60 GB", source = "smaller" }')
    given = dict(EIGHT, seq_len=1024, options={"zero_stage": "3"})
    assert value("total_memory_per_gpu", smaller, **given) == value("total_memory_per_gpu", "h100", **given)
    lost = value("memory_headroom", "h100", **given) - value("memory_headroom", smaller, **given)
    assert lost == pytest.approx(81559 * 2**20 - 60e9, rel=1e-9)


# ---- one name per fact: the data and the profile reader keep it ----------------------------


def test_every_preset_field_is_one_quantity_that_something_reads():
    # a field nothing reads is a fact under a name no formula uses (what bf16_peak_flops beside
    # peak_flops.bf16 was, seen from the other side); an alias would be a second name
    lib = symcalc.default_library()
    warned = {name for q in lib.quantities.values() for name in q.warn_above}
    read = {name for f in lib.formulas.values() for name in f.quantities} | warned
    dtypes = {d for opt in lib.options.values() for d in opt.compute_dtype.values()}
    checked = 0
    for kind in all_presets().values():
        for p in kind.values():
            for name in p.fields:
                if name.startswith("peak_flops_") and name not in lib.quantities:
                    # a dtype no formula reads by name (fp16, tf32...): it reaches a question as
                    # peak_flops when a precision computes in it, or is shown by `symcalc show`
                    continue
                assert name in lib.quantities and name not in lib.aliases, (p.key, name)
                assert name in read, (p.key, name)
                checked += 1
            assert not any(name.startswith("peak_flops") for name in p.values), p.key
    assert checked > 300 and {"bf16", "fp8", "fp4", "tf32"} <= dtypes


def test_the_peaks_basis_moved_with_it():
    # the h100 96 GB's peaks are assumed (torchtitan's footnote): an answer that uses them says so
    r = symcalc.solve("step_time", model="llama3-8b", hardware="h100_96gb_500w", **EIGHT)
    unmeasured = {f.quantity: f.values["basis"] for f in r.findings if f.kind == "unmeasured"}
    assert unmeasured.get("peak_flops") == "assumed"
    assert find_preset("hardware", "h100").basis_of("peak_flops", "bf16") == "datasheet"
    assert find_preset("hardware", "h100").basis_of("peak_flops_fp8", None) == "datasheet"


@pytest.mark.parametrize("name", ["peak_flops", "peak_flops_bf16", "peak_flops_fp8"])
def test_a_peak_written_as_a_value_is_refused_with_the_one_way_to_write_it(tmp_path, name):
    entry = {"value": "500 TFLOP/s", "source": "s"}
    with pytest.raises(LibraryError, match=r"values\.%s: a dense peak is written peak_flops\." % name):
        load_table("hardware", "x", {"values": {name: entry}}, "hardware.toml")
    path = tmp_path / "ours.toml"
    path.write_text(f'[ours]\nsource = "s"\nvalues.{name} = {{ value = "500 TFLOP/s", source = "s" }}\n')
    with pytest.raises(MalformedValueError, match=r"peak_flops\.(bf16|fp8) = \{ value = \.\.\., source = \.\.\. \}"):
        hardware_from_file(path)


@pytest.mark.parametrize("alias, way", [("bf16_peak_flops", "peak_flops.bf16"), ("fp8_peak_flops", "peak_flops.fp8"),
                                        ("gpu_peak_flops", "peak_flops.bf16"), ("peak", "peak_flops.bf16"),
                                        ("gpu_mem", "values.gpu_memory")])
def test_a_profile_field_under_another_name_is_refused(tmp_path, alias, way):
    # an alias would be a second name of a fact the base preset gives under its own: both
    # would reach the question, and the formulas would read the base's
    lib = symcalc.default_library()
    assert alias in lib.aliases
    path = tmp_path / "ours.toml"
    path.write_text(f'[ours]\nsource = "s"\nbase = "h100"\nvalues.{alias} = {{ value = "1", source = "s" }}\n')
    with pytest.raises(UnknownNameError) as e:
        check_profile(lib, hardware_from_file(path))
    assert f"'{alias}' is another name of" in e.value.message and f"write {way}" in e.value.message


def test_two_values_for_the_compute_dtypes_peak_are_a_conflict():
    # under 16-bit training peak_flops and peak_flops_bf16 are one fact: two different values
    # are refused in one line, equal ones accepted; under FP8 they are two facts
    from symcalc.errors import ConflictError
    mfu = dict(n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64)
    with pytest.raises(ConflictError, match="peak_flops = 989 TFLOP/s and peak_flops_bf16 = 900 TFLOP/s are one fact"):
        symcalc.solve("mfu", peak_flops="989 TFLOP/s", peak_flops_bf16="900 TFLOP/s", **mfu)
    same = symcalc.solve("mfu", peak_flops="989 TFLOP/s", peak_flops_bf16="989 TFLOP/s", **mfu)
    # 6 x 7e9 x 150000 / (64 x 989e12) = 9.953 %
    assert same.base_value == pytest.approx(6 * 7e9 * 150000 / (64 * 989e12), rel=1e-9)
    fp8 = symcalc.solve("mfu", peak_flops="1979 TFLOP/s", peak_flops_bf16="989 TFLOP/s", options=FP8, **mfu)
    assert fp8.base_value == pytest.approx(6 * 7e9 * 150000 / (64 * 1979e12), rel=1e-9)
