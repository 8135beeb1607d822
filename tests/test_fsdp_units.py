"""FSDP units besides the transformer layers (formulas/peak_memory.toml, option fsdp_units): the
embedding and output layer a stack keeps gathered from their forward into the backward, counted
by hand from torchtitan's apply_fsdp and FSDP2's root rule, and what they do to the published
torchtitan peaks of calibration/memory/.

Llama 3 8B throughout (32 layers, d 4096, vocabulary 128256, untied, 8,030,261,248 parameters
with the norms), one sequence of 8192 tokens, bf16 weights and gradients (mixed_fp16_adam).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import symcalc

ROOT = Path(__file__).resolve().parents[1]
N8B, V, D, L = 8_030_261_248, 128256, 4096, 32
LAYER = (N8B - 2 * V * D - D) / L          # one block: the published count less both embeddings and the final norm
JOB = dict(micro_batch_size=1, seq_len="8192 token", tp=1, pp=1, cp=1, dp=8, n_gpus=8)


def gather(units, stack="textbook", **given):
    """zero3_gather_memory in bytes, under ZeRO-3 with the given FSDP units."""
    options = {"stack": stack, "zero_stage": "3", "fsdp_units": units}
    r = symcalc.solve("zero3_gather_memory", {**JOB, **given}, options=options, model="llama3-8b")
    return r.to("byte").magnitude


def test_layers_alone_keep_the_one_layer_count():
    # the layer computing and the prefetched one (2 + 2 bytes), its bf16 gradient (2) and the
    # gradient's reduce-scatter copy (2): 8 bytes a layer parameter, nothing for the embeddings
    assert gather("layers") == pytest.approx(LAYER * 8, rel=1e-9)


def test_the_root_unit_keeps_both_embedding_matrices_gathered():
    # torchtitan @ 9dec370: tok_embeddings, norm and output are the root unit, which FSDP2 does not
    # reshard after forward: at the loss's peak both V x d matrices are gathered in bf16,
    # 2 x 128256 x 4096 x 2 bytes = 2.10 GB on top of the layers' 8 bytes a parameter
    assert gather("root_embeddings") == pytest.approx(LAYER * 8 + 2 * V * D * 2, rel=1e-9)
    assert 2 * V * D * 2 == pytest.approx(2.101e9, rel=1e-3)


def test_the_output_layer_unit_keeps_one_matrix_gathered():
    # torchtitan since 83e6941: [norm, output] one unit not resharded after forward, the embedding
    # its own unit resharded after its forward: one matrix, 1.05 GB
    assert gather("separate_embeddings") == pytest.approx(LAYER * 8 + V * D * 2, rel=1e-9)


def test_tensor_parallelism_splits_the_kept_matrices_over_the_vocabulary():
    # tp = 2: torchtitan shards tok_embeddings (RowwiseParallel) and output (ColwiseParallel) over
    # the vocabulary, so each GPU keeps V d / 2 of each; the layer is split over tp as well
    assert gather("root_embeddings", tp=2, dp=4) == pytest.approx(LAYER / 2 * 8 + 2 * V * D / 2 * 2, rel=1e-9)


def test_tied_embeddings_keep_one_matrix_in_the_root():
    # one V x d matrix serves as embedding and output: the root holds it once. The preset's total
    # (8,030,261,248) stays given, so with one matrix less the layers take its V d: a layer is
    # (N - V d - d) / L here
    layer = (N8B - V * D - D) / L
    r = symcalc.solve("zero3_gather_memory", JOB, model="llama3-8b",
                      options={"stack": "textbook", "zero_stage": "3", "fsdp_units": "root_embeddings", "tied_embeddings": "true"})
    assert r.to("byte").magnitude == pytest.approx(layer * 8 + V * D * 2, rel=1e-9)


def test_a_pipeline_stage_keeps_its_one_matrix_and_its_accumulated_gradient():
    # torchtitan, pp = 2: each stage is its own root, the first holding the embedding, the last the
    # output layer (one matrix, not two); with the stage kept unsharded between micro-batches its
    # gradient accumulates unsharded in FSDP2's fp32 reduce dtype: V d x (2 + 4) bytes, beside the
    # layers' 8 bytes a parameter and the stage's 16 layers x (2 + 4) bytes
    got = gather("root_embeddings", stack="torchtitan", pp=2, dp=4, global_batch_size=8)
    assert got == pytest.approx(LAYER * 8 + 16 * LAYER * (2 + 4) + V * D * (2 + 4), rel=1e-9)
    assert gather("separate_embeddings", stack="torchtitan", pp=2, dp=4, global_batch_size=8) == pytest.approx(got, rel=1e-12)


def test_a_wrapping_the_library_lacks_is_one_line_naming_the_close_one(cli):
    r = cli("solve", "zero3_gather_memory", "--model", "llama3-8b", "tp=1", "pp=1", "dp=8",
            "-o", "zero_stage=3", "-o", "fsdp_units=root")
    lines = [x for x in (r.out + r.err).splitlines() if x.strip()]
    assert r.code != 0 and len(lines) == 1 and "Did you mean: root_embeddings" in lines[0]


@pytest.fixture(scope="module")
def titan_rows():
    sys.path.insert(0, str(ROOT / "calibration"))
    import memory as M
    return {r.id: r for r in (M.translate(src, row) for src, row in M.load_rows())}


def test_each_torchtitan_row_says_the_units_of_the_version_it_ran(titan_rows):
    # Dec 2024 (9dec370) and June 2025 (e7c0cae): the root unit; the B200 rows (6fc499f, after
    # 83e6941): the output layer's own unit
    assert titan_rows["tt24_8b_fsdp8_lbs2"].options["fsdp_units"] == "root_embeddings"
    assert titan_rows["tt25_8b_fsdp32_h200_fp8"].options["fsdp_units"] == "root_embeddings"
    assert titan_rows["tt25_8b_fsdp8_b200_bf16"].options["fsdp_units"] == "separate_embeddings"


def test_the_eager_8b_row_rises_by_the_root_unit_and_the_reserve_on_it(titan_rows):
    # torchtitan Table 1, FSDP over 8, local batch 2: the kept root adds its 2.10 GB, and the
    # expandable-segment reserve (0.043 of the short-lived blocks, which a gathered unit is) adds
    # 4.3 % of it; no max in the sum moves
    # (the activations and the 25 GB of logits dominate the optimizer step and the gradients)
    run = titan_rows["tt24_8b_fsdp8_lbs2"]

    def total(units):
        return symcalc.solve("total_memory_per_gpu", run.given, options={**run.options, "fsdp_units": units}).to("byte").magnitude

    assert total("root_embeddings") - total("layers") == pytest.approx(2 * V * D * 2 * 1.043, rel=1e-6)


# ---- the loss under tensor parallelism (the 70B rows the output layer was suspected of) ---------

def test_dtensor_loss_parallel_keeps_sixteen_bytes_a_local_logit():
    # PyTorch's loss_parallel backward (torch/distributed/tensor/parallel/loss.py) holds the saved
    # fp32 log-softmax (4), torch.zeros_like's dense fp32 gradient (4), torch.exp of the log-softmax
    # (4) and their sum (4): 16 bytes a logit of the local vocabulary shard. tp = 8, one 8192-token
    # sequence: 8192 x 128256 / 8 x 16 = 2.10 GB, a third more than the 12-byte single-GPU kernel
    r = symcalc.solve("loss_memory", {**JOB, "tp": 8, "dp": 1}, model="llama3-8b",
                      options={"stack": "textbook", "loss_kernel": "dtensor_parallel"})
    assert r.to("byte").magnitude == pytest.approx(8192 * V / 8 * 16, rel=1e-12)


def test_torchtitans_loss_is_loss_parallel_only_under_tensor_parallelism():
    # torchtitan enters DTensor's loss_parallel whenever tp > 1 (get_train_context): its stack's
    # loss counts PyTorch's 12 bytes a logit on one rank and loss_parallel's 16 a local logit at
    # tp 8; asked of a run, tp 8 and one 8192-token sequence: 8192 x 128256 / 8 x 16 = 2.10 GB
    def bytes_at(tp):
        return symcalc.solve("logit_memory_bytes", {"tp": tp}, options={"stack": "torchtitan"}).to("byte").magnitude
    assert (bytes_at(1), bytes_at(8)) == (12, 16)
    r = symcalc.solve("loss_memory", {**JOB, "tp": 8, "dp": 1}, model="llama3-8b", options={"stack": "torchtitan"})
    assert r.to("byte").magnitude == pytest.approx(8192 * V / 8 * 16, rel=1e-12)
