"""Graph mode: the walk on small synthetic graphs with a scripted model (chain, fan-out with a decoy, a dead
end that needs backtracking, a cycle), the ablations, the verifier's checks; the whole mode on real jobs."""
from __future__ import annotations

from types import SimpleNamespace

import networkx as nx
import pytest

from rcagent.config import Settings
from rcagent.graphmode import verifier
from rcagent.graphmode.agents import GraphAgents
from rcagent.graphmode.anomaly_graph import Health, Signal, gradient, mark_reach
from rcagent.graphmode.walk import HEALTHY, PROPAGATOR, ROOT, walk
from rcagent.serving.counted import CountedModel
from rcagent.serving.scripted import RuleBackend
from rcagent.store import Store


def graph(nodes: dict[str, float], calls: list[tuple[str, str]], intrinsic: set[str] = frozenset()) -> nx.DiGraph:
    """A graph of services: name -> health (0..1); intrinsic nodes have a signal of their own (CPU), the
    others only a latency that waits on their callees."""
    g = nx.DiGraph()
    for name, health in nodes.items():
        h = Health(score=100 * health, health=health)
        if health:
            h.signals = [Signal(100 * health, "cpu_usage up 9 sd" if name in intrinsic
                                else "latency p95 10->90 ms (waiting on callees)", "metrics",
                                "saturation" if name in intrinsic else "latency", name in intrinsic)]
        g.add_node(name, kind="service", health=h)
    for u, v in calls:
        g.add_edge(u, v, kind="calls", stats=None, gradient=gradient(None, nodes[v]))
    mark_reach(g)
    g.graph.update(traced=False, top=100.0)
    return g


def states(rules: dict[str, str], confidence: float = 0.95, verify: bool = True):
    """A scripted model: the diagnoser answers rules[node] (default healthy), the verifier passes every check
    when `verify`, the health summarizer writes a sentence."""
    def answer(messages, schema):
        prompt = messages[0]["content"]
        props = schema["properties"]
        if "state" in props:
            node = prompt.split("Component: ", 1)[1].split(" (", 1)[0]
            state = rules.get(node, HEALTHY)
            return {"state": state, "confidence": confidence, "reason": f"{node} looks like a {state} here."}
        if "consistency" in props:
            return {c: verify for c in verifier.CHECKS} | {"critique": "The checks agree with the evidence seen."}
        return {"report": "The component moved from its baseline in several signals."}
    return answer


def agents_for(g: nx.DiGraph, answer, tmp_path) -> tuple[GraphAgents, RuleBackend]:
    backend = RuleBackend(answer)
    settings = Settings(backend="scripted", cache=False)
    job = SimpleNamespace(alert="the front end is slow", entities={n: None for n in g})
    model = CountedModel(backend, Store(tmp_path / "runs.db"), settings)
    return GraphAgents(job, g, model), backend


def run_walk(g, rules, tmp_path, start="a", **kw):
    agents, backend = agents_for(g, states(rules, verify=kw.pop("verify_ok", True)), tmp_path)
    verify = None if kw.pop("no_verifier", False) else agents.verify
    return walk(g, start, agents.diagnose, verify, 0.85, 0.9, **kw), backend


def test_chain_walks_to_the_end(tmp_path):
    g = graph({"a": 0.5, "b": 0.6, "c": 1.0}, [("a", "b"), ("b", "c")], {"c"})
    result, _ = run_walk(g, {"a": PROPAGATOR, "b": PROPAGATOR, "c": ROOT}, tmp_path)
    assert result.root == "c" and result.path == ["a", "b", "c"] and result.ended == "verified"
    assert [e.kind for e in result.events if e.kind != "move"] == ["visit", "visit", "visit", "verify", "stop"]


def test_fan_out_follows_the_steeper_gradient_past_a_decoy(tmp_path):
    # b is a decoy with a mild anomaly; c is the culprit with the steeper gradient
    g = graph({"a": 0.5, "b": 0.2, "c": 1.0}, [("a", "b"), ("a", "c")], {"c"})
    result, _ = run_walk(g, {"a": PROPAGATOR, "b": ROOT, "c": ROOT}, tmp_path)
    assert result.visited == ["a", "c"] and result.root == "c"


def test_dead_end_backtracks_to_the_next_branch(tmp_path):
    # the steeper branch (b) ends at a healthy leaf; the walk comes back and finds d behind c
    g = graph({"a": 0.5, "b": 0.9, "x": 0.8, "c": 0.4, "d": 1.0},
              [("a", "b"), ("b", "x"), ("a", "c"), ("c", "d")], {"d"})
    rules = {"a": PROPAGATOR, "b": PROPAGATOR, "x": HEALTHY, "c": PROPAGATOR, "d": ROOT}
    result, _ = run_walk(g, rules, tmp_path)
    assert result.visited == ["a", "b", "x", "c", "d"] and result.root == "d"
    backtrack = [e for e in result.events if e.kind == "backtrack"]
    assert len(backtrack) == 1 and backtrack[0].node == "c" and backtrack[0].detail["branch"] == "a"
    # without backtracking the same walk stops at the dead end
    blind, _ = run_walk(g, rules, tmp_path, backtrack=False)
    assert blind.root is None and blind.ended == "dead end" and blind.visited == ["a", "b", "x"]


def test_cycle_is_visited_once(tmp_path):
    g = graph({"a": 0.5, "b": 0.6, "c": 0.7}, [("a", "b"), ("b", "c"), ("c", "a")])
    result, _ = run_walk(g, {"a": PROPAGATOR, "b": PROPAGATOR, "c": PROPAGATOR}, tmp_path)
    assert result.visited == ["a", "b", "c"] and result.root is None and result.ended == "exhausted"


def test_refuted_suspect_is_passed_and_the_search_goes_on(tmp_path):
    # the model calls b the root cause, but b only waits on c (no evidence of its own): the verifier's
    # counterfactual fails, b is refuted, and the walk goes on to c
    g = graph({"a": 0.5, "b": 0.8, "c": 1.0}, [("a", "b"), ("b", "c")], {"c"})
    result, backend = run_walk(g, {"a": PROPAGATOR, "b": ROOT, "c": ROOT}, tmp_path)
    verifies = [e for e in result.events if e.kind == "verify"]
    assert [(e.node, e.detail["passed"]) for e in verifies] == [("b", False), ("c", True)]
    assert "counterfactual" in verifies[0].detail["critique"] or verifies[0].detail["checks"]["counterfactual"]["graph"] == 0
    assert result.root == "c" and ("b", 0.95, True) in result.claims
    # the verifier's prompt carried the graph's checks
    prompts = [c["messages"][-1]["content"] for c in backend.calls if "consistency" in c["schema"]["properties"]]
    assert "counterfactual (if b were healthy" in prompts[0]


def test_without_a_verifier_the_first_suspect_is_accepted(tmp_path):
    g = graph({"a": 0.5, "b": 0.8, "c": 1.0}, [("a", "b"), ("b", "c")], {"c"})
    result, _ = run_walk(g, {"a": PROPAGATOR, "b": ROOT, "c": ROOT}, tmp_path, no_verifier=True)
    assert result.root == "b" and result.ended == "accepted"


def test_random_navigator_ignores_the_gradient(tmp_path):
    g = graph({"a": 0.5, **{f"n{i}": 0.1 * i for i in range(1, 8)}}, [("a", f"n{i}") for i in range(1, 8)])
    rules = {"a": PROPAGATOR}
    steep, _ = run_walk(g, rules, tmp_path, max_steps=2)
    assert steep.visited == ["a", "n7"]
    seen = {tuple(run_walk(g, rules, tmp_path, max_steps=2, navigator="random", seed=s)[0].visited) for s in range(6)}
    assert len(seen) > 1


def test_unusable_answers_fall_back_to_the_evidence(tmp_path):
    g = graph({"a": 0.5, "b": 1.0}, [("a", "b")], {"b"})
    agents, _ = agents_for(g, lambda messages, schema: {"nonsense": 1}, tmp_path)
    result = walk(g, "a", agents.diagnose, agents.verify, 0.85, 0.9)
    visits = {e.node: e.detail for e in result.events if e.kind == "visit"}
    assert visits["a"]["source"] == "evidence" and visits["a"]["state"] == PROPAGATOR
    assert visits["b"]["state"] == ROOT and result.root == "b"
    assert agents.unparsed >= 3


def test_verifier_checks_on_synthetic_graph():
    g = graph({"a": 0.5, "b": 0.0, "c": 1.0}, [("a", "b"), ("a", "c")], {"c"})
    assert verifier.consistency(g, "b", "CPU overload")[0] == 0.0          # nothing moved on b
    assert verifier.consistency(g, "c", "CPU overload in c")[0] == 1.0
    assert verifier.consistency(g, "c", "memory leak in c")[0] == 0.0      # memory is flat
    assert verifier.sufficiency(g, ["a", "b"])[0] == 0.0                   # the step a->b shows nothing
    assert verifier.sufficiency(g, ["a", "c"])[0] == 1.0
    assert verifier.counterfactual(g, "a")[0] == 0.0                        # a only waits; c has its own fault
    assert verifier.counterfactual(g, "c")[0] == 1.0
    vscore, checks, critique = verifier.combine(verifier.deterministic(g, "a", ["a"], "slow"), None)
    assert checks["counterfactual"]["score"] == 0.0 and critique.startswith("counterfactual")


def test_the_alerts_node_is_never_a_dead_end(tmp_path):
    # mild evidence everywhere (below the challenge's bar): "healthy" at the start is not contradicted by the
    # graph, yet the alert fired there, so the walk goes on
    g = graph({"a": 0.3, "b": 0.4}, [("a", "b")], {"b"})
    result, _ = run_walk(g, {"a": HEALTHY, "b": ROOT}, tmp_path)
    first = next(e for e in result.events if e.kind == "visit")
    assert first.detail["state"] == PROPAGATOR and "alert fired here" in first.detail["reason"]
    assert result.root == "b"


def _sequence(answers: dict[str, list[str]]):
    """A scripted diagnoser that gives each node's states in turn (the last one repeated); it records how
    many times each node was asked and whether the question was a challenge."""
    asked: dict[str, list[bool]] = {}

    def answer(messages, schema):
        props = schema["properties"]
        if "state" in props:
            node = messages[0]["content"].split("Component: ", 1)[1].split(" (", 1)[0]
            turns = asked.setdefault(node, [])
            turns.append(len(messages) > 1)
            states_ = answers.get(node, [HEALTHY])
            state = states_[min(len(turns), len(states_)) - 1]
            return {"state": state, "confidence": 0.95, "reason": f"{node} looks like a {state} here."}
        if "consistency" in props:
            return {c: True for c in verifier.CHECKS} | {"critique": "The checks agree with the evidence seen."}
        return {"report": "The component moved from its baseline in several signals."}
    return answer, asked


def test_a_healthy_verdict_against_the_graph_is_challenged_and_the_model_may_change_it(tmp_path):
    # b moved most (health 1.0): "healthy" contradicts the graph; asked again, the model says root_cause
    g = graph({"a": 0.5, "b": 1.0}, [("a", "b")], {"b"})
    answer, asked = _sequence({"a": [PROPAGATOR], "b": [HEALTHY, ROOT]})
    agents, _ = agents_for(g, answer, tmp_path)
    result = walk(g, "a", agents.diagnose, agents.verify, 0.85, 0.9)
    assert asked["b"] == [False, True] and asked["a"] == [False]
    assert agents.challenged == 1 and agents.overruled == 0
    visit_b = next(e for e in result.events if e.kind == "visit" and e.node == "b")
    assert visit_b.detail["source"] == "model" and result.root == "b"


def test_a_second_contradicting_verdict_is_overruled_by_the_evidence(tmp_path):
    g = graph({"a": 0.5, "b": 1.0}, [("a", "b")], {"b"})
    answer, asked = _sequence({"a": [PROPAGATOR], "b": [HEALTHY]})
    agents, _ = agents_for(g, answer, tmp_path)
    result = walk(g, "a", agents.diagnose, agents.verify, 0.85, 0.9)
    assert asked["b"] == [False, True] and agents.challenged == agents.overruled == 1
    visit_b = next(e for e in result.events if e.kind == "visit" and e.node == "b")
    # b's own evidence outweighs what it depends on (nothing): the evidence verdict calls it the root cause
    assert visit_b.detail["source"] == "evidence" and visit_b.detail["state"] == ROOT
    assert "said healthy twice" in visit_b.detail["reason"] and result.root == "b"


def test_a_root_claim_where_nothing_moved_is_challenged(tmp_path):
    g = graph({"a": 0.5, "b": 0.0, "c": 1.0}, [("a", "b"), ("a", "c")], {"c"})
    answer, asked = _sequence({"a": [ROOT, PROPAGATOR], "b": [ROOT, ROOT], "c": [ROOT]})
    agents, _ = agents_for(g, answer, tmp_path)
    # a moved (0.5), so its root claim stands unchallenged; b never moved: challenged when visited
    assert agents.contradiction("a", agents.diagnose("a", ["a"], [])) is None
    verdict = agents.diagnose("b", ["a", "b"], [])
    assert asked["b"] == [False, True] and verdict.source == "evidence" and verdict.state == HEALTHY


def test_healthy_above_a_strong_anomaly_is_challenged(tmp_path):
    # b barely moved, but it calls c, the most anomalous node: "healthy" would prune the way to c
    g = graph({"a": 0.5, "b": 0.1, "c": 1.0}, [("a", "b"), ("b", "c")], {"c"})
    answer, asked = _sequence({"a": [PROPAGATOR], "b": [HEALTHY, PROPAGATOR], "c": [ROOT]})
    agents, _ = agents_for(g, answer, tmp_path)
    result = walk(g, "a", agents.diagnose, agents.verify, 0.85, 0.9)
    assert asked["b"] == [False, True] and agents.challenged == 1 and result.root == "c"
    assert result.path == ["a", "b", "c"]
    # without the challenge the walk stops at b
    agents, _ = agents_for(g, _sequence({"a": [PROPAGATOR], "b": [HEALTHY]})[0], tmp_path)
    agents.challenge = False
    assert walk(g, "a", agents.diagnose, agents.verify, 0.85, 0.9).root is None


def test_healthy_without_contradiction_is_taken_as_said(tmp_path):
    g = graph({"a": 0.5, "b": 0.2, "c": 0.3}, [("a", "b"), ("a", "c")], {"c"})
    answer, asked = _sequence({"a": [PROPAGATOR]})
    agents, _ = agents_for(g, answer, tmp_path)
    verdict = agents.diagnose("b", ["a", "b"], [])
    assert verdict.state == HEALTHY and verdict.source == "model" and asked["b"] == [False]
    assert agents.challenged == 0


# ---- on real jobs ------------------------------------------------------------------------------------------
CONTACTS = "ts-contacts-service"


def test_verifier_checks_on_a_real_case(contacts_job):
    from rcagent.graphmode import anomaly_graph

    g = anomaly_graph.build(contacts_job)
    # the case's fault: error logs of ts-contacts-service and nothing else of it moved
    assert verifier.consistency(g, CONTACTS, "exceptions in its error logs")[0] == 1.0
    assert verifier.consistency(g, CONTACTS, "a memory leak")[0] == 0.0
    assert verifier.counterfactual(g, CONTACTS)[0] == 1.0
    # the gateway only passes the requests on: without evidence of its own it fails the counterfactual
    assert verifier.counterfactual(g, "ts-gateway-service")[0] == 0.0
    origin, why = anomaly_graph.start_node(contacts_job, g)
    assert origin == "entry" and why == "named by the alert"
    path = nx.shortest_path(g, origin, CONTACTS)
    assert verifier.sufficiency(g, path)[0] > 0


def test_graph_mode_walks_to_the_root_cause_of_a_real_case(contacts_job, store, tmp_path):
    """A scripted diagnoser that knows the answer: the navigator's gradient must lead the walk to it."""
    from rcagent.graphmode.mode import analyze
    from rcagent.report import render_steps

    def answer(messages, schema):
        props, prompt = schema["properties"], messages[0]["content"]
        if "state" in props:
            node = prompt.split("Component: ", 1)[1].split(" (", 1)[0]
            state = ROOT if node.startswith(CONTACTS) else PROPAGATOR
            return {"state": state, "confidence": 0.95, "reason": f"errors in the logs of {node} started here."}
        if "consistency" in props:
            return {c: True for c in verifier.CHECKS} | {"critique": "The errors explain the failed requests."}
        if "call" in props:
            return {"call": 1}
        return {"report": "The service writes new error lines in the window."}

    d = analyze(contacts_job, RuleBackend(answer), store, Settings(backend="scripted", cache=False),
                graph_dir=tmp_path / "graphs")
    assert d.finalized and d.mode == "graph"
    assert d.root_causes[0].entity.startswith(CONTACTS) and d.model_root_causes[0] == d.root_causes[0].entity
    walk_ = d.graph["walk"]
    assert walk_["visited"][0] == "entry" and walk_["ended"] == "verified" and len(walk_["visited"]) <= 6
    assert d.graph["logs_linked"]["trace"] > 0          # this case's logs carry trace ids
    events = store.walk_events(d.run_id)
    assert [e["kind"] for e in events][-2:] == ["verify", "stop"]
    shown = render_steps(store.get_run(d.run_id), [], walk=events)
    assert "visit entry" in shown and "Vscore" in shown and "counterfactual" in shown
    page = (tmp_path / "graphs" / f"{d.run_id}.html").read_text()
    assert page.count("<rect") >= len(walk_["visited"]) and "The walk" in page and CONTACTS in page
    assert page.count('class="concluded"') == 1 and f"concluded: {d.graph['concluded']}" in page


@pytest.mark.parametrize("system", ["TrainTicket", "OnlineBoutique", "SockShop", "PetSite", "ChangeRCA"])
def test_graph_mode_gives_a_valid_diagnosis_on_every_system(imported, system, tmp_path):
    """A scripted model that calls every node a propagator: the walk explores until the step limit or the
    end of the graph, and the diagnosis is still valid (inventory names, the walk stored)."""
    from rcagent.graphmode.mode import analyze
    from rcagent.job import Job

    prefix = {"TrainTicket": "tt-", "OnlineBoutique": "ob-", "SockShop": "ss-", "PetSite": "ps-", "ChangeRCA": "cr-"}
    job = Job.load(next(p for p in sorted((imported["dest"] / "jobs").iterdir()) if p.name.startswith(prefix[system])))

    def answer(messages, schema):
        if "state" in schema["properties"]:
            return {"state": PROPAGATOR, "confidence": 0.6, "reason": "It waits on a slower dependency."}
        if "call" in schema["properties"]:
            return {"call": 1}
        return {"report": "Several of its signals moved in the window."}

    store = Store(tmp_path / "s.db")
    d = analyze(job, RuleBackend(answer), store, Settings(backend="scripted", cache=False))
    assert d.root_causes and all(rc.entity in job.entities for rc in d.root_causes)
    assert not d.finalized and d.model_root_causes == []
    assert 1 <= len(d.graph["walk"]["visited"]) <= 10 and d.invalid_steps == 0
    assert d.graph["walk"]["visited"][0] == d.graph["start"]
    assert len(store.walk_events(d.run_id)) >= len(d.graph["walk"]["visited"])


def test_a_walk_that_verifies_nothing_concludes_with_its_best_supported_suspect(tmp_path):
    from rcagent.graphmode.mode import best_hypothesis

    # b and c both look like root causes to the diagnoser and the verifier's model refutes both; c's own
    # evidence is not outweighed by anything it depends on, b's is (by c): c scores higher at the verifier
    g = graph({"a": 0.5, "b": 0.6, "c": 1.0}, [("a", "b"), ("b", "c")], {"b", "c"})
    result, _ = run_walk(g, {"a": PROPAGATOR, "b": ROOT, "c": ROOT}, tmp_path, verify_ok=False)
    assert result.root is None and result.ended == "exhausted"
    assert [n for n, _, refuted in result.claims if refuted] == ["b", "c"]
    node, vscore = best_hypothesis(result)
    scores = {e.node: e.detail["score"] for e in result.events if e.kind == "verify"}
    assert node == "c" and vscore == scores["c"] > scores["b"]
    # no suspect at all: nothing to conclude with
    result, _ = run_walk(g, {"a": PROPAGATOR, "b": PROPAGATOR, "c": PROPAGATOR}, tmp_path)
    assert best_hypothesis(result) == (None, None)


def test_a_model_that_answers_garbage_falls_back_to_the_evidence_and_is_counted(tmp_path):
    g = graph({"a": 0.5, "b": 1.0}, [("a", "b")], {"b"})
    agents, _ = agents_for(g, lambda messages, schema: "I think it is b, probably", tmp_path)
    result = walk(g, "a", agents.diagnose, agents.verify, 0.85, 0.9)
    visits = [e for e in result.events if e.kind == "visit"]
    assert visits and all(e.detail["source"] == "evidence" for e in visits)
    assert agents.unparsed >= len(visits) and agents.challenged == 0
    assert [n for n, _, _ in result.claims] == ["b"]       # the graph's own suspect: b's evidence is its own
