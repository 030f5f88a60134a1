"""Stabilizers: make a small model's output act validly.

- `jsonregen`: repair malformed output in bounded rounds (strict, json-repair, YAML restatement by the model).
- `handlers`: reject well-formed but bad actions with an error and a hint (unknown tool/argument/entity,
  trivial expert input, repeated call, loop, premature finalize), and narrow the next step's schema to match.
Constrained decoding itself lives in the backends (serving/), fed by the schema from rcagent.actions.
"""
