"""The LLM judge (RCAgent §4.1: G-Correctness and G-Helpfulness): a local model grades each diagnosis's root
cause and solution against the reference texts on 0-10, through a JSON schema. Prompts live in prompts/.
"""
from __future__ import annotations

import json
from typing import Callable

from json_repair import repair_json

from rcagent import prompts
from rcagent.errors import BackendError
from rcagent.validate import unsurrogate

SCHEMA = {
    "type": "object",
    # scores first: a grammar keeps this order, so a reason cut by max_tokens still leaves both scores
    "properties": {"correctness": {"type": "integer", "minimum": 0, "maximum": 10},
                   "helpfulness": {"type": "integer", "minimum": 0, "maximum": 10},
                   "reason": {"type": "string"}},
    "required": ["correctness", "helpfulness", "reason"],
}


def parse_grade(text: str) -> dict | None:
    """{'correctness', 'helpfulness', 'reason'} from the judge's answer, or None if it gave no usable grade."""
    try:
        data = unsurrogate(json.loads(repair_json(text)))
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    grade = {}
    for key in ("correctness", "helpfulness"):
        try:
            grade[key] = max(0, min(10, int(float(data[key]))))
        except (KeyError, TypeError, ValueError):
            return None
    grade["reason"] = str(data.get("reason") or "")
    return grade


def judge_case(backend, case: dict) -> dict | None:
    messages = [
        {"role": "system", "content": prompts.render("judge_system")},
        {"role": "user", "content": prompts.render(
            "judge", ref_root_cause=case["ref_root_cause"],
            ref_solution=case["ref_solution"] or "(none)", entities=", ".join(case["answer"]) or "(none)",
            root_cause=case["root_cause"] or "(none)", solution=case["solution"] or "(none)")},
    ]
    completion = backend.complete(messages, schema=SCHEMA, n=1, temperature=0.0, max_tokens=200)[0]
    return parse_grade(completion.text)


def add_judge_scores(cases: list[dict], backend, progress: Callable[[int, int], None] = lambda i, n: None) -> list[str]:
    """Add judge_correctness, judge_helpfulness and judge_reason to each case; returns notes."""
    failed = 0
    for i, case in enumerate(cases, 1):
        try:
            grade = judge_case(backend, case)
        except BackendError as exc:
            raise BackendError(f"the judge failed on {case['job']}: {exc}") from None
        if grade is None:
            failed += 1
        else:
            case.update(judge_correctness=grade["correctness"], judge_helpfulness=grade["helpfulness"],
                        judge_reason=grade["reason"])
        progress(i, len(cases))
    notes = [f"judge: {backend.name}/{backend.model}"]
    if failed:
        notes.append(f"the judge gave no usable grade for {failed} of {len(cases)} cases (left out of its means)")
    return notes


def separation(cases: list[dict]) -> dict:
    """How well the correctness grade separates right answers (PR@1 = 1 by the label) from wrong ones: the
    mean grade of each, and the AUC (the chance that a right case is graded above a wrong one; ties count
    half; 0.5 is a judge that cannot tell them apart)."""
    graded = [c for c in cases if c.get("judge_correctness") is not None]
    right = [c["judge_correctness"] for c in graded if c["pr1"] == 1]
    wrong = [c["judge_correctness"] for c in graded if c["pr1"] != 1]
    pairs = [(r > w) + 0.5 * (r == w) for r in right for w in wrong]
    return {"right": len(right), "wrong": len(wrong),
            "right_mean": round(sum(right) / len(right), 2) if right else None,
            "wrong_mean": round(sum(wrong) / len(wrong), 2) if wrong else None,
            "auc": round(sum(pairs) / len(pairs), 3) if pairs else None}


def separation_notes(cases: list[dict]) -> list[str]:
    out = []
    for method in dict.fromkeys(c["method"] for c in cases):
        s = separation([c for c in cases if c["method"] == method])
        out.append(f"judge separation, {method}: correctness {s['right_mean']} on {s['right']} right answers, "
                   f"{s['wrong_mean']} on {s['wrong']} wrong ones; AUC {s['auc']} (0.5 = no separation)")
    return out
