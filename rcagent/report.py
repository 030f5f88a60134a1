"""Render a diagnosis or a stored run as text, JSON or Markdown."""
from __future__ import annotations

import json

from rcagent.consistency import render as render_consistency, render_samples
from rcagent.diagnosis import Diagnosis


def span_lines(span: dict) -> list[str]:
    """Span mode: the request, the agents, the path to the root cause and where the picture is."""
    if not span:
        return []
    nodes = {n["id"]: n for n in span.get("graph", {}).get("nodes", [])}
    path = " -> ".join(f"{nodes[i]['label']} {nodes[i]['service']}" if i in nodes else i for i in span["path"])
    lines = [f"Span mode: {span['spans']} span agents ({span['abnormal']} found their span abnormal), at most "
             f"{span['max_active']} at once (pool {span['pool']}); request: {span['request']}",
             f"Path from the entry span to the root cause: {path}"]
    if span.get("picture"):
        lines.append(f"Evidence graph: {span['picture']}")
    return lines


def render(d: Diagnosis | dict, fmt: str = "text") -> str:
    data = d.to_dict() if isinstance(d, Diagnosis) else d
    if fmt == "json":
        return json.dumps(data, indent=2)
    causes = data.get("root_causes") or []
    status = "finalized by the agent" if data.get("finalized") else f"best effort ({data.get('note') or 'not finalized'})"
    repaired = f", {data['repaired_steps']} repaired" if data.get("repaired_steps") else ""
    figures = (f"{data['steps']} steps ({data['invalid_steps']} invalid{repaired}), {data['llm_calls']} model calls, "
               f"{data['prompt_tokens']}+{data['completion_tokens']} tokens, {data['wall_s']:.1f} s")
    picks = data.get("model_root_causes") or []
    named = (f"The model named {', '.join(picks)}; the ranking adds the overview's evidence."
             if picks and picks != [c["entity"] for c in causes] else "")
    if fmt == "md":
        lines = [f"# Diagnosis of {data['job']}", "", f"Run `{data['run_id']}` — {status}.", "",
                 "| rank | entity | kind | score |", "|---|---|---|---|"]
        lines += [f"| {i + 1} | {c['entity']} | {c['kind']} | {c['score']} |" for i, c in enumerate(causes)]
        if named:
            lines += ["", named]
        written = [f"_{data['note']}._", ""] if data.get("finalized") and data.get("note") else []
        lines += ["", f"**Root cause.** {data['root_cause']}", "", f"**Solution.** {data['solution']}", "", *written,
                  f"**Responsibility.** {data['responsibility']}", "", "**Evidence.**"]
        lines += [f"- {e}" for e in data.get("evidence") or []] or ["- none cited"]
        lines += ["", *[f"_{x}_  " for x in span_lines(data.get("span") or {})]] if data.get("span") else []
        consistency = render_consistency(data.get("consistency") or {})
        if consistency:
            lines += ["", f"**{consistency[0]}**", ""] + [f"- {c.strip()}" for c in consistency[1:]]
        lines += ["", f"_{figures}; {data['backend']} / {data['model']}_"]
        return "\n".join(lines)
    lines = [f"Diagnosis of {data['job']} (run {data['run_id']}, {status})", "Root causes, best first:"]
    lines += [f"  {i + 1}. {c['entity']} ({c['kind']}, score {c['score']})" for i, c in enumerate(causes)]
    if named:
        lines.append(f"  ({named})")
    lines += [f"Root cause: {data['root_cause']}", f"Solution: {data['solution']}"]
    if data.get("finalized") and data.get("note"):
        lines.append(f"({data['note']})")
    lines += [f"Responsibility: {data['responsibility']}", "Evidence:"]
    lines += [f"  - {e}" for e in data.get("evidence") or []] or ["  - none cited"]
    lines += render_consistency(data.get("consistency") or {})
    lines += span_lines(data.get("span") or {})
    lines.append(f"({figures}; {data['backend']} / {data['model']})")
    return "\n".join(lines)


def render_steps(run: dict, steps: list[dict], fmt: str = "text", samples: list[dict] | None = None,
                 agents: list[dict] | None = None) -> str:
    if fmt == "json":
        return json.dumps({"run": run, "steps": steps, "samples": samples or [], "span_agents": agents or []},
                          indent=2, default=str)
    out = [f"Run {run['id']} on {run['job']} ({run['backend']} / {run['model']}): {run['status']}, "
           f"started {run['started']}"]
    for s in steps:
        mark = "" if s["valid"] else f" INVALID ({s.get('handler') or 'rejected'})"
        out.append(f"\n--- step {s['step']}{mark}: {s['action']} {s['arguments'] or ''}")
        if s.get("thought"):
            out.append(f"thought: {s['thought']}")
        if s.get("repairs"):
            rounds = json.loads(s["repairs"])
            out.append("repair: " + ", ".join(f"{r['method']} {'ok' if r['ok'] else 'failed'}" for r in rounds))
        if s.get("error"):
            out.append(f"error: {s['error']}\nraw: {(s.get('raw') or '')[:300]}")
        if s.get("observation"):
            out.append(s["observation"])
        out.append(f"({s.get('prompt_tokens') or 0}+{s.get('completion_tokens') or 0} tokens, "
                   f"model {s.get('model_ms') or 0:.0f} ms, tool {s.get('tool_ms') or 0:.0f} ms)")
    for a in agents or []:
        o = json.loads(a["output"])
        if a["phase"] == "self_state":
            out.append(f"\n--- {o['label']} {o['service']} {o['operation']} ({o['duration_ms']} ms): "
                       f"{'ABNORMAL' if o['abnormal'] else 'normal'} ({o['from']})\n{o['key_symptoms']}\n{o['hypothesis']}")
        else:
            out.append(f"{o['label']} concludes: root cause {o['root_cause']}"
                       + (f" (confidence {o['confidence']})" if o.get("confidence") is not None else "")
                       + (f": {o['reason']}" if o.get("reason") else ""))
    if samples:
        out.append(f"\n--- {len(samples)} finalizations sampled from step {steps[-1]['step'] if steps else '?'}'s prefix")
        out += render_samples(samples)
    if run.get("diagnosis"):
        out.append("\n" + render(json.loads(run["diagnosis"]), "md" if fmt == "md" else "text"))
    return "\n".join(out)
