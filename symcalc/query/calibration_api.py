"""``symcalc.calibrate``: the Python face of ``symcalc calibrate``.

The command line fits and writes a profile; a notebook wants the fit as a value it can show
(``Calibration._repr_html_``) and, only when asked, the profile as a file that ``hardware=``
then reads. This module ties symcalc.query.calibrate's pieces (which take the solver and the
preset lookup as arguments, so calibration/fit.py can drive them) to the built-in ones.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

from symcalc.library.loading import Library, default_library
from symcalc.library.presets import find_preset
from symcalc.outfile import check_target, write_file
from symcalc.query.calibrate import Calibration, check_not_input
from symcalc.query.calibrate import calibrate as fit_runs
from symcalc.query.solve import solve


def calibrate(runs: str | os.PathLike, /, *, hardware: str | None = None, fit: Sequence[str] | None = None,
              name: str | None = None, output: str | os.PathLike | None = None,
              library: Library | None = None) -> Calibration:
    """Fit the step-time model to the steps measured in ``runs`` (a runs file, as
    calibration/examples/h100_fsdp_runs.toml) and return the :class:`Calibration`: each run's
    error before and after, the fitted coefficients, and the profile (``.profile()``, TOML).

    ``hardware``, ``fit`` and ``name`` replace the runs file's base preset, coefficients and
    profile name. ``output`` writes the profile there (never over ``runs``), to pass later as
    ``hardware=output``; without it nothing is written.

    Raises the errors of ``symcalc calibrate`` (a SymcalcError, with one line saying why).

        >>> cal = symcalc.calibrate("calibration/examples/h100_fsdp_runs.toml")   # doctest: +SKIP
        >>> cal.fit.mean_error("after") < cal.fit.mean_error("before")            # doctest: +SKIP
        True
    """
    runs, out = os.fspath(runs), None if output is None else os.fspath(output)
    if out is not None:
        check_target(out, "output")
        check_not_input(runs, out)
    lib = library or default_library()
    result = fit_runs(runs, lib, functools.partial(solve, library=lib), find_preset, hardware=hardware,
                      fit_names=list(fit) if fit else None, name=name)
    if out is not None:
        write_file(out, result.profile(), "output")
        result.profile_path = out
    return result
