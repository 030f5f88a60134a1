"""The ReAct controller with the scripted backend on a real TrainTicket job."""
from __future__ import annotations

import dataclasses
import json

import pytest

from rcagent import snapshots
from rcagent.controller import Controller
from rcagent.serving.scripted import ScriptedBackend


def act(action, thought="checking", **arguments):
    return json.dumps({"thought": thought, "action": action, "arguments": arguments})


FINAL = act("finalize", root_causes=["ts-contacts-service-866bd68c97-xcqfx", "ts-contacts-service"],
            root_cause="contacts returns no contacts", solution="fix ContactsServiceImpl",
            evidence=["NEW ERROR No contacts according to contactsId"], responsibility="contacts team")


def run(job, store, settings, *responses, **kw):
    backend = ScriptedBackend(list(responses))
    events = []
    controller = Controller(job, backend, store, settings, progress=events.append, **kw)
    return controller.run(), controller, backend, events


def test_finalize_returns_ranked_inventory_entities(contacts_job, store, settings):
    d, c, backend, events = run(contacts_job, store, settings,
                                act("logs", entity="ts-contacts-service"), FINAL)
    assert d.finalized and d.steps == 2 and d.invalid_steps == 0 and d.llm_calls == 2
    picks = ["ts-contacts-service-866bd68c97-xcqfx", "ts-contacts-service"]
    assert d.model_root_causes == picks
    # fused with the evidence ranking: both picks carry strong evidence, so they stay on top, followed by
    # the rest of the overview's ranking
    assert [r.entity for r in d.root_causes][:2] == picks and len(d.root_causes) == 10
    assert [r.kind for r in d.root_causes][:2] == ["pod", "service"]
    # at the default vote (0) the evidence scores; the model's order broke the tie of the two
    assert d.root_causes[0].score >= d.root_causes[1].score > d.root_causes[2].score
    assert [e["action"] for e in events] == ["logs", "finalize"]
    # the prompt: rules, task, tool docs from the registry, no few-shot examples
    system = backend.calls[0]["messages"][0]["content"]
    assert "calls(entity, direction?)" in system and "finalize(" in system
    # the schema enumerates tools and the inventory; the overview is already in the prompt and finalize
    # is only offered once something was inspected (the error handlers, as schema limits)
    branches = backend.calls[0]["schema"]["anyOf"]
    names = [b["properties"]["action"]["enum"][0] for b in branches]
    assert {"logs", "metrics", "calls", "read_snapshot"} <= set(names)
    assert "overview" not in names and "finalize" not in names
    logs = branches[names.index("logs")]["properties"]["arguments"]["properties"]["entity"]["enum"]
    assert "ts-contacts-service" in logs
    # snapshot keys are enumerated too: the run's only key so far is the overview it started from
    snap = branches[names.index("read_snapshot")]["properties"]["arguments"]["properties"]["key"]["enum"]
    assert snap == ["S1"]
    # step 2: logs no longer offers the service it was called on; finalize names only what was inspected
    branches = {b["properties"]["action"]["enum"][0]: b["properties"]["arguments"]["properties"]
                for b in backend.calls[1]["schema"]["anyOf"]}
    assert "ts-contacts-service" not in branches["logs"]["entity"]["enum"]
    named = set(branches["finalize"]["root_causes"]["items"]["enum"])
    assert "ts-contacts-service" in named and "ts-contacts-service-866bd68c97-xcqfx" in named
    assert "ts-order-service" not in named


def test_raw_newline_inside_a_string_is_accepted(contacts_job, store, settings):
    raw = '{"thought": "two\nlines", "action": "topology", "arguments": {"entity": "ts-contacts-service"}}'
    d, *_ = run(contacts_job, store, settings, raw, FINAL)
    assert d.invalid_steps == 0 and store.steps(d.run_id)[0]["thought"] == "two\nlines"


def test_every_step_is_stored(contacts_job, store, settings):
    d, *_ = run(contacts_job, store, settings, act("topology", entity="ts-contacts-service"), FINAL)
    steps = store.steps(d.run_id)
    assert [s["action"] for s in steps] == ["topology", "finalize"]
    assert steps[0]["observation"].startswith("ts-contacts-service: service")
    assert store.get_run(d.run_id)["status"] == "finalized"
    assert json.loads(store.get_run(d.run_id)["diagnosis"])["root_causes"][0]["entity"].startswith("ts-contacts")


def test_long_observation_goes_behind_a_snapshot_key(contacts_job, store, settings):
    settings.snapshot_threshold, settings.head_chars = 300, 200
    d, c, backend, _ = run(contacts_job, store, settings, act("metrics", entity="ts-contacts-service"),
                           act("read_snapshot", key="S9"), FINAL)
    keys = store.snapshot_keys(d.run_id)
    # step 0 is the overview the prompt starts from; step 1 the metrics call
    assert [(k["step"], k["tool"]) for k in keys] == [(0, "overview"), (1, "metrics")]
    first = store.steps(d.run_id)[0]
    assert first["snapshot"] == keys[1]["key"] and keys[1]["key"] in first["observation"]
    assert len(first["observation"]) < 400 and keys[1]["chars"] > 300
    # the placeholder key is unknown: the model is told which keys exist
    assert keys[1]["key"] in store.steps(d.run_id)[1]["error"]


def test_read_snapshot_pages_through(contacts_job, store, settings):
    settings.snapshot_threshold, settings.head_chars = 300, 200
    backend = ScriptedBackend([act("metrics", entity="ts-contacts-service")])
    c = Controller(contacts_job, backend, store, settings)
    c.run_id = c.trajectory.run_id = store.start_run("j", "/", "scripted", "m", {})
    c.messages = []
    c.do_step()
    key = store.snapshot_keys(c.run_id)[-1]["key"]
    full = store.snapshot(c.run_id, key)
    page2 = snapshots.read(store, c.run_id, c.inv, key, 2, 200)
    assert page2.startswith(f"[snapshot {key}, page 2 of") and full[200:400] in page2
    last = snapshots.read(store, c.run_id, c.inv, key, 999, 200)
    assert last.split("\n", 1)[1] == full[(-(-len(full) // 200) - 1) * 200:]
    # without a page: the first page not shown yet (page 1 is the head already in the prompt)
    assert snapshots.read(store, c.run_id, c.inv, key, None, 200).startswith(f"[snapshot {key}, page 3 of")


def test_invalid_outputs_are_answered_and_counted(contacts_job, store, settings):
    """Without the error handlers the action contract still refuses what cannot run (see test_stabilizers)."""
    settings.jsonregen = settings.handlers = False
    d, c, backend, events = run(contacts_job, store, settings,
                                "I think the answer is contacts",          # prose
                                act("dance", entity="x"),                   # unknown tool
                                act("metrics", entity="contacts-svc"),      # unknown entity
                                act("metrics"),                             # missing argument
                                act("finalize", root_causes=["nobody"], root_cause="", solution="",
                                    evidence=[], responsibility=""),       # finalize outside the inventory
                                FINAL)
    assert d.finalized and d.invalid_steps == 5 and d.steps == 6
    errors = [s["error"] for s in store.steps(d.run_id)[:5]]
    assert "not valid JSON" in errors[0]
    assert "unknown tool 'dance'" in errors[1]
    assert "'contacts-svc' is not in the inventory" in errors[2] and "nearest names: ts-contacts-service" in errors[2]
    assert "metrics: missing entity" in errors[3]
    assert "'nobody' is not in the inventory" in errors[4]
    assert [s["handler"] for s in store.steps(d.run_id)[:5]] == ["format", "unknown_tool", "unknown_entity",
                                                                 "bad_arguments", "unknown_entity"]
    # the error goes back to the model as the next user message
    assert "nearest names" in backend.calls[3]["messages"][-1]["content"]


def test_step_limit_gives_best_effort_not_exception(contacts_job, store, settings):
    settings.max_steps, settings.yaml_rounds = 3, 0
    d, c, backend, _ = run(contacts_job, store, settings, act("logs", entity="ts-contacts-service"),
                           act("calls", entity="ts-order-service"), "garbage")
    assert not d.finalized and d.steps == 3 and d.invalid_steps == 1
    assert {r.entity for r in d.root_causes} <= {"ts-contacts-service", "ts-order-service"}
    assert "step limit" in d.root_cause
    assert store.get_run(d.run_id)["status"] == "step_limit"
    # the last step offers finalize only
    assert [b["properties"]["action"]["enum"][0] for b in [backend.calls[2]["schema"]]] == ["finalize"]


def test_interrupted_run_is_kept_and_marked(contacts_job, store, settings):
    class Interrupting(ScriptedBackend):
        def complete(self, *a, **k):
            if len(self.calls) == 1:
                raise KeyboardInterrupt
            return super().complete(*a, **k)
    c = Controller(contacts_job, Interrupting([act("overview")]), store, settings)
    with pytest.raises(KeyboardInterrupt):
        c.run()
    assert store.get_run(c.run_id)["status"] == "interrupted"
    assert len(store.steps(c.run_id)) == 1


def test_cache_replays_a_run(contacts_job, store, settings):
    d1, *_ = run(contacts_job, store, settings, act("topology", entity="ts-contacts-service"), FINAL)
    d2, c, backend, events = run(contacts_job, store, settings)  # empty queue: everything from the cache
    assert [r.entity for r in d2.root_causes] == [r.entity for r in d1.root_causes]
    assert all(e["cached"] for e in events) and backend.calls == []


def test_schema_bounds_every_action_below_the_token_budget(contacts_job, settings):
    """A small model that fills every string must still finish its JSON within max_tokens."""
    from rcagent.actions import action_schema
    from rcagent.tools import load_builtin_tools

    def longest(schema) -> int:
        if "anyOf" in schema:
            return max(longest(s) for s in schema["anyOf"])
        t = schema.get("type")
        if "enum" in schema:
            return max(len(json.dumps(v)) for v in schema["enum"])
        if t == "string":
            return schema["maxLength"] + 2
        if t == "integer":
            return 20
        if t == "array":
            return 2 + schema["maxItems"] * (longest(schema["items"]) + 2)
        if t == "object":
            return 2 + sum(len(k) + 4 + longest(v) for k, v in schema["properties"].items())
        raise AssertionError(schema)

    worst = longest(action_schema(load_builtin_tools(), sorted(contacts_job.entities)))
    assert worst * 1.1 < settings.max_tokens  # at least one character per token; 10% for optional spaces


def test_a_degenerate_answer_is_echoed_only_in_part(contacts_job, store, settings):
    settings.yaml_rounds = 0
    d, c, backend, _ = run(contacts_job, store, settings, "{" + "1." * 2000,
                           act("logs", entity="ts-contacts-service"), FINAL)
    assert d.invalid_steps == 1
    echoed = backend.calls[1]["messages"][-2]
    assert echoed["role"] == "assistant" and len(echoed["content"]) <= 300


def test_fusion_lets_the_model_flip_close_calls_only():
    from rcagent.fusion import fuse
    # the model's pick has less than half the top evidence: the evidence wins
    assert [e for e, _ in fuse(["b"], [("a", 10.0), ("b", 4.0)])] == ["a", "b"]
    # at least half: the model's pick wins (the tie goes to the model)
    assert [e for e, _ in fuse(["b"], [("a", 10.0), ("b", 5.0)])] == ["b", "a"]
    # a pick without evidence still enters the list; later picks weigh less
    assert fuse(["c", "d"], [("a", 10.0)]) == [("a", 1.0), ("c", 0.5), ("d", 0.25)]
    assert fuse([], []) == []
    # another weight of the vote (benchmarks/fusion_replay.py): 0.1 flips only a near tie, 0 never
    assert [e for e, _ in fuse(["b"], [("a", 10.0), ("b", 5.0)], vote=0.1)] == ["a", "b"]
    assert [e for e, _ in fuse(["b"], [("a", 10.0), ("b", 9.5)], vote=0.1)] == ["b", "a"]
    assert [e for e, _ in fuse(["b"], [("a", 10.0), ("b", 9.9)], vote=0.0)] == ["a", "b"]


def test_model_ranking_keeps_the_models_order(contacts_job, store, settings):
    settings.ranking = "model"
    d, *_ = run(contacts_job, store, settings, act("logs", entity="ts-contacts-service"), FINAL)
    assert [r.entity for r in d.root_causes] == d.model_root_causes == \
        ["ts-contacts-service-866bd68c97-xcqfx", "ts-contacts-service"]
    assert [r.score for r in d.root_causes] == [1.0, 0.5]


def test_text_that_is_not_a_sentence_is_written_from_the_evidence(contacts_job, store, settings):
    junk = {"thought": "done", "action": "finalize", "arguments": {
        "root_causes": ["ts-contacts-service"], "root_cause": "finalize", "solution": "ts-contacts-service",
        "evidence": ["error-like logs rose in ts-contacts-service"], "responsibility": "contacts team"}}
    d, *_ = run(contacts_job, store, settings, act("logs", entity="ts-contacts-service"), json.dumps(junk))
    top = d.root_causes[0]
    assert d.root_cause.startswith(f"{top.entity} ({top.kind}) moved most from its baseline: ")
    assert top.entity in d.solution and len(d.solution.split()) > 8
    assert d.note == "root cause, solution written from the evidence: the model's text was not a sentence"
    assert d.evidence == junk["arguments"]["evidence"] and d.responsibility == "contacts team"
    # evidence that only names entities is replaced by the signals of the top entities
    bare = {**junk, "arguments": {**junk["arguments"], "evidence": ["ts-contacts-service"], "responsibility": "x"}}
    settings.cache = False
    d, *_ = run(contacts_job, store, settings, act("logs", entity="ts-contacts-service"), json.dumps(bare))
    assert d.evidence[0].startswith(f"{top.entity}: ") and "baseline" not in d.evidence[0]
    assert d.responsibility == f"the team that owns {top.entity}"
    assert d.note.startswith("root cause, solution, evidence, responsibility written from the evidence")
    # a real sentence is kept as the model wrote it (the cache off: the prompts repeat the first run's)
    kept = {**junk, "arguments": {**junk["arguments"], "root_cause": "The contacts service returns wrong results",
                                  "solution": "Roll back the contacts service release"}}
    d, *_ = run(contacts_job, store, settings, act("logs", entity="ts-contacts-service"), json.dumps(kept))
    assert d.root_cause == "The contacts service returns wrong results" and d.note == ""


def test_the_model_vote_setting_decides_whether_the_models_pick_outranks_the_evidence(contacts_job, store, settings):
    from rcagent.tools.overview import ranking
    evidence = [e for e, _, _ in ranking(contacts_job)]
    third = evidence[2]
    final = act("finalize", root_causes=[third], root_cause="it fails", solution="fix it",
                evidence=["its calls fail"], responsibility="its team")
    d = run(contacts_job, store, settings, act("logs", entity=third), final)[0]
    assert d.model_root_causes == [third] and d.root_causes[0].entity == evidence[0]   # default vote 0
    heavy = dataclasses.replace(settings, model_vote=2.0)
    d = run(contacts_job, store, heavy, act("logs", entity=third), final)[0]
    assert [r.entity for r in d.root_causes][:2] == [third, evidence[0]]
