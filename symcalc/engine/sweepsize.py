"""The array sizes of the sweep path (symcalc.engine.fastpath), apart from it.

Why a module of its own: whether a grid is large enough for the sweep path is asked of every
evaluation over arrays (a planner's ~100 groups of layouts, most far smaller), and the sweep
path's module imports sympy (about 0.25 s, a quarter of a warm plan) to build its programs.
"""

CHUNK = 1 << 14          # elements per chunk: a chunk's inputs and temporaries stay in L2 cache
MIN_SIZE = 1 << 15       # below this many points the general path costs about the same
