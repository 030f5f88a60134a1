"""One-shot harness (RCAtlas §5): the whole case as one evidence package, one model call, ranked candidates.

The package (harnesses.evidence) is sized to the setting `oneshot_tokens` and stored as the run's snapshot
S1, so `rcagent show RUN --snapshot S1` prints exactly what the model saw. The answer is constrained to a
JSON schema whose candidates are the inventory; JsonRegen's repair reads an unconstrained answer. The
model's picks are kept apart (`model_root_causes`) and fused with the evidence ranking like any finalize;
an answer with no usable pick gives the best-effort diagnosis, and the note says so.
"""
from __future__ import annotations

import threading
import time

from rcagent import conclusion, prompts
from rcagent.diagnosis import Diagnosis
from rcagent.errors import FormatError, TimeLimit
from rcagent.harnesses import evidence
from rcagent.serving.counted import CountedModel
from rcagent.stabilizers.jsonregen import repaired

ANALYSIS_MAX, SOLUTION_MAX, PICKS = 400, 300, 5


def answer_schema(entities: list[str]) -> dict:
    return {"type": "object", "properties": {
        "analysis": {"type": "string", "minLength": 1, "maxLength": ANALYSIS_MAX},
        "root_causes": {"type": "array", "items": {"enum": entities}, "minItems": 1, "maxItems": PICKS},
        "solution": {"type": "string", "minLength": 1, "maxLength": SOLUTION_MAX}},
        "required": ["analysis", "root_causes", "solution"], "additionalProperties": False}


def picks(job, data) -> list[str]:
    return conclusion.inventory_names(job, data.get("root_causes") if isinstance(data, dict) else None, PICKS)


def analyze(job, backend, store, settings, deadline: float | None = None,
            cancel: threading.Event | None = None) -> Diagnosis:
    start = time.perf_counter()
    model = CountedModel(backend, store, settings)
    with store.run(job, backend, {"mode": "oneshot", "oneshot_tokens": settings.oneshot_tokens,
                                  "constrain": settings.constrain, "ranking": settings.ranking,
                                  "seed": settings.seed, "temperature": settings.temperature},
                   mode="oneshot") as run:
        package = evidence.build(job, settings.oneshot_tokens)
        key = store.put_snapshot(run.id, 0, "evidence_package", package.text)
        if cancel is not None and cancel.is_set():
            raise KeyboardInterrupt
        if deadline is not None and time.monotonic() > deadline:
            raise TimeLimit("the time limit ran out before the model call")
        messages = [{"role": "system", "content": prompts.render("oneshot_system")},
                    {"role": "user", "content": prompts.render("oneshot_task", job_id=job.id,
                                                               package=prompts.data(package.text))}]
        schema = answer_schema(sorted(job.entities)) if settings.constrain else None
        tool_start = time.perf_counter()
        completion = model.query(messages, schema)
        try:
            data = repaired(completion.text)
            error = None if picks(job, data) else "the answer names no inventory entity"
        except FormatError as exc:
            data, error = {}, str(exc)
        chosen = picks(job, data) if not error else []
        store.add_step(run.id, 1, thought=str(data.get("analysis", ""))[:ANALYSIS_MAX] if isinstance(data, dict) else None,
                       action="answer", arguments=data if isinstance(data, dict) else None, valid=int(not error),
                       error=error, raw=completion.text, prompt_tokens=completion.prompt_tokens,
                       completion_tokens=completion.completion_tokens, model_ms=completion.latency_ms,
                       tool_ms=(time.perf_counter() - tool_start) * 1000, observation=f"(evidence package {key})",
                       snapshot=key)
        if chosen:
            d = conclusion.conclude(job, run.id, chosen, {"root_cause": data.get("analysis"),
                                                          "solution": data.get("solution")}, settings.ranking,
                                    settings.model_vote)
        else:
            d = conclusion.best_effort(job, run.id, [], f"the one-shot answer was not usable ({error})")
        d.mode, d.steps, d.invalid_steps = "oneshot", 1, int(bool(error))
        model.fill(d, time.perf_counter() - start)
        if package.cut:
            cut = ", ".join(f"{n} lines of {s}" for s, n in package.cut.items())
            d.note = "; ".join(filter(None, [d.note, f"evidence package cut to {package.budget} tokens ({cut})"]))
        run.status, run.diagnosis = ("finalized" if d.finalized else "step_limit"), d.to_dict()
    return d
