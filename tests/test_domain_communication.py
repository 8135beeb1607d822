"""Collective communication, ZeRO traffic and tensor parallelism (inventory sections 7, 8, 12):
inverse questions solved from the seeds' results, seed errors reproduced under their own names,
and edge cases. Every expectation is a seed's number or a hand computation written next to it."""

import pytest

import symcalc
from symcalc.errors import UnderdeterminedError


def solve(target, options=None, **given):
    return symcalc.solve(target, given, options=options or {})


# ---- inverse questions ----------------------------------------------------------------------

def test_link_bandwidth_for_a_gradient_allreduce_to_hide_behind_the_backward_pass():
    # 10B params, fp16 gradients: M = 20 GB. Ring over 64 GPUs within a 200 ms backward:
    # beta = 2 M (N-1)/N / T = 2 x 20e9 x 63/64 / 0.2 s = 196.875 GB/s
    r = solve("link_bandwidth", n_params=10e9, bytes_per_grad="2 byte", n_gpus=64, allreduce_time="200 ms")
    assert r.to("GB/s").magnitude == pytest.approx(2 * 20 * 63 / 64 / 0.2, rel=1e-12)
    assert "gradient_message_size" in r.defaults_used["message_size"]["rule"]


def test_largest_tp_whose_tp_overhead_stays_under_a_target():
    # Seed 001's TP case: b=1, s=4096, d=8192, fp16 (default 2 byte), 80 layers x 2 AllReduces x 2 passes
    # (the defaults), NVLink 600 GB/s, compute 300 ms. One AllReduce moves 2 M (t-1)/t with
    # M = 4096 x 8192 x 2 B = 67,108,864 B, so overhead(t) = 320 x 2M/beta x (t-1)/t / 0.3 s
    # = 0.238609... x (t-1)/t. Under 21%: (t-1)/t < 0.21/0.238609 -> t < 8.340.
    shape = dict(micro_batch_size=1, seq_len="4096 token", d_model=8192, link_bandwidth="600 GB/s",
                 n_layers=80, compute_time="300 ms")
    coeff = 320 * 2 * 67_108_864 / 600e9 / 0.3
    r = solve("tp", tp_overhead=0.21, **shape)
    assert r.exact == pytest.approx(1 / (1 - 0.21 / coeff), rel=1e-9)       # 8.3403
    assert r.value == 8
    # and tp = 8 indeed stays under: 0.238609 x 7/8 = 20.88% (seed 001's corrected figure)
    assert solve("tp_overhead", tp=8, **shape).value == pytest.approx(100 * coeff * 7 / 8, rel=1e-9)


def test_message_size_that_fits_a_time_budget():
    # seed 001: 8 GPUs, 50 GB/s, 70 ms  ->  M = 70 ms x 50 GB/s x 8 / (2 x 7) = 2 GB
    r = solve("message_size", allreduce_time="70 ms", n_gpus=8, link_bandwidth="50 GB/s")
    assert r.to("GB").magnitude == pytest.approx(2, rel=1e-12)
    # with the 5 us latency term: (70.07 ms - 14 x 5 us) -> the same 2 GB
    r = solve("message_size", allreduce_time="70.07 ms", n_gpus=8, link_bandwidth="50 GB/s", link_latency="5 us")
    assert r.to("GB").magnitude == pytest.approx(2, rel=1e-9)


def test_nodes_and_bandwidth_for_a_hierarchical_allreduce_target():
    # seed 001: 20 GB across 8 node leaders on 100 GB/s: 2 x 20 x 7/8 / 100 = 350 ms.
    # Backwards: 2 M (n-1)/(n B) = T  ->  n = 1 / (1 - T B / (2 M)) = 1 / (1 - 0.875) = 8
    r = solve("n_nodes", allreduce_time_inter_node="350 ms", message_size="20 GB", inter_node_bandwidth="100 GB/s")
    assert r.value == 8 and r.exact == pytest.approx(8, rel=1e-9)
    r = solve("inter_node_bandwidth", allreduce_time_inter_node="350 ms", message_size="20 GB", n_nodes=8)
    assert r.to("GB/s").magnitude == pytest.approx(100, rel=1e-12)
    # a 500 ms budget at 100 GB/s allows any number of nodes (2 M / B = 400 ms is the limit), a 300 ms
    # one at most 1 / (1 - 0.75) = 4 nodes
    assert solve("n_nodes", allreduce_time_inter_node="300 ms", message_size="20 GB",
                 inter_node_bandwidth="100 GB/s").value == 4


def test_zero3_dp_that_a_bandwidth_sustains():
    # seed 001: 3 x 14 GB x 63/64 / 100 GB/s = 413.4375 ms. Backwards: 3 M (dp-1)/dp = T B
    # -> dp = 1 / (1 - T B / (3 M)) = 1 / (1 - 41.34375/42) = 64
    r = solve("dp", zero3_comm_time="413.4375 ms", message_size="14 GB", link_bandwidth="100 GB/s")
    assert r.value == 64 and r.exact == pytest.approx(64, rel=1e-9)
    # and the bandwidth that keeps ZeRO-3 on 64 ranks within 413.4375 ms
    r = solve("link_bandwidth", zero3_comm_time="413.4375 ms", message_size="14 GB", dp=64)
    assert r.to("GB/s").magnitude == pytest.approx(100, rel=1e-12)


def test_tp_degree_from_a_computation_to_communication_ratio():
    # seed 003: 1D TP, d = 32768, C/C = d/(TP-1) = 2184.53 FLOP/byte -> TP = 1 + 32768/2184.53 = 16
    r = solve("tp", cc_ratio_tp=f"{32768 / 15} FLOP/byte", d_model=32768)
    assert r.value == 16 and r.exact == pytest.approx(16, rel=1e-9)


def test_measured_time_from_a_bus_bandwidth_utilization():
    # 2 GB on 8 GPUs over 50 GB/s links at 7/9 utilization: busbw = 38.89 GB/s,
    # time = 2 x 2 GB x 7/8 / 38.89 GB/s = 90 ms (the reconstructed seed 001 example, backwards)
    r = solve("measured_time", bus_bandwidth_utilization=7 / 9, message_size="2 GB", n_gpus=8,
              link_bandwidth="50 GB/s")
    assert r.to("ms").magnitude == pytest.approx(90, rel=1e-12)


# ---- seed errors, reproduced under their own names --------------------------------------------

def test_seed000_allreduce_counts_one_ring_phase():
    # seed 000: (140 GB / 50 GB/s) x 127/128 = 2.78 s ("2.8 s"); the ring takes twice that, 5.556 s
    seed = solve("allreduce_time_seed000", message_size="140 GB", n_gpus=128, link_bandwidth="50 GB/s")
    ring = solve("allreduce_time", message_size="140 GB", n_gpus=128, link_bandwidth="50 GB/s")
    assert seed.to("s").magnitude == pytest.approx(140 / 50 * 127 / 128, rel=1e-12)
    assert ring.to("s").magnitude == pytest.approx(2 * seed.to("s").magnitude, rel=1e-12)


def test_seed000_tp_allreduce_has_no_ring_factor():
    # seed 000: 2 x 4 x 4096 x 8192 B / 900 GB/s = 0.298 ms; the ring over 8 ranks moves 1.75x: 0.522 ms
    shape = dict(tp=8, micro_batch_size=4, seq_len="4096 token", d_model=8192, link_bandwidth="900 GB/s")
    seed = solve("tp_allreduce_time_seed000", **shape)
    assert seed.to("ms").magnitude == pytest.approx(268_435_456 / 900e9 * 1e3, rel=1e-12)
    assert solve("tp_allreduce_time", **shape).to("ms").magnitude == pytest.approx(
        1.75 * seed.to("ms").magnitude, rel=1e-12)


def test_seed001_tp_bytes_are_two_phases_not_56_mib():
    # seed 001 prints 56 "MB": 64 MiB x 7/8 = 56 MiB, one phase. The ring moves 2 x 7/8 x 64 MiB = 112 MiB.
    r = solve("allreduce_bytes_per_gpu", tp=8, micro_batch_size=1, seq_len="4096 token", d_model=8192)
    assert r.to("MiB").magnitude == pytest.approx(112, rel=1e-12)


def test_seed003_cc_ratio_is_d_over_tp_minus_1():
    # printed simplification d (TP-1)/TP would give 30720; the seed's own 2,185 is d/(TP-1)
    r = solve("cc_ratio_tp", d_model=32768, tp=16)
    assert r.to("FLOP/byte").magnitude == pytest.approx(32768 / 15, rel=1e-12)
    assert r.defaults_used["tp_y"]["value"] == "1"             # 1D TP: tp_x = tp
    # 2D at tp_y = 1 reduces to 1D (the printed 2D formula divides by zero there)
    r2 = solve("cc_ratio_tp", d_model=32768, tp_x=16, tp_y=1)
    assert r2.base_value == pytest.approx(r.base_value, rel=1e-12)


# ---- edge cases and cross-checks -------------------------------------------------------------

def test_tp_latency_counts_the_tp_ring_when_given():
    # one TP AllReduce known by its bytes: 117.44 MB / 600 GB/s + 2 (8-1) x 5 us = 0.19573 + 0.07 ms
    r = solve("allreduce_time", allreduce_bytes_per_gpu="117.44 MB", link_bandwidth="600 GB/s", tp=8,
              link_latency="5 us")
    assert r.to("ms").magnitude == pytest.approx(117.44e6 / 600e9 * 1e3 + 14 * 5e-3, rel=1e-12)


def test_no_tensor_parallelism_moves_no_tp_bytes():
    # tp = 1: 2 M (1-1)/1 = 0
    r = solve("tp_comm_bytes_per_step", tp=1, micro_batch_size=1, seq_len="4096 token", d_model=8192, n_layers=80)
    assert r.base_value == 0


def test_generic_and_tp_allreduces_in_one_question_stay_apart():
    # A DP gradient AllReduce (2 GB over dp = 8 at 50 GB/s: 70 ms) and a TP group (t = 8, b=1,
    # s=4096, d=8192) in the same question: allreduce_time is the generic ring, tp_allreduce_time
    # the TP one (117.44 MB / 50 GB/s = 2.349 ms).
    both = dict(message_size="2 GB", dp=8, link_bandwidth="50 GB/s", tp=8, micro_batch_size=1,
                seq_len="4096 token", d_model=8192)
    assert solve("allreduce_time", **both).to("ms").magnitude == pytest.approx(70, rel=1e-12)
    assert solve("tp_allreduce_time", **both).to("ms").magnitude == pytest.approx(
        2 * 67_108_864 * 7 / 8 / 50e9 * 1e3, rel=1e-12)


def test_gradient_message_follows_tensor_and_pipeline_sharding():
    # 70B, fp16 gradients, TP = 8: each DP rank AllReduces 70e9 x 2 B / 8 = 17.5 GB
    assert solve("message_size", n_params=70e9, tp=8).to("GB").magnitude == pytest.approx(17.5, rel=1e-12)


def test_exposed_communication_when_buckets_outrun_the_backward():
    # 40 buckets of 6 ms behind 5 ms of backward each: the AllReduces queue up;
    # exposed = 40 x 6 - 39 x 5 = 45 ms of 240 ms, overlap 1 - 45/240 = 81.25%
    kw = dict(n_layers=40, backward_time_per_layer="5 ms", bucket_allreduce_time="6 ms")
    assert solve("exposed_comm_time", **kw).to("ms").magnitude == pytest.approx(45, rel=1e-12)
    assert solve("comm_overlap_fraction", **kw).base_value == pytest.approx(1 - 45 / 240, rel=1e-12)


def test_hierarchical_total_and_rail_optimized_cross_node_step():
    # leader-based: 2 x 20 GB / 600 GB/s (reduce + broadcast) + 350 ms = 416.67 ms;
    # rail-optimized with 100 GB/s per GPU: 2 x 2.5 GB x 7/8 / 100 GB/s = 43.75 ms
    kw = dict(message_size="20 GB", n_nodes=8, gpus_per_node=8, inter_node_bandwidth="100 GB/s",
              intra_node_bandwidth="600 GB/s")
    assert solve("allreduce_time_hierarchical", **kw).to("ms").magnitude == pytest.approx(
        2 * 20 / 600 * 1e3 + 350, rel=1e-12)
    r = solve("allreduce_time_inter_node_rail", message_size="20 GB", n_nodes=8, gpus_per_node=8,
              nic_bandwidth="100 GB/s")
    assert r.to("ms").magnitude == pytest.approx(43.75, rel=1e-12)


def test_kv_heads_divide_until_tp_exceeds_them():
    # 8 KV heads: TP = 4 -> 2 per GPU, no replication; TP = 16 -> 1 per GPU, each replicated twice
    assert solve("kv_heads_per_gpu", n_kv_heads=8, tp=4).value == 2
    assert solve("kv_head_replication", n_kv_heads=8, tp=4).value == 1
    assert solve("kv_heads_per_gpu", n_kv_heads=8, tp=16).value == 1


def test_tree_is_slower_than_ring_for_large_messages_and_faster_for_small():
    # 8 GPUs, 50 GB/s, 5 us. 2 GB: tree 6 x (5 us + 40 ms) = 240.03 ms vs ring 70.07 ms.
    # 1 KB: tree 6 x (5 us + 20 ns) = 30.12 us vs ring 14 x (5 us + 1e3/8/50e9 s) = 70.035 us.
    kw = dict(n_gpus=8, link_bandwidth="50 GB/s", link_latency="5 us")
    assert solve("tree_allreduce_time", message_size="1 kB", **kw).to("us").magnitude == pytest.approx(
        6 * (5 + 1e3 / 50e9 * 1e6), rel=1e-12)
    assert solve("allreduce_time", message_size="1 kB", **kw).to("us").magnitude == pytest.approx(
        14 * (5 + 1e3 / 8 / 50e9 * 1e6), rel=1e-12)


def test_nccls_double_binary_tree_runs_at_full_bandwidth_with_logarithmic_latency():
    # two pipelined trees, each rank a leaf in one (Sanders et al. 2009; NCCL 2.4): a rank sends
    # 2 M in all, and the latency is the depth. 2 GB, 8 ranks, 50 GB/s, 5 us: 6 x 5 us + 2 x 2 GB
    # / 50 GB/s = 80.03 ms, against the ring's 2 x 2 GB x 7/8 / 50 GB/s + 14 x 5 us = 70.07 ms.
    # 1,024 ranks and 1 MB: the tree's 20 steps (1.14 ms in all) beat the ring's 2,046 (10.27 ms)
    tree = {"options": {"tree_model": "double_binary"}, "link_bandwidth": "50 GB/s", "link_latency": "5 us"}
    assert solve("tree_allreduce_time", message_size="2 GB", n_gpus=8, **tree).to("ms").magnitude == pytest.approx(
        6 * 5e-3 + 2 * 2e9 / 50e9 * 1e3, rel=1e-12)
    small = solve("tree_allreduce_time", message_size="1 MB", n_gpus=1024, **tree).base_value
    ring = solve("allreduce_time", message_size="1 MB", n_gpus=1024, link_bandwidth="50 GB/s",
                 link_latency="5 us").base_value
    assert small == pytest.approx(20 * 5e-6 + 2 * 1e6 / 50e9, rel=1e-12)
    assert ring == pytest.approx(2046 * 5e-6 + 2 * 1e6 * 1023 / 1024 / 50e9, rel=1e-12)


def test_tree_steps_round_up_for_group_sizes_that_are_not_powers_of_two():
    # 6 ranks: a binary tree is ceil(log2 6) = 3 deep -> 6 steps
    assert solve("tree_allreduce_steps", n_gpus=6).value == 6


def test_zero3_ratio_is_one_and_a_half_whatever_dp_is():
    assert solve("zero3_comm_ratio").value == pytest.approx(1.5)
    # and the two volumes agree with it: 3 x 14 x 63/64 over 2 x 14 x 63/64
    z3 = solve("zero3_comm_bytes_per_gpu", message_size="14 GB", dp=64).base_value
    z12 = solve("zero12_comm_bytes_per_gpu", message_size="14 GB", dp=64).base_value
    assert z3 / z12 == pytest.approx(1.5, rel=1e-12)


def test_zero3_traffic_without_its_group_size_is_underdetermined():
    with pytest.raises(UnderdeterminedError) as e:
        solve("zero3_comm_bytes_per_gpu", message_size="14 GB")
    assert ["dp"] in e.value.missing


def test_the_gradient_ring_is_the_data_parallel_group():
    # 512 GPUs as TP 8 x PP 4 x DP 16: the gradient AllReduce runs over 16 ranks, not 512.
    # Llama 3 70B's shard: 70.553706496e9 x 2 B / 32 = 4.4096 GB; 2 x 4.4096 GB x 15/16 / 50 GB/s
    # + 30 x 5 us = 165.5 ms
    r = solve("allreduce_time", n_params=70553706496, n_gpus=512, tp=8, pp=4, link_bandwidth="50 GB/s",
              link_latency="5 us")
    shard = 70553706496 * 2 / 32
    assert r.to("s").magnitude == pytest.approx(2 * shard * 15 / 16 / 50e9 + 30 * 5e-6, rel=1e-12)
    # with only n_gpus the job is all data parallel and the ring has n_gpus ranks (the seeds' convention)
    assert solve("allreduce_time", message_size="2 GB", n_gpus=8, link_bandwidth="50 GB/s").to(
        "ms").magnitude == pytest.approx(70, rel=1e-12)


def test_tp_bytes_per_step_count_the_tp_allreduce_not_the_gradient_one():
    # TP 8, b = 1, s = 4096, d = 8192: each TP AllReduce moves 2 x 67.1 MB x 7/8 = 117.44 MB per GPU;
    # 80 layers x 2 x 2 passes = 320 of them: 37.58 GB. A gradient AllReduce described in the same
    # question (1 GB over 64 GPUs) must not be counted instead.
    r = solve("tp_comm_bytes_per_step", tp=8, micro_batch_size=1, seq_len="4096 token", d_model=8192,
              n_layers=80, message_size="1 GB", n_gpus=64)
    assert r.to("GB").magnitude == pytest.approx(320 * 2 * 4096 * 8192 * 2 * 7 / 8 / 1e9, rel=1e-12)


def test_sequence_parallel_messages_keep_their_own_byte_widths():
    # seed 003: the all-gather is msl x d_model x sizeof(fp8), the reduce-scatter x sizeof(bf16),
    # "= 2 x tp_all_gather_size": msl = 1 x 8192 / 2 = 4096, d = 16384 -> 67.1 MB and 134.2 MB
    given = dict(micro_batch_size=1, seq_len="8192 token", cp=2, d_model=16384)
    ag = symcalc.solve("tp_all_gather_size", **given).to("byte").magnitude
    rs = symcalc.solve("tp_reduce_scatter_size", **given).to("byte").magnitude
    assert ag == pytest.approx(4096 * 16384 * 1) and rs == pytest.approx(2 * ag)
