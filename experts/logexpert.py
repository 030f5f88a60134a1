"""log_expert(entity): an LLM expert reads the entity's log clusters and reports findings that cite real lines.

As in RCAgent §3.2.2: the clusters (logcluster.py) are the chunks; the ones shown to the model are chosen by
how much they changed, then by similarity to the alert, within a character budget (retrieval over the
chunks). The expert thinks step by step (zero-shot chain of thought), then a second call extracts the
findings as JSON, each citing the ids of real lines shown in the chunks ([L1], [L2], ...) or lines
copied from them. Every evidence line is checked against
the real log lines of the entity: a line that matches none (fuzzy ratio below MATCH) is dropped, and a
finding left without evidence is discarded. Under a grammar (local backend, vLLM) the evidence is an
enumeration of the shown lines' ids, so the check matters most for backends without one. The count of discarded findings goes on the step. The full
clustering follows the findings in the observation, so the controller stores it behind a snapshot key.
"""
from __future__ import annotations

from rapidfuzz import fuzz, process

from rcagent import prompts
from rcagent.experts import ExpertContext
from rcagent.experts.logcluster import Cluster, clean, cluster_logs, render_clusters
from rcagent.job import Job
from rcagent.tools import entity_param, has_rows, register
from rcagent.tools.common import one_of
from rcagent.validate import unsurrogate

CHUNK_BUDGET = 2400       # characters of clusters shown to the expert
MATCH = 90                # rapidfuzz score an evidence line needs against a real line
MIN_EVIDENCE_CHARS = 20   # shorter "evidence" (a word, a level) proves nothing
THINK_TOKENS = 200
ANSWER_TOKENS = 300


def answer_schema(ids: list[str]) -> dict:
    """Findings as JSON. Evidence comes first and, under a grammar, is the id of a real line shown, so even
    a small model cites real lines; the finding follows (a cut-off finding still leaves the evidence)."""
    evidence = {"type": "string", "enum": ids} if ids else {"type": "string"}
    return {
        "type": "object",
        "properties": {"findings": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
            "type": "object",
            "properties": {"evidence": {"type": "array", "minItems": 1, "maxItems": 2, "items": evidence},
                           "finding": {"type": "string"}},
            "required": ["evidence", "finding"]}}},
        "required": ["findings"],
    }


def degenerate(text: str) -> bool:
    """Output with no reasoning in it: one phrase repeated (it compresses to almost nothing) or mostly
    digits and dots ("1. 2. 3. ...", what SmolLM2 writes when asked to think step by step)."""
    import zlib
    data = text.encode()
    if len(data) < 100:
        return False
    letters = sum(ch.isalpha() for ch in text) / len(text)
    return len(zlib.compress(data)) / len(data) < 0.25 or letters < 0.3


def choose_chunks(clusters: list[Cluster], alert: str, budget: int = CHUNK_BUDGET) -> list[str]:
    """Rendered clusters in order of change (ties by similarity to the alert), as many as fit the budget."""
    scored = [(c.score, fuzz.token_set_ratio(alert, " ".join(c.templates[:3])), i, c) for i, c in enumerate(clusters)]
    chunks, used = [], 0
    for _, _, i, c in sorted(scored, key=lambda s: (-s[0], -s[1], s[2])):
        text = render_clusters([c]).replace("cluster 1 ", f"cluster {i + 1} ", 1)
        if used + len(text) > budget and chunks:
            break
        chunks.append(text[:budget])
        used += len(text)
    return chunks


def number_lines(chunks: list[str]) -> tuple[list[str], dict[str, str]]:
    """Give each real line shown an id ([L1], [L2], ...): the expert cites ids, which a grammar can
    enumerate cheaply (an enumeration of whole log lines made llama.cpp's sampling 100x slower)."""
    ids: dict[str, str] = {}
    out = []
    for chunk in chunks:
        lines = []
        for line in chunk.splitlines():
            if line.startswith("  line: "):
                key = f"L{len(ids) + 1}"
                ids[key] = line.removeprefix("  line: ")
                line = f"  [{key}] {ids[key]}"
            lines.append(line)
        out.append("\n".join(lines))
    return out, ids


def real_lines(job: Job, entity: str) -> list[str]:
    members = job.members(job.entities[entity])
    rows = job.query(f"""SELECT DISTINCT message FROM logs WHERE {one_of('entity', 'members')}
                         AND ({job.in_window()} OR {job.in_baseline('logs')}) LIMIT 50000""", {"members": members})
    return [line for (m,) in rows if (line := clean(m))]


def verify(findings: list[dict], lines: list[str]) -> tuple[list[dict], int]:
    """Keep the findings with at least one evidence line that matches a real line (replaced by that line)."""
    kept, discarded = [], 0
    for f in findings:
        evidence = []
        for ev in f.get("evidence") or []:
            ev = clean(str(ev)).removeprefix("line:").strip()
            if len(ev) < MIN_EVIDENCE_CHARS or not lines:
                continue
            match = process.extractOne(ev, lines, scorer=fuzz.ratio, score_cutoff=MATCH) or \
                process.extractOne(ev, lines, scorer=fuzz.partial_ratio, score_cutoff=MATCH + 5)
            if match and match[0] not in evidence:
                evidence.append(match[0])
        if evidence and str(f.get("finding") or "").strip():
            kept.append({"finding": str(f["finding"]).strip(), "evidence": evidence})
        else:
            discarded += 1
    return kept, discarded


@register("log_expert", "An expert reads the entity's log clusters (similar lines grouped, compared with the "
          "baseline) and reports findings, each citing real log lines", entity_param(), expert=True,
          available=has_rows("logs"))
def log_expert(job: Job, entity: str, ctx: ExpertContext) -> str:
    import json

    from json_repair import repair_json

    clusters = cluster_logs(job, entity)
    if not clusters:
        ctx.report(clusters=0, kept=0, discarded=0)
        return f"Log expert on {entity}: no log lines of it in the window or the baseline."
    chunks, ids = number_lines(choose_chunks(clusters, job.alert))
    messages = [{"role": "user", "content": prompts.render("log_expert_think", alert=job.alert, entity=entity,
                                                           chunks=prompts.data("\n\n".join(chunks)))}]
    thought = ctx.ask(messages, None, THINK_TOKENS)
    if not degenerate(thought):    # a looping "thought" would only mislead the extraction
        messages += [{"role": "assistant", "content": thought}]
    messages += [{"role": "user", "content": prompts.render("log_expert_answer")}]
    answer = ctx.ask(messages, answer_schema(list(ids)), ANSWER_TOKENS)
    try:
        data = unsurrogate(json.loads(repair_json(answer)))
        findings = data.get("findings") if isinstance(data, dict) else []
    except (ValueError, TypeError, RecursionError):
        findings = []
    for f in findings or []:       # a cited id stands for its line; anything else is checked as written
        if isinstance(f, dict) and isinstance(f.get("evidence"), list):
            f["evidence"] = [ids.get(str(e).strip(" []"), e) for e in f["evidence"]]
    kept, discarded = verify([f for f in findings or [] if isinstance(f, dict)], real_lines(job, entity))
    ctx.report(clusters=len(clusters), kept=len(kept), discarded=discarded)
    new = sum(c.new for c in clusters)
    head = (f"Log expert on {entity}: {len(clusters)} log clusters ({new} new in the window); "
            f"{len(kept)} finding(s) with evidence matching real log lines"
            + (f", {discarded} discarded (evidence matched no real line)" if discarded else "") + ".")
    body = [f"{i}. {f['finding']}\n" + "\n".join(f"   evidence: {e[:300]}" for e in f["evidence"])
            for i, f in enumerate(kept, 1)]
    if not kept:
        body = ["No finding with real evidence; the most changed clusters are listed below."]
    return "\n".join([head, *body, "", "Clusters (most changed first):", render_clusters(clusters)])
