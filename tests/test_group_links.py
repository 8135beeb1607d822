"""Each collective runs over its own group's link (issue 35: "a collective's bandwidth comes from
its group, never from whichever default is reachable"), and the layout's degrees keep the
structure rules in every command.

Hardware figures of the h100 preset (formulas/presets/hardware.toml): 476 GB/s AllReduce bus
bandwidth inside a node (nccl-tests, NVLS), 362 GB/s for a ring (AllGather/ReduceScatter), one
400 Gb/s NIC a GPU at 94 % = 47 GB/s, 8 GPUs a node, 7.88 us a ring step inside a node and 10 us
(inter_node_step_latency's default) across nodes. Llama 3 70B: d_model 8192, seq_len 8192, 80
layers, 64 heads (its config.json). Before this, one default rule gave every collective the
data-parallel group's figure: the TP AllReduce of 8 GPUs in one node ran at the NIC's 47 GB/s.
"""

from __future__ import annotations

import pytest

import symcalc
from symcalc.errors import DomainError

MB = 1e6
GB = 1e9
US = 1e-6
# one TP AllReduce of a [1 x 8192, 8192] bf16 activation: 8192 x 8192 x 2 = 134,217,728 bytes
MESSAGE = 8192 * 8192 * 2
TP8 = ("--model", "llama3-70b", "--hardware", "h100", "tp=8", "n_gpus=64", "micro_batch_size=1")


def _ms(cli, *args: str) -> float:
    run = cli("solve", *args, "--json")
    assert run.code == 0, run.err
    d = run.json()
    assert d["unit"] == "ms"
    return d["value"]


def test_the_tp_allreduce_inside_a_node_runs_on_nvlink(cli):
    # 8 ranks on one 8-GPU node: 2 x 134.2 MB x 7/8 = 234.9 MB a GPU at 476 GB/s = 0.4934 ms, plus
    # 2 x 7 ring steps of 7.88 us = 0.1103 ms: 0.6038 ms (4.997 ms before, at the NIC's 47 GB/s)
    expected = 2 * MESSAGE * 7 / 8 / (476 * GB) + 14 * 7.88 * US
    assert _ms(cli, "tp_allreduce_time", *TP8) == pytest.approx(expected * 1e3, rel=1e-9)
    r = symcalc.solve("tp_allreduce_time", tp=8, n_gpus=64, micro_batch_size=1, model="llama3-70b",
                      hardware="h100")
    assert r.defaults_used["tp_link_bandwidth"]["rule"].startswith("tp_link_from_hardware")


def test_a_tp_group_across_two_nodes_runs_on_their_nics():
    # tp = 16 on 8-GPU nodes: 8 ranks a node, 8 NICs x 47 = 376 GB/s < 476; the ring crosses the
    # network at every step (10 us): 2 x 134.2 MB x 15/16 / 376 GB/s + 30 x 10 us = 0.9693 ms
    r = symcalc.solve("tp_allreduce_time", tp=16, n_gpus=64, micro_batch_size=1, model="llama3-70b",
                      hardware="h100")
    assert r.base_value == pytest.approx(2 * MESSAGE * 15 / 16 / (376 * GB) + 30 * 10 * US, rel=1e-9)


def test_a_given_link_bandwidth_still_wins_with_its_own_latency(cli):
    # the user's 50 GB/s link, the hardware named too: 234.9 MB / 50 GB/s = 4.698 ms, and the
    # link's latency is link_latency's (0 s unless given), not the hardware's 7.88 us
    assert _ms(cli, "tp_allreduce_time", *TP8, "link_bandwidth=50 GB/s") == pytest.approx(
        2 * MESSAGE * 7 / 8 / (50 * GB) * 1e3, rel=1e-9)
    # with link_latency given: + 14 x 5 us
    assert _ms(cli, "tp_allreduce_time", *TP8, "link_bandwidth=50 GB/s", "link_latency=5 us") == pytest.approx(
        (2 * MESSAGE * 7 / 8 / (50 * GB) + 14 * 5 * US) * 1e3, rel=1e-9)


def test_the_gradient_allreduce_runs_on_the_data_parallel_group():
    # 70B fp16 gradients, 140 GB, over 128 ranks (tp = 1): 8 a node, min(476, 8 x 47) = 376 GB/s;
    # 2 x 140 GB x 127/128 / 376 GB/s = 0.7389 s plus 254 steps of 10 us (the ring crosses nodes)
    r = symcalc.solve("allreduce_time", n_params=70e9, n_gpus=128, hardware="h100")
    assert r.base_value == pytest.approx(2 * 140 * GB * 127 / 128 / (376 * GB) + 254 * 10 * US, rel=1e-9)


def test_zero3_collectives_run_at_the_data_parallel_ring_figure():
    # 3 x 14 GB x 63/64 = 41.34 GB a GPU of AllGathers and ReduceScatters over dp = 64 (8 a node):
    # min(362, 8 x 47 = 376) = 362 GB/s, the ring figure (no in-switch reduction): 114.2 ms
    r = symcalc.solve("zero3_comm_time", message_size="14 GB", dp=64, hardware="h100",
                      options={"zero_stage": "3"})
    assert r.base_value == pytest.approx(3 * 14 * GB * 63 / 64 / (362 * GB), rel=1e-9)


def test_pipeline_traffic_runs_on_the_link_between_stages(cli):
    # 180 GB through one link (seed 001's serialized bound). pp = 4 over 64 GPUs: stages 16 GPUs
    # apart, one a node, one NIC: 180 / 47 = 3.830 s; over 4 GPUs of one node: 180 / 476 = 0.3782 s
    across = _ms(cli, "pp_p2p_time_serialized", "--hardware", "h100", "pp_p2p_bytes_per_step=180 GB",
                 "pp=4", "n_gpus=64")
    inside = _ms(cli, "pp_p2p_time_serialized", "--hardware", "h100", "pp_p2p_bytes_per_step=180 GB",
                 "pp=4", "n_gpus=4")
    assert across == pytest.approx(180 / 47 * 1e3, rel=1e-9)
    assert inside == pytest.approx(180 / 476 * 1e3, rel=1e-9)


def test_the_link_bandwidth_a_collective_needs_is_still_asked_for():
    # seed 001's TP AllReduce (b = 1, s = 4096, d = 8192, tp = 8): 2 x 67.1 MB x 7/8 = 117.4 MB;
    # in 0.2 ms it needs 117,440,512 B / 0.2 ms = 587.2 GB/s
    r = symcalc.solve("link_bandwidth", tp_allreduce_time="0.2 ms", tp=8, micro_batch_size=1,
                      seq_len="4096 token", d_model=8192)
    assert r.base_value == pytest.approx(2 * 4096 * 8192 * 2 * 7 / 8 / 0.2e-3, rel=1e-9)
    # and the latency of a 2 GB ring over 8 GPUs at 50 GB/s that takes 70.07 ms: 70 ms of
    # bandwidth (2 x 2 GB x 7/8 / 50 GB/s), 70 us over 14 steps = 5 us (seed 001)
    r = symcalc.solve("link_latency", allreduce_time="70.07 ms", message_size="2 GB", n_gpus=8,
                      link_bandwidth="50 GB/s")
    assert r.base_value == pytest.approx(5 * US, rel=1e-6)


# ---- structure rules: the degrees multiply to the GPU count ---------------------------------

def test_degrees_that_do_not_multiply_to_the_gpus_are_refused_in_one_line(cli):
    # 8 x 4 x 4 = 128 GPUs asked of 64: no cp makes that 64 (cp = 0.5)
    run = cli("solve", "weight_memory", "--model", "llama3-70b", "tp=8", "pp=4", "dp=4", "n_gpus=64")
    assert run.code == 2 and run.out == ""
    [line] = run.err.strip().splitlines()
    assert "do not multiply to the GPU count" in line
    assert "tp = 8, pp = 4, dp = 4, n_gpus = 64 (rule degrees_gpus" in line
    # all four given: 8 x 2 x 1 x 2 = 32 divides 64 but is not it
    with pytest.raises(DomainError, match=r"tp = 8, pp = 2, cp = 1, dp = 2, n_gpus = 64 \(rule degrees_all_gpus"):
        symcalc.solve("weight_memory", model="llama3-70b", tp=8, pp=2, cp=1, dp=2, n_gpus=64)


def test_degrees_that_leave_a_whole_degree_answer():
    # tp 8 x pp 4 = 32 divides 64: dp = 2 (cp 1); the weights 2 x 70,553,706,496 / 32 = 4.41 GB
    r = symcalc.solve("weight_memory", model="llama3-70b", tp=8, pp=4, n_gpus=64)
    assert r.base_value == pytest.approx(2 * 70_553_706_496 / 32, rel=1e-12)
    assert symcalc.solve("dp", tp=8, pp=4, n_gpus=64).value == 2


def test_an_absurd_degree_is_refused_through_the_command_line(cli):
    # tp = 1e9 divides no 64 heads (the first rule it breaks); without a model, the million-GPU bound
    run = cli("solve", "decode_step_time", "--model", "llama3-70b", "--hardware", "h100", "tp=1e9")
    assert run.code == 2 and len(run.err.strip().splitlines()) == 1 and "rule tp_heads" in run.err
    run = cli("solve", "weight_memory", "n_params=70e9", "bytes_per_param=2 byte", "ep=1e7")
    assert run.code == 2 and "ep = 1e7 (rule degree_absurd" in run.err
