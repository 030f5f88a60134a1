"""Graph mode (GAMA): the anomaly fusion graph, the coordinator's walk from the alert to the source, a
verifier that tries to refute each suspect.

`analyze(job, backend, store, settings)`:
1. build the graph (graphmode.anomaly_graph) and link the error log lines to the calls they are about
   (graphmode.align; the model arbitrates the ambiguous ones, counted);
2. walk from the alert's entity (graphmode.walk) with the diagnoser, navigator and verifier
   (graphmode.agents, graphmode.verifier); every event is stored as it happens (`graph_walk`);
3. the diagnosis ranks the verified root cause first, then the walk's other suspects (unrefuted first),
   fused with the overview's ranking as every mode's. A walk whose search ends with no suspect verified
   (every viable candidate tried, or its budget of `graph_max_steps` visits spent, as GAMA's maximum
   search depth) concludes with its best-supported suspect (highest Vscore): it enters the fusion as the
   first pick (not forced first) and the run counts as finalized; a walk with no suspect does not. The
   model's own picks are the suspects it named itself, not those an evidence verdict named when its answer
   was unusable or overruled. A job with neither traces nor relations has no edges between services: the
   walk runs on placements alone, and the note says so.
The picture of the graph with the walk drawn on it is written as HTML next to the store.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

from rcagent import explain
from rcagent.diagnosis import Diagnosis, RootCause
from rcagent.fusion import fuse
from rcagent.graphmode import align, anomaly_graph, picture
from rcagent.graphmode.agents import GraphAgents
from rcagent.graphmode.walk import walk
from rcagent.serving.counted import CountedModel
from rcagent.tools.overview import ranking

SETTINGS = ("graph_tau_conf", "graph_tau_verify", "graph_max_steps", "graph_verifier", "graph_backtrack",
            "graph_navigator", "graph_summaries", "graph_challenge", "graph_arbitrations", "seed", "temperature", "constrain")


def analyze(job, backend, store, settings, graph_dir: Path | None = None, deadline: float | None = None,
            cancel: threading.Event | None = None) -> Diagnosis:
    start = time.perf_counter()
    model = CountedModel(backend, store, settings)
    with store.run(job, backend, {"mode": "graph", **{k: getattr(settings, k) for k in SETTINGS}},
                   mode="graph") as run:
        g = anomaly_graph.build(job)
        agents = GraphAgents(job, g, model, deadline, cancel, settings.graph_summaries, settings.graph_challenge)
        linked = align.align(job, g, agents.arbitrate, settings.graph_arbitrations)
        origin, why = anomaly_graph.start_node(job, g)
        seq = [0]

        def stored(event) -> None:
            store.add_walk_event(run.id, seq[0], event.step, event.kind, event.node, event.detail)
            seq[0] += 1

        result = walk(g, origin, agents.diagnose,
                      agents.verify if settings.graph_verifier else None,
                      settings.graph_tau_conf, settings.graph_tau_verify, settings.graph_max_steps,
                      settings.graph_backtrack, settings.graph_navigator, settings.seed, on_event=stored)
        d, concluded = _diagnosis(job, run.id, g, result, agents)
        model.fill(d, time.perf_counter() - start)
        # a step is one agent's answer (summary, diagnosis, verification, arbitration); an invalid one did
        # not parse even after repair, and its part fell back to the graph's evidence
        d.steps, d.invalid_steps = model.llm_calls, agents.unparsed
        calls = sum(1 for _, _, e in g.edges(data=True) if e["kind"] == "calls")
        notes = [f"graph mode: walk from {origin} ({why}), {len(result.visited)} visited, ended: {result.ended}"]
        if not calls:
            notes.append("no calls between services (no traces, no relations): the walk follows placements only")
        d.note = "; ".join(notes + ([d.note] if d.note else []))
        d.graph = {"start": origin, "start_why": why, "nodes": g.number_of_nodes(), "edges": g.number_of_edges(),
                   "call_edges": calls, "traced": g.graph["traced"], "logs_linked": linked,
                   "reports": {n: by for n, (_, by) in agents.reports.items()}, "unparsed": agents.unparsed,
                   "challenged": agents.challenged, "overruled": agents.overruled,
                   "concluded": concluded,
                   "walk": result.to_dict()}
        if graph_dir is not None:
            graph_dir.mkdir(parents=True, exist_ok=True)
            page = graph_dir / f"{run.id}.html"
            page.write_text(picture.to_html(g, d.graph["walk"], f"{job.id}: the walk over the anomaly fusion graph",
                                            d.graph["concluded"]))
            d.graph["picture"] = str(page)
        run.status, run.diagnosis = ("finalized" if d.finalized else "step_limit"), d.to_dict()
    return d


def best_hypothesis(result, g=None) -> tuple[str | None, float | None]:
    """The suspect a walk that verified none concludes with: the claim that scored highest at the verifier,
    then unrefuted before refuted, the diagnoser's confidence, the node's anomaly score in `g`, the earliest
    claimed; (None, None) if the diagnoser never suspected a node."""
    vscores = {e.node: e.detail["score"] for e in result.events if e.kind == "verify"}
    if not result.claims:
        return None, None
    first = {e.node: i for i, e in reversed(list(enumerate(result.events)))}
    score = (lambda n: g.nodes[n]["health"].score) if g is not None else (lambda n: 0.0)
    node, _, _ = max(result.claims, key=lambda c: (vscores.get(c[0], 0.0), not c[2], c[1], score(c[0]),
                                                   -first.get(c[0], 0)))
    return node, vscores.get(node)


def _diagnosis(job, run_id: str, g, result, agents: GraphAgents) -> tuple[Diagnosis, str | None]:
    """The verified root cause first; else the walk's best-supported suspect as its first pick. Then the
    walk's other suspects, all fused with the overview's ranking. Returns it with the node concluded on."""
    overview = ranking(job)
    reasons = {e: r for e, _, r in overview}
    concluded, vscore = (result.root, None) if result.root else best_hypothesis(result, g)
    suspects = [n for n, _, refuted in result.claims if not refuted and n != concluded]
    picks = ([concluded] if concluded else []) + suspects
    # the model's own picks: the suspects it named itself, not those the evidence verdict named for it
    said_by = {e.node: e.detail.get("source") for e in result.events if e.kind == "visit"}
    own = [n for n in picks if said_by.get(n) == "model"]
    fused = fuse(picks, [(e, s) for e, s, _ in overview])
    if result.root:
        fused = [(result.root, max((s for _, s in fused), default=1.0))] + [(e, s) for e, s in fused if e != result.root]
    ranked = [RootCause(e, job.entities[e].kind, s) for e, s in fused if e in job.entities]
    top = ranked[0] if ranked else None
    visits = {e.node: e.detail for e in result.events if e.kind == "visit"}
    checks = next((e.detail for e in reversed(result.events) if e.kind == "verify" and e.node == concluded), None)
    names = set(job.entities)
    # the diagnoser's reason is the root cause's text when the model wrote it about the top entity; an
    # evidence verdict's reason is rcagent's own note, and the evidence's explanation reads better
    said = (visits.get(concluded, {}).get("reason", "") if concluded and top and top.entity == concluded
            and said_by.get(concluded) == "model" else "")
    root_cause = said if explain.is_sentence(said, names) else (
        explain.explanation(top.entity, top.kind, reasons.get(top.entity, [])) if top else
        "No entity moved noticeably from its baseline.")
    evidence = [f"walk: {' -> '.join(result.path)} ({result.ended})"]
    if concluded and not result.root:
        evidence.append(f"no suspect passed the verifier; the walk concluded with the best-supported one, {concluded}"
                        + (f" (Vscore {vscore:.2f})" if vscore is not None else " (not verified)"))
    if checks:
        evidence.append("verifier: " + "; ".join(f"{k} {c['score']:.2f} ({c['why']})" for k, c in checks["checks"].items()))
    if top:
        evidence += [f"{top.entity}: {'; '.join(reasons.get(top.entity, [])) or 'no signal of its own'}"]
    # the coordinator concluded: a verified root cause, or, when the search ended (every viable candidate
    # tried, or its budget of visits spent), the best-supported suspect; a walk with no suspect did not
    finalized = concluded is not None
    return Diagnosis(job=job.id, run_id=run_id, root_causes=ranked, model_root_causes=own, root_cause=root_cause,
                     solution=explain.solution(top.entity, reasons.get(top.entity, [])) if top else
                     "Widen the window or add telemetry.",
                     evidence=evidence, responsibility=f"the team that owns {top.entity}" if top else "on-call SRE",
                     finalized=finalized, mode="graph"), concluded
