"""``symcalc plan``: search every parallel layout of a run, keep those that fit, rank them.

space.py (the layouts and their validity rules, read from formulas/planner/space.toml),
setup.py (the question read), onecount.py (one GPU count searched and ranked), goals.py (planning
backwards to a deadline, a budget, a throughput),
evaluate.py (the step-time and memory derivations over arrays of layouts), search.py (fit, rank,
plan backwards), result.py (the PlanResult record that renderers read).
"""
