"""``symcalc plan``: search every parallel layout of a run, keep those that fit, rank them.

space.py (the layouts and their validity rules, read from formulas/planner/space.toml),
evaluate.py (the step-time and memory derivations over arrays of layouts), search.py (fit, rank,
plan backwards), result.py (the PlanResult record that renderers read).
"""
