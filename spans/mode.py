"""Span-recursion mode (RCLAgent): one agent per span of the anomalous request, in parallel, synthesized.

`analyze(job, backend, store, settings)`:
1. pick the anomalous request (spans.tree.anomalous_requests) and build its folded span tree;
   a job without traces falls back to the ReAct controller, and the note says so;
2. run a Dedicated Agent per span through the Agents Pool (K = setting `span_pool`): self-state, then
   consolidation bottom-up (spans.agent, spans.pool);
3. build the Global Evidence Graph and the path from the entry span to the root cause (spans.graph);
4. the Diagnosis Synthesizer: one model call over the root-level report and the graph, its picks
   constrained to the graph's services and pods, fused with the graph's own evidence (the path's end,
   then abnormal spans, deeper first) and then the overview's ranking for the rest.
The agents' outputs are stored per span (`span_agents`), the graph with the diagnosis (`span.graph`), and
its picture is written as HTML next to the store.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

from rcagent import explain, prompts
from rcagent.diagnosis import Diagnosis, RootCause
from rcagent.fusion import fuse
from rcagent.spans.agent import TEXT, SpanAgents
from rcagent.spans.graph import evidence_graph, path_to_root_cause, to_html, to_json
from rcagent.spans.pool import AgentsPool
from rcagent.spans.tree import anomalous_requests, span_tree
from rcagent.tools.overview import ranking


def label_spans(root) -> dict[str, str]:
    """Short labels S1, S2, ... in breadth-first order: what the agents and the synthesizer name spans by."""
    labels, queue = {}, [root]
    while queue:
        span = queue.pop(0)
        labels[span.span_id] = f"S{len(labels) + 1}"
        queue.extend(span.children)
    return labels


def graph_evidence(job, g, path: list[str]) -> list[tuple[str, float]]:
    """Inventory entities scored from the graph: the path's end 3, abnormal spans on the path 2, other
    abnormal spans 1 + 0.1 x depth; a span counts for its pod and its service. The overview's ranking
    follows, scaled below the graph's evidence."""
    score: dict[str, float] = {}
    for node, data in g.nodes(data=True):
        path_end = node == path[-1] and (len(path) > 1 or data["abnormal"])
        if path_end:
            s = 3.0
        elif data["abnormal"]:
            s = 2.0 if node in path else 1.0 + 0.1 * data["depth"]
        else:
            s = 0.0
        for name in (data["entity"], data["service"]):
            if name in job.entities and s > 0:
                score[name] = max(score.get(name, 0.0), s)
    ranked = sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))
    overview = ranking(job)
    top = max((s for _, s, _ in overview), default=0.0) or 1.0
    floor = min((s for _, s in ranked), default=1.0)
    ranked += [(e, round(0.5 * floor * s / top, 4)) for e, s, _ in overview if e not in score]
    return ranked


def synthesize(agents: SpanAgents, g, path: list[str]) -> tuple[list[str], str]:
    """The synthesizer's picks (inventory names from the graph) and reason; ([], "") if it gave none."""
    choices = sorted({n for _, d in g.nodes(data=True) for n in (d["entity"], d["service"])
                      if n in agents.job.entities})
    if not choices:
        return [], ""
    root = g.nodes[g.graph["root"]]["conclusion"]
    listing = "\n".join(
        f"{'!' if d['abnormal'] else '-'} {d['label']} {d['service']} ({d['entity']}): {d['key_symptoms'][:90]}"
        for _, d in sorted(g.nodes(data=True), key=lambda nd: int(nd[1]["label"][1:])))
    path_text = " -> ".join(f"{g.nodes[n]['label']} {g.nodes[n]['service']}" for n in path)
    prompt = prompts.render("span_synth", root_choice=root["root_cause"], root_reason=root["reason"][:200],
                            root_confidence=root["confidence"] if root["confidence"] is not None else "n/a",
                            path=path_text, graph=prompts.data(listing[:2400]), choices=", ".join(choices)[:600])
    schema = {"type": "object", "properties": {
        "root_causes": {"type": "array", "items": {"enum": choices}, "minItems": 1, "maxItems": 3},
        "reason": TEXT}, "required": ["root_causes", "reason"]}
    answer = agents.ask(prompt, schema)
    if not answer or not isinstance(answer.get("root_causes"), list):
        return [], ""
    picks = list(dict.fromkeys(str(x) for x in answer["root_causes"] if str(x) in agents.job.entities))
    return picks, str(answer.get("reason") or "")


def analyze(job, backend, store, settings, graph_dir: Path | None = None, deadline: float | None = None,
            cancel: threading.Event | None = None) -> Diagnosis:
    """`deadline` (time.monotonic()) and `cancel` act as in Controller.run: checked before every agent's
    model call, a run past the deadline ends with TimeLimit and is stored as "timeout"."""
    from rcagent.controller import Controller

    requests = anomalous_requests(job, settings.span_factor, 1)
    if not requests:
        d = Controller(job, backend, store, settings).run(deadline=deadline, cancel=cancel)
        why = "span mode needs traces; this job has none in the window, so the ReAct mode ran"
        d.note = f"{why}; {d.note}" if d.note else why
        return d
    start = time.perf_counter()
    request = requests[0]
    with store.run(job, backend, {"mode": "span", "pool": settings.span_pool, "factor": settings.span_factor,
                                  "delta_s": settings.span_delta_s, "sigma": settings.span_sigma}, mode="span") as run:
        d = _analyze_request(job, backend, store, settings, run.id, request, graph_dir, deadline, cancel, start)
        run.status, run.diagnosis = ("finalized" if d.model_root_causes else "step_limit"), d.to_dict()
    return d


def _analyze_request(job, backend, store, settings, run_id, request, graph_dir, deadline, cancel, start) -> Diagnosis:
    root = span_tree(job, request.trace_id, settings.span_max_children, settings.span_max_depth,
                     settings.span_max_spans)
    labels = label_spans(root)
    agents = SpanAgents(job, backend, store, settings, run_id, request.trace_id, labels, request.baseline_ms,
                        deadline, cancel)
    pool = AgentsPool(settings.span_pool)
    states, conclusions = pool.run(root, lambda s: s.children, lambda s: s.span_id,
                                   agents.self_state, agents.consolidate)
    g = evidence_graph(root, states, conclusions)
    path = path_to_root_cause(g)
    picks, reason = synthesize(agents, g, path)
    evidence = graph_evidence(job, g, path)
    ranked = [RootCause(e, job.entities[e].kind, s) for e, s in fuse(picks, evidence)]
    top = ranked[0] if ranked else None
    reasons = {e: r for e, _, r in ranking(job)}
    names = set(job.entities)
    end = g.nodes[path[-1]]
    path_text = " -> ".join(f"{g.nodes[n]['service']} {g.nodes[n]['operation']}"[:60] for n in path)
    root_cause = reason if explain.is_sentence(reason, names) else (
        explain.explanation(top.entity, top.kind, reasons.get(top.entity, [])) if top else "")
    d = Diagnosis(
        job=job.id, run_id=run_id, root_causes=ranked, model_root_causes=picks, root_cause=root_cause,
        solution=explain.solution(top.entity, reasons.get(top.entity, [])) if top else "",
        evidence=[f"request: {request.reason}", f"path: {path_text}"] +
                 [f"{d['label']} {d['service']}: {d['key_symptoms']}" for _, d in g.nodes(data=True)
                  if d["abnormal"] and d["key_symptoms"]][:5],
        responsibility=f"the team that owns {top.entity}" if top else "",
        finalized=bool(picks), steps=len(g), llm_calls=agents.llm_calls, prompt_tokens=agents.prompt_tokens,
        completion_tokens=agents.completion_tokens, wall_s=round(time.perf_counter() - start, 3),
        backend=backend.name, model=backend.model, mode="span",
        note=(f"span mode: {len(g)} span agents on trace {request.trace_id} ({request.reason}); "
              f"path ends at {end['label']} {end['service']}"
              + ("" if picks else "; the synthesizer named nothing, so the graph's evidence ranks")),
        span={"trace_id": request.trace_id, "request": request.reason, "spans": len(g),
              "abnormal": sum(1 for _, d in g.nodes(data=True) if d["abnormal"]), "path": path,
              "pool": settings.span_pool, "max_active": pool.max_active, "unparsed": agents.unparsed,
              "max_prompt_chars": agents.max_prompt_chars, "graph": to_json(g)})
    if graph_dir is not None:
        graph_dir.mkdir(parents=True, exist_ok=True)
        page = graph_dir / f"{run_id}.html"
        page.write_text(to_html(g, f"{job.id}: evidence graph of trace {request.trace_id}"))
        d.span["picture"] = str(page)
    return d
