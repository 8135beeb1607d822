"""Solving: structural solvability and blocks, routing a question through the equations,
inverting each step (sympy, guarded), tearing large blocks, compiling, evaluating, numeric roots."""
