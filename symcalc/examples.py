"""Built-in worked examples: questions from the source documents, answered by the engine.

These are queries, not answers: every number printed is computed by the formula library.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import click

from symcalc.query.solve import solve
from symcalc.render.text import headline

# (question, target, given, options, source[, presets])
EXAMPLES: list[tuple[Any, ...]] = [
    ("Seed 000's opening question: a 30B model on 128 H100s, time per step (1M-token batch, 45% MFU)?",
     "step_time", {"n_params": "30e9", "n_gpus": "128", "global_batch_tokens": "1e6 token", "mfu": "45%"}, {},
     "seed 000, with the H100 preset's dense BF16 peak", {"hardware": "h100"}),
    ("What MFU does 150K tokens/s on 64 H100s mean for a 7B model? (peak as seed 000 quotes it)",
     "mfu", {"n_params": "7e9", "tokens_per_second": "150000 token/s", "n_gpus": "64",
             "peak_flops": "1979 TFLOP/s"}, {}, "seed 000, Exercise 2"),
    ("How many H100s (dense BF16 peak) train a 30B model on 600B tokens in 30 days at 45% MFU?",
     "n_gpus", {"n_params": "30e9", "n_tokens": "600e9 token", "train_time": "30 day", "mfu": "45%",
                "peak_flops": "989 TFLOP/s"}, {}, "seed 000, Exercise 3"),
    ("Model-state memory per GPU of a 7B model under ZeRO-3 on 64 GPUs?",
     "model_state_memory", {"n_params": "7e9", "dp": "64"}, {"zero_stage": "3"}, "seed 001, ZeRO"),
    ("Ring AllReduce of 7.38 GB of gradients over 128 GPUs at 400 Gb/s?",
     "allreduce_time", {"message_size": "7.38 GB", "n_gpus": "128", "link_bandwidth": "400 Gb/s"}, {},
     "seed 001, Llama 3.1 405B"),
    ("Optimal checkpoint interval when a checkpoint takes 98 s and the MTBF is 24 h?",
     "checkpoint_interval", {"checkpoint_write_time": "98 s", "mtbf": "24h"}, {}, "seed 001, Young's formula"),
    ("Hidden size of a 12.9B model with 40 layers and a 32K vocabulary?",
     "d_model", {"n_params": "1.291059e10", "n_layers": "40", "vocab_size": "32000"}, {},
     "seed 000's 12 L H^2 + 2 V H, solved backwards"),
    ("GPT-3 175B on 1024 A100s (TP 8, PP 8, DP 16, batch 1536): step time from the layout, no MFU guessed?",
     "step_time", {"tp": "8", "pp": "8", "dp": "16", "n_gpus": "1024", "global_batch_size": "1536",
                   "micro_batch_size": "1", "seq_len": "2048 token"},
     {"stack": "megatron-lm-2021", "recompute": "full"},
     "the step-time model (formulas/step_time.toml) with the code of the published run (Megatron-LM of 2021); "
     "Narayanan et al. 2021 measured 140 TFLOP/s a GPU",
     {"model": "gpt3-175b", "hardware": "a100-80gb"}),
]

SHOWN = 2  # the example whose whole derivation is printed


def command_line(target: str, given: dict, options: dict, presets: dict | None = None) -> str:
    parts = ["symcalc", "solve", target] + [f"{k}={v}" for k, v in given.items()]
    parts += [f"--option {k}={v}" for k, v in options.items()]
    parts += [f"--{k} {v}" for k, v in (presets or {}).items()]
    return " ".join(shlex.quote(p) if " " in p and not p.startswith("--") else p for p in parts)


def run_examples(as_json: bool = False) -> None:
    answers = []
    for question, target, given, options, source, *rest in EXAMPLES:
        presets = rest[0] if rest else {}
        r = solve(target, given, options=options, **presets)
        answers.append((question, source, command_line(target, given, options, presets), r))
    if as_json:
        click.echo(json.dumps([{"question": q, "source": s, "command": c, **r.as_dict()}
                               for q, s, c, r in answers], indent=2))
        return
    for i, (question, source, cmd, r) in enumerate(answers):
        click.echo(f"{i + 1}. {question}  ({source})")
        click.echo(f"   $ {cmd}")
        click.echo(f"   {headline(r)}")
        click.echo("")
    q, s, cmd, r = answers[SHOWN]
    click.echo(f"The whole derivation of example {SHOWN + 1}:")
    click.echo("")
    click.echo(r.text())
