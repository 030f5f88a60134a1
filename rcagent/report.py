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


def graph_lines(graph: dict) -> list[str]:
    """Graph mode: where the walk started, what it visited, how it ended, and where the picture is."""
    if not graph:
        return []
    walk = graph["walk"]
    linked = graph.get("logs_linked") or {}
    lines = [f"Graph mode: {graph['nodes']} nodes, {graph['call_edges']} call edges"
             f" ({'from traces' if graph.get('traced') else 'from relations'}); walk from {graph['start']} "
             f"({graph['start_why']}): {' -> '.join(walk['visited'])}; ended: {walk['ended']}",
             "Error log lines linked to calls: " + (", ".join(f"{k.replace('_', ' ')} {v}" for k, v in linked.items()
                                                             if k != "similarity" and v) or "none in the window")
             + (f" (similarity: {linked['similarity']})" if linked.get("similarity") else "")]
    if graph.get("challenged"):
        lines.append(f"Diagnoser verdicts that contradicted the graph: {graph['challenged']} asked again, "
                     f"{graph.get('overruled', 0)} overruled by the evidence")
    for e in walk["events"]:
        if e["kind"] == "verify":
            checks = ", ".join(f"{k} {c['score']:.2f}" for k, c in e["detail"]["checks"].items())
            lines.append(f"Verifier on {e['node']}: Vscore {e['detail']['score']:.2f} ({checks}), "
                         + ("passed" if e["detail"]["passed"] else f"refuted: {e['detail']['critique']}"))
    if graph.get("picture"):
        lines.append(f"Graph and walk: {graph['picture']}")
    return lines


def walk_lines(events: list[dict]) -> list[str]:
    """Every event of a graph-mode walk, as stored."""
    out = []
    for e in events:
        d = json.loads(e["detail"]) if isinstance(e["detail"], str) else e["detail"]
        head = f"\n--- walk {e['seq'] + 1}: {e['kind']} {e['node']}"
        if e["kind"] == "visit":
            out.append(f"{head}{' (from ' + d['via'] + ')' if d.get('via') else ''}\n"
                       f"{d['state']}, confidence {d['confidence']:.2f} ({d['source']}): {d['reason']}")
        elif e["kind"] == "verify":
            out.append(f"{head}: Vscore {d['score']:.2f}, {'passed' if d['passed'] else 'refuted'}")
            out += [f"  {k}: {c['score']:.2f} (graph {c['graph']:.2f}, model {c['model']}) {c['why']}"
                    for k, c in d["checks"].items()]
            if not d["passed"]:
                out.append(f"  critique: {d['critique']}")
        elif e["kind"] == "move":
            out.append(f"{head} from {d['src']}, gradient {d['gradient']:.2f}"
                       + (f"; alternatives {', '.join(d['alternatives'])}" if d.get("alternatives") else ""))
        elif e["kind"] == "backtrack":
            out.append(f"{head} (branch point {d.get('branch')})")
        else:
            out.append(f"{head}: {d.get('why', '')}")
    return out


def render(d: Diagnosis | dict, fmt: str = "text") -> str:
    data = d.to_dict() if isinstance(d, Diagnosis) else d
    if fmt == "json":
        return json.dumps(data, indent=2)
    causes = data.get("root_causes") or []
    status = "finalized by the agent" if data.get("finalized") else f"best effort ({data.get('note') or 'not finalized'})"
    repaired = f", {data['repaired_steps']} repaired" if data.get("repaired_steps") else ""
    figures = (f"{data['steps']} steps ({data['invalid_steps']} invalid{repaired}), {data['llm_calls']} model calls, "
               f"{data['prompt_tokens']}+{data['completion_tokens']} tokens, {data['wall_s']:.1f} s")
    if data.get("redacted"):
        figures += "; redacted before the model: " + ", ".join(f"{n} {k}" for k, n in data["redacted"].items())
    picks = data.get("model_root_causes") or []
    named = (f"The model named {', '.join(picks)}; the ranking above fuses its picks with the evidence."
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
        lines += ["", "**How the job was read.**", *[f"- {w}" for w in data["warnings"]]] if data.get("warnings") else []
        lines += ["", *[f"_{x}_  " for x in span_lines(data.get("span") or {})]] if data.get("span") else []
        lines += ["", *[f"_{x}_  " for x in graph_lines(data.get("graph") or {})]] if data.get("graph") else []
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
    lines += graph_lines(data.get("graph") or {})
    lines.append(f"({figures}; {data['backend']} / {data['model']})")
    return "\n".join(lines)


def render_steps(run: dict, steps: list[dict], fmt: str = "text", samples: list[dict] | None = None,
                 agents: list[dict] | None = None, walk: list[dict] | None = None) -> str:
    if fmt == "json":
        return json.dumps({"run": run, "steps": steps, "samples": samples or [], "span_agents": agents or [],
                           "walk": walk or []}, indent=2, default=str)
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
    out += walk_lines(walk or [])
    if samples:
        out.append(f"\n--- {len(samples)} finalizations sampled from step {steps[-1]['step'] if steps else '?'}'s prefix")
        out += render_samples(samples)
    if run.get("diagnosis"):
        out.append("\n" + render(json.loads(run["diagnosis"]), "md" if fmt == "md" else "text"))
    return "\n".join(out)
