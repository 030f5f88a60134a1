"""Span-recursion mode (RCLAgent): the anomalous request's span tree, one agent per span, the Agents Pool,
the Global Evidence Graph and the Diagnosis Synthesizer. Entry point: rcagent.spans.mode.analyze."""
