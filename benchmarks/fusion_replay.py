"""Replay the fusion of stored agent runs with other weights of the model's vote (nothing re-run).

    python benchmarks/fusion_replay.py react.jsonl overview.jsonl --work ~/.cache/rcagent/work

Each run keeps `model_root_causes` (the model's picks, best first); the overview's results hold the
evidence ranking with its scores. `rcagent.fusion.fuse` is applied to both with each vote in VOTES and the
fused ranking scored against the labels: what the model's vote would have given, from the same runs.
A vote of 0 is the ranking alone.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rcagent import fusion
from rcagent.batch import read_results
from rcagent.eval.labels import load_label
from rcagent.eval.scoring import Inventory, level, score_case
from rcagent.job import Job

VOTES = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)


def main(runs_path: Path, overview_path: Path, work: Path) -> None:
    evidence = {row["job"]: [(rc["entity"], rc["score"]) for rc in row["root_causes"]]
                for row in read_results(overview_path)}
    runs = [row for row in read_results(runs_path) if row["job"] in evidence]
    total = dict.fromkeys(VOTES, 0.0)
    for row in runs:
        label = load_label(work / "labels", row["job"])
        job = Job.load(work / "jobs" / row["job"])
        inventory = Inventory.from_job(job)
        job.con.close()
        truth = [rc["entity"] for rc in label["root_causes"]]
        levels = {rc.get("level") or level(inventory.kinds.get(rc["entity"])) for rc in label["root_causes"]}
        picks = row.get("model_root_causes") or []
        for vote in VOTES:
            fused = [e for e, _ in fusion.fuse(picks, evidence[row["job"]], vote=vote)]
            total[vote] += score_case(fused, truth, inventory, levels).pr1
    print(f"{len(runs)} runs; fused PR@1 by the model's vote (0 = the ranking alone):")
    for vote, hits in total.items():
        default = "  (the default)" if vote == fusion.MODEL_VOTE else ""
        print(f"  {vote:<5} {100 * hits / max(len(runs), 1):5.1f}{default}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("overview", type=Path)
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache/rcagent/work")
    args = parser.parse_args()
    main(args.runs, args.overview, args.work)
