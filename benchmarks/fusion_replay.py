"""Replay the fusion of stored agent runs with other weights of the model's vote (nothing re-run).

    python benchmarks/fusion_replay.py react.jsonl overview.jsonl --work ~/.cache/rcagent/work

Each run keeps `model_root_causes` (the model's picks, best first); the overview's results hold the
evidence ranking with its scores. `rcagent.fusion.fuse` is applied to both with each vote in VOTES and the
fused ranking scored against the labels: what the model's vote would have given, from the same runs.
A vote of 0 is the ranking alone. Then the vote is chosen leave-one-system-out, as `rcagent bench ranking`
chooses the ranking's weights: for each system, the vote with the best mean PR@1 on the other systems'
runs, each other system one vote (ties to the smaller vote: the model's say must earn its place), scores the
held-out system's runs. The last column is the vote 0.5 (rcagent.fusion.MODEL_VOTE) that react used before
the `model_vote` setting took its default from this choice.
"""
from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from rcagent import fusion
from rcagent.batch import read_results
from rcagent.config import Settings
from rcagent.eval.labels import load_label
from rcagent.eval.rankbench import _groups
from rcagent.eval.scoring import Inventory, level, score_case
from rcagent.job import Job

VOTES = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)


def replay(runs_path: Path, overview_path: Path, work: Path) -> list[tuple[str, dict[float, float]]]:
    """[(job, {vote: PR@1 of the fused ranking})] for every stored run with an overview result."""
    evidence = {row["job"]: [(rc["entity"], rc["score"]) for rc in row["root_causes"]]
                for row in read_results(overview_path)}
    out = []
    for row in read_results(runs_path):
        if row["job"] not in evidence:
            continue
        label = load_label(work / "labels", row["job"])
        job = Job.load(work / "jobs" / row["job"])
        inventory = Inventory.from_job(job)
        job.con.close()
        truth = [rc["entity"] for rc in label["root_causes"]]
        levels = {rc.get("level") or level(inventory.kinds.get(rc["entity"])) for rc in label["root_causes"]}
        picks = row.get("model_root_causes") or []
        out.append((row["job"], {vote: score_case([e for e, _ in fusion.fuse(picks, evidence[row["job"]], vote=vote)],
                                                  truth, inventory, levels).pr1 for vote in VOTES}))
    return out


def leave_one_out(scored: list[tuple[str, dict[float, float]]], group_of: dict[str, str]) -> list[tuple]:
    """[(group, runs, vote chosen on the other groups, its PR@1 held out, the ranking alone, the default)]
    and a last row for all runs, each scored with its own group's choice."""
    by_group: dict[str, list[dict[float, float]]] = defaultdict(list)
    for job, pr1 in scored:
        by_group[group_of.get(job, "?")].append(pr1)
    rows, held = [], []
    for group, runs in sorted(by_group.items()):
        train = [rs for g, rs in by_group.items() if g != group]
        vote = max(VOTES, key=lambda v: (round(statistics.fmean(statistics.fmean(r[v] for r in rs) for rs in train), 9)
                                         if train else 0.0, -v))
        held += [(r, vote) for r in runs]
        rows.append((group, len(runs), vote, *(statistics.fmean(r[v] for r in runs) for v in (vote, 0.0,
                                                                                              fusion.MODEL_VOTE))))
    if held:
        rows.append(("all", len(held), None, statistics.fmean(r[v] for r, v in held),
                     *(statistics.fmean(r[v] for r, _ in held) for v in (0.0, fusion.MODEL_VOTE))))
    return rows


def main(runs_path: Path, overview_path: Path, work: Path) -> None:
    scored = replay(runs_path, overview_path, work)
    print(f"{len(scored)} runs; fused PR@1 by the model's vote (0 = the ranking alone):")
    for vote in VOTES:
        default = "  (the model_vote setting's default)" if vote == Settings().model_vote else ""
        print(f"  {vote:<5} {100 * statistics.fmean(r[vote] for _, r in scored) if scored else 0.0:5.1f}{default}")
    labels = {p.stem: load_label(work / "labels", p.stem) for p in (work / "labels").glob("*.yaml")}
    print("\nThe vote chosen leave-one-system-out (PR@1 in %):")
    print(f"| held out | runs | vote chosen on the others | fused PR@1 | ranking alone | vote {fusion.MODEL_VOTE} |")
    print("|---|---|---|---|---|---|")
    for group, runs, vote, chosen, alone, default in leave_one_out(scored, _groups(labels)):
        print(f"| {group} | {runs} | {'per group' if vote is None else f'{vote:g}'} | {100 * chosen:.1f} "
              f"| {100 * alone:.1f} | {100 * default:.1f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("overview", type=Path)
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache/rcagent/work")
    args = parser.parse_args()
    main(args.runs, args.overview, args.work)
