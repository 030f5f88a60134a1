"""How often the overview's anomaly ranking alone puts the labelled root cause first / in the top 3 / top 5.

    python benchmarks/overview_ranking.py --jobs ~/.cache/rcagent/work

Answers are mapped up to services (a pod counts as its service) and deduplicated; a hit is the labelled
pod or its service. This is the ranking the agent starts from (the prompt's primer), not the agent's
answer; the evaluation proper (PR@1, RR, baselines) is `rcagent eval` (a later issue).
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import yaml

from rcagent.job import Job
from rcagent.tools.overview import ranking


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", required=True, help="an import DEST (holding jobs/ and labels/)")
    root = Path(ap.parse_args().jobs).expanduser()
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for label_file in sorted((root / "labels").glob("*.yaml")):
        label = yaml.safe_load(label_file.read_text())
        job = Job.load(root / "jobs" / label_file.stem)
        truth = {rc["entity"] for rc in label["root_causes"]} | {rc["service"] for rc in label["root_causes"]}
        services: list[str] = []
        for name, _, _ in ranking(job):
            ent = job.entities[name]
            svc = ent.service if ent.kind == "pod" and ent.service else name
            if svc not in services:
                services.append(svc)
        row = table[label["system"]]
        row[0] += 1
        for i, k in enumerate((1, 3, 5), start=1):
            row[i] += any(s in truth for s in services[:k])
    print("| system | cases | top-1 | top-3 | top-5 |\n|---|---|---|---|---|")
    for system, (n, a, b, c) in sorted(table.items()):
        print(f"| {system} | {n} | {a} | {b} | {c} |")


if __name__ == "__main__":
    main()
