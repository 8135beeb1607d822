"""Buffers nvidia-smi sees and PyTorch's allocator does not (issue 37, item 6): Transformer
Engine's userbuffers for TP communication overlap (one buffer of a micro-batch's gathered hidden
activations for each of the twelve overlapped GEMMs: TE base.py initialize_ub; Megatron passes
[seq x mbs / cp, h]) and DeepEP's dispatch buffers (csrc/legacy/config.hpp size hints)."""

import pytest

import symcalc

GIVEN = {"tp": 2, "dp": 4, "n_gpus": 8, "micro_batch_size": 1, "seq_len": "8192 token"}


def ub(options, given=GIVEN):
    return symcalc.solve("tp_comm_buffer_memory", dict(given), options={"stack": "megatron-core", **options},
                         model="llama3-8b", hardware="h100")


def test_twelve_bf16_buffers_of_the_gathered_micro_batch():
    # 8 all-gather + 4 reduce-scatter buffers of 8192 tokens x 4096 x 2 bytes
    assert ub({}).to("byte").magnitude == 12 * 8192 * 4096 * 2


def test_the_all_gather_buffers_hold_fp8_under_an_fp8_recipe():
    # fp8_buf: the 8 all-gather buffers in 1 byte, the 4 reduce-scatter ones stay BF16
    assert ub({"precision": "fp8"}).to("byte").magnitude == (8 * 1 + 4 * 2) * 8192 * 4096


def test_none_without_tp_or_without_the_overlap():
    assert ub({}, {**GIVEN, "tp": 1, "dp": 8}).to("byte").magnitude == 0
    assert ub({"tp_comm_overlap": "backward"}).to("byte").magnitude == 0


def test_nvidia_smi_sees_them_the_allocator_does_not():
    opts = {"stack": "megatron-core"}
    device = symcalc.solve("total_memory_per_gpu", dict(GIVEN), options={**opts, "memory_figure": "device"},
                           model="llama3-8b", hardware="h100")
    reserved = symcalc.solve("total_memory_per_gpu", dict(GIVEN), options={**opts, "memory_figure": "reserved"},
                             model="llama3-8b", hardware="h100")
    # the device figure adds the CUDA context (1.42 GiB), NCCL (1 GiB) and the userbuffers
    extra = device.to("byte").magnitude - reserved.to("byte").magnitude
    assert extra == pytest.approx(1.42 * 2**30 + 2**30 + 12 * 8192 * 4096 * 2, rel=1e-9)


def deepep(ep, options=None, dp=None):
    given = {"tp": 1, "pp": 16, "ep": ep, "dp": dp or 2048 // 16, "n_gpus": 2048}
    return symcalc.solve("ep_dispatch_buffer_memory", given,
                         options={"stack": "hai-llm", **(options or {})}, model="deepseek-v3", hardware="h800")


def test_deepep_keeps_token_slots_per_channel_and_peer():
    # 10 channels (20 SMs), 288 slots per channel and NVLink peer, each slot the bf16 hidden
    # (2 x 7168 bytes) plus 8 + 128 x (8 + 4 + 4) bytes of routing metadata; across 8 nodes
    # (ep 64) an RDMA buffer of 128 slots per channel and node, twice, with 16 more bytes a slot
    nvl = 10 * 8 * 288 * (2 * 7168 + 2056)
    rdma = 10 * (64 // 8) * 128 * 2 * (2 * 7168 + 2072)
    assert deepep(64).to("byte").magnitude == nvl + rdma          # 0.71 GB
    # inside one node (ep 8) there is no RDMA buffer
    assert deepep(8).to("byte").magnitude == 10 * 8 * 288 * (2 * 7168 + 2056)


def test_nccl_all_to_all_keeps_none_of_its_own():
    assert deepep(64, {"ep_dispatcher": "all_to_all", "ep_comm_overlap": "false",
                       "pipeline_schedule": "1f1b"}).to("byte").magnitude == 0
