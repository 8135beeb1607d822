"""The run a question is about, declared once (symcalc.query.run) and read alike by solve, check,
plan, the JSON and the text: its workload, stack and why, presets, and each parallel group with its
degree, where it came from, whether it stays in a node and the link its collectives took."""

import json
import pickle

import pytest

import symcalc

from symcalc import solve
from symcalc.query.solve import solve_unshown
from symcalc.errors import UnderdeterminedError
from symcalc.library.loading import default_library
from symcalc.query.check import check
from symcalc.query.layout_rules import space_data
from symcalc.query.run import declared_groups


def test_every_group_the_data_declares_names_quantities_the_library_has():
    # a misspelt link would silently show nothing: the default library must know every name
    lib = default_library()
    declared = space_data()["groups"]
    kept = {name: (links, per_node) for name, links, per_node in declared_groups(lib)}
    assert set(kept) == set(declared) == {"tp", "cp", "pp", "dp", "ep"}
    for name, spec in declared.items():
        assert kept[name] == (tuple(spec["links"]), spec["per_node"]), name


def test_the_tp_group_of_a_node_runs_its_allreduce_over_nvlink():
    # the example: tp = 8 of 64 H100s. Megatron puts a TP group on consecutive GPUs, so 8
    # ranks fill one 8-GPU node: its AllReduce takes the node's NVLink bus bandwidth (476 GB/s in
    # the H100 preset), never the NIC's 47 GB/s
    r = solve("tp_allreduce_time", {"tp": 8, "n_gpus": 64, "micro_batch_size": 1}, model="llama3-70b",
              hardware="h100")
    run = r.run.as_dict(r.values, r.library)
    tp = next(g for g in run["groups"] if g["name"] == "tp")
    assert (tp["degree"], tp["origin"], tp["spans"]) == (8.0, "given", "inside a node")
    assert tp["links"]["tp_link_bandwidth"] == {"value": pytest.approx(476.0), "unit": "GB/s",
                                                "from": "tp_bus_bandwidth"}
    assert (run["workload"], run["model"], run["hardware"]) == ("training", "llama3_70b", "h100_sxm")
    assert "run: training of llama3_70b on h100_sxm" in r.text()
    assert "tp = 8 (given; inside a node; tp_link_bandwidth = 476 GB/s from tp_bus_bandwidth)" in r.text()


def test_a_data_parallel_group_of_32_spans_nodes_and_takes_the_nics():
    # tp = 2 on 8-GPU nodes leaves 8 / 2 = 4 data-parallel ranks per node, so a dp group of 32
    # spans 8 nodes; its bus bandwidth is 4 ranks x 47 GB/s of NIC = 188 GB/s (collectives.toml's
    # dp_bus_bandwidth: the NICs of its ranks in a node), not NVLink's 476
    r = solve("step_time", {"tp": 2, "dp": 32, "n_gpus": 64, "micro_batch_size": 1, "seq_len": "8192 token",
                            "global_batch_size": 64}, model="llama3-8b", hardware="h100")
    dp = next(g for g in r.run.as_dict(r.values, r.library)["groups"] if g["name"] == "dp")
    assert dp["spans"] == "across nodes"
    assert dp["links"]["dp_bus_bandwidth"]["value"] == pytest.approx(4 * 47.0)
    assert r.run.stack == (("stack", "megatron-core"),) and r.run.stack_why == "default-run"


def test_a_serving_question_is_about_a_serving_run_and_its_fit_reads_that():
    # a decode rate reaches the batch's KV cache: the serving workload, whose fit is
    # serving_memory_per_gpu against gpu_memory (Llama 3 8B: 512 x 8192 tokens x 128 KiB = 550 GB)
    r = solve("decode_tokens_per_second", {"batch_size": 512, "seq_len": "8192 token"}, model="llama3-8b",
              hardware="h100")
    assert r.run.workload == "serving" and [w.amount for w in r.run.workloads] == ["serving_memory_per_gpu"]
    assert r.fit and r.fit[0].startswith("DOES NOT FIT: serving_memory_per_gpu")
    data = json.loads(r.json())
    assert data["run"]["workload"] == "serving" and data["run"]["stack_why"] == "none"


def test_check_and_plan_read_the_same_run_as_solve():
    # the same model and hardware with no stack named: plan, check and a stack-dependent solve
    # all run under the one default stack and say it is the default for a run
    lib = default_library()
    default = lib.options["stack"].default
    r = solve("total_memory_per_gpu", {"tp": 8, "pp": 4, "n_gpus": 64, "micro_batch_size": 1,
                                       "seq_len": "8192 token", "global_batch_size": 512},
              model="llama3-70b", hardware="h100", on_bounds="flag")
    p = symcalc.plan("llama3-70b", "h100", 64, top=1)
    assert dict(r.run.stack) == dict(p.run.stack) == {"stack": default}
    assert r.run.stack_why == p.run.stack_why == "default-run"
    assert r.run.workload == p.run.workload == "training"
    c = check({"tp": 8, "batch_size": 64, "seq_len": "4096 token", "kv_cache_per_token": "320 kB/token"},
              model="llama3-70b", hardware="h100")
    assert c.run.workload == "serving" and c.as_dict()["run"]["model"] == "llama3_70b"
    assert [f.quantity for f in c.fits] == ["serving_memory_per_gpu"]


def test_a_question_of_the_formulas_own_inputs_is_about_no_run_and_says_none():
    # seed 000's activation memory per layer: no preset, no degree given: no stack in force, and
    # the answer's text has no run line (the textbook formulas answer as the seeds wrote them)
    r = solve("activation_memory_per_layer", {"seq_len": "2048 token", "micro_batch_size": 1, "d_model": 4096,
                                              "n_heads": 32})
    assert r.run.stack == () and r.run.stack_why == "none"
    assert "run:" not in r.text()


def test_the_run_is_plain_data_that_pickles_with_its_answer():
    r = solve("tp_allreduce_time", {"tp": 8, "n_gpus": 64, "micro_batch_size": 1}, model="llama3-70b",
              hardware="h100")
    back = pickle.loads(pickle.dumps(r))
    assert back.run == r.run and back.run.group("tp").degree == 8.0


def test_a_gpu_count_from_a_throughput_is_not_the_layouts_defaults():
    # Llama 3 8B (8.03e9 parameters) at 200,000 token/s and 40 % MFU of an H100's 989.4 TFLOP/s:
    # 6 x 8.03e9 x 2e5 / (0.4 x 989.4e12) = 24.35 GPUs, 25 whole. A given dp = 8 must not turn the
    # answer into tp x pp x cp x dp = 8 with tp = pp = cp = 1 by default (121 % MFU); and 25 GPUs
    # cannot hold dp = 8, which the answer says
    r = solve("n_gpus", {"dp": 8, "tokens_per_second": "200000 token/s", "mfu": "40%"}, model="llama3-8b",
              hardware="h100")
    assert r.value == 25 and r.exact == pytest.approx(6 * 8030261248 * 2e5 / (0.4 * 989.4e12), rel=1e-4)
    assert any("degrees_gpus" in w and "dp = 8, n_gpus = 25" in w for w in r.warnings)


def test_when_nothing_fits_the_options_plan_searches_are_named_with_what_they_give():
    # Llama 3 8B keeps 16 bytes a parameter of model states (128.5 GB) on every GPU with no
    # optimizer sharding: no micro-batch fits in 80 GB. symcalc plan would shard them; solve says
    # which searched option makes the question answer, and the answer it gives is the one solve
    # gives under that option: the first stage that fits, ZeRO-2 over dp = 8, keeps the bf16
    # weights whole and shards the other 14 B: 8.03e9 x (2 + 14 / 8) = 30.1 GB of states
    from symcalc.errors import NoFitError
    given = {"tp": 1, "dp": 8, "n_gpus": 8, "memory_headroom": "0 GB", "seq_len": "8192 token"}
    with pytest.raises(NoFitError) as e:
        solve("micro_batch_size", given, model="llama3-8b", hardware="h100")
    sharded = solve("micro_batch_size", given, model="llama3-8b", hardware="h100", options={"zero_stage": "2"})
    assert sharded.values["model_state_memory"] / 1e9 == pytest.approx(8.03e9 * (2 + 14 / 8) / 1e9, rel=1e-3)
    # the states and the device's fixed memory (CUDA context 1.42 GiB, NCCL 1 GiB; no TP, so no
    # userbuffers) already exceed the GPU
    assert ("model_state_memory = 128.5 GB + cuda_context_memory = 1.525 GB + nccl_buffer_memory = 1.074 GB "
            "(together 131.1 GB) already exceed") in e.value.message
    assert f"it fits with --option zero_stage=2 (micro_batch_size = {sharded.value:g})" in e.value.message


def test_a_serving_throughput_target_takes_whole_replicas_of_the_given_tp():
    # the question: Llama 3 70B at tp 8, batch 64, 4k context, 50,000 token/s in all.
    # One replica's decode rate (asked on its own) sets the replicas: ceil(50,000 / rate); the
    # GPUs are 8 a replica (n_gpus = tp x pp x cp x dp with the replicas as dp), never a count
    # that no layout of tp 8 has
    import math
    run = {"tp": 8, "batch_size": 64, "seq_len": "4096 token"}
    rate = solve("decode_tokens_per_second", run, model="llama3-70b", hardware="h100").base_value
    want = math.ceil(50000 / rate)
    target = {**run, "cluster_decode_tokens_per_second": "50000 token/s"}
    replicas = solve("replicas", target, model="llama3-70b", hardware="h100")
    gpus = solve("n_gpus", target, model="llama3-70b", hardware="h100")
    assert replicas.value == want == 13 and gpus.value == 8 * want
    assert gpus.run.workload == "serving" and gpus.fit[0].startswith("fits: serving_memory_per_gpu")


def test_a_replicas_rate_given_for_the_deployments_is_read_as_the_deployments(cli):
    # the question as first asked: 50,000 token/s given as decode_tokens_per_second, one
    # replica's rate (decode_tokens_per_second = batch / decode step), leaves n_gpus open; read
    # as cluster_decode_tokens_per_second (the same figure summed over the replicas, data:
    # decode_tokens_per_second's `total`), the only reading that settles it, it is the 104 GPUs
    # above, and the answer says how it read the value before anything else
    run = {"tp": 8, "batch_size": 64, "seq_len": "4096 token", "decode_tokens_per_second": "50000 token/s"}
    r = solve("n_gpus", run, model="llama3-70b", hardware="h100")
    assert r.value == 104 and "cluster_decode_tokens_per_second" in r.given and "decode_tokens_per_second" not in r.given
    assert r.readings == ["decode_tokens_per_second = 50000 token/s is read as cluster_decode_tokens_per_second "
                          "(the deployment's total): as one replica's or one GPU's figure it cannot settle n_gpus; "
                          "give cluster_decode_tokens_per_second=... to say so"]
    assert not any("is read as" in w for w in r.warnings)
    out = cli("solve", "n_gpus", "--model", "llama3-70b", "--hardware", "h100", "tp=8", "batch_size=64",
              "seq_len=4096 token", "decode_tokens_per_second=50000 token/s")
    assert out.code == 0 and out.out.splitlines()[1] == f"  reading: {r.readings[0]}"
    data = cli("solve", "n_gpus", "--model", "llama3-70b", "--hardware", "h100", "tp=8", "batch_size=64",
               "seq_len=4096 token", "decode_tokens_per_second=50000 token/s", "--json").json()
    assert data["value"] == 104 and data["readings"] == r.readings
    # the planner's unshown questions never reread a value (no reader to tell): refused as asked,
    # with the reading as the refusal's suggestion
    with pytest.raises(UnderdeterminedError) as e:
        solve_unshown("n_gpus", run, model="llama3-70b", hardware="h100")
    assert e.value.rescopings == [["decode_tokens_per_second", "cluster_decode_tokens_per_second"]]


def test_a_model_size_from_a_decode_rate_points_to_the_bound_the_rate_gives(cli):
    # "how big a model can serve 100 token/s a sequence on an H100": n_params itself needs the
    # model's shapes (its KV cache and math), but the rate settles the bound declared in the data
    # as answering for n_params (largest_servable_params), so that is the answer, said first; it
    # is the weights-only figure: 1.905 TB/s (the preset's decode bandwidth) / (2 byte x 100
    # token/s) = 9.525e9 parameters
    run = {"decode_tokens_per_second": "100 token/s", "batch_size": 1}
    r = solve("n_params", run, hardware="h100")
    assert r.target == "largest_servable_params" and r.value == pytest.approx(1.905e12 / 200, rel=1e-3)
    assert r.readings == ["the values given do not settle n_params; they settle largest_servable_params (the most "
                          "parameters a replica can serve at a decode rate), answered for it"]
    assert "<p><b>Read as</b></p><ul><li>the values given do not settle n_params" in r._repr_html_()
    out = cli("solve", "n_params", "--hardware", "h100", "decode_tokens_per_second=100 token/s", "batch_size=1",
              "--json")
    assert out.code == 0 and out.json()["target"] == "largest_servable_params"
    # a refusal whose own values do not reach the bound (no rate given) does not name it
    with pytest.raises(UnderdeterminedError) as e:
        solve("n_params", {"n_layers": 32}, hardware="h100")
    assert e.value.related == []


def test_a_throughput_asked_of_a_serving_run_is_the_decode_rate_its_values_reach():
    # tokens_per_second is a training run's rate; asked of a serving batch it is the decode rate
    # (declared as answering for it). One replica's when nothing more is given; with the replicas
    # given, the deployment's, whose route reads them too (4 x one replica's rate)
    run = {"batch_size": 8, "seq_len": "2048 token"}
    one = solve("tokens_per_second", run, model="llama3-8b", hardware="h100")
    assert one.target == "decode_tokens_per_second"
    four = solve("tokens_per_second", {**run, "replicas": 4}, model="llama3-8b", hardware="h100")
    assert four.target == "cluster_decode_tokens_per_second"
    assert four.base_value == pytest.approx(4 * one.base_value)


def test_chinchillas_ratio_asked_of_a_trained_run_points_to_the_runs_own_ratio():
    # tokens_per_param is Chinchilla's compute-optimal 20; "tokens per parameter of Llama 3 8B
    # trained on 15T tokens" is the run's own ratio, 15e12 / 8.03e9 = 1,868 (training_tokens_per
    # _param answers for tokens_per_param in the data): that is the answer, said first
    ratio = solve("tokens_per_param", {"n_tokens": "15e12 token"}, model="llama3-8b")
    assert ratio.target == "training_tokens_per_param"
    assert ratio.value == pytest.approx(15e12 / 8.030261248e9)


def test_the_collective_family_runs_over_the_data_parallel_groups_link():
    # a 1 GB tensor over 8 ranks at 100 GB/s: every rank moves (8-1)/8 GB in an AllGather, a
    # ReduceScatter or an AllToAll (NCCL's bus-bandwidth factor (n-1)/n), 8.75 ms, and twice that
    # in an AllReduce, which is a ReduceScatter then an AllGather; and back, the size from the time
    given = {"message_size": "1 GB", "n_gpus": 8, "link_bandwidth": "100 GB/s"}
    for name in ("allgather_time", "reducescatter_time", "alltoall_time"):
        assert solve(name, given).base_value == pytest.approx(0.875e9 / 100e9), name
    assert solve("allreduce_time", given).base_value == pytest.approx(2 * 0.875e9 / 100e9)
    back = solve("message_size", {"allgather_time": "8.75 ms", "n_gpus": 8, "link_bandwidth": "100 GB/s"})
    assert back.base_value == pytest.approx(1e9)
    # on H100s, 64 data-parallel ranks span 8 nodes: the group's ring link is its NICs (8 ranks a
    # node x 47 GB/s = 376 GB/s of bus bandwidth: an AllGather's eight rings share them), with 63
    # inter-node steps of 10 us
    ag = solve("allgather_time", {"message_size": "1 GB", "dp": 64}, hardware="h100")
    assert ag.values["dp_link_bandwidth"] == pytest.approx(8 * 47e9)
    assert ag.base_value == pytest.approx(1e9 * 63 / 64 / (8 * 47e9) + 63 * 10e-6, rel=1e-6)
    # an AllToAll sends the 56/64 of its bytes bound for the other 7 nodes through each rank's own
    # 47 GB/s NIC (DeepEP's internode bound), NVLink carrying the 7/64 for its node meanwhile:
    # 0.875 GB / 47 GB/s = 18.6 ms + 0.63 ms, six times the AllGather's
    a2a = solve("alltoall_time", {"message_size": "1 GB", "dp": 64}, hardware="h100")
    assert a2a.base_value == pytest.approx(56 / 64 * 1e9 / 47e9 + 63 * 10e-6, rel=1e-6)
    # inside one node the AllToAll is the group's link, as the AllGather: 7/8 GB at 476 GB/s + 7 x 7.88 us
    one = solve("alltoall_time", {"message_size": "1 GB", "dp": 8}, hardware="h100")
    assert one.base_value == pytest.approx(7 / 8 * 1e9 / 476e9 + 7 * 7.88e-6, rel=1e-6)


def test_the_collective_family_runs_over_the_group_the_option_names():
    # an AllToAll of 1 GB a rank over 64 expert-parallel ranks on H100s: the group spans 8 nodes
    # (its rings would have 8 x 47 GB/s = 376 GB/s of bus bandwidth), and each rank sends the 56/64
    # bound for other nodes through its own 47 GB/s NIC, 63 steps of 10 us: 18.6 + 0.63 = 19.25 ms,
    # the same as 64 data-parallel ranks
    a2a = solve("alltoall_time", {"message_size": "1 GB", "ep": 64}, hardware="h100",
                options={"collective_group": "ep"})
    assert a2a.values["ep_bus_bandwidth"] == pytest.approx(8 * 47e9)
    assert a2a.base_value == pytest.approx(56 / 64 * 1e9 / 47e9 + 63 * 10e-6, rel=1e-6)
    # with tp = 2 (and etp = tp, Megatron-Core's expert grid) an EP group takes every second GPU:
    # 4 of its 8 ranks a node, so it spans 2 nodes (rings at 4 x 47 GB/s), and half of each
    # rank's bytes leave through its NIC: 0.5 GB / 47 GB/s + 7 x 10 us
    spread = solve("alltoall_time", {"message_size": "1 GB", "ep": 8, "tp": 2}, hardware="h100",
                   options={"collective_group": "ep"})
    assert spread.values["ep_bus_bandwidth"] == pytest.approx(4 * 47e9)
    assert spread.base_value == pytest.approx(0.5e9 / 47e9 + 7 * 10e-6, rel=1e-6)
    # 4 context-parallel ranks in one node: NVLink's ring figure, 3 steps of the intra-node latency
    cp = solve("allgather_time", {"message_size": "1 GB", "cp": 4}, hardware="h100", options={"collective_group": "cp"})
    assert cp.base_value == pytest.approx(0.75e9 / cp.values["cp_ring_bus_bandwidth"] + 3 * cp.values["cp_step_latency"])


def test_a_collective_asked_without_its_group_is_offered_the_group_the_values_settle(cli):
    # ep given, the default group (data parallel) unknown: the refusal names dp, and the group
    # option that puts the given ep to use; not tp or cp, which only their defaults of 1 would settle
    err = cli("solve", "alltoall_time", "message_size=1 GB", "ep=8", "--hardware", "h100")
    assert err.code == 2
    assert err.err.strip().endswith("also give one of: dp | n_gpus | n_nodes; or --option collective_group=ep")


def test_the_runs_layout_is_read_where_the_question_leaves_it_open():
    # the page's "with the run above" (symcalc.solve's layout=, the HTTP API's "layout"): a
    # memory question on Llama 3 8B at micro-batch 1 reads the layout's tp 8 and pp 1 where it
    # would have taken the defaults (tp = 1), the same answer as the degrees typed, and says so
    layout = {"tp": 8, "dp": 8, "pp": 1}
    a = solve("total_memory_per_gpu", {"micro_batch_size": 1}, model="llama3-8b", hardware="h100", layout=layout)
    b = solve("total_memory_per_gpu", {"micro_batch_size": 1, **layout}, model="llama3-8b", hardware="h100")
    assert a.base_value == pytest.approx(b.base_value, rel=1e-12)
    assert any(line.strip().startswith("run:") and "tp = 8 (layout of the run)" in line for line in a.text().splitlines())
    # under ZeRO-3 the question's values settle nothing without dp: the whole layout is read
    z3 = {"options": {"zero_stage": "3"}, "model": "llama3-8b", "hardware": "h100"}
    assert solve("total_memory_per_gpu", {"micro_batch_size": 1}, layout=layout, **z3).base_value == pytest.approx(
        solve("total_memory_per_gpu", {"micro_batch_size": 1, **layout}, **z3).base_value, rel=1e-12)
    # a value typed beside the layout wins
    typed = solve("total_memory_per_gpu", {"micro_batch_size": 1, "tp": 4}, model="llama3-8b", hardware="h100",
                  layout=layout)
    assert typed.values["tp"] == 4
    # the serving load on a page at tp 8, dp 64: the load reads tp 8 (where it leaned on
    # tp = 1) but not dp 64, which would have fixed n_gpus = 512 before the load was read:
    # 13 replicas of 8 (test_a_throughput_target_gives_the_replicas_and_the_gpus), 104 GPUs
    load = {"batch_size": 64, "seq_len": "4096 token", "cluster_decode_tokens_per_second": "50000 token/s"}
    gpus = solve("n_gpus", load, model="llama3-70b", hardware="h100", layout={"tp": 8, "dp": 64, "pp": 1})
    assert gpus.value == 104
    # 6 x 7e9 x 150,000 / (64 x 989e12) = 9.95 % MFU, which no degree of the layout enters: none
    # is read, and none is said to go unused
    mfu = solve("mfu", {"n_params": 7e9, "tokens_per_second": "150000 token/s", "n_gpus": 64,
                        "peak_flops": "989 TFLOP/s"}, layout={"tp": 1, "pp": 1, "dp": 64, "micro_batch_size": 1})
    assert mfu.base_value == pytest.approx(6 * 7e9 * 150000 / (64 * 989e12)) and mfu.warnings == []
    with pytest.raises(symcalc.SymcalcError, match="not one of its fields"):
        solve("mfu", {}, layout={"n_params": 7e9})
    # a layout that breaks a rule with the values typed says the layout took part
    with pytest.raises(symcalc.SymcalcError, match="with the run's layout: tp = 8, dp = 64"):
        solve("step_time", {"n_gpus": 128}, model="llama3-8b", hardware="h100",
              layout={"tp": 8, "dp": 64, "pp": 1, "micro_batch_size": 1, "global_batch_size": 512})


def test_a_given_achievable_hbm_rate_is_decodes_rate_not_the_presets_measured_one():
    # the H100 preset's decode figure (1.905 TB/s, a measured batch-1 decode) describes the same
    # fact as a given achievable_hbm_bandwidth: the user's value wins, and the answer says which
    # figure it replaced. Batch 1 of Llama 3 8B at 1k context reads its bf16 weights but the input
    # embedding's table (8.03e9 - 128,256 x 4,096 parameters: 15.01 GB) and 1024 x 128 KiB of KV
    # cache each step, and moves one token's activations (2 bytes x 32 layers x (10 x 4096 + 3 x
    # 14336 + 2 x (4096 + 1024)) elements, and its 128 KiB of keys and values):
    # (15.01e9 + 0.134e9 + 6.16e6) / 3e12 = 5.050 ms at 3 TB/s
    r = solve("decode_memory_time", {"batch_size": 1, "seq_len": "1024 token", "achievable_hbm_bandwidth": "3 TB/s"},
              model="llama3-8b", hardware="h100")
    assert r.values["decode_hbm_bandwidth"] == pytest.approx(3e12)
    act = 2 * 32 * (10 * 4096 + 3 * 14336 + 2 * (4096 + 1024)) + 131072
    assert r.base_value == pytest.approx((2 * (8030261248 - 128256 * 4096) + 1024 * 131072 + act) / 3e12, rel=1e-6)
    assert any(n.startswith("decode_hbm_bandwidth: hardware h100_sxm's 1.905 TB/s is not used") for n in r.notes)


def test_the_largest_micro_batch_without_a_margin_is_told_to_give_the_margin(cli):
    # a micro-batch is settled by the memory sum only once the margin is known: the refusal names
    # memory_headroom (0 GB for the largest that fits), the slack such a question lacks, even where
    # the search is cut short before checking a route through the memory block (it had said it
    # "ran out of its time budget", naming nothing)
    run = cli("solve", "micro_batch_size", "--model", "llama3-8b", "--hardware", "h100", "dp=8", "n_gpus=8",
              "seq_len=8192 token", "--option", "zero_stage=1")
    assert run.code == 2
    asked = run.err.split("also give ", 1)[1].removeprefix("one of: ")
    assert asked.startswith("memory_headroom (0 GB for the largest value that fits in gpu_memory)")


def test_the_fit_of_an_answer_reads_the_runs_layout_as_the_answer_does():
    # the page's solve box "with the run above" (tp 8): the GPUs for 50,000 token/s read tp 8 from
    # the run's layout, and so does whether the replica fits: 141.1 GB of weights over 8 GPUs, as
    # when tp = 8 is given with the question (before, the fit took tp 1 and said it did not fit)
    q = {"batch_size": 64, "seq_len": "4096 token", "cluster_decode_tokens_per_second": "50000 token/s"}
    laid = solve("n_gpus", q, model="llama3-70b", hardware="h100", layout={"tp": 8, "pp": 1, "dp": 64})
    given = solve("n_gpus", {**q, "tp": 8}, model="llama3-70b", hardware="h100")
    assert laid.value == given.value == 104
    assert laid.fit[0].startswith("fits: serving_memory_per_gpu = 28.63 GB")
    assert given.fit[0].startswith("fits: serving_memory_per_gpu = 28.63 GB")


def test_a_sweep_and_a_comparison_read_a_replicas_rate_as_solve_does(cli):
    # the same question over tp, and tp 4 against tp 8: each point answered as solve answers it,
    # 50,000 token/s read as the deployment's rate (before, the sweep failed inside: its grid kept
    # the name the template answer no longer read), and each says the reading
    run = ["--model", "llama3-70b", "--hardware", "h100", "batch_size=64", "seq_len=4096 token",
           "decode_tokens_per_second=50000 token/s"]
    swept = cli("sweep", "n_gpus", *run, "--vary", "tp=4,8", "--json").json()
    assert swept["values"] == [96, 104] and swept["feasible"] == [True, True]
    assert any("read as cluster_decode_tokens_per_second" in w for w in swept["warnings"])
    pair = cli("compare", "n_gpus", *run, "tp=4", "--vs", "tp=8", "--json").json()
    assert (pair["a"]["value"], pair["b"]["value"]) == (96, 104)
    assert pair["readings"]["a"] == pair["readings"]["b"] and "read as cluster_decode" in pair["readings"]["a"][0]


def test_check_reads_every_value_as_given():
    # a check compares the values as written: 50,000 token/s as decode_tokens_per_second is one
    # replica's rate, and the replica decodes 3,944 (batch 64 / its step), so it disagrees; the
    # GPU count is not rechecked by reading the rate as the deployment's (which solve would do)
    c = check({"tp": 8, "batch_size": 64, "seq_len": "4096 token", "decode_tokens_per_second": "50000 token/s",
               "n_gpus": 104}, model="llama3-70b", hardware="h100")
    assert not c.ok and "n_gpus" not in [r.quantity for r in c.relations]
    rate = next(r for r in c.relations if r.quantity == "decode_tokens_per_second")
    assert not rate.agrees and rate.computed == pytest.approx(
        solve("decode_tokens_per_second", {"tp": 8, "batch_size": 64, "seq_len": "4096 token"},
              model="llama3-70b", hardware="h100").base_value, rel=1e-9)


def test_an_answers_function_rounds_a_gpu_count_as_solve_does():
    # GPUs for twice the load, through the first answer's function: whole replicas of tp 8 (208,
    # as solve answers it), not the count rounded up alone (203); and a replica's rate given for
    # the deployment's is read the same way by the function as by the answer it came from
    q = {"tp": 8, "batch_size": 64, "seq_len": "4096 token"}
    r = solve("n_gpus", {**q, "cluster_decode_tokens_per_second": "50000 token/s"}, model="llama3-70b",
              hardware="h100")
    twice = solve("n_gpus", {**q, "cluster_decode_tokens_per_second": "100000 token/s"}, model="llama3-70b",
                  hardware="h100")
    assert r.function(**q, cluster_decode_tokens_per_second="100000 token/s").magnitude == twice.value == 208
    read = solve("n_gpus", {**q, "decode_tokens_per_second": "50000 token/s"}, model="llama3-70b", hardware="h100")
    assert read.function(**q, decode_tokens_per_second="100000 token/s").magnitude == 208
