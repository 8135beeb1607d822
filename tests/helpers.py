"""Plain helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

from symcalc import units

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).parent / "data"


def seed_examples() -> tuple[list[dict], dict[str, dict]]:
    """(every worked example, the errata by id), the errata applied: where an example's given
    names or options were only a seed's way of saying something the library says with an
    option, data/seed_examples_errata.toml says so and why."""
    examples = tomllib.loads((DATA / "seed_examples.toml").read_text())["example"]
    errata = {e["id"]: e for e in tomllib.loads((DATA / "seed_examples_errata.toml").read_text())["erratum"]}
    for e in examples:
        fix = errata.get(e["id"])
        if fix:
            e["options"] = {**e.get("options", {}), **fix.get("set_options", {})}
            e["given"] = {**e["given"], **fix.get("set_given", {})}
    return examples, errata


def base(text: str) -> float:
    """Magnitude of '68.5857 min' (or '47') in base units."""
    return float(units.parse_quantity(text).to_base_units().magnitude)


def close(got: float, expected: float, rel: float) -> bool:
    return math.isclose(got, expected, rel_tol=rel, abs_tol=0.0)


# the calibration example (llm-foundry's H100 FSDP steps), shared by the calibrate tests
EXAMPLE = Path(__file__).resolve().parent.parent / "calibration" / "examples" / "h100_fsdp_runs.toml"
# mpt7b_8gpu_noac of the example, as a `symcalc solve step_time` question
RUN = ["d_model=4096", "n_layers=32", "n_heads=32", "d_ffn=16384", "vocab_size=50368", "seq_len=2048 token", "tp=1",
       "pp=1", "dp=8", "n_gpus=8", "global_batch_size=48", "micro_batch_size=6", "--stack", "fsdp",
       "--option", "zero_stage=3", "--option", "recompute=none", "--option", "attention_kernel=flash1",
       "--option", "dropout=false", "--option", "position_encoding=alibi", "--option", "precision=bf16_fp32_grads",
       "--option", "tied_embeddings=true", "--option", "overlap_grad_reduce=true"]


def faster_runs(tmp_path, factor: float = 2.0):
    """A copy of the calibration example with every throughput ``factor`` times the measured one."""
    text = re.sub(r'tokens_per_second = "(\d+) token/s"',
                  lambda m: f'tokens_per_second = "{int(m.group(1)) * factor:g} token/s"', EXAMPLE.read_text())
    path = tmp_path / "fast.toml"
    path.write_text(text)
    return path
