"""Localization scores: PR@1 and RR as RCAtlas defines them, Recall@k and MRR, and the random-guess rate.

RCAtlas (§4): each answered entity is replaced by itself and its parents in the inventory (pod -> service)
that lie at the levels the dataset annotates; duplicates are dropped; the first five distinct entities are
the answer list, compared with the labels by name; each answer matches at most one root cause.
With r(g) the position of the first answer matching root cause g (inf if none) and t root causes:
PR@1 = 1 if some r(g) == 1; RR = mean over g of 1 / (1 + max(0, r(g) - t)), so with two root causes both
orders of the pair score 1. Recall@k (RCLAgent) is the share of root causes within the first k mapped
answers (k up to 10, so that list is cut at ten, not five); MRR is 1 / r of the best-placed root cause.
The random-guess rate is the probability that one inventory entity, drawn uniformly, scores PR@1 = 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

# Levels of the RCAtlas hierarchy by entity kind: databases, queues, functions count as services,
# hosts as nodes.
LEVEL_OF_KIND = {"pod": "pod", "container": "pod", "node": "node", "host": "node"}
SCORED = 5          # RCAtlas scores the first five distinct mapped answers
RECALL_KS = (1, 3, 5, 10)


def level(kind: str | None) -> str:
    return LEVEL_OF_KIND.get(kind or "", "service")


@dataclass
class Inventory:
    """What the scorer needs of a job: entity kinds and each entity's parents (a pod's service)."""
    kinds: dict[str, str]
    parents: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_job(cls, job) -> "Inventory":
        kinds = {e.id: e.kind for e in job.entities.values()}
        parents = {e.id: [e.service] for e in job.entities.values()
                   if e.service and e.service != e.id and e.service in kinds}
        return cls(kinds, parents)

    def map_up(self, entity: str, levels: set[str]) -> list[str]:
        """The entity and its parents that lie at the annotated levels (an unknown name stays as it is)."""
        if entity not in self.kinds:
            return [entity]
        chain = [entity] + self.parents.get(entity, [])
        return [e for e in chain if level(self.kinds.get(e)) in levels]


def mapped_answers(answers: list[str], inventory: Inventory, levels: set[str], limit: int = SCORED) -> list[str]:
    out: list[str] = []
    for answer in answers:
        for e in inventory.map_up(answer, levels):
            if e not in out:
                out.append(e)
    return out[:limit]


def first_positions(answers: list[str], truth: list[str]) -> dict[str, float]:
    """r(g) for each root cause: the 1-based position of the first answer matching it, inf if none.
    Each answer matches at most one root cause (names are unique after mapping, so this holds by name)."""
    return {g: float(answers.index(g) + 1) if g in answers else math.inf for g in truth}


@dataclass
class CaseScore:
    pr1: float
    rr: float
    mrr: float
    recall: dict[int, float]
    random_pr1: float
    answered: bool


def score_case(answers: list[str], truth: list[str], inventory: Inventory, levels: set[str]) -> CaseScore:
    """Score one case: `answers` ranked best first (raw entity names), `truth` the labelled root causes."""
    truth = list(dict.fromkeys(truth))
    top5 = mapped_answers(answers, inventory, levels, SCORED)
    r = first_positions(top5, truth)
    t = len(truth)
    pr1 = 1.0 if any(v == 1 for v in r.values()) else 0.0
    rr = sum(1 / (1 + max(0.0, v - t)) for v in r.values()) / t if t else 0.0
    top10 = mapped_answers(answers, inventory, levels, max(RECALL_KS))
    r10 = first_positions(top10, truth)
    recall = {k: sum(1 for v in r10.values() if v <= k) / t if t else 0.0 for k in RECALL_KS}
    best = min(r10.values(), default=math.inf)
    return CaseScore(pr1=pr1, rr=rr, mrr=0.0 if best == math.inf else 1 / best, recall=recall,
                     random_pr1=random_guess_rate(truth, inventory, levels), answered=bool(top5))


def random_guess_rate(truth: list[str], inventory: Inventory, levels: set[str]) -> float:
    """Exact chance that one entity drawn uniformly from the inventory is a hit (its first mapped name is a
    root cause)."""
    if not inventory.kinds:
        return 0.0
    hits = 0
    for entity in inventory.kinds:
        mapped = inventory.map_up(entity, levels)
        if mapped and mapped[0] in truth:
            hits += 1
    return hits / len(inventory.kinds)
