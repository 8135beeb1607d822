"""Seed 004's roofline / cost-per-memory-bandwidth model (formulas/roofline.toml), forwards and
backwards. Every expectation is a number seed 004 prints or a hand computation written next to it.

The run of seed 004: 70B parameters, 80 layers, d_model 8192, bf16 (2 B), alpha_opt 16 B,
c_act 5, B_g = 512,000 tokens, b_g = 2 B, dp = 8, u = 0.75, and F_tok = 1.2 x 6 x 70e9 =
5.04e11 FLOP/token (given directly here, so these tests do not depend on how compute.toml
builds flops_per_token).
"""

import pytest

import symcalc

RUN = {
    "n_params": "70e9", "n_layers": "80", "d_model": "8192", "bytes_per_activation": "2 byte",
    "flops_per_token": "5.04e11 FLOP/token", "optimizer_bytes_per_param_step": "16 byte",
    "activation_traffic_coeff": "5", "global_batch_tokens": "512000 token", "bytes_per_grad": "2 byte",
    "dp": "8", "utilization": "0.75",
}
H100 = {"peak_flops": "900 TFLOP/s", "hbm_bandwidth": "3.35 TB/s", "nic_bandwidth": "200 Gb/s"}
L4 = {"peak_flops": "120 TFLOP/s", "hbm_bandwidth": "0.3 TB/s", "nic_bandwidth": "100 Gb/s"}

# hand: r_comp (H100) = 900e12 / 5.04e11 = 1785.714... token/s
R_COMP_H100 = 900e12 / 5.04e11
# hand: M_tok = 16 x 70e9 / 512000 + 5 x 80 x 8192 x 2 = 2,187,500 + 6,553,600 = 8,741,100 B/token
M_TOK = 8_741_100.0


def without(d, *keys):
    return {k: v for k, v in d.items() if k not in keys}


def test_per_gpu_rate_and_bound_of_the_seed():
    r = symcalc.solve("tokens_per_second_per_gpu", {**RUN, **H100})
    # seed 004 prints per_gpu_tokens_s = 1339.29 (0.75 x 1785.71)
    assert r.base_value == pytest.approx(0.75 * R_COMP_H100, rel=1e-12)
    assert symcalc.solve("bound", {**RUN, **H100}).value == "compute"


def test_hbm_bandwidth_at_which_memory_stops_binding():
    # Memory binds while r_mem = W / M_tok < r_comp; the two meet at W = r_comp x M_tok
    # = 1785.714 x 8,741,100 = 15.609e9 B/s (15.6 GB/s, far below the H100's 3.35 TB/s).
    r = symcalc.solve("hbm_bandwidth", {**RUN, "memory_bound_tokens_per_second_per_gpu": f"{R_COMP_H100} token/s"})
    assert r.base_value == pytest.approx(R_COMP_H100 * M_TOK, rel=1e-9)
    assert r.base_value == pytest.approx(15.609107e9, rel=1e-6)


def test_global_batch_at_which_the_network_stops_binding():
    # Corrected r_net = W_NIC B_g / (2 N b_g (dp - 1)); it equals r_comp at
    # B_g = r_comp x 2 x 70e9 x 2 B x 7 / 25e9 B/s = 1785.714 x 1.96e12 / 25e9 = 1785.714 x 78.4 = 140,000 tokens
    # (check: r_net at 512,000 tokens is 6530.6 token/s; 512,000 x 1785.714 / 6530.6 = 140,000).
    r = symcalc.solve("global_batch_tokens", {**without(RUN, "global_batch_tokens"), **H100,
                                              "network_bound_tokens_per_second_per_gpu": f"{R_COMP_H100} token/s"})
    assert r.base_value == pytest.approx(140_000, rel=1e-9)


def test_utilization_needed_for_a_target_cluster_throughput():
    # 200,000 token/s on 152 H100s (19 data-parallel replicas of the run's dp = 8: 150 GPUs, the
    # seed's count, is no whole number of them and is refused, n_gpus = tp pp cp dp):
    # r_gpu = 200000/152 = 1315.79 token/s, u = 1315.79 / 1785.714 = 0.736842
    r = symcalc.solve("utilization", {**without(RUN, "utilization"), **H100,
                                      "target_tokens_per_second": "200000 token/s", "n_gpus": "152"})
    assert r.base_value == pytest.approx(200000 / 152 / R_COMP_H100, rel=1e-12)
    assert r.base_value == pytest.approx(0.736842, rel=1e-6)


def test_gpus_for_a_target_round_up_without_float_noise():
    # L4: r_gpu = 0.75 x 120e12 / 5.04e11 = 178.5714 token/s; 200,000 / 178.5714 = 1120 exactly (seed prints 1120)
    r = symcalc.solve("n_gpus", {**RUN, **L4, "target_tokens_per_second": "200000 token/s"})
    assert r.rounded_base == 1120
    # H100: 200,000 / 1339.2857 = 149.33 -> 150 (seed prints 150)
    r = symcalc.solve("n_gpus", {**RUN, **H100, "target_tokens_per_second": "200000 token/s"})
    assert r.rounded_base == 150 and r.base_value == pytest.approx(149.3333, rel=1e-5)


def test_seed_network_term_and_its_correction():
    # seed 004: M_net = 2 x 70e9 x 2 / 512000 = 546,875 B/token; its r_net = 25e9 / 546,875 = 45,714 token/s
    seed = symcalc.solve("net_bytes_per_token", without(RUN, "dp"))
    assert seed.base_value == pytest.approx(546_875, rel=1e-12)
    # corrected per GPU: x (dp - 1) = 7 -> 3,828,125 B/token, r_net = 25e9 / 3,828,125 = 6530.6 token/s
    per_gpu = symcalc.solve("net_bytes_per_token_per_gpu", RUN)
    assert per_gpu.base_value == pytest.approx(7 * 546_875, rel=1e-12)
    r_net = symcalc.solve("network_bound_tokens_per_second_per_gpu", {**RUN, **H100})
    assert r_net.base_value == pytest.approx(25e9 / (7 * 546_875), rel=1e-12)
    assert r_net.base_value == pytest.approx(6530.61, rel=1e-6)


def test_memory_and_network_bound_cases():
    # HBM of 10 GB/s: r_mem = 1e10 / 8,741,100 = 1144 < r_comp 1785.7 -> memory
    assert symcalc.solve("bound", {**RUN, **H100, "hbm_bandwidth": "10 GB/s"}).value == "memory"
    # B_g = 64,000 tokens: r_net = 25e9 x 64000 / (2 x 70e9 x 2 x 7) = 816.3 token/s;
    # M_tok = 16 x 70e9 / 64000 + 6,553,600 = 24,053,600 B -> r_mem = 3.35e12 / 24,053,600 = 139,274 -> network
    case = {**RUN, **H100, "global_batch_tokens": "64000 token"}
    assert symcalc.solve("bound", case).value == "network"
    r = symcalc.solve("tokens_per_second_per_gpu", case)
    assert r.base_value == pytest.approx(0.75 * 25e9 * 64000 / (2 * 70e9 * 2 * 7), rel=1e-12)


def test_intensity_balance_and_cost_per_bandwidth():
    # I = 5.04e11 / 8,741,100 = 57,658.6 FLOP/B; H100 balance 900e12 / 3.35e12 = 268.66 FLOP/B
    assert symcalc.solve("arithmetic_intensity", RUN).base_value == pytest.approx(5.04e11 / M_TOK, rel=1e-12)
    assert symcalc.solve("machine_balance", H100).base_value == pytest.approx(900 / 3.35, rel=1e-12)
    # H100 3.93 $/h over 3.35 TB/s = 1.1731 $/(TB/s)/h (seed: 1.17)
    r = symcalc.solve("cost_per_memory_bandwidth", gpu_hour_price="3.93 USD/hour", hbm_bandwidth="3.35 TB/s")
    assert r.value == pytest.approx(3.93 / 3.35, rel=1e-12)
    # inverse: the hourly price at which an H200 (4.8 TB/s) costs 1 $/(TB/s)/h is 4.80 $/h
    r = symcalc.solve("gpu_hour_price", cost_per_memory_bandwidth="1 USD*s/TB/hour", hbm_bandwidth="4.8 TB/s")
    assert r.base_value == pytest.approx(4.8 / 3600, rel=1e-12)


def test_target_throughput_from_cluster_hbm_traffic():
    # seed 004: 200,000 token/s x 8,741,100 B = 1.748 TB/s; backwards 1.74822e12 / 8,741,100 = 200,000 token/s
    hbm_only = without(RUN, "flops_per_token", "bytes_per_grad", "dp", "utilization")
    r = symcalc.solve("cluster_hbm_bandwidth", {**hbm_only, "target_tokens_per_second": "200000 token/s"})
    assert r.base_value == pytest.approx(1.74822e12, rel=1e-9)
    r = symcalc.solve("target_tokens_per_second", {**hbm_only, "cluster_hbm_bandwidth": "1.74822 TB/s"})
    assert r.base_value == pytest.approx(200_000, rel=1e-9)


def test_optimizer_traffic_from_measured_hbm_bytes():
    # inverse of M_tok: (8,741,100 - 6,553,600) x 512,000 / 70e9 = 16 B per parameter per step
    r = symcalc.solve("optimizer_bytes_per_param_step", {**without(RUN, "optimizer_bytes_per_param_step"),
                                                         "hbm_bytes_per_token": "8741100 byte/token"})
    assert r.base_value == pytest.approx(16, rel=1e-9)


def test_cluster_throughput_of_a_fleet():
    # 152 H100s (19 replicas of dp = 8) x 1339.2857 token/s = 203,571.4 token/s
    r = symcalc.solve("roofline_tokens_per_second", {**RUN, **H100, "n_gpus": "152"})
    assert r.base_value == pytest.approx(152 * 0.75 * R_COMP_H100, rel=1e-12)


def test_no_data_parallelism_means_no_network_bound():
    # dp = 1: no gradient AllReduce, r_net infinite (seed 004's code), compute binds: 0.75 x 1785.714
    r = symcalc.solve("tokens_per_second_per_gpu", {**RUN, **H100, "dp": "1"})
    assert r.base_value == pytest.approx(0.75 * R_COMP_H100, rel=1e-12)
    assert r.values["network_bound_tokens_per_second_per_gpu"] == float("inf")
