"""One run, read the same way by every command (issue 35): a question that names a model or
hardware is answered under the same default stack, with the same memory figure and the same fit
test, whether it is asked of `solve`, `check`, `sweep` or `plan`."""

import numpy as np
import pytest

import symcalc

# Llama 3 8B on one node of 8 H100s, the global batch plan takes by default (4M tokens: 512 x 8192)
RUN = dict(model="llama3-8b", hardware="h100")
RUN_7B = dict(model="llama2-7b", hardware="h100")
H100 = 81559 * 2**20        # bytes: an H100's memory, nvidia-smi's total (formulas/presets/hardware.toml)


@pytest.fixture(scope="module")
def planned():
    return symcalc.plan("llama3-8b", "h100", 8, top=4)


def _asked(row, target):
    """The plan's row asked of solve as a new user would: its layout and options, no --stack."""
    given = {k: v for k, v in row.layout.items() if k != "virtual_stages" or v > 1}
    given.update(global_batch_size=512, seq_len="8192 token")
    return symcalc.solve(target, given, options=row.options, **RUN)


def test_solve_and_plan_agree_on_memory_and_step_time_for_the_same_layout(planned):
    # four different layouts (ZeRO-1 with full recompute, tp 4 without, ...): the memory plan
    # ranks by and the step time it prints are what solve gives without being told the stack
    assert len(planned.rows) == 4
    for row in planned.rows:
        memory = _asked(row, "total_memory_per_gpu")
        assert memory.base_value == pytest.approx(row.memory, rel=1e-9), row.layout
        step = _asked(row, "step_time")
        assert step.base_value == pytest.approx(row.step_time, rel=1e-9), row.layout
        # both said which stack they assumed, first: the plan's own
        for r in (memory, step):
            assert (r.assumptions[0]["name"], r.assumptions[0]["value"]) == ("stack", planned.stack)
    # the memory is nvidia-smi's figure under every real stack: the parts plan prints add up
    # to it, the device's fixed parts (the CUDA context, NCCL's buffers) included, by their parts
    best = planned.rows[0]
    assert sum(best.memory_parts.values()) == pytest.approx(best.memory, rel=1e-9)
    assert best.memory_parts["cuda_context_memory"] == pytest.approx(1.42 * 2**30)
    assert best.memory_parts["nccl_buffer_memory"] == pytest.approx(2**30)


def test_check_gives_the_plans_verdict_on_the_plans_layout(planned):
    # check of the plan's best layout under the same fit test: it fits, with the same figure
    row = planned.rows[0]
    given = {k: v for k, v in row.layout.items() if k != "virtual_stages"}
    given.update(global_batch_size=512, seq_len="8192 token")
    c = symcalc.check(given, options=row.options, **RUN)
    fit = [f for f in c.fits if f.quantity == "total_memory_per_gpu"]
    assert fit and fit[0].fits and fit[0].value == pytest.approx(row.memory, rel=1e-9)


def test_sweep_marks_the_points_plan_would_reject_for_memory():
    # tp 8, no recompute, ZeRO-0 with sequence parallelism: plan's row 'tp8 mbs8 ... sp' counts
    # 72.1 GB at micro-batch 8 (rank 4 of its default plan); the sweep over micro-batches 4..12
    # under the same default stack puts the same figure at 8 and marks the points above the GPU's
    # 85.52 GB (the sweep keeps no margin unless one is given)
    s = symcalc.sweep("total_memory_per_gpu", vary={"micro_batch_size": "4:12"}, tp=8, pp=1, cp=1, dp=1, n_gpus=8,
                      global_batch_size=512, seq_len="8192 token",
                      options={"zero_stage": "0", "recompute": "none", "sequence_parallel": "true"}, **RUN)
    values = np.asarray(s.values, dtype=float).ravel()         # in GB, the display unit
    one = symcalc.solve("total_memory_per_gpu", dict(tp=8, pp=1, cp=1, dp=1, n_gpus=8, micro_batch_size=8,
                                                     global_batch_size=512, seq_len="8192 token"),
                        options={"zero_stage": "0", "recompute": "none", "sequence_parallel": "true"}, **RUN)
    assert values[4] == pytest.approx(one.base_value / 1e9, rel=1e-9)
    assert list(np.asarray(s.feasible).ravel()) == list(values <= H100 / 1e9)
    assert 0 < int(np.sum(values <= H100 / 1e9)) < values.size        # the boundary lies inside the sweep


def test_a_bare_formula_question_keeps_the_seeds_physics_and_names_no_stack():
    # seed 000's Exercise 1 layer: s b h (34 + 5 a s / h) with s = 2048, b = 1, h = 12288,
    # a = 96: 2048 x 12288 x (34 + 5 x 96 x 2048 / 12288) = 3.869 GB; asked of the same model as
    # a run, the default stack's cuDNN attention keeps no s x s scores: less
    bare = symcalc.solve("activation_memory_per_layer", seq_len="2048 token", micro_batch_size=1, d_model=12288,
                         n_heads=96)
    assert bare.base_value == pytest.approx(2048 * 12288 * (34 + 5 * 96 * 2048 / 12288), rel=1e-12)
    assert not [a for a in bare.assumptions if a["kind"] == "stack"]
    as_run = symcalc.solve("activation_memory_per_layer", seq_len="2048 token", micro_batch_size=1, hardware="h100",
                           d_model=12288, n_heads=96)
    assert as_run.assumptions[0]["value"] == "megatron-core" and as_run.base_value < bare.base_value
    textbook = symcalc.solve("activation_memory_per_layer", seq_len="2048 token", micro_batch_size=1,
                             hardware="h100", d_model=12288, n_heads=96, options={"stack": "textbook"})
    assert textbook.base_value == pytest.approx(bare.base_value, rel=1e-12)


def test_the_cli_says_the_stack_first(cli):
    run = cli("solve", "total_memory_per_gpu", "--model", "llama3-8b", "--hardware", "h100", "tp=8", "dp=1",
              "n_gpus=8", "micro_batch_size=8", "seq_len=8192 token", "--option", "sequence_parallel=true")
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[1].startswith("  assuming stack = megatron-core (the default stack: the question names a model "
                               "or hardware")
    assert "--stack textbook for the source documents' physics" in lines[1]


def test_one_margin_decides_a_fit_in_plan_and_in_solve(planned):
    # plan keeps 5 % of the GPU free when no headroom is given: an H100's 81559 MiB = 85.52 GB
    # less 4.276 GB = 81.24 GB a GPU
    assert planned.memory_limit == pytest.approx(H100 * 0.95, rel=1e-12)
    # Llama 2 7B, ZeRO-1 over 8, full recompute, flash attention, micro-batch 17: 82.21 GB under
    # the default stack (77.86 GB of tensors, 2.40 GB a micro-batch; the expandable segments'
    # reserve Megatron-Core's recipes run with, 4.3 % of the 40.8 GB of short-lived blocks, 1.75 GB;
    # + 2.60 GB of CUDA context and NCCL), so it fits the GPU but leaves 3.31 GB, under the
    # 4.276 GB plan keeps: solve says so, with the same margin
    r = symcalc.solve("total_memory_per_gpu", dict(dp=8, micro_batch_size=17),
                      options={"zero_stage": "1", "recompute": "full", "attention_kernel": "flash"}, **RUN_7B)
    [fit] = [f for f in r.findings if f.kind == "fit"]
    assert fit.values["fits"] and fit.values["tight"]
    assert fit.values["advised"] == pytest.approx(H100 * 0.05 / 1e9, rel=1e-12)    # GB, 5 % of 85.52 GB
    assert fit.values["free"] == pytest.approx(H100 / 1e9 - r.base_value / 1e9, rel=1e-9)
    assert 3.2 < fit.values["free"] < 3.4


def test_the_textbook_stack_answers_a_step_time_with_no_host_overhead():
    # --stack textbook sets no host time (layer_pass_overhead 0 us): the step's overhead is 0,
    # inside its bounds, and the step is its compute and exposed communications alone
    r = symcalc.solve("step_time", dict(tp=1, pp=1, cp=1, dp=8, n_gpus=8, micro_batch_size=1, global_batch_size=512,
                                        seq_len="8192 token"),
                      options={"zero_stage": "1", "recompute": "full", "stack": "textbook"}, **RUN)
    assert r.values["step_overhead_time"] == 0 and not r.violations
    assert r.options["attention_kernel"] == "eager"            # the seeds' attention, as the option's default
    assert r.base_value >= r.values["step_compute_time"]


def test_a_margin_given_beside_a_step_time_is_the_fits_not_a_value_to_reproduce():
    # memory_headroom = 2 GB is the margin to keep: the step time does not go through it (no
    # memory_headroom_def in its derivation, no default replaced to reproduce it), and the fit
    # verdict tests the layout's 82.21 GB against 85.52 - 2 = 83.52 GB: fits, 1.31 GB to spare
    r = symcalc.solve("step_time", dict(dp=8, n_gpus=8, global_batch_size=544, micro_batch_size=17,
                                        memory_headroom="2 GB"),
                      options={"zero_stage": "1", "recompute": "full", "attention_kernel": "flash"}, **RUN_7B)
    assert "memory_headroom_def" not in {f.id for s in r.steps for f in s.formulas}
    [fit] = [f for f in r.findings if f.kind == "fit"]
    assert fit.values["fits"] and not fit.values["tight"]
    assert fit.values["limit"] == pytest.approx(H100 / 1e9 - 2, rel=1e-12)
    assert 1.25 < fit.values["free"] < 1.35                  # 83.52 - 82.21 GB
    assert "memory_headroom" not in r.unused and "gpu_memory" not in r.unused     # the verdict read them


def test_plan_calls_a_layout_tight_where_solve_does():
    # the layout of test_one_margin_decides_a_fit_in_plan_and_in_solve (82.21 GB: fits the H100's
    # 85.52 GB, not its 5 % margin, 81.24 GB) fixed in a plan: rejected as tight, not as over the
    # GPU; the message says it fits the GPU with 85.52 - 82.21 = 3.31 GB left; with no headroom
    # the same layout is planned, at solve's memory
    fixed = dict(global_batch_size=136, tp=1, pp=1, cp=1, micro_batch_size=17,
                 options={"zero_stage": "1", "recompute": "full", "attention_kernel": "flash",
                          "sequence_parallel": "false"})
    p = symcalc.plan("llama2-7b", "h100", 8, **fixed)
    assert p.fitting == 0 and "does not fit in gpu_memory" not in p.rejected
    assert p.rejected["fits gpu_memory but not the memory_headroom kept free (tight: --headroom 0GB ranks them)"] == 1
    assert "it fits the GPU's 85.52 GB, leaving 3.31 GB" in p.message
    r = symcalc.solve("total_memory_per_gpu", dict(dp=8, micro_batch_size=17),
                      options={"zero_stage": "1", "recompute": "full", "attention_kernel": "flash"}, **RUN_7B)
    [fit] = [f for f in r.findings if f.kind == "fit"]
    assert fit.values["fits"] and fit.values["tight"]
    planned = symcalc.plan("llama2-7b", "h100", 8, memory_headroom="0GB", **fixed)
    assert planned.fitting == 1 and planned.rows[0].memory == pytest.approx(r.base_value, rel=1e-9)


def test_check_calls_a_layout_tight_where_solve_and_plan_do(cli):
    # the layout of test_one_margin_decides_a_fit_in_plan_and_in_solve (82.21 GB, 3.31 GB left of
    # the H100's 85.52 GB, under the 4.276 GB margin): check's fit line says tight with solve's
    # numbers, and the JSON carries it; with a margin given, the verdict is against that margin
    args = ("check", "--model", "llama2-7b", "--hardware", "h100", "dp=8", "n_gpus=8", "micro_batch_size=17",
            "--option", "zero_stage=1", "--option", "recompute=full", "--option", "attention_kernel=flash")
    run = cli(*args, "--brief")
    [line] = [x for x in run.out.splitlines() if "total_memory_per_gpu" in x]
    assert "(3.313 GB free, under the 4.276 GB a run keeps by default: tight, symcalc plan would not propose it)" in line
    [fit] = [f for f in cli(*args, "--json").json()["fits"] if f["quantity"] == "total_memory_per_gpu"]
    assert fit["fits"] and fit["tight"]
    given = cli(*args, "memory_headroom=2GB", "--json").json()
    [fit] = [f for f in given["fits"] if f["quantity"] == "total_memory_per_gpu"]
    assert fit["fits"] and not fit["tight"]
