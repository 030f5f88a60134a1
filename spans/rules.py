"""A deterministic stand-in for the model in span mode, for tests and the speed-up benchmark (with
serving.scripted.RuleBackend): span agents call it from many threads, where a queue's order would race."""
from __future__ import annotations


def span_rules(pick: str | None = None):
    """Self-state: abnormal when the span's metrics moved (the metric tool found a value beyond n sd).
    Consolidation: the first child whose conclusion does not defer, else "self". Synthesis: the first
    two choices that contain `pick`, else the first two."""
    def answer(messages, schema):
        prompt, props = messages[0]["content"], schema["properties"]
        if "abnormal" in props:
            moved = "beyond" in prompt
            return {"abnormal": moved, "key_symptoms": "metrics moved" if moved else "nothing moved",
                    "hypothesis": "a fault in this service" if moved else "normal"}
        if "confidence" in props:
            children = props["root_cause"]["enum"][:-2]
            live = [c for c in children if "root cause defer" not in prompt.split(f"- {c} (")[-1].split("\n")[0]]
            return {"root_cause": live[0] if live else "self", "reason": "it is slow", "confidence": 0.8}
        choices = props["root_causes"]["items"]["enum"]
        named = [c for c in choices if pick and pick in c]
        return {"root_causes": (named or choices)[:2], "reason": "The slowest service on the path is at fault."}
    return answer
