"""Trajectory-level self-consistency (RCAgent §3.4): sample only at finalization, then aggregate.

The controller runs greedily until it finalizes. Then `samples` finalizations are drawn from that same
prefix (the final step's messages, under the finalize-only schema) at the sampling temperature; the
backend reuses the prompt it has just evaluated (llama.cpp keeps its KV cache, vLLM has prefix caching and
`n`), so no tool is replayed. A sample is repaired by json-repair only (a YAML restatement would cost more
model calls than another sample); one that still does not parse, is not a finalize, or that the handlers
reject is dropped and counted. The kept candidates are aggregated:
- root-cause entities: Borda count over each candidate's own ranked picks, ties broken by the greedy answer;
- root cause and solution texts, among the candidates whose first pick is the aggregated first entity:
  `embed` picks the text nearest the centroid of their MiniLM embeddings (the semantic majority);
  `llm` asks the model to merge them into one answer.
Every sample is stored with the run (`samples` table); the diagnosis keeps the candidates and their agreement.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Protocol

from rcagent import explain, prompts
from rcagent.actions import Action
from rcagent.diagnosis import Diagnosis
from rcagent.errors import AgentMessage, BadInput, FormatError, Handled
from rcagent.job import Job
from rcagent.serving.counted import CountedModel
from rcagent.stabilizers.jsonregen import JsonRegen, strict
from rcagent.store import Store

AGGREGATORS = ("embed", "llm")
MERGE_TOKENS = 300
MERGE_SCHEMA = {"type": "object", "properties": {"root_cause": {"type": "string", "maxLength": 400},
                                                 "solution": {"type": "string", "maxLength": 400}},
                "required": ["root_cause", "solution"]}


class Finalizing(Protocol):
    """What self-consistency needs of the agent that finalized (the Controller is one)."""
    settings: object
    job: Job
    store: Store
    run_id: str
    model: CountedModel
    last_messages: list[dict]   # the final step's messages: the prefix every sample continues

    def finalize_schema(self) -> dict | None: ...

    def accept(self, action: Action) -> Action: ...        # the contract and the error handlers, or Handled

    def conclude(self, names: list[str], args: dict) -> Diagnosis: ...


def check_settings(settings) -> None:
    """Refuse bad self-consistency settings before the greedy run, not after it."""
    import importlib.util

    if settings.samples < 1:
        raise BadInput(f"setting samples: {settings.samples} (1 turns self-consistency off)")
    if settings.aggregate not in AGGREGATORS:
        raise BadInput(f"setting aggregate: '{settings.aggregate}' is not one of {', '.join(AGGREGATORS)}")
    if settings.samples > 1 and settings.aggregate == "embed" and not importlib.util.find_spec("sentence_transformers"):
        raise BadInput("--aggregate embed needs the eval extra (pip install -e '.[eval]'); or use --aggregate llm")


def borda(rankings: list[list[str]], tiebreak: list[str]) -> list[str]:
    """Borda count: in a ranking of the longest length K, position i earns K - i points. Ties go to the
    entity the tiebreak ranking puts first, then by name."""
    k = max((len(r) for r in rankings), default=0)
    points: Counter = Counter()
    for r in rankings:
        for i, entity in enumerate(r):
            points[entity] += k - i
    order = {e: i for i, e in enumerate(tiebreak)}
    return sorted(points, key=lambda e: (-points[e], order.get(e, len(order)), e))


def nearest_to_centroid(texts: list[str]) -> tuple[int, float]:
    """Index of the text nearest the centroid of all texts' embeddings, and the mean similarity to it."""
    from rcagent.embedding import embedder

    vectors = embedder().encode(texts, normalize_embeddings=True)
    centroid = vectors.mean(axis=0)
    centroid = centroid / (float((centroid ** 2).sum()) ** 0.5 or 1.0)
    sims = vectors @ centroid
    return int(sims.argmax()), round(float(sims.mean()), 3)


def sample_finalizations(ctl: Finalizing, n: int) -> tuple[list[Diagnosis], Counter]:
    """n finalizations from the final step's prefix: the kept diagnoses, and why the others were dropped."""
    kept, dropped = [], Counter()
    parse = JsonRegen(None) if ctl.settings.jsonregen else strict
    for idx, c in enumerate(ctl.model.sample(ctl.last_messages, ctl.finalize_schema(), n)):
        diagnosis, reason = None, None
        try:
            action, _ = parse(c.text)
            if action.name != "finalize":
                reason = "not a finalize"
            else:
                action = ctl.accept(action)
                diagnosis = ctl.conclude(action.arguments["root_causes"], action.arguments)
        except Handled as exc:
            reason = exc.handler
        except FormatError:
            reason = "format"
        except AgentMessage:           # a tool's refusal: not expected of a finalize
            reason = "no root cause"
        if diagnosis is not None:
            kept.append(diagnosis)
        else:
            dropped[reason] += 1
        ctl.store.add_sample(ctl.run_id, idx, raw=c.text, dropped=reason,
                             diagnosis=candidate(diagnosis) if diagnosis else None, prompt_tokens=c.prompt_tokens,
                             completion_tokens=c.completion_tokens, model_ms=c.latency_ms)
    return kept, dropped


def candidate(d: Diagnosis) -> dict:
    return {"root_causes": d.model_root_causes, "root_cause": d.root_cause, "solution": d.solution,
            "evidence": d.evidence, "responsibility": d.responsibility}


def merge_with_model(ctl: Finalizing, pool: list[Diagnosis], top: str) -> dict | None:
    """The llm aggregator: the model merges the candidates' texts (None if its answer is not sentences)."""
    import json_repair

    listed = "\n".join(f"{i + 1}. Root cause: {d.root_cause}\n   Solution: {d.solution}" for i, d in enumerate(pool))
    messages = [{"role": "user", "content": prompts.render("aggregate", candidates=prompts.data(listed), top=top)}]
    try:
        answer = json_repair.loads(ctl.model.query(messages, MERGE_SCHEMA if ctl.settings.constrain else None,
                                             MERGE_TOKENS).text)
    except (ValueError, RecursionError):
        return None
    names = set(ctl.job.entities)
    if not isinstance(answer, dict) or not all(explain.is_sentence(str(answer.get(k) or ""), names)
                                               for k in ("root_cause", "solution")):
        return None
    return {"root_cause": str(answer["root_cause"]), "solution": str(answer["solution"])}


def self_consistency(ctl: Finalizing, greedy: Diagnosis) -> Diagnosis:
    """The greedy finalization replaced by the aggregate of `samples` sampled ones (kept if none survive)."""
    s = ctl.settings
    kept, dropped = sample_finalizations(ctl, s.samples)
    report = {"samples": s.samples, "kept": len(kept), "dropped": dict(dropped), "aggregate": s.aggregate,
              "candidates": [candidate(d) for d in kept]}
    if not kept:
        greedy.consistency = {**report, "used": "greedy (no sample finalized)"}
        return greedy
    order = borda([d.model_root_causes for d in kept], greedy.model_root_causes)
    top = order[0]
    pool = [d for d in kept if d.model_root_causes[0] == top] or kept
    agreement = {"top1": round(sum(d.model_root_causes[0] == top for d in kept) / len(kept), 3)}
    chosen = pool[0]
    texts = {"root_cause": chosen.root_cause, "solution": chosen.solution}
    if s.aggregate == "embed":
        i, agreement["root_cause_similarity"] = nearest_to_centroid([d.root_cause for d in pool])
        j, agreement["solution_similarity"] = nearest_to_centroid([d.solution for d in pool])
        chosen, texts = pool[i], {"root_cause": pool[i].root_cause, "solution": pool[j].solution}
    else:
        merged = merge_with_model(ctl, pool, top)
        if merged:
            texts = merged
        else:
            report["used"] = "the first agreeing candidate's texts (the model's merge was not sentences)"
    d = ctl.conclude(order, {**texts, "evidence": chosen.evidence, "responsibility": chosen.responsibility})
    d.consistency = {**report, "agreement": agreement, "order": order}
    kept_note = f"self-consistency: {len(kept)} of {s.samples} sampled finalizations kept, {s.aggregate} aggregation"
    d.note = f"{d.note}; {kept_note}" if d.note else kept_note
    return d


def render(consistency: dict) -> list[str]:
    """Lines for the report: how many samples were kept, the agreement, each candidate's picks."""
    if not consistency:
        return []
    dropped = ", ".join(f"{n} {why}" for why, n in consistency.get("dropped", {}).items()) or "none"
    agree = consistency.get("agreement") or {}
    lines = [f"Self-consistency: {consistency['kept']} of {consistency['samples']} samples kept (dropped: {dropped}); "
             f"{consistency['aggregate']} aggregation"
             + (f"; {agree['top1']:.0%} agree on the first root cause" if "top1" in agree else "")]
    for i, c in enumerate(consistency.get("candidates") or []):
        lines.append(f"  {i + 1}. {', '.join(c['root_causes'])}: {c['root_cause'][:120]}")
    return lines


def render_samples(samples: list[dict]) -> list[str]:
    """`rcagent show`: the stored samples of a run."""
    out = []
    for smp in samples:
        d = json.loads(smp["diagnosis"]) if smp.get("diagnosis") else None
        head = f"sample {smp['idx'] + 1}: " + (f"dropped ({smp['dropped']})" if smp.get("dropped") else
                                               ", ".join(d["root_causes"]))
        out.append(head + f"  ({smp.get('prompt_tokens') or 0}+{smp.get('completion_tokens') or 0} tokens, "
                          f"{smp.get('model_ms') or 0:.0f} ms)")
        if d:
            out.append(f"  root cause: {d['root_cause'][:200]}\n  solution: {d['solution'][:200]}")
        else:
            out.append(f"  raw: {(smp.get('raw') or '')[:200]}")
    return out
