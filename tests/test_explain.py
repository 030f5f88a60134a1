"""The solution the harness writes from the evidence when the model's text is not a sentence: it follows the
kind of signal of the top entity (a change before the degradation, an outage, new error lines, a routine log
line that stopped), on reasons as the overview writes them and on a real case."""
from __future__ import annotations

from rcagent.explain import is_sentence, solution
from rcagent.job import Job
from rcagent.tools.overview import ranking
from tests.conftest import CONTACTS_CASE


def test_the_solution_follows_the_kind_of_evidence():
    assert solution("cart", ["incoming calls STOPPED (12/min expected)"]).startswith("Check whether cart is running")
    # a routine log line that stopped is an exception before it, not a service that stopped
    assert solution("cart", ["log line stopped (28 expected): <n> INFO c.s.CartImpl#34"]).startswith(
        "Find the exception cart's requests now hit before the log line that stopped")
    assert solution("cart", ["error-like logs 0.0->5.0/min (expected from its log volume)",
                             "log line stopped in its calls: written by 0 of 17 calls of /cart (15 expected)"]
                    ).startswith("Read the new error logs of cart")
    assert solution("cart", ["Deployment at 10:02:03 UTC (Created until 10:03:00), then its service degraded",
                             "error-like logs 0.0->5.0/min"]).startswith(
        "Roll back cart's Deployment of 10:02:03 UTC to its previous version")
    assert solution("cart", ["cpu up 9 sd"]).startswith("Find the process using the CPU in cart")


def test_on_a_real_exception_the_solution_reads_the_new_error_logs(job_of):
    # TrainTicket 2023-01-29_08_43: the contacts pod throws before a routine line and logs a new error
    entity, _, reasons = ranking(Job.load(job_of(CONTACTS_CASE)))[0]
    assert entity.startswith("ts-contacts-service") and any("log line stopped" in r for r in reasons)
    assert solution(entity, reasons).startswith(f"Read the new error logs of {entity}")


def test_an_identifier_or_a_degenerate_run_is_not_a_sentence():
    # SmolLM2's finalize on a PetSite job without a baseline (2026-12-06): root cause, solution and evidence
    said = "petSite_pet_service_failure_2023-04-18 19:02:00.00000000000000011111111111111111111111111111"
    assert not is_sentence(said, set()) and not is_sentence("evidence_type_1", set(), min_words=2)
    assert not is_sentence("19:02:00.000000000000 the service failed badly", set())   # words, then a run
    assert not is_sentence("ts-cart-service", {"ts-cart-service"}) and not is_sentence("<one sentence: why>", set())
    assert is_sentence("error-like logs rose in ts-contacts-service", set())
    assert is_sentence("The PetSearch_AWS::ECS::Fargate latency rose sharply.", set())   # a name among words
    assert is_sentence("It's the cart's (redis) fault, isn't it?", set())
    assert is_sentence("contacts team", set(), min_words=2)
    assert is_sentence("Le service échoue à chaque appel.", set())   # letters of any script
