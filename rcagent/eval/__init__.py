"""Evaluation, apart from the agent: the baselines (NSigma, BARO, random, ...), the scorer (PR@1, MRR,
Recall@k), `rcagent eval` and its report, text metrics (METEOR, embedding, BLEURT), the LLM judge, labels,
and the benchmarks `rcagent bench stability` and `rcagent bench ranking`. The agent imports nothing here."""
