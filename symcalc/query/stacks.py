"""Options whose values set, restrict and require: training stacks.

The same layout runs at different speeds under Megatron-Core, PyTorch FSDP, torchtitan or
DeepSpeed: each overlaps different communications, fuses different kernels and supports
different parallelisms. In the data a stack is an option like any other, whose values carry
three more keys (see the README's options section):

- ``options = { attention_kernel = "flash", ... }``: defaults it sets for other options (below
  presets and implications, above the other option's own default: :mod:`symcalc.query.implied`);
- ``supports = { pipeline_schedule = ["1f1b"], ... }``: the values of other options it runs
  with; another value is refused (:func:`check_supports`);
- ``requires = [{ when = "tp == 1", why = "..." }]``: conditions given values must satisfy
  (:func:`check_requires`).

When a stack is in force. One rule, read by every command. A question about a run (it names a
model or a hardware preset, as every plan does: :func:`is_run`) is answered as the default
stack runs it, memory and step time alike: the stack is in force when its derivation depends on
an option the stack set (the attention kernel of an activation memory). A question of a
formula's own inputs alone (the seed examples' activation memory per layer, with the textbook
eager-attention formulas) keeps the library's defaults unless it depends on the stack itself: a
formula of the derivation names it in its ``when``, or a default the derivation uses was set by
one of its values (``sets``: a step time's host overhead). A setting option given explicitly
(or by a preset, or implied by given values) is always in force. The solver resolves the
options with the stack's defaults, derives, and, when the derivation does not hold to the stack
(:func:`held`), resolves again without them and takes that derivation instead
(:func:`symcalc.query.question.pose`). Derivations are cached by their options, so the second
pass costs one more cold derivation at most once per question.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from symcalc.errors import BadOptionValueError
from symcalc.query.values import GivenValue
from symcalc.units.format import with_unit


def options_used(derivation, defaults_used: Mapping[str, dict]) -> set[str]:
    """The options a derivation depends on: those its formulas' ``when`` name, and those whose
    values set a default it uses."""
    names: set[str] = set()
    for s in derivation.steps:
        for f in s.formulas:
            names |= set(f.when)
    return names | {d["option"] for d in defaults_used.values() if d.get("option")}


def is_run(presets: Iterable) -> bool:
    """Whether a question is about a run: it names a model or a hardware preset (a real model
    on a real machine), as every plan does. Such a question is answered as the default stack
    runs it, in every command; a question of a formula's own inputs alone (the source
    documents' exercises) keeps the formulas' textbook defaults unless it names a stack."""
    return any(p.kind in ("model", "hardware") for p in presets)


def held(used: Iterable[str], set_by: Mapping[str, tuple[str, str]], run: bool) -> set[str]:
    """The setting options (stacks) a derivation holds to: those it depends on (``used``), and,
    for a question about a run (:func:`is_run`), those that set an option it depends on (the
    attention kernel of an activation memory, the overlaps of a step time)."""
    used = set(used)
    return used | ({by for name, (by, _) in set_by.items() if name in used} if run else set())


def decided(explicit: Iterable[str], preset_options: Iterable[str], implied: Iterable) -> set[str]:
    """Options the question itself settles: given explicitly, by a preset, or implied by values."""
    return set(explicit) | set(preset_options) | {imp.option for imp in implied}


def check_supports(library, options: Mapping[str, str], in_force: Iterable[str], matter: Iterable[str]) -> None:
    """Refuse an option value that a setting option in force does not run with.

    Parameters
    ----------
    options : every option's effective value
    in_force : the setting options (stacks) in force for the question
    matter : the options to check: those given explicitly and those the derivation uses

    Raises
    ------
    BadOptionValueError
        ``option pipeline_schedule=interleaved is not supported by stack=fsdp (it runs: 1f1b)``.
    """
    matter = set(matter)
    for name in in_force:
        value = options[name]
        for other, allowed in library.options[name].supports.get(value, {}).items():
            if other in matter and options[other] not in allowed:
                raise unsupported(library, other, options[other], name, value, allowed)


def unsupported(library, option: str, value: str, setting: str, setting_value: str,
                allowed: Iterable[str]) -> BadOptionValueError:
    """The refusal of ``option=value`` under ``setting=setting_value``, naming what it runs and
    the other values of the setting that list the option's value as one they run
    (``option finetune=qlora is not supported by stack=megatron-core (it runs: full, lora);
    --stack torchtune runs it``)."""
    spec = library.options[setting]
    # the values that run it: those whose supports list it; else those that leave the option free
    others = [v for v in spec.values if v != setting_value and value in spec.supports.get(v, {}).get(option, ())] or \
        [v for v in spec.values if v != setting_value and option not in spec.supports.get(v, {})]
    flag = "--stack " if setting == "stack" else f"--option {setting}="
    runs = f"; {' or '.join(flag + v for v in others)} {'runs' if len(others) == 1 else 'run'} it" if others else ""
    return BadOptionValueError(f"option {option}={value} is not supported by {setting}={setting_value} "
                               f"(it runs: {', '.join(library.options[option].listed(tuple(allowed)))}){runs}")


def check_requires(library, options: Mapping[str, str], in_force: Iterable[str], knowns: Mapping[str, GivenValue],
                   given: Iterable[str]) -> None:
    """Refuse given values (typed or from a preset; any point of an array) that make a condition
    of a setting option in force false. A condition whose quantities are not all known holds.

    Parameters
    ----------
    options : every option's effective value
    in_force : the setting options in force for the question
    knowns : the known values (typed and from presets)
    given : the setting options the question gave (the others are named as defaults)

    Raises
    ------
    BadOptionValueError
        ``stack=fsdp requires tp == 1 (PyTorch FSDP alone is data parallel only): tp = 2 was given``.
    """
    given = set(given)
    values = {k: v.magnitude for k, v in knowns.items() if not isinstance(v.magnitude, str)}
    for name in in_force:
        value = options[name]
        for req in library.options[name].requires.get(value, ()):
            if not req.applies(options):
                continue
            holds = req.condition.holds_where(values)
            if holds is None or bool(np.all(holds)):
                continue
            bad = ~np.asarray(holds, dtype=bool)
            first = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
            shown = []
            for n in req.condition.names:
                q = library.quantities[n]
                x = float(np.broadcast_to(np.asarray(values[n], dtype=float), bad.shape)[first])
                shown.append(f"{n} = {with_unit(x / q.factor, q.display_unit)}"
                             + (f" (from {knowns[n].origin.split(':', 1)[0]})" if knowns[n].origin else ""))
            where = f" at {int(bad.sum())} of {bad.size} points" if bad.ndim else ""
            who = f"{name}={value}" + ("" if name in given else f" (the default of option {name})")
            raise BadOptionValueError(f"{who} requires {req.text} ({req.why}): {', '.join(shown)}"
                                      f"{where} {'was' if len(shown) == 1 else 'were'} given")


def check_new_values(result, values: Mapping[str, object]) -> None:
    """The ``requires`` of the stacks in force for ``result`` (Result.stacks), checked on new
    values of its question (a sweep's axes, Result.function's arrays), read like given values
    (base-unit magnitudes, or GivenValue records).

    Raises
    ------
    BadOptionValueError
        As :func:`check_requires`.
    """
    if not result.stacks:
        return
    knowns = dict(result.given)
    for name, v in values.items():
        knowns[name] = v if isinstance(v, GivenValue) else GivenValue(name, "", v)
    check_requires(result.library, result.all_options, result.stacks, knowns,
                   [s for s, given in result.stacks.items() if given])
