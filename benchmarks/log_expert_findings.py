"""The log expert's findings, with their cited lines, on the labelled root-cause service of each job.

    python benchmarks/log_expert_findings.py --jobs ~/.cache/rcagent/work --pattern 'tt-*' --out findings.jsonl

For each job, the expert (default local model) reads the log clusters of the labelled root cause's service;
the script records the clusters, the findings kept and discarded, and checks again that every kept
citation is a real log line of the job.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rcagent.config import Settings
from rcagent.controller import Controller
from rcagent.experts import ExpertCalls, expert_tools
from rcagent.job import Job
from rcagent.eval.labels import labels_dir, load_label
from rcagent.serving import make_backend
from rcagent.discovery import find_jobs
from rcagent.store import Store
from rcagent.experts.logexpert import real_lines
from rcagent.tools import run_tool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", required=True, type=Path)
    ap.add_argument("--pattern", default="tt-*")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--store", default="/tmp/rcagent-log-expert.db")
    args = ap.parse_args()
    settings = Settings(experts=True, store=args.store, cache=False)
    backend, store = make_backend(settings), Store(settings.store_path())
    tool = expert_tools()["log_expert"]
    jobs = [j for j in find_jobs(args.jobs.expanduser()) if j.match(args.pattern)]
    labels = labels_dir(jobs[0].parent)
    totals = {"jobs": 0, "kept": 0, "discarded": 0, "citations": 0, "citations_real": 0}
    with args.out.open("w") as out:
        for path in jobs:
            label = load_label(labels, path.name)
            if not label:
                continue
            job = Job.load(path)
            entity = label["root_causes"][0].get("service") or label["root_causes"][0]["entity"]
            controller = Controller(job, backend, store, settings)
            controller.run_id = store.start_run(job.id, str(path), backend.name, backend.model, {"experts": True},
                                                mode="log_expert")
            start = time.perf_counter()
            text = run_tool(tool, job, {"entity": entity}, ctx=ExpertCalls(controller.model, controller.trajectory.expert_figures))
            lines = set(real_lines(job, entity))
            cited = [line.removeprefix("   evidence: ") for line in text.splitlines() if line.startswith("   evidence: ")]
            figures = controller.trajectory.expert_figures
            row = {"job": job.id, "fault": label.get("fault_type"), "entity": entity, **figures,
                   "citations": len(cited), "citations_real": sum(c in lines or any(c in l for l in lines) for c in cited),
                   "wall_s": round(time.perf_counter() - start, 1), "observation": text.split("\nClusters")[0]}
            out.write(json.dumps(row) + "\n")
            for key in ("kept", "discarded", "citations", "citations_real"):
                totals[key] += row.get(key, 0)
            totals["jobs"] += 1
            print(f"{job.id} {entity:<28} clusters {figures.get('clusters', 0):>3}  kept {figures.get('kept', 0)}  "
                  f"discarded {figures.get('discarded', 0)}  {row['wall_s']} s", flush=True)
    print(json.dumps(totals))


if __name__ == "__main__":
    main()
