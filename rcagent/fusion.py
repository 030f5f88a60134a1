"""The final ranking: the model's root causes fused with an evidence ranking.

A small model names plausible entities but orders them poorly; the evidence ranks every entity by how far
its telemetry moved. Each entity scores its evidence (normalized so the top entity has 1) plus a vote from
the model: `vote` for the model's first pick, half that for its second, and so on. At vote 0.5 the model's
first pick wins whenever its evidence is at least half the top entity's; at 0 the evidence ranks and the
model's order only breaks ties. An entity the model names without evidence still enters the list.

react, oneshot and sql take the vote from the `model_vote` setting (default 0: on the default model's 60-job
sample every vote up to 0.25 ties the ranking alone, 0.5 loses one case, and 0 is the vote chosen
leave-one-system-out; docs/benchmarks.md). Span and graph modes fuse their own walk's picks at MODEL_VOTE,
fixed before any evaluation.
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
