"""Stabilizers: JsonRegen on real malformed outputs, and every error handler through the controller.

The malformed outputs are SmolLM2-135M's own (recorded on tt-8ed0d397): its degenerate unconstrained answer,
and a constrained action and finalize of the same run, cut, wrapped in prose, single-quoted and written as
YAML the way small models do.
"""
from __future__ import annotations

import json

import pytest

from rcagent.controller import Controller
from rcagent.errors import FormatError
from rcagent.serving.scripted import ScriptedBackend
from rcagent.stabilizers.jsonregen import JsonRegen, strict
from rcagent.tools import Param, Tool, load_builtin_tools

# Real SmolLM2 outputs (unconstrained: it degenerates into repetition; constrained: valid, but a cut at
# max_tokens or a model without a grammar gives the variants below).
DEGENERATE = "The incident tt-8e0d397.\n\n" * 8
REAL_ACTION = ('{"thought": "The root cause of the incident is the service that was removed from the network.", '
               '"action": "metrics", "arguments": {"entity": "ts-preserve-other-service-66646bdb5b-fw7x9"}}')
REAL_FINAL = ('{"thought": "The root cause of the incident is the service that was removed", "action": "finalize", '
              '"arguments": {"root_causes": ["ts-consign-service-7dcdfcb995-xx84c", "ts-config-service-5fcd447d84-'
              'wxwjd"],"root_cause": "ts-consign-service-7dcdfcb995-xx84c", "solution": "ts-config-service-5fcd4'
              '47d84-wxwjd", "evidence": ["ts-seat-service-5c95b49cff-tdsdz"],"responsibility": "ts-config"}}')
TRUNCATED = REAL_FINAL[:REAL_FINAL.index('"solution"') + 20]
PROSE = f"Sure! Here is my next step:\n```json\n{REAL_ACTION}\n```\nAfter that I will check the logs."
SINGLE_QUOTES = REAL_ACTION.replace('"', "'")
YAMLISH = ("thought: The root cause may be the preserve service\naction: metrics\narguments:\n"
           "  entity: ts-preserve-other-service-66646bdb5b-fw7x9")


# ---- JsonRegen on its own ------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [TRUNCATED, PROSE, SINGLE_QUOTES, YAMLISH])
def test_repair_round_fixes_malformed_output_without_the_model(text):
    action, rounds = JsonRegen()(text)
    assert [(r["method"], r["ok"]) for r in rounds] == [("strict", False), ("repair", True)]
    assert action.name in ("metrics", "finalize")
    if action.name == "metrics":
        assert action.arguments == {"entity": "ts-preserve-other-service-66646bdb5b-fw7x9"}


def test_truncated_finalize_keeps_what_was_written():
    action, _ = JsonRegen()(TRUNCATED)
    assert action.arguments["root_causes"] == ["ts-consign-service-7dcdfcb995-xx84c",
                                               "ts-config-service-5fcd447d84-wxwjd"]
    assert action.arguments["root_cause"] == "ts-consign-service-7dcdfcb995-xx84c"


def test_key_aliases_are_mapped():
    action, _ = JsonRegen()('{"tool": "logs", "args": {"entity": "ts-order-service"}}')
    assert (action.name, action.arguments) == ("logs", {"entity": "ts-order-service"})


def test_yaml_restatement_round_asks_the_model_and_keeps_content():
    asked = []

    def restate(text, error):
        asked.append((text, error))
        return "thought: check it\naction: logs\narguments:\n  entity: ts-contacts-service\n"

    action, rounds = JsonRegen(restate, yaml_rounds=2)("I would look at the logs of the contacts service")
    assert (action.name, action.arguments) == ("logs", {"entity": "ts-contacts-service"})
    assert [r["method"] for r in rounds] == ["strict", "repair", "yaml"] and rounds[-1]["ok"]
    assert asked[0][0].startswith("I would look") and "JSON object" in asked[0][1]


def test_degenerate_output_fails_after_bounded_rounds_each_recorded():
    errors = []

    def restate(text, error):
        errors.append(error)
        return DEGENERATE  # what SmolLM2 actually answers: it copies the junk

    with pytest.raises(FormatError) as exc:
        JsonRegen(restate, yaml_rounds=2)(DEGENERATE)
    assert [r["method"] for r in exc.value.rounds] == ["strict", "repair", "yaml", "yaml"]
    assert not any(r["ok"] for r in exc.value.rounds) and exc.value.rounds[2]["text"].startswith("The incident")
    assert len(errors) == 2  # one model call per YAML round, no more
    assert "not valid JSON" in str(exc.value)


def test_strict_parser_rejects_what_jsonregen_repairs():
    with pytest.raises(FormatError):
        strict(SINGLE_QUOTES)


# ---- through the controller on a real job -----------------------------------------------------------------
def act(action, thought="checking", **arguments):
    return json.dumps({"thought": thought, "action": action, "arguments": arguments})


GOOD_FINAL = act("finalize", root_causes=["ts-contacts-service"], root_cause="contacts returns no contacts",
                 solution="fix ContactsServiceImpl", evidence=["NEW ERROR No contacts according to contactsId"],
                 responsibility="contacts team")
LOGS = act("logs", entity="ts-contacts-service")


def run(job, store, settings, *responses, tools=None):
    backend = ScriptedBackend(list(responses))
    controller = Controller(job, backend, store, settings, tools=tools)
    diagnosis = controller.run()
    return diagnosis, store.steps(diagnosis.run_id), backend


POD = "ts-preserve-other-service-66646bdb5b-fw7x9"   # tt-8ed0d397 is the contacts job the outputs came from
POD_FINAL = act("finalize", root_causes=[POD], root_cause="the preserve pod is slow", solution="restart it",
                evidence=[f"{POD} latency up"], responsibility="preserve team")


@pytest.mark.parametrize("text", [PROSE, SINGLE_QUOTES, YAMLISH], ids=["prose", "single-quotes", "yaml-ish"])
def test_repaired_step_is_valid_and_its_rounds_are_stored(contacts_job, store, settings, text):
    d, steps, backend = run(contacts_job, store, settings, text, POD_FINAL)
    assert d.finalized and d.invalid_steps == 0 and d.repaired_steps == 1 and d.llm_calls == 2
    assert (steps[0]["action"], json.loads(steps[0]["arguments"])) == ("metrics", {"entity": POD})
    assert steps[0]["valid"] == 1 and steps[0]["observation"].startswith(f"Metrics of {POD}")
    assert [r["method"] for r in json.loads(steps[0]["repairs"])] == ["strict", "repair"]
    # the conversation continues from the repaired action, not from the malformed text
    assert json.loads(backend.calls[1]["messages"][-2]["content"])["arguments"] == {"entity": POD}


def test_truncated_finalize_at_step_one_is_repaired_then_rejected_as_premature(contacts_job, store, settings):
    d, steps, _ = run(contacts_job, store, settings, TRUNCATED, LOGS, GOOD_FINAL)
    assert steps[0]["action"] == "finalize" and steps[0]["handler"] == "premature_finalize"
    assert json.loads(steps[0]["arguments"])["root_causes"][0] == "ts-consign-service-7dcdfcb995-xx84c"
    assert [r["method"] for r in json.loads(steps[0]["repairs"])] == ["strict", "repair"]
    assert d.finalized and d.invalid_steps == 1 and d.repaired_steps == 0


def test_yaml_round_goes_through_the_model(contacts_job, store, settings):
    d, steps, backend = run(contacts_job, store, settings, "I would look at the logs of ts-contacts-service",
                            "thought: look\naction: logs\narguments:\n  entity: ts-contacts-service", GOOD_FINAL)
    assert d.finalized and d.steps == 2 and d.llm_calls == 3 and d.repaired_steps == 1
    regen = backend.calls[1]
    assert regen["schema"] is None and "Restate the same answer as YAML" in regen["messages"][-1]["content"]
    # the restatement continues the step's conversation (shared prefix), quoting the bad answer
    assert regen["messages"][:-2] == backend.calls[0]["messages"]
    assert regen["messages"][-2] == {"role": "assistant", "content": "I would look at the logs of ts-contacts-service"}
    assert steps[0]["action"] == "logs" and json.loads(steps[0]["repairs"])[-1]["method"] == "yaml"


def test_without_jsonregen_the_same_output_is_invalid(contacts_job, store, settings):
    settings.jsonregen = False
    d, steps, _ = run(contacts_job, store, settings, SINGLE_QUOTES, LOGS, GOOD_FINAL)
    assert d.invalid_steps == 1 and steps[0]["handler"] == "format" and steps[0]["repairs"] is None


def handled(steps, i):
    return steps[i]["handler"], steps[i]["error"]


def test_finalize_at_step_one_is_premature(contacts_job, store, settings):
    d, steps, backend = run(contacts_job, store, settings, GOOD_FINAL, LOGS, GOOD_FINAL)
    handler, error = handled(steps, 0)
    assert handler == "premature_finalize" and "no tool was called yet" in error
    assert "Hint: inspect the top suspect first: " in error and "(entity=" in error
    assert d.finalized and d.invalid_steps == 1 and d.steps == 3
    # the model is told, and a constrained model would not have been offered finalize at all
    assert "no tool was called yet" in backend.calls[1]["messages"][-1]["content"]
    assert "finalize" not in [b["properties"]["action"]["enum"][0] for b in backend.calls[0]["schema"]["anyOf"]]


def test_finalize_naming_entities_never_looked_at(contacts_job, store, settings):
    bad = act("finalize", root_causes=["ts-order-service"], root_cause="order is slow", solution="restart it",
              evidence=["order latency up 3 sd"], responsibility="order team")
    d, steps, _ = run(contacts_job, store, settings, LOGS, bad, GOOD_FINAL)
    handler, error = handled(steps, 1)
    assert handler == "premature_finalize" and "ts-order-service, never inspected" in error
    assert 'metrics(entity="ts-order-service")' in error and "ts-contacts-service" in error


def test_a_pod_of_an_inspected_service_counts_as_looked_at(contacts_job, store, settings):
    pod = act("finalize", root_causes=["ts-contacts-service-866bd68c97-xcqfx"], root_cause="contacts pod fails",
              solution="fix it", evidence=["NEW ERROR No contacts according to contactsId"], responsibility="x")
    d, steps, _ = run(contacts_job, store, settings, LOGS, pod)
    assert d.finalized and d.invalid_steps == 0


def test_finalize_without_evidence(contacts_job, store, settings):
    bare = act("finalize", root_causes=["ts-contacts-service"], root_cause="contacts", solution="fix",
               evidence=["ok"], responsibility="x")
    d, steps, _ = run(contacts_job, store, settings, LOGS, bare, GOOD_FINAL)
    assert handled(steps, 1) == ("premature_finalize", steps[1]["error"])
    assert "without evidence" in steps[1]["error"] and "quote" in steps[1]["error"]


def test_repeated_call_is_answered_with_a_new_suspect(contacts_job, store, settings):
    d, steps, backend = run(contacts_job, store, settings, LOGS, LOGS, GOOD_FINAL)
    handler, error = handled(steps, 1)
    assert handler == "repeated_call"
    assert 'already called logs(entity="ts-contacts-service") at step 1' in error
    suggestion = error.split("Hint: call another tool or entity: ")[1]
    assert suggestion != 'logs(entity="ts-contacts-service").'
    assert d.invalid_steps == 1 and steps[1]["valid"] == 0 and steps[1]["action"] == "logs"
    # the model sees its parsed action and the error, and the schema no longer offers the repeat
    assert json.loads(backend.calls[2]["messages"][-2]["content"])["action"] == "logs"
    logs = [b for b in backend.calls[1]["schema"]["anyOf"] if b["properties"]["action"]["enum"] == ["logs"]][0]
    assert "ts-contacts-service" not in logs["properties"]["arguments"]["properties"]["entity"]["enum"]


def test_fuzzy_name_of_the_same_entity_is_a_repeat_too(contacts_job, store, settings):
    d, steps, _ = run(contacts_job, store, settings, LOGS, act("logs", entity="TS-CONTACTS-SERVICE"), GOOD_FINAL)
    assert steps[1]["handler"] == "repeated_call"


def test_a_tool_runs_once_per_entity_whatever_its_other_arguments(contacts_job, store, settings):
    """Near-identical and alternating calls (new arguments each time, circling two tools) are repeats: the
    rule is one call per tool and entity, the same rule the schema narrowing applies."""
    d, steps, backend = run(contacts_job, store, settings,
                            act("logs", entity="ts-contacts-service", query="error"),
                            act("metrics", entity="ts-contacts-service"),
                            act("logs", entity="ts-contacts-service", query="errors"),
                            act("metrics", entity="ts-contacts-service", metric="cpu"), GOOD_FINAL)
    assert [s["handler"] for s in steps[:4]] == [None, None, "repeated_call", "repeated_call"]
    assert 'you already called logs(entity="ts-contacts-service", query="error") at step 1' in steps[2]["error"]
    logs = [b for b in backend.calls[2]["schema"]["anyOf"] if b["properties"]["action"]["enum"] == ["logs"]][0]
    assert "ts-contacts-service" not in logs["properties"]["arguments"]["properties"]["entity"]["enum"]


def test_one_tool_in_a_rut_is_a_loop(contacts_job, store, settings):
    names = ["ts-contacts-service", "ts-order-service", "ts-station-service", "ts-route-service"]
    d, steps, backend = run(contacts_job, store, settings, *[act("topology", entity=n) for n in names],
                            GOOD_FINAL)
    assert [s["handler"] for s in steps[:4]] == [None, None, None, "loop"]
    offered = [b["properties"]["action"]["enum"][0] for b in backend.calls[3]["schema"]["anyOf"]]
    assert "topology" not in offered and "metrics" in offered


def test_unknown_tool_argument_and_entity_get_hints(contacts_job, store, settings):
    d, steps, _ = run(contacts_job, store, settings,
                      act("metric", entity="ts-contacts-service"),
                      act("logs", entity="ts-contacts-service", level="error"),
                      act("logs", entity="contacts-svc"), LOGS, GOOD_FINAL)
    assert [s["handler"] for s in steps[:3]] == ["unknown_tool", "bad_arguments", "unknown_entity"]
    assert "did you mean metrics?" in steps[0]["error"]
    assert "unknown argument(s) level" in steps[1]["error"] and "logs(entity, query?)" in steps[1]["error"]
    assert "nearest names:" in steps[2]["error"] and "ts-contacts-service" in steps[2]["error"]
    assert d.finalized and d.invalid_steps == 3


def test_trivial_input_to_an_expert(contacts_job, store, settings):
    expert = Tool("explain_code", "An expert reads a class", (Param("target", "a class or file name", min_chars=4),),
                  run=lambda job, target, ctx: f"read {target}", expert=True)
    tools = {**load_builtin_tools(), "explain_code": expert}
    d, steps, _ = run(contacts_job, store, settings, act("explain_code", target=""), act("explain_code", target=" "),
                      act("explain_code", target="ab"), act("explain_code", target="ContactsServiceImpl"),
                      LOGS, GOOD_FINAL, tools=tools)
    assert [s["handler"] for s in steps[:4]] == ["bad_arguments", "trivial_input", "trivial_input", None]
    assert "missing target" in steps[0]["error"] and "at least 4 characters" in steps[2]["error"]
    assert steps[3]["observation"] == "read ContactsServiceImpl"


def test_read_snapshot_without_page_shows_the_next_unread_page(contacts_job, store, settings):
    d, steps, _ = run(contacts_job, store, settings, act("read_snapshot", key="S1"),
                      act("read_snapshot", key="S1"), act("read_snapshot", key="S1", page=2), LOGS, GOOD_FINAL)
    assert steps[0]["observation"].startswith("[snapshot S1, page 2 of")
    assert steps[1]["observation"].startswith("[snapshot S1, page 3 of")
    assert steps[2]["handler"] == "repeated_call" and "page 2 of snapshot S1 was already shown" in steps[2]["error"]


def test_a_snapshot_read_to_the_end_is_no_longer_offered(contacts_job, store, settings):
    """Measured: SmolLM2 on ps-952a19ab read the overview's last page and then asked for it eight more times."""
    settings.head_chars = 2000   # the overview of this job then has two pages
    d, steps, backend = run(contacts_job, store, settings, act("read_snapshot", key="S1"),
                            act("read_snapshot", key="S1"), LOGS, GOOD_FINAL)
    assert steps[0]["observation"].startswith("[snapshot S1, page 2 of 2]")
    assert steps[1]["handler"] == "repeated_call" and "every page of snapshot S1" in steps[1]["error"]
    offered = [b["properties"]["action"]["enum"][0] for b in backend.calls[1]["schema"]["anyOf"]]
    assert "read_snapshot" not in offered


def test_with_schema_limits_read_snapshot_takes_no_page(contacts_job, store, settings):
    """Measured on ob-760a9eb9: SmolLM2 asked for page 3 of S1, already shown, ten times in one run. With the
    schema limits on, read_snapshot offers only the key, and the next unread page is shown."""
    d, steps, backend = run(contacts_job, store, settings, act("read_snapshot", key="S1"), LOGS, GOOD_FINAL)
    branch = next(b for b in backend.calls[1]["schema"]["anyOf"]
                  if b["properties"]["action"]["enum"] == ["read_snapshot"])
    assert set(branch["properties"]["arguments"]["properties"]) == {"key"}
    assert steps[0]["observation"].startswith("[snapshot S1, page 2 of")
    settings.schema_limits = False
    _, _, backend = run(contacts_job, store, settings, act("read_snapshot", key="S1"), LOGS, GOOD_FINAL)
    branch = next(b for b in backend.calls[1]["schema"]["anyOf"]
                  if b["properties"]["action"]["enum"] == ["read_snapshot"])
    assert "page" in branch["properties"]["arguments"]["properties"]


def test_without_schema_limits_the_handlers_still_check(contacts_job, store, settings):
    settings.schema_limits = False
    d, steps, backend = run(contacts_job, store, settings, GOOD_FINAL, LOGS, LOGS, GOOD_FINAL)
    assert [s["handler"] for s in steps] == ["premature_finalize", None, "repeated_call", None]
    offered = [b["properties"]["action"]["enum"][0] for b in backend.calls[0]["schema"]["anyOf"]]
    assert "finalize" in offered and "overview" in offered


def test_without_handlers_the_same_mistakes_go_through(contacts_job, store, settings):
    settings.handlers = False
    d, steps, backend = run(contacts_job, store, settings, LOGS, LOGS, GOOD_FINAL)
    assert d.finalized and d.invalid_steps == 0 and d.steps == 3
    assert "finalize" in [b["properties"]["action"]["enum"][0] for b in backend.calls[0]["schema"]["anyOf"]]


def test_without_constraint_no_schema_is_sent(contacts_job, store, settings):
    settings.constrain = False
    d, steps, backend = run(contacts_job, store, settings, LOGS, GOOD_FINAL)
    assert d.finalized and all(c["schema"] is None for c in backend.calls)
