"""Text the harness writes from the evidence when the model's own text is not a usable sentence.

A 135M model often fills finalize's `root_cause`, `solution`, `evidence` and `responsibility` with an entity
name or the word "finalize". The diagnosis must still tell an operator what moved and where to look, so
those fields are then written from the overview's signals (of the top-ranked entity; for evidence, of the
top three), and the diagnosis says so in its note.
The solution follows the kind of signal (runbook-style), not the model.
"""
from __future__ import annotations

import re

MIN_WORDS = 4


# a word: letters of any script (inner hyphens and apostrophes allowed) between spaces, with punctuation
WORD = re.compile(r"[(\"']?[^\W\d_]+(?:['-][^\W\d_]+)*[)\"'.,;:!?]*")
# a small model's degenerate decoding: one character many times over ("19:02:00.000000000000011111111…")
RUN = re.compile(r"(.)\1{9,}")


def is_sentence(text: str, names: set[str], min_words: int = MIN_WORDS) -> bool:
    """At least min_words words of letters separated by spaces, no character repeated ten times in a row,
    and not just an entity name, an action or a copied placeholder (`<one sentence: ...>`, as a small model
    copies from a prompt's answer format). An identifier is not a word: `pet_service_failure_2023-04-18`
    reads as four words to a looser rule and is what SmolLM2 writes when it has nothing to say."""
    text = text or ""
    words = [w for w in text.split() if WORD.fullmatch(w)]
    placeholder = re.fullmatch(r"\s*<[^<>]*>\s*", text)
    return len(words) >= min_words and text.strip() not in names and not placeholder and not RUN.search(text)


def explanation(entity: str, kind: str, reasons: list[str]) -> str:
    if not reasons:
        return f"{entity} ({kind}) ranks first, but no signal moved far from the baseline."
    return f"{entity} ({kind}) moved most from its baseline: {'; '.join(reasons[:3])}."


# a change reason of the overview: "Deployment at 19:24:25 UTC …, then its service degraded" (or "then its caller
# … worsened")
CHANGE_THEN_WORSE = re.compile(r"^(.*?) at (\d\d:\d\d:\d\d) UTC\b.*, then its (service degraded|caller )")


def solution(entity: str, reasons: list[str]) -> str:
    change = next((m for m in map(CHANGE_THEN_WORSE.match, reasons) if m), None)
    if change:   # a change followed by the degradation: undo it first, find the defect after
        return (f"Roll back {entity}'s {change.group(1)} of {change.group(2)} UTC to its previous version, confirm "
                "its callers recover, then find the defect in the new version before rolling it out again.")
    text = " ".join(reasons).lower()
    if "incoming calls stopped" in text:   # an outage, not a log line that stopped (an exception before it)
        return (f"Check whether {entity} is running and reachable (crashed, scaled to zero, network policy); "
                "restore it, then confirm its callers recover.")
    if "error" in text:
        return (f"Read the new error logs of {entity}, roll back its latest change or configuration if the "
                "errors started with it, and redeploy.")
    if re.search(r"\blog line (stopped|fell)", text):
        return (f"Find the exception {entity}'s requests now hit before the log line that stopped (the code "
                "path just before it), roll back its latest change if it started with it, and redeploy.")
    if re.search(r"\bcpu\b", text):
        return f"Find the process using the CPU in {entity}, stop it, then raise the CPU limit or scale out."
    if re.search(r"\bmem|memory", text):
        return f"Find what holds the memory in {entity}, restart it, then raise the memory limit or fix the leak."
    if "latency" in text or "gap" in text:
        return (f"Inspect {entity}'s slow calls: its resource limits, network delay to it, and its own "
                "dependencies; remove the delay or scale it out.")
    return f"Inspect {entity}'s recent changes, resource limits and dependencies."
