"""Span mode: request choice, folded and bounded trees, the Agents Pool, the evidence graph, fallback."""
from __future__ import annotations

import json
import threading
import time

import networkx as nx
import pytest

from rcagent.config import Settings
from rcagent.job import Job
from rcagent.serving.scripted import RuleBackend, ScriptedBackend
from rcagent.spans.agent import MAX_PROMPT_CHARS
from rcagent.spans.graph import path_to_root_cause
from rcagent.spans.mode import analyze, label_spans
from rcagent.spans.pool import AgentsPool
from rcagent.spans.rules import span_rules
from rcagent.spans.tree import Span, anomalous_requests, span_tree
from tests.test_job import META, write

CONTACTS_TT = "2023-01-29_08_43"


def tree(width: int, depth: int) -> Span:
    def node(i: str, d: int) -> Span:
        kids = [node(f"{i}.{k}", d + 1) for k in range(width)] if d < depth else []
        return Span(i, f"svc{i}", f"pod{i}", "op", "2023-01-01 00:00:00", 1.0, children=kids)
    return node("0", 0)


@pytest.mark.parametrize("width,depth", [(1, 60), (12, 2), (3, 5)])
@pytest.mark.parametrize("capacity", [1, 2, 4])
def test_pool_never_exceeds_its_capacity_and_does_not_deadlock(width, depth, capacity):
    root = tree(width, depth)
    active, peak, lock = [0], [0], threading.Lock()

    def work(result):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.0005)
        with lock:
            active[0] -= 1
        return result

    order: list[str] = []
    pool = AgentsPool(capacity)
    states, conclusions = pool.run(root, lambda s: s.children, lambda s: s.span_id,
                                   lambda s: work(s.span_id),
                                   lambda s, st, kids: order.append(s.span_id) or work((st, len(kids))))
    n = sum(1 for _ in root.walk())
    assert len(states) == len(conclusions) == n and pool.tasks == 2 * n
    assert peak[0] <= capacity and pool.max_active <= capacity
    # a parent is consolidated only after all its children
    position = {s: i for i, s in enumerate(order)}
    assert all(position[c.span_id] < position[s.span_id] for s in root.walk() for c in s.children)
    assert conclusions["0"] == ("0", width)


def test_pool_reports_an_agent_failure():
    def boom(span):
        raise RuntimeError(f"agent of {span.span_id} failed")
    with pytest.raises(RuntimeError, match="failed"):
        AgentsPool(2).run(tree(2, 2), lambda s: s.children, lambda s: s.span_id, boom, lambda *a: None)


def test_the_anomalous_request_and_its_tree_on_a_real_job(job_of):
    job = Job.load(job_of(CONTACTS_TT))
    requests = anomalous_requests(job, factor=100, limit=3)
    assert len(requests) == 3 and requests[0].ratio >= requests[1].ratio >= requests[2].ratio
    assert "no request reached 100x" in requests[0].reason          # these cases have no 100x request
    assert anomalous_requests(job, factor=requests[1].ratio, limit=5)[0].reason.startswith("entry span")
    root = span_tree(job, requests[0].trace_id)
    spans = list(root.walk())
    ids = {s.span_id for s in spans}
    assert root.operation and len(ids) == len(spans) <= 40
    rows = job.query("SELECT count(*) FROM traces WHERE trace_id = ?", [requests[0].trace_id])[0][0]
    assert sum(s.folded for s in spans) <= rows


def test_repeated_sibling_calls_fold_and_fan_out_is_bounded(tmp_path):
    spans = ["trace_id,span_id,parent_id,start,duration_ms,service,entity,operation,status",
             "t1,root,,2024-05-01 10:01:00,900,front,front-1,GET /,"]
    spans += [f"t1,c{i},root,2024-05-01 10:01:0{i % 10},{10 + i},cart,cart-1,GET /item,"
              for i in range(30)]                                      # 30 calls to the same operation
    spans += [f"t1,o{i},root,2024-05-01 10:01:01,{100 + i},svc{i},svc{i}-1,op{i}," for i in range(9)]
    spans += ["t1,deep1,o8,2024-05-01 10:01:02,50,db,db-1,query,ERROR"]
    job_dir = write(tmp_path, META, traces="\n".join(spans) + "\n")
    job = Job.load(job_dir)
    root = span_tree(job, "t1", max_children=4)
    assert len(root.children) == 4 and root.dropped_children == 10 - 4   # 1 folded cart + 9 others, 4 kept
    assert {c.service for c in root.children} == {"svc5", "svc6", "svc7", "svc8"}    # the slowest four
    root = span_tree(job, "t1", max_children=12)
    cart = next(c for c in root.children if c.service == "cart")
    assert cart.folded == 30 and cart.duration_ms == 39 and cart.folded_mean_ms == pytest.approx(24.5)
    assert len(list(span_tree(job, "t1", max_children=12, max_spans=5).walk())) == 5
    assert [s.span_id for s in span_tree(job, "t1", max_children=12, max_depth=1).walk()] == ["root"]


def test_span_mode_on_a_real_job_builds_the_evidence_graph(job_of, tmp_path, store):
    job = Job.load(job_of(CONTACTS_TT))
    root = span_tree(job, anomalous_requests(job)[0].trace_id)
    leaf = [s for s in root.walk() if not s.children][-1].service      # the synthesizer's pick in this script
    settings = Settings(backend="scripted", cache=False, span_pool=3)
    d = analyze(job, RuleBackend(span_rules(leaf)), store, settings, graph_dir=tmp_path / "graphs")
    span = d.span
    g = nx.node_link_graph(span["graph"], edges="edges")
    expected = nx.DiGraph([(s.span_id, c.span_id) for s in root.walk() for c in s.children])
    expected.add_node(root.span_id)
    assert nx.is_isomorphic(g, expected) and set(g) == set(expected)      # one node per span, one edge per call
    for _, data in g.nodes(data=True):
        assert {"span_id", "service", "abnormal", "key_symptoms", "hypothesis", "conclusion"} <= set(data)
        assert {"root_cause", "reason", "confidence"} <= set(data["conclusion"])
    assert span["path"][0] == root.span_id and span["path"] == path_to_root_cause(g)
    assert 1 <= span["max_active"] <= 3 and span["max_prompt_chars"] <= MAX_PROMPT_CHARS
    assert d.mode == "span" and d.root_causes and all(rc.entity in job.entities for rc in d.root_causes)
    assert d.model_root_causes and all(leaf in e for e in d.model_root_causes)
    assert d.root_causes[0].entity in d.model_root_causes
    # every agent's two phases are stored with the run; the picture marks abnormal spans and the path
    assert len(store.span_agents(d.run_id)) == 2 * len(g)
    page = (tmp_path / "graphs" / f"{d.run_id}.html").read_text()
    assert page.count("<rect") == len(g) and "<script" not in page and "ABNORMAL" in page
    assert json.loads(store.get_run(d.run_id)["diagnosis"])["span"]["path"] == span["path"]


def test_span_agents_run_in_parallel_with_a_slow_model(job_of, store):
    job = Job.load(job_of(CONTACTS_TT))
    for k in (1, 4):        # the agents wait on the model at the same time, up to the pool's capacity
        settings = Settings(backend="scripted", cache=False, span_pool=k)
        d = analyze(job, RuleBackend(span_rules(), delay=0.05), store, settings)
        assert d.span["max_active"] == k


def test_a_job_without_traces_falls_back_to_react(job_of, store):
    job = Job.load(job_of("carts-mem/1"))
    final = {"thought": "done", "action": "finalize", "arguments": {
        "root_causes": ["carts"], "root_cause": "The carts service ran out of memory.",
        "solution": "Raise the memory limit of carts.", "evidence": ["memory of carts rose"],
        "responsibility": "the carts team"}}
    script = [json.dumps({"thought": "look", "action": "metrics", "arguments": {"entity": "carts"}}), json.dumps(final)]
    d = analyze(job, ScriptedBackend(script), store, Settings(backend="scripted", mode="span"))
    assert d.mode == "react" and d.finalized and d.note.startswith("span mode needs traces")


def test_labels_are_breadth_first():
    assert list(label_spans(tree(2, 2)).values())[:3] == ["S1", "S2", "S3"]
    assert label_spans(tree(2, 2))["0.1"] == "S3"


def test_batch_runs_span_mode(job_of, tmp_path):
    from rcagent.batch import Batch, read_results
    out = tmp_path / "span.jsonl"
    settings = Settings(backend="scripted", cache=False, mode="span", store=str(tmp_path / "b.db"))
    Batch([job_of(CONTACTS_TT)], out, "span", settings, backend=RuleBackend(span_rules())).run()
    lines = {x["job"]: x for x in read_results(out)}
    traced = lines[job_of(CONTACTS_TT).name]
    assert traced["method"] == "span" and traced["mode"] == "span" and traced["status"] == "answered"
    assert traced["span"]["spans"] >= 2 and (tmp_path / "span-graphs" / f"{traced['run_id']}.html").is_file()


def test_span_mode_stops_at_the_deadline(job_of, store):
    from rcagent.errors import TimeLimit
    job = Job.load(job_of(CONTACTS_TT))
    settings = Settings(backend="scripted", cache=False, span_pool=2)
    with pytest.raises(TimeLimit):      # a deadline already past: no agent may call the model
        analyze(job, RuleBackend(span_rules()), store, settings, deadline=time.monotonic() - 1)
    run = store.runs(limit=1)[0]
    assert run["mode"] == "span" and run["status"] == "timeout"
    assert store.span_agents(run["id"]) == []


def test_batch_timeout_applies_to_span_mode(job_of, tmp_path):
    from rcagent.batch import Batch, read_results
    out = tmp_path / "span.jsonl"
    settings = Settings(backend="scripted", cache=False, mode="span", span_pool=1, store=str(tmp_path / "b.db"))
    # each model call takes 0.5 s and the job has a second: it stops well before its agents are done
    Batch([job_of(CONTACTS_TT)], out, "span", settings, timeout=1.0,
          backend=RuleBackend(span_rules(), delay=0.5)).run()
    line = read_results(out)[0]
    assert line["status"] == "timeout" and "time limit" in line["error"]
