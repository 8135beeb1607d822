"""Round-trip audit: run forwards and back, and the library gives the given values again, or
says why it cannot. ``python benchmarks/roundtrip_audit.py [--quick] [--seed N]``.

Broader than tests/test_roundtrip.py (whose helpers ``_value_for``, ``_shown``, ``_satisfies``
are copied here, so that this audit does not move when the test does):

1. every formula of the library that has an explicit left-hand side (as
   test_every_formula_solves_back_to_its_inputs), with 3 random seeds: random inputs, solve the
   left-hand side, then solve back for each input that the formula can be solved for;
2. random multi-step chains on the built-in presets (``symcalc list models``, ``symcalc list
   hardware``): a model, a hardware, a parallel layout (dp, tp, pp, micro_batch_size, seq_len,
   n_microbatches, sometimes mfu) and options (zero_stage, recompute, architecture=moe for MoE
   models); a target (memories, step time, MFU, throughput, train time, parameter counts, kv
   widths ...). Back: one quantity the forward derivation used (a typed value or a preset's),
   every other used value given explicitly (the presets' too, no model=/hardware=, their
   options and every option that shaped the forward derivation passed as options), the
   forward answer given as the target's value.

Each back question is one of: back (the same value, rel 1e-6), refused (underdetermined, no
solution, not determined, out of bounds: fair), conflict (ConflictError), another law (formula
part: another formula delivered a different value, as the test allows), another root (a different
value that satisfies the forward derivation), said why (another value, with a warning that the
given forward answer was not used and disagrees with it, and by how much), timeout (TimeLimitError), WRONG (a different value
that does not), ERROR (any other exception, internal ones included). Prints the counts and each
WRONG and ERROR case as a reproducible ``symcalc.solve(...)`` call (at most 40 lines); exits 1
if there is any WRONG or ERROR. The whole run is bounded (about 10 minutes; --quick about 1).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import symcalc  # noqa: E402
from symcalc.errors import (  # noqa: E402
    ConflictError,
    NoSolutionError,
    OutOfBoundsError,
    SymcalcError,
    TimeLimitError,
    UnderdeterminedError,
)
from symcalc.library.presets import all_presets  # noqa: E402

RTOL = 1e-6
CLASSES = ("back", "refused", "conflict", "another law", "another root", "said why", "timeout", "WRONG", "ERROR")
FAIR = (UnderdeterminedError, NoSolutionError, OutOfBoundsError)   # NotDeterminedError is a NoSolutionError
MAX_LINES = 40

LIB = symcalc.default_library()


# -- helpers (copied from tests/test_roundtrip.py) ------------------------------------------------

def _value_for(q, rng: random.Random) -> float:
    """A value of ``q`` in base units inside its domain, in the range real runs use."""
    d = q.domain
    if q.whole:
        lo = max(1, int(math.ceil(d.lo + (1e-9 if d.lo_open else 0))))
        hi = int(min(d.hi, 64))
        return float(rng.randint(lo, max(lo, hi)))
    if q.plausible:
        lo, hi = q.plausible
        return math.exp(rng.uniform(math.log(lo), math.log(hi)) * 0.5 + 0.25 * (math.log(lo) + math.log(hi)))
    if not math.isinf(d.hi):
        lo = max(d.lo, 0.0)
        return lo + (d.hi - lo) * rng.uniform(0.1, 0.9)
    return q.factor * 10 ** rng.uniform(-0.5, 1.0)


def _shown(name: str, base: float):
    """A base-unit magnitude as solve() takes it: in the quantity's display unit."""
    q = LIB.quantities[name]
    return (base / q.factor, q.display_unit) if q.display_unit else base


def _given(values: dict[str, float]) -> dict:
    return {k: _shown(k, v) for k, v in values.items()}


def _satisfies(forward, values: dict[str, float]) -> bool:
    """Whether ``values`` (base units) give the forward answer again through the forward derivation."""
    env = dict(values)
    env.update({k: d["magnitude"] for k, d in forward.defaults_used.items() if "magnitude" in d})
    try:
        again = forward.derivation.evaluate(env).values[forward.target]
        return math.isclose(float(again), float(forward.base_value), rel_tol=RTOL)
    except Exception:          # noqa: BLE001 - no value at all: it does not satisfy
        return False


# -- one back question ---------------------------------------------------------------------------

class Audit:
    def __init__(self, deadline: float, per_question: float):
        self.deadline = deadline
        self.per_question = per_question
        self.counts: dict[str, Counter] = {}
        self.bad: list[str] = []           # one-line reproductions of WRONG and ERROR
        self.timeouts: list[str] = []

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def limit(self) -> float:
        return max(1.0, min(self.per_question, self.left()))

    def count(self, part: str, cls: str) -> None:
        self.counts.setdefault(part, Counter())[cls] += 1

    def back(self, part: str, x: str, given: dict, options: dict, original: float, forward,
             satisfied_values: dict, formula_id: str = "", label: str = "") -> str:
        """Solve back for ``x`` and classify (see the module doc)."""
        call = repro(x, given, options)
        try:
            r = symcalc.solve(x, given, options=options, on_bounds="raise", diagnose=False,
                              time_limit=self.limit())
        except ConflictError:
            return self._note(part, "conflict")
        except FAIR:
            return self._note(part, "refused")
        except TimeLimitError:
            self.timeouts.append(f"{label}{call}")
            return self._note(part, "timeout")
        except Exception as e:        # noqa: BLE001 - everything else is the audit's finding
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            self.bad.append(f"ERROR {label}{call}  # {last[:300]}")
            return self._note(part, "ERROR")
        got = float(r.base_value)
        if math.isclose(got, original, rel_tol=RTOL, abs_tol=1e-300):
            return self._note(part, "back")
        if formula_id and formula_id not in {g.id for s in r.steps for g in s.formulas}:
            return self._note(part, "another law")
        if _satisfies(forward, {**satisfied_values, x: got}):
            return self._note(part, "another root")
        if any(f.kind == "unused_disagrees" and forward.target in f.related for f in r.findings):
            # the answer says that the value it came back from was not used, and that it
            # disagrees (how much, and with which defaults): it says why it cannot come back
            return self._note(part, "said why")
        self.bad.append(f"WRONG {label}{call}  # expected {original!r}, got {got!r}")
        return self._note(part, "WRONG")

    def _note(self, part: str, cls: str) -> str:
        self.count(part, cls)
        return cls


def _fmt(v) -> str:
    if isinstance(v, tuple):
        return f"({v[0]!r}, {v[1]!r})"
    return repr(float(v)) if isinstance(v, float) and not v.is_integer() else repr(int(v)) \
        if isinstance(v, float) else repr(v)


def repro(target: str, given: dict, options: dict) -> str:
    values = ", ".join(f"{k!r}: {_fmt(v)}" for k, v in sorted(given.items()))
    return f"symcalc.solve({target!r}, {{{values}}}, options={dict(sorted(options.items()))!r})"


# -- part 1: every formula -----------------------------------------------------------------------

def formula_cases():
    """(formula, options it needs, forward quantity, inputs it is solved back for)."""
    out = []
    symbol_type = type(LIB.quantities["n_params"].symbol)
    for f in LIB.formulas.values():
        if f.algorithm or not isinstance(f.lhs, symbol_type):
            continue
        lhs = LIB.symbols.get(f.lhs)
        if lhs is None or f.solvability.get(lhs) != "explicit" or LIB.quantities[lhs].whole:
            continue       # a whole-number result is rounded: its inputs cannot come back exactly
        if f.default_rule or f.forward_only:
            continue
        xs = [x for x in f.quantities if x != lhs and f.solvability[x] != "none"]
        if xs:
            out.append((f, {k: v[0] for k, v in f.when.items()}, lhs, xs))
    return out


def every_formula(audit: Audit, seeds: list[int], share: float) -> None:
    stop = time.monotonic() + share
    cases = formula_cases()
    for seed in seeds:
        rng = random.Random(seed)
        for f, options, lhs, xs in cases:
            if time.monotonic() > stop:
                audit.count("formulas", "(cut: time)")
                return
            values = {q: _value_for(LIB.quantities[q], rng) for q in f.quantities if q != lhs}
            given = _given(values)
            try:
                fwd = symcalc.solve(lhs, given, options=options, conflicts=False, diagnose=False,
                                    time_limit=audit.limit())
            except SymcalcError:
                audit.count("formulas", "(no forward)")
                continue
            except Exception as e:    # noqa: BLE001
                last = traceback.format_exception_only(type(e), e)[-1].strip()
                audit.bad.append(f"ERROR forward [{f.id}] {repro(lhs, given, options)}  # {last[:300]}")
                audit.count("formulas", "ERROR")
                continue
            if f.id not in {g.id for s in fwd.steps for g in s.formulas}:
                audit.count("formulas", "(no forward)")       # another formula delivered it
                continue
            for x in xs:
                back_given = _given({**{k: v for k, v in values.items() if k != x}, lhs: float(fwd.base_value)})
                audit.back("formulas", x, back_given, options, values[x], fwd, values, f.id, label=f"[{f.id}] ")


# -- part 2: random chains on presets ------------------------------------------------------------

MEMORY = ["total_memory_per_gpu", "activation_memory", "model_state_memory", "memory_headroom", "weight_memory",
          "optimizer_memory", "gradient_memory", "params_per_gpu", "n_params", "n_active_params", "kv_width",
          "kv_heads_per_gpu"]
THROUGHPUT = ["step_time", "mfu", "tokens_per_second", "train_time", "flops_per_token", "total_flops",
              "gpu_hours", "tokens_per_second_per_gpu", "achieved_flops_per_gpu", "global_batch_tokens",
              "bubble_fraction", "total_cost"]


def world(rng: random.Random, models: dict, hardware: dict):
    """(model key, hardware key, typed values, options, target) of one random realistic run."""
    model = rng.choice(sorted(models))
    hw = rng.choice(sorted(hardware))
    pp = rng.choice([1, 1, 2, 4, 8])
    values: dict[str, object] = {
        "dp": rng.choice([1, 2, 4, 8, 16, 32, 64]), "tp": rng.choice([1, 2, 4, 8]), "pp": pp,
        "micro_batch_size": rng.choice([1, 1, 2, 4]), "seq_len": (rng.choice([2048, 4096, 8192]), "token"),
        "n_microbatches": pp * rng.choice([1, 2, 4, 8]),
    }
    options = {"zero_stage": rng.choice("0123"), "recompute": rng.choice(["none", "selective", "full"])}
    if models[model].options.get("architecture") == "moe":
        options["architecture"] = "moe"
    target = rng.choice(MEMORY + THROUGHPUT)
    values["_pick"] = rng.random()     # which used quantity goes back (drawn here: timing never shifts the draws)
    if target in THROUGHPUT and target != "mfu" and rng.random() < 0.5:
        values["mfu"] = round(rng.uniform(0.25, 0.55), 3)
    if target in ("train_time", "gpu_hours", "total_flops", "total_cost") and "n_tokens" not in models[model].values:
        values["n_tokens"] = (rng.choice([1e12, 2e12, 15e12]), "token")
    if target == "total_cost":
        values["gpu_hour_price"] = (round(rng.uniform(1.5, 4.0), 2), "USD/hour")
    if target == "memory_headroom" and rng.random() < 0.5:
        options["zero_stage"] = "3"
    return model, hw, values, options, target


def chains(audit: Audit, rng: random.Random, wanted: int, share: float) -> int:
    presets = all_presets()
    models, hardware = presets["model"], presets["hardware"]
    stop = time.monotonic() + share
    asked: set = set()
    tries = 0
    while sum(audit.counts.get("chains", Counter())[c] for c in CLASSES) < wanted and tries < 20 * wanted:
        if time.monotonic() > stop:
            audit.count("chains", "(cut: time)")
            break
        tries += 1
        model, hw, values, options, target = world(rng, models, hardware)
        pick = values.pop("_pick")
        try:
            # conflicts on: a run whose values contradict each other (a given mfu beside the
            # step-time model of the hardware) is no forward answer to come back to
            fwd = symcalc.solve(target, values, model=model, hardware=hw, options=options,
                                diagnose=False, time_limit=audit.limit())
        except TimeLimitError:
            audit.count("chains", "(forward timeout)")
            continue
        except SymcalcError:
            audit.count("chains", "(no forward)")
            continue
        except Exception as e:        # noqa: BLE001
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            audit.bad.append(f"ERROR forward {repro(target, values, options)[:-1]}, model={model!r}, "
                             f"hardware={hw!r})  # {last[:300]}")
            audit.count("chains", "ERROR")
            continue
        tq = LIB.quantities[target]
        answer = float(fwd.base_value)
        if fwd.looked_up or (tq.whole and not float(answer).is_integer()):
            audit.count("chains", "(skipped: looked up / rounded answer)")
            continue
        used = list(fwd.derivation.route.given)
        if not used:
            continue
        x = used[min(int(pick * len(used)), len(used) - 1)]
        key = (model, hw, target, x, tuple(sorted(options.items())))
        if key in asked:
            continue
        asked.add(key)
        used_values = {g: float(fwd.given[g].magnitude) for g in used}
        back_given = _given({**{g: v for g, v in used_values.items() if g != x}, target: answer})
        # the presets' options, the question's own, then every option that shaped the forward
        # derivation (a training stack the forward put in force because its derivation depended
        # on it, and what that stack set): the back question is the same question
        back_options = {**models[model].options, **hardware[hw].options, **options, **fwd.options}
        origin = "preset" if fwd.given[x].origin else "typed"
        audit.back("chains", x, back_given, back_options, used_values[x], fwd, used_values,
                   label=f"[{model}/{hw} {target} -> {x} ({origin})] ")
    return tries


# -- the report ------------------------------------------------------------------------------------

def summary(audit: Audit) -> str:
    parts = list(audit.counts)
    extra = sorted({c for p in parts for c in audit.counts[p] if c not in CLASSES})
    heads = ["part", *CLASSES, "total", *extra]
    rows = [heads]
    for p in parts:
        c = audit.counts[p]
        rows.append([p, *(str(c[k]) for k in CLASSES), str(sum(c[k] for k in CLASSES)), *(str(c[k]) for k in extra)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(heads))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(r, widths)) for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: one seed, 30 chains, about a minute")
    parser.add_argument("--seed", type=int, default=20261123, help="first of the formula seeds; chains use seed + 7")
    parser.add_argument("--chains", type=int, default=None, help="back questions on presets (default 240; quick 30)")
    parser.add_argument("--budget", type=float, default=None, help="seconds for the whole run (default 570; quick 90)")
    args = parser.parse_args(argv)
    budget = args.budget or (90.0 if args.quick else 570.0)
    wanted = args.chains or (30 if args.quick else 240)
    seeds = [args.seed] if args.quick else [args.seed, args.seed + 1, args.seed + 2]
    started = time.monotonic()
    audit = Audit(deadline=started + budget, per_question=10.0 if args.quick else 20.0)

    print(f"formulas: {len(formula_cases())} formulas x {len(seeds)} seed(s) ...", file=sys.stderr, flush=True)
    every_formula(audit, seeds, share=0.45 * budget)
    t_formulas = time.monotonic() - started
    print(f"  {t_formulas:.0f} s; chains on presets ...", file=sys.stderr, flush=True)
    tries = chains(audit, random.Random(args.seed + 7), wanted, share=audit.left() - 5)
    elapsed = time.monotonic() - started

    print(f"round-trip audit ({'quick' if args.quick else 'full'}): formulas with seeds {seeds} in "
          f"{t_formulas:.0f} s; {tries} random chains tried for {wanted} back questions; {elapsed:.0f} s in all")
    print(summary(audit))
    chains_done = sum(audit.counts.get("chains", Counter())[c] for c in CLASSES)
    if chains_done < wanted:
        print(f"NOTE: only {chains_done} chain back questions within the budget (wanted {wanted})")
    if audit.timeouts:
        print(f"timeouts ({len(audit.timeouts)}, not counted as failures; first 5):")
        for line in audit.timeouts[:5]:
            print("  " + line[:400])
    if audit.bad:
        print(f"WRONG / ERROR ({len(audit.bad)}{', first ' + str(MAX_LINES) if len(audit.bad) > MAX_LINES else ''}):")
        for line in audit.bad[:MAX_LINES]:
            print(line)
    return 1 if audit.bad else 0


if __name__ == "__main__":
    os.environ.setdefault("SYMCALC_TIME_LIMIT", "30")
    sys.exit(main())
