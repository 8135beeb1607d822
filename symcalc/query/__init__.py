"""A question and its answer: given values, solve / sweep / compare / check, limit-aware
rounding, and the result records the renderers read."""
