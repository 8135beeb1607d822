"""A request's latency and a deployment's capacity: the questions served next after one
replica's decode rate (issue: every question in every direction, serving included)."""

import pytest

from symcalc import solve
from symcalc.errors import DomainError, NoFitError, OutOfBoundsError, UnderdeterminedError


def test_a_requests_latency_is_its_prefill_and_its_decode_steps_at_the_mean_context():
    # Llama 3 8B, one request of a 1,024-token prompt and 256 output tokens: its prefill (asked on
    # its own, the prompt the whole context) and then 256 decode steps at the mean context
    # 1,024 + 256 / 2 = 1,152 tokens (asked on its own): the latency is the one plus 256 x the other
    run = dict(model="llama3-8b", hardware="h100")
    prefill = solve("prefill_time", {"batch_size": 1, "prompt_len": "1024 token"}, **run).base_value
    step = solve("decode_step_time", {"batch_size": 1, "seq_len": "1152 token"}, **run).base_value
    r = solve("request_latency", {"batch_size": 1, "prompt_len": "1024 token", "output_len": "256 token"}, **run)
    assert r.base_value == pytest.approx(prefill + 256 * step, rel=1e-9)
    assert r.values["seq_len"] == 1152 and r.run.workload == "serving"
    # the model's 8,192-token training context is not the request's: said, not used
    assert any(n.startswith("seq_len: model llama3_8b's 8192 token is not used") for n in r.notes)
    # and backwards: the longest output a 2.2 s budget allows is about 256 tokens
    back = solve("output_len", {"batch_size": 1, "prompt_len": "1024 token", "request_latency": f"{r.base_value} s"},
                 **run)
    assert back.value == pytest.approx(256, abs=1)


def test_a_request_rate_target_gives_the_replicas_and_the_gpus():
    # a replica that puts out 2,000 output tokens a second under continuous batching, each
    # request 200 of them, completes 2000 / 200 = 10 requests a second; a deployment asked for
    # 25 req/s needs ceil(25 / 10) = 3 such replicas, 12 GPUs at tp 4 (vLLM's 'Request throughput
    # (req/s)' is completed requests over the run's duration)
    rate = {"continuous_tokens_per_second": "2000 token/s", "output_len": "200 token"}
    assert solve("request_throughput", rate).base_value == pytest.approx(10)
    target = {**rate, "cluster_requests_per_second": "25 req/s", "tp": 4}
    assert solve("replicas", target).value == 3
    assert solve("n_gpus", target).value == 12
    # a load below one replica's still takes one: 8 req/s on replicas of 10 rounds 0.8 up to 1
    assert solve("n_gpus", {**rate, "cluster_requests_per_second": "8 req/s", "tp": 4}).value == 4
    # a day's requests as a rate: 864,000 a day is 10 a second, one replica
    assert solve("replicas", {**rate, "cluster_requests_per_second": "864000 request/day"}).value == 1
    # without the request's lengths the request rate settles nothing: the output a mean context
    # leaves is asked backwards only (a context with no prompt given is all prompt, output 0), so
    # the refusal asks for output_len instead of dividing by a zero output
    with pytest.raises(UnderdeterminedError) as e:
        solve("replicas", {"tp": 8, "batch_size": 64, "cluster_requests_per_second": "20 req/s"},
              model="llama3-70b", hardware="h100")
    assert ["output_len"] in e.value.missing
    # a target given as one replica's rate leaves the GPUs open: read as the deployment's (the
    # only reading that answers), it is the same answer as the deployment's rate given, said first
    served = {"tp": 4, "batch_size": 32, "prompt_len": "500 token", "output_len": "200 token"}
    read = solve("n_gpus", {**served, "requests_per_second": "20 req/s"}, model="llama3-70b", hardware="h100")
    meant = solve("n_gpus", {**served, "cluster_request_throughput": "20 req/s"}, model="llama3-70b",
                  hardware="h100")
    assert read.value == meant.value and read.value % 4 == 0
    assert read.readings[0].startswith("request_throughput = 20 req/s is read as cluster_request_throughput")


def test_a_request_rate_without_a_batch_asks_for_the_batch_not_another_rate():
    # 100 req/s of 1,000-token prompts and 300-token outputs on replicas of tp 8: what is missing
    # is how many requests a replica holds (the batch, or the largest that fits: memory_headroom
    # 0), a serving question though the default workload is training; the training formulas'
    # only route, a cluster decode rate, restates the rate given and then has no solution
    served = {"tp": 8, "cluster_requests_per_second": "100 req/s", "prompt_len": "1000 token",
              "output_len": "300 token"}
    with pytest.raises(UnderdeterminedError) as e:
        solve("n_gpus", served, model="llama3-70b", hardware="h100")
    assert ["batch_size"] in e.value.missing and ["memory_headroom"] in e.value.missing
    assert e.value.missing[0] == ["memory_headroom"]    # the largest batch that fits, first
    # and what it asks settles it: the largest batch that fits, tp 8 x a whole number of replicas
    r = solve("n_gpus", {**served, "memory_headroom": "0 GB"}, model="llama3-70b", hardware="h100")
    assert r.run.workload == "serving" and r.value % 8 == 0


def test_a_latency_target_rounds_the_layout_the_way_that_keeps_it():
    # tp for a 20 ms decode step of Llama 3 70B (batch 1, 4096 tokens): exactly about 3.99 GPUs'
    # worth, so tp = 4 keeps the target and tp = 3 would not; a time per output token is a limit
    # (given_is at_most), so the answer rounds up, and says why
    r = solve("tp", {"batch_size": 1, "seq_len": "4096 token", "decode_step_time": "20 ms"}, model="llama3-70b",
              hardware="h100")
    assert r.value == 4 and r.rounding == "up"
    at = solve("decode_step_time", {"batch_size": 1, "seq_len": "4096 token", "tp": 4}, model="llama3-70b",
               hardware="h100")
    assert at.base_value <= 0.020


@pytest.mark.parametrize("given, says", [
    ({"output_len": "0 token"}, "output_len must lie in [1, inf)"),
    ({"prompt_len": "10000 token", "output_len": "16 token"}, "prompt_len = 10000 token is more than "
                                                               "max_position_embeddings = 8192 token"),
    ({"replicas": -2}, "replicas must lie in (0, inf)"),
])
def test_impossible_requests_are_one_line(given, says):
    with pytest.raises(DomainError) as e:
        solve("request_latency", {"batch_size": 1, "prompt_len": "100 token", **given}, model="llama3-8b",
              hardware="h100")
    assert says in e.value.message and "\n" not in e.value.message


def test_a_given_checkpoint_interval_is_a_choice_not_evidence_of_the_mtbf():
    # BLOOM's 384 GPUs checkpointing every 3 h (60 s writes): the job's MTBF is the GPUs', 50,677
    # GPU-hours (Llama 3's rate) / 384 = 132 h, not the 270 h that would make 3 h Young-optimal.
    # Waste: 60 s / 3 h + (3 h / 2) / 132 h
    r = solve("goodput_fraction", {"n_gpus": 384, "checkpoint_interval": "3 hour", "checkpoint_write_time": "60 s"})
    mtbf = 50677 * 3600 / 384
    assert r.values["mtbf"] == pytest.approx(mtbf, rel=1e-4)
    assert r.base_value == pytest.approx(1 - 60 / 10800 - 5400 / mtbf, rel=1e-6)
    # asked for, the same law still gives the MTBF that makes an interval optimal (the seed's inverse)
    assert solve("mtbf", {"checkpoint_interval": "30 min", "checkpoint_write_time": "98 s"}).base_value == \
        pytest.approx(1800 ** 2 / (2 * 98), rel=1e-9)


def test_a_sweep_over_tp_rounds_each_gpu_count_as_solve_does():
    # 25 req/s on replicas of 10 req/s each (2,000 output token/s, 200 tokens a request) is 2.5
    # replicas, so 3 whole replicas: 3 x tp GPUs at every tp, not 2.5 x tp rounded up to a whole
    # GPU (10 at tp 4 would split a replica); the sweep's table is solve's answer point by point
    from symcalc import sweep
    rate = {"continuous_tokens_per_second": "2000 token/s", "output_len": "200 token",
            "cluster_requests_per_second": "25 req/s"}
    s = sweep("n_gpus", rate, vary={"tp": [1, 2, 4, 8]})
    assert list(s.values) == [3, 6, 12, 24]
    assert [solve("n_gpus", {**rate, "tp": tp}).value for tp in (4, 8)] == [12, 24]
    ruled = [f for f in s.findings if f.kind == "rounded_to_rule"]
    assert len(ruled) == 1 and ruled[0].values["points"] == 3     # tp 1 needs no moving


def test_a_replica_whose_weights_do_not_fit_says_so_not_a_negative_cache():
    # Llama 3 70B in bf16 on one H100: its weights alone, 70.55e9 x 2 bytes = 141.1 GB, exceed the
    # GPU's 85.52 GB, so no replica of tp 1 serves any load; the refusal names the weights (what
    # does not fit), not the KV cache the remainder would leave (-56.66 GB) or the batch it gives
    served = {"memory_headroom": "0 GB", "cluster_requests_per_second": "20 req/s", "prompt_len": "1000 token",
              "output_len": "300 token"}
    with pytest.raises(NoFitError) as e:
        solve("n_gpus", {**served, "tp": 1}, model="llama3-70b", hardware="h100")
    assert str(e.value).startswith("no value of n_gpus fits: serving_weight_memory = 141.1 GB + "
                                   "serving_workspace_memory = 1.074 GB (together 142.2 GB) already exceed "
                                   "serving_memory_per_gpu = 85.52 GB")
    # at tp 2 the weights take 70.55 GB of each GPU and it fits: the refusal says so, with the answer
    wider = solve("n_gpus", {**served, "tp": 2}, model="llama3-70b", hardware="h100").value
    assert wider % 2 == 0 and str(e.value).endswith(f"; it fits with tp=2 (n_gpus = {wider:.0f})")


def test_the_largest_batch_that_keeps_each_users_speed():
    # "how many users at 50 token/s each": each sequence gets one token a step, so the speed is
    # 1 / the decode step; the largest batch is the last whose step stays within 20 ms
    run = {"tp": 8, "seq_len": "2048 token"}
    presets = {"model": "llama3.1-70b", "hardware": "h100"}
    users = solve("batch_size", {**run, "tokens_per_second_per_user": "50 token/s"}, **presets).value
    assert solve("decode_step_time", {**run, "batch_size": users}, **presets).base_value <= 0.020
    assert solve("decode_step_time", {**run, "batch_size": users + 1}, **presets).base_value > 0.020
    step = solve("decode_step_time", {**run, "batch_size": 64}, **presets).base_value
    speed = solve("interactivity", {**run, "batch_size": 64}, **presets)
    assert speed.target == "tokens_per_second_per_user" and speed.base_value == pytest.approx(1 / step, rel=1e-12)
    # a speed no batch reaches: even one sequence gets only 1 / its step (Llama 3 8B on an H100
    # at batch 1: 7.95 ms, 125.8 token/s), said as such rather than as a batch of -115.8
    alone = solve("tokens_per_second_per_user", {"batch_size": 1, "seq_len": "1000 token"}, model="llama3-8b",
                  hardware="h100")
    with pytest.raises(OutOfBoundsError) as e:
        solve("batch_size", {"seq_len": "1000 token", "tokens_per_second_per_user": "100000 token/s"},
              model="llama3-8b", hardware="h100")
    assert str(e.value) == (f"no value of batch_size in [1, inf) meets the given limits: at batch_size = 1, "
                            f"tokens_per_second_per_user = {alone.value:.4g} token/s, below the given 100000 token/s: "
                            f"no batch_size reaches it")
