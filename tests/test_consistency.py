"""Self-consistency at finalization: samples share the greedy prefix, bad samples are dropped, aggregation."""
from __future__ import annotations

import json

from rcagent.consistency import borda, nearest_to_centroid
from rcagent.controller import Controller
from rcagent.serving.scripted import ScriptedBackend

CONTACTS, AUTH = "ts-contacts-service", "ts-auth-service"


def act(action: str, **arguments) -> str:
    return json.dumps({"thought": f"{action} next", "action": action, "arguments": arguments})


def final(names: list[str], root_cause: str, solution: str) -> str:
    return act("finalize", root_causes=names, root_cause=root_cause, solution=solution,
               evidence=["contacts errors rose in the window"], responsibility="the contacts team")


GREEDY = final([CONTACTS], "The contacts service fails to find contacts.", "Roll back the contacts service.")


def run(job, store, settings, samples: list[str], n: int, aggregate: str = "embed", extra: list[str] = ()):
    settings.samples, settings.aggregate, settings.ranking = n, aggregate, "model"
    script = [act("logs", entity=CONTACTS), act("metrics", entity=AUTH), GREEDY, *samples, *extra]
    backend = ScriptedBackend(script)
    return Controller(job, backend, store, settings).run(), backend


def test_samples_share_the_greedy_prefix_and_bad_ones_are_dropped(contacts_job, store, settings):
    samples = [
        final([CONTACTS, AUTH], "Contacts lookups fail in ts-contacts-service after a bad release.",
              "Roll back ts-contacts-service to the previous version."),
        act("logs", entity=AUTH),                                     # not a finalize
        "I think the answer is the contacts service",                  # no JSON at all
        final([AUTH, CONTACTS], "The auth service is slow.", "Restart the auth service."),
        final(["no-such-service"], "Something else broke.", "Fix it."),   # nothing in the inventory
    ]
    d, backend = run(contacts_job, store, settings, samples, n=5)
    # two tool steps and the greedy finalize, then ONE sampling request of the same prefix: no tool replayed
    assert len(backend.calls) == 4 and backend.calls[3]["n"] == 5
    assert backend.calls[3]["messages"] == backend.calls[2]["messages"]
    assert len(store.steps(d.run_id)) == 3
    c = d.consistency
    assert (c["samples"], c["kept"]) == (5, 2)
    assert c["dropped"] == {"not a finalize": 1, "format": 1, "unknown_entity": 1}
    # Borda over the kept picks [contacts, auth] and [auth, contacts]: a tie (3 points each), broken by the
    # greedy answer [contacts]
    assert c["order"] == [CONTACTS, AUTH] and [rc.entity for rc in d.root_causes] == [CONTACTS, AUTH]
    assert c["agreement"]["top1"] == 0.5
    # only one candidate agrees on the first root cause, so its texts are the aggregate
    assert d.root_cause.startswith("Contacts lookups fail") and d.solution.startswith("Roll back ts-contacts")
    stored = store.samples(d.run_id)
    assert [s["dropped"] for s in stored] == [None, "not a finalize", "format", None, "unknown_entity"]
    assert json.loads(stored[3]["diagnosis"])["root_causes"] == [AUTH, CONTACTS]
    assert d.llm_calls == 3 + 5 and "self-consistency: 2 of 5" in d.note


def test_no_finalizing_sample_keeps_the_greedy_answer(contacts_job, store, settings):
    d, _ = run(contacts_job, store, settings, [act("logs", entity=AUTH), "???"], n=2)
    assert d.consistency["kept"] == 0 and d.consistency["used"].startswith("greedy")
    assert d.root_cause == "The contacts service fails to find contacts."


def test_borda_counts_positions_and_breaks_ties_by_the_greedy_answer():
    assert borda([["a", "b"], ["b", "a"], ["c"]], tiebreak=["b"]) == ["b", "a", "c"]
    assert borda([["a", "b"], ["b", "a"], ["c"]], tiebreak=["a"]) == ["a", "b", "c"]
    assert borda([["x"], ["y"], ["y"]], tiebreak=["x"]) == ["y", "x"]


def test_embed_picks_the_semantic_majority():
    texts = ["The database refuses connections because it ran out of connections.",
             "Bananas are a yellow fruit grown in the tropics.",
             "The database is out of connections and refuses new ones.",
             "Connections to the database are refused: its pool is exhausted."]
    index, mean_similarity = nearest_to_centroid(texts)
    assert index in (0, 2, 3) and 0 < mean_similarity < 1


def test_embed_aggregation_on_fixed_candidates(contacts_job, store, settings):
    samples = [final([CONTACTS], "The contacts service cannot find contacts and returns errors.", "Roll back contacts."),
               final([CONTACTS], "Bananas are a yellow fruit grown in the tropics.", "Eat more fruit, it helps."),
               final([CONTACTS], "The contacts service returns errors: contacts are not found.",
                     "Roll back the contacts service release.")]
    d, _ = run(contacts_job, store, settings, samples, n=3)
    assert d.consistency["agreement"]["top1"] == 1.0
    assert "contacts" in d.root_cause and "Bananas" not in d.root_cause
    assert "fruit" not in d.solution


def test_llm_aggregation_merges_the_candidates(contacts_job, store, settings):
    samples = [final([CONTACTS], "The contacts service cannot find contacts.", "Roll back the contacts service."),
               final([CONTACTS], "Contacts lookups return errors.", "Redeploy the previous contacts release.")]
    merged = json.dumps({"root_cause": "The contacts service fails its lookups and returns errors.",
                         "solution": "Roll back the contacts service to its previous release."})
    d, backend = run(contacts_job, store, settings, samples, n=2, aggregate="llm", extra=[merged])
    prompt = backend.calls[-1]["messages"][0]["content"]
    assert "Contacts lookups return errors." in prompt and "Roll back the contacts service." in prompt
    assert CONTACTS in prompt
    assert d.root_cause == "The contacts service fails its lookups and returns errors."
    assert d.solution == "Roll back the contacts service to its previous release."


def test_llm_aggregation_that_is_not_sentences_falls_back(contacts_job, store, settings):
    samples = [final([CONTACTS], "The contacts service cannot find contacts.", "Roll back contacts.")] * 2
    junk = json.dumps({"root_cause": CONTACTS, "solution": "finalize"})
    d, _ = run(contacts_job, store, settings, samples, n=2, aggregate="llm", extra=[junk])
    assert d.root_cause == "The contacts service cannot find contacts."
    assert "merge was not sentences" in d.consistency["used"]
