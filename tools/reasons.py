"""What a signal's reason says about its entity: whether the entity serves worse, whether on its own account
(not by something the ranking already explains: another entity, or the period before the onset), and
whether it is a client-side view of the entity's dependencies. The notes that mark an explained signal are
defined once, where they are written (metric_signals and PREEXISTING here), and read back from there."""
from __future__ import annotations

import re

from rcagent.tools.metric_signals import LESS_LOAD, OWN_TIME_SAME, QUALITY, WAITING, higher_is_better

PREEXISTING = " (already so before the onset at {:%H:%M:%S})"
# the notes of a signal that another entity explains, and of one that also the period before the onset showed
# (without what they fill in)
EXPLAINED_BY_OTHERS = tuple(note.split("{")[0].strip() for note in (WAITING, OWN_TIME_SAME, LESS_LOAD))
EXPLAINED = EXPLAINED_BY_OTHERS + (PREEXISTING.split("{")[0].strip(),)


def worse_service(reason: str, source: str) -> bool:
    """A signal that says the entity serves worse: call, log and change signals (a change signal exists only
    with a degradation after the change), and quality metrics (success rates down; error rates, latency up),
    not resource metrics."""
    if source in ("calls", "logs", "changes"):
        return True
    if source != "metrics" or not QUALITY.search(reason):
        return False
    return (" down " in reason) == higher_is_better(reason)


def own_worse(reason: str, source: str, explained: tuple[str, ...] = EXPLAINED) -> bool:
    """A signal that the entity serves worse on its own account: not one the ranking already explains by
    something else (a callee it waits on or fails by, its own time that did not grow, a state it was in
    before the onset, less load that most of its kind shared)."""
    return worse_service(reason, source) and not any(note in reason for note in explained)


def client_side(reason: str, source: str) -> bool:
    """A metric signal of a client-side measurement (what the entity saw of its dependencies)."""
    metric = re.match(r"(.*?) (up|down) [0-9]", reason)
    return source == "metrics" and metric is not None and "client" in metric.group(1).lower()
