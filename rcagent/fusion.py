"""The final ranking: the model's root causes fused with the overview's evidence ranking.

A small model names plausible entities but orders them poorly; the overview ranks every entity by how far
its telemetry moved. Each entity scores its evidence (normalized so the top entity has 1) plus a vote from
the model: MODEL_VOTE for the model's first pick, half that for its second, and so on. The model's first
pick therefore wins whenever its evidence is at least half the top entity's, and an entity the model names
without evidence can still enter the list (it scores its vote). The weight was fixed before any evaluation, not tuned on the cases.
"""
from __future__ import annotations

MODEL_VOTE = 0.5
LIMIT = 10


def fuse(model_names: list[str], evidence: list[tuple[str, float]], limit: int = LIMIT,
         vote: float = MODEL_VOTE) -> list[tuple[str, float]]:
    """[(entity, score)] best first, from the model's ranked names and [(entity, evidence score)]; `vote`
    is the weight of the model's first pick (benchmarks/fusion_replay.py tries others on stored runs)."""
    top = max((s for _, s in evidence), default=0.0) or 1.0
    score = {entity: s / top for entity, s in evidence}
    for i, name in enumerate(model_names):
        score[name] = score.get(name, 0.0) + vote / (i + 1)
    order = {name: i for i, name in enumerate(model_names)}
    ranked = sorted(score.items(), key=lambda kv: (-kv[1], order.get(kv[0], len(order)), kv[0]))
    return [(e, round(s, 3)) for e, s in ranked[:limit]]
