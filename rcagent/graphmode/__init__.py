"""Graph mode (GAMA, `--mode graph`): the anomaly fusion graph, the coordinator's walk over it, and the
verifier that tries to refute each suspect. `mode.analyze` is the entry point; see its docstring."""
