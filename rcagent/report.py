"""Render a diagnosis or a stored run as text, JSON or Markdown."""
from __future__ import annotations

import json

from rcagent.diagnosis import Diagnosis


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
    lines.append(f"({figures}; {data['backend']} / {data['model']})")
    return "\n".join(lines)


def render_steps(run: dict, steps: list[dict], fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps({"run": run, "steps": steps}, indent=2, default=str)
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
    if run.get("diagnosis"):
        out.append("\n" + render(json.loads(run["diagnosis"]), "md" if fmt == "md" else "text"))
    return "\n".join(out)
