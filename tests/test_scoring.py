"""The scorer against hand-computed cases (RCAtlas PR@1/RR, Recall@k, MRR, random-guess rate), and on real jobs."""
from __future__ import annotations

import pytest

from rcagent.eval.scoring import Inventory, score_case

# a tiny inventory: two services with two pods each, and a node
INV = Inventory(kinds={"cart": "service", "cart-1": "pod", "cart-2": "pod", "pay": "service", "pay-1": "pod",
                       "pay-2": "pod", "node-a": "node", "cart-db": "database"},
                parents={"cart-1": ["cart"], "cart-2": ["cart"], "pay-1": ["pay"], "pay-2": ["pay"]})
SERVICE, POD = {"service"}, {"pod"}


def test_a_pod_answer_counts_as_its_service_when_services_are_labelled():
    s = score_case(["cart-1"], ["cart"], INV, SERVICE)
    assert (s.pr1, s.rr, s.mrr, s.recall[1]) == (1.0, 1.0, 1.0, 1.0)


def test_a_service_answer_is_too_coarse_for_a_pod_label():
    # the service is not at the annotated level and has no parent there: it drops out of the list
    s = score_case(["cart", "pay-1", "cart-1"], ["cart-1"], INV, POD)
    assert s.pr1 == 0.0 and s.rr == 0.5 and s.mrr == 0.5  # mapped list: pay-1, cart-1


def test_two_root_causes_score_one_in_either_order():
    for answers in (["cart", "pay"], ["pay", "cart"]):
        s = score_case(answers, ["cart", "pay"], INV, SERVICE)
        assert (s.pr1, s.rr, s.recall[1], s.recall[3]) == (1.0, 1.0, 0.5, 1.0)
    # one of two found at position 3: RR = (1/(1+max(0,3-2)) + 0) / 2
    s = score_case(["cart-db", "unknown", "pay"], ["cart", "pay"], INV, SERVICE)
    assert s.pr1 == 0.0 and s.rr == pytest.approx(0.25) and s.mrr == pytest.approx(1 / 3)


def test_an_answer_at_a_level_the_dataset_does_not_label_drops_out():
    s = score_case(["node-a", "pay"], ["pay"], INV, SERVICE)
    assert s.pr1 == 1.0


def test_no_answer_scores_zero():
    s = score_case([], ["cart"], INV, SERVICE)
    assert (s.pr1, s.rr, s.mrr, s.recall[10], s.answered) == (0.0, 0.0, 0.0, 0.0, False)


def test_duplicates_after_mapping_take_one_place():
    # two pods of cart both map to cart: the second adds nothing, so pay moves up to position 2
    s = score_case(["cart-1", "cart-2", "pay-2"], ["pay"], INV, SERVICE)
    assert s.rr == 0.5 and s.mrr == 0.5 and s.recall[1] == 0.0 and s.recall[3] == 1.0


def test_only_the_first_five_count_for_rr_but_recall_reads_ten():
    answers = ["cart-db", "cart", "x1", "x2", "x3", "pay"]    # unknown names still take a place
    s = score_case(answers, ["pay"], INV, SERVICE)
    assert s.rr == 0.0 and s.recall[5] == 0.0 and s.recall[10] == 1.0 and s.mrr == pytest.approx(1 / 6)


def test_random_guess_rate_is_exact():
    # services labelled: cart, cart-1, cart-2 all hit 'cart' (3 of 8 entities)
    assert score_case([], ["cart"], INV, SERVICE).random_pr1 == pytest.approx(3 / 8)
    # pods labelled: only the pod itself hits
    assert score_case([], ["cart-1"], INV, POD).random_pr1 == pytest.approx(1 / 8)


def test_real_pod_label_through_the_inventory(contacts_job, labels):
    label = labels[contacts_job.id]
    truth = [rc["entity"] for rc in label["root_causes"]]
    inv = Inventory.from_job(contacts_job)
    service = label["root_causes"][0]["service"]
    assert score_case([truth[0]], truth, inv, POD).pr1 == 1.0
    assert score_case([service], truth, inv, POD).pr1 == 0.0          # TrainTicket labels pods
    assert score_case([service, truth[0]], truth, inv, POD).pr1 == 1.0  # the service drops out
    pods = [e for e, ent in contacts_job.entities.items() if ent.kind == "pod"]
    assert score_case([], truth, inv, POD).random_pr1 == pytest.approx(1 / len(contacts_job.entities))
    assert len(pods) > 10
