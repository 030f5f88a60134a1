"""Building the diagnosis: from the model's finalize (fused with the evidence ranking), or, when the run
ended without one, from the evidence alone (best effort)."""
from __future__ import annotations

from rcagent import explain
from rcagent.diagnosis import Diagnosis, RootCause
from rcagent.errors import UnknownEntity
from rcagent.fusion import fuse
from rcagent.job import Job
from rcagent.tools.overview import ranking

RANKINGS = ("fused", "model")


def inventory_names(job: Job, raw, limit: int) -> list[str]:
    """An answer's root causes (a list, or one string) that name inventory entities, resolved as the tools
    resolve names (case, unique prefix), in order, without repeats; a name the model made up is dropped."""
    raw = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    names: list[str] = []
    for name in raw:
        try:
            entity = job.resolve(str(name)).id
        except UnknownEntity:
            continue
        names += [entity] if entity not in names else []
    return names[:limit]


def conclude(job: Job, run_id: str, model_names: list[str], args: dict, how: str, vote: float) -> Diagnosis:
    """The diagnosis from the model's ranked picks (inventory ids) and its texts: fused with the evidence
    ranking (`how`="fused", the model's first pick weighing `vote`) or the model's order alone ("model");
    texts that are not sentences are written from the evidence."""
    ranked = [RootCause(e, job.entities[e].kind, 0.0) for e in model_names]
    evidence = ranking(job)
    if how == "fused":
        ranked = [RootCause(e, job.entities[e].kind, s) for e, s in fuse(model_names, [(e, s) for e, s, _ in evidence],
                                                                     vote=vote)]
    else:
        for i, rc in enumerate(ranked):
            rc.score = round(1.0 / (i + 1), 3)
    return Diagnosis(job=job.id, run_id=run_id, root_causes=ranked, model_root_causes=list(model_names),
                     finalized=True, **texts(job, ranked, args, {e: r for e, _, r in evidence}))


def texts(job: Job, ranked: list[RootCause], args: dict, reasons: dict[str, list[str]]) -> dict:
    """The model's root cause, solution, evidence and responsibility; a field that is not a sentence
    (an entity name, "finalize") is written from the overview's evidence instead, and the note says which."""
    names = set(job.entities) | {"finalize"}
    top = ranked[0]
    evidence = args.get("evidence") or []
    out = {"root_cause": str(args.get("root_cause") or ""), "solution": str(args.get("solution") or ""),
           "evidence": [str(e) for e in (evidence if isinstance(evidence, list) else [evidence])],
           "responsibility": str(args.get("responsibility") or "")}
    written = []
    if not explain.is_sentence(out["root_cause"], names):
        out["root_cause"] = explain.explanation(top.entity, top.kind, reasons.get(top.entity, []))
        written.append("root cause")
    if not explain.is_sentence(out["solution"], names):
        out["solution"] = explain.solution(top.entity, reasons.get(top.entity, []))
        written.append("solution")
    if not any(explain.is_sentence(e, names) for e in out["evidence"]):
        out["evidence"] = [f"{rc.entity}: {'; '.join(reasons[rc.entity])}" for rc in ranked[:3] if reasons.get(rc.entity)]
        written.append("evidence")
    if not explain.is_sentence(out["responsibility"], names, min_words=2):
        out["responsibility"] = f"the team that owns {top.entity}"
        written.append("responsibility")
    if written:
        out["note"] = f"{', '.join(written)} written from the evidence: the model's text was not a sentence"
    return out


def best_effort(job: Job, run_id: str, looked_at: list[str], why: str) -> Diagnosis:
    """No finalize: rank what the agent looked at (else everything) by the overview's anomaly score."""
    ranked = ranking(job)
    seen = set(looked_at)
    pool = [r for r in ranked if r[0] in seen] or ranked
    causes = [RootCause(e, job.entities[e].kind, s) for e, s, _ in pool[:5]]
    evidence = [f"{e}: {'; '.join(r)}" for e, _, r in pool[:3]]
    if causes:
        text = f"Best effort ({why}): " + explain.explanation(causes[0].entity, causes[0].kind, pool[0][2])
        fix = explain.solution(causes[0].entity, pool[0][2])
    else:
        text, fix = f"Best effort ({why}): no entity moved noticeably.", "Widen the window or add telemetry."
    return Diagnosis(job=job.id, run_id=run_id, root_causes=causes, root_cause=text, solution=fix,
                     evidence=evidence, responsibility="on-call SRE", finalized=False, note=why)
