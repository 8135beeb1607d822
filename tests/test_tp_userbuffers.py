"""Transformer Engine's userbuffers for TP communication overlap (issue 37, item 6): registered
outside PyTorch's allocator, one buffer of a micro-batch's gathered hidden activations for each
of the twelve overlapped GEMMs (TE base.py initialize_ub; Megatron passes [seq x mbs / cp, h])."""

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
