"""Prefill and decode against published serving measurements: ``python benchmarks/serving.py``.

Each row is one published figure with its source, predicted from the model preset, the
hardware preset and the row's layout alone (nothing is fitted to these rows). Prints a markdown
table (the README's) with the error of each row and the mean |error|. Read: a static batch
(lmdeploy, TensorRT-LLM) decodes in lockstep, so its tokens/s give the step time; a continuous
batch's inter-token latency at one request is a step at batch 1; a request's end-to-end time
over its output tokens is a step (its short prefill included, about 1 %).
"""

from __future__ import annotations

import symcalc

LMD = "InternLM/lmdeploy @3e391df docs/en/benchmark/a100_fp16.md"
TRT09 = "NVIDIA/TensorRT-LLM v0.9.0 docs/source/performance/perf-overview.md"
TRT061 = "NVIDIA/TensorRT-LLM @138f96d docs/source/performance.md"
NIM = "docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance.md (NIM 1.8.0)"
VLLM = "buildkite.com/vllm/performance-benchmark/builds/9515"

# (what was measured, source, target, model, hardware, options, given, measured seconds)
ROWS = [
    ("lmdeploy Llama-2-7B, 1 A100 80GB, fp16, batch 1, 128 in / 2048 out: 98.92 token/s", LMD,
     "decode_step_time", "llama2-7b", "a100", {}, dict(tp=1, batch_size=1, seq_len="1152 token"), 1 / 98.92),
    ("lmdeploy Llama-2-70B, 4 A100 80GB tp 4, fp16, batch 1, 128/2048: 32.38 token/s", LMD,
     "decode_step_time", "llama2-70b", "a100", {}, dict(tp=4, batch_size=1, seq_len="1152 token"), 1 / 32.38),
    ("lmdeploy Llama-2-70B, 4 A100 tp 4, fp16, batch 64, 128/2048: 1391.8 token/s", LMD,
     "decode_step_time", "llama2-70b", "a100", {}, dict(tp=4, batch_size=64, seq_len="1152 token"), 64 / 1391.8),
    ("NIM Llama-3.3-70B, 2 H100 tp 2, fp8, 1 request, 500/2000: inter-token 18.91 ms", NIM,
     "decode_step_time", "llama3-70b", "h100", {"precision": "fp8", "weight_dtype": "fp8"}, dict(tp=2, batch_size=1, seq_len="1500 token"),
     18.91e-3),
    ("vLLM CI Llama-3-70B, 4 H200 tp 4, bf16, batch 8, 32/128: 2077.5 ms a request", VLLM,
     "decode_step_time", "llama3-70b", "h200", {}, dict(tp=4, batch_size=8, seq_len="96 token"), 2077.53e-3 / 128),
    ("TensorRT-LLM Llama-2-70B, 8 H100 tp 8, fp8, batch 1, 2048-token prompt: 85.1 ms", TRT09,
     "prefill_time", "llama2-70b", "h100", {"precision": "fp8", "weight_dtype": "fp8"}, dict(tp=8, batch_size=1, prompt_len="2048 token"),
     85.1e-3),
    ("TensorRT-LLM Llama-2-7B, 1 A100, fp16, batch 1, 2048-token prompt: 132.4 ms", TRT09,
     "prefill_time", "llama2-7b", "a100", {}, dict(tp=1, batch_size=1, prompt_len="2048 token"), 132.4e-3),
    ("TensorRT-LLM Llama-2-70B, 4 A100 tp 4, fp16, batch 1, 2048-token prompt: 377 ms", TRT061,
     "prefill_time", "llama2-70b", "a100", {}, dict(tp=4, batch_size=1, prompt_len="2048 token"), 377e-3),
    ("NIM Llama-3.3-70B, 2 H100 tp 2, fp8, 1 request, 5000-token prompt: first token 406.8 ms", NIM,
     "prefill_time", "llama3-70b", "h100", {"precision": "fp8", "weight_dtype": "fp8"}, dict(tp=2, batch_size=1, prompt_len="5000 token"),
     406.77e-3),
    # More rows from the same lmdeploy table (static batch, v0.1.0a1, 8x A100-80G): step = batch / out tok/s
    # (a 128-token prompt is under 1 % of a 2048-token run); seq_len is the mean context, prompt + half the output.
    ("lmdeploy Llama-2-7B, 1 A100, fp16, batch 1, 2048/2048: 93.78 token/s", LMD,
     "decode_step_time", "llama2-7b", "a100", {}, dict(tp=1, batch_size=1, seq_len="3072 token"), 1 / 93.78),
    ("lmdeploy Llama-2-7B, 1 A100, fp16, batch 16, 128/2048: 1010.62 token/s", LMD,
     "decode_step_time", "llama2-7b", "a100", {}, dict(tp=1, batch_size=16, seq_len="1152 token"), 16 / 1010.62),
    ("lmdeploy Llama-2-7B, 1 A100, fp16, batch 32, 128/2048: 1462.12 token/s", LMD,
     "decode_step_time", "llama2-7b", "a100", {}, dict(tp=1, batch_size=32, seq_len="1152 token"), 32 / 1462.12),
    ("lmdeploy Llama-2-7B, 1 A100, fp16, batch 64, 128/2048: 1852.06 token/s", LMD,
     "decode_step_time", "llama2-7b", "a100", {}, dict(tp=1, batch_size=64, seq_len="1152 token"), 64 / 1852.06),
    ("lmdeploy Llama-2-13B, 1 A100, fp16, batch 1, 128/2048: 55.29 token/s", LMD,
     "decode_step_time", "llama2-13b", "a100", {}, dict(tp=1, batch_size=1, seq_len="1152 token"), 1 / 55.29),
    ("lmdeploy Llama-2-13B, 1 A100, fp16, batch 16, 128/2048: 605.88 token/s", LMD,
     "decode_step_time", "llama2-13b", "a100", {}, dict(tp=1, batch_size=16, seq_len="1152 token"), 16 / 605.88),
    ("lmdeploy Llama-2-13B, 1 A100, fp16, batch 32, 128/2048: 860.14 token/s", LMD,
     "decode_step_time", "llama2-13b", "a100", {}, dict(tp=1, batch_size=32, seq_len="1152 token"), 32 / 860.14),
    ("lmdeploy Llama-2-70B, 4 A100 tp 4, fp16, batch 16, 128/2048: 482.99 token/s", LMD,
     "decode_step_time", "llama2-70b", "a100", {}, dict(tp=4, batch_size=16, seq_len="1152 token"), 16 / 482.99),
    ("lmdeploy Llama-2-70B, 4 A100 tp 4, fp16, batch 32, 128/2048: 853.56 token/s", LMD,
     "decode_step_time", "llama2-70b", "a100", {}, dict(tp=4, batch_size=32, seq_len="1152 token"), 32 / 853.56),
    # Same table, batch 1: the mean first-token latency (FTL(ave)) of a 2048- or 128-token prompt.
    ("lmdeploy Llama-2-7B, 1 A100, fp16, batch 1, 2048-token prompt: first token 0.139 s", LMD,
     "prefill_time", "llama2-7b", "a100", {}, dict(tp=1, batch_size=1, prompt_len="2048 token"), 0.139),
    ("lmdeploy Llama-2-13B, 1 A100, fp16, batch 1, 2048-token prompt: first token 0.242 s", LMD,
     "prefill_time", "llama2-13b", "a100", {}, dict(tp=1, batch_size=1, prompt_len="2048 token"), 0.242),
    ("lmdeploy Llama-2-70B, 4 A100 tp 4, fp16, batch 1, 2048-token prompt: first token 0.402 s", LMD,
     "prefill_time", "llama2-70b", "a100", {}, dict(tp=4, batch_size=1, prompt_len="2048 token"), 0.402),
    ("lmdeploy Llama-2-13B, 1 A100, fp16, batch 1, 128-token prompt: first token 0.040 s", LMD,
     "prefill_time", "llama2-13b", "a100", {}, dict(tp=1, batch_size=1, prompt_len="128 token"), 0.040),
    ("lmdeploy Llama-2-70B, 4 A100 tp 4, fp16, batch 1, 128-token prompt: first token 0.074 s", LMD,
     "prefill_time", "llama2-70b", "a100", {}, dict(tp=4, batch_size=1, prompt_len="128 token"), 0.074),
    # TensorRT-LLM's batch-1 first-token latency table (its note: data from v0.5; "LLaMA 7B/70B" are the
    # Llama2-7b/-70b engines its build commands name; H100 engines built with --enable_fp8 --fp8_kv_cache).
    ("TensorRT-LLM Llama-2-7B, 1 A100, fp16, batch 1, 128-token prompt: 16 ms", TRT061,
     "prefill_time", "llama2-7b", "a100", {}, dict(tp=1, batch_size=1, prompt_len="128 token"), 16e-3),
    ("TensorRT-LLM Llama-2-70B, 4 A100 tp 4, fp16, batch 1, 128-token prompt: 47 ms", TRT061,
     "prefill_time", "llama2-70b", "a100", {}, dict(tp=4, batch_size=1, prompt_len="128 token"), 47e-3),
    ("TensorRT-LLM Llama-2-7B, 1 H100, fp8, batch 1, 128-token prompt: 7 ms", TRT061,
     "prefill_time", "llama2-7b", "h100", {"precision": "fp8", "weight_dtype": "fp8"}, dict(tp=1, batch_size=1, prompt_len="128 token"),
     7e-3),
    ("TensorRT-LLM Llama-2-7B, 1 H100, fp8, batch 1, 2048-token prompt: 36 ms", TRT061,
     "prefill_time", "llama2-7b", "h100", {"precision": "fp8", "weight_dtype": "fp8"}, dict(tp=1, batch_size=1, prompt_len="2048 token"),
     36e-3),
    ("TensorRT-LLM Llama-2-70B, 4 H100 tp 4, fp8, batch 1, 128-token prompt: 26 ms", TRT061,
     "prefill_time", "llama2-70b", "h100", {"precision": "fp8", "weight_dtype": "fp8"}, dict(tp=4, batch_size=1, prompt_len="128 token"),
     26e-3),
    ("TensorRT-LLM Llama-2-70B, 4 H100 tp 4, fp8, batch 1, 2048-token prompt: 109 ms", TRT061,
     "prefill_time", "llama2-70b", "h100", {"precision": "fp8", "weight_dtype": "fp8"}, dict(tp=4, batch_size=1, prompt_len="2048 token"),
     109e-3),
]


def compare() -> list[tuple[str, str, float, float, str]]:
    """(row, source, predicted s, measured s, the bound that holds) for every row."""
    out = []
    for label, source, target, model, hardware, options, given, measured in ROWS:
        r = symcalc.solve(target, model=model, hardware=hardware, options=options, **given)
        bound = next((f.values["value"] for f in r.findings if f.kind == "reported"), "")
        out.append((label, source, float(r.base_value), measured, bound))
    return out


def main() -> None:
    rows = compare()
    print("| published measurement | source | predicted | measured | error | bound |")
    print("|---|---|---|---|---|---|")
    for label, source, pred, meas, bound in rows:
        print(f"| {label} | {source} | {pred * 1e3:.1f} ms | {meas * 1e3:.1f} ms | {100 * (pred / meas - 1):+.1f} % "
              f"| {bound} |")
    errors = [abs(p / m - 1) for _, _, p, m, _ in rows]
    print(f"\nmean |error| {100 * sum(errors) / len(errors):.1f} %, max {100 * max(errors):.1f} % over {len(rows)} rows")


if __name__ == "__main__":
    main()
