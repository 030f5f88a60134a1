"""What a harmless rollout does to the ranking: a Deployment of a service that is not the root cause, shortly
before the window of a real incident that no change caused.

    python benchmarks/harmless_change.py --jobs ~/.cache/rcagent/work [--before 60] [--pattern 'tt-*']

Most rollouts are harmless, and an incident often follows one that is not its cause. For every labelled job
without events of its own, each service other than the root cause's in turn gets one Deployment event
BEFORE seconds before the window (in memory; the job's files are not touched) and the job is ranked again.
Per system: PR@1 without any change, the share of (job, service) rollouts after which the top answer is
still right (on the jobs that were right without one), and how many of those rollouts put the changed
service first. Jobs that come with events (ChangeRCA: harmless rollouts beside the defective one) are
measured by `rcagent bench ranking` already.
"""
from __future__ import annotations

import argparse
import datetime as dt
from collections import defaultdict
from pathlib import Path

from rcagent.eval.rankbench import _groups, _score, labelled_jobs
from rcagent.eval.scoring import Inventory, level, mapped_answers
from rcagent.job import Job
from rcagent.tools.overview import ranking


def _with_rollout(job: Job, service: str | None, at: dt.datetime) -> None:
    """Replace the job's events with one Deployment of `service` at `at` (none when service is None)."""
    job.con.execute("CREATE OR REPLACE TABLE _rollout (timestamp TIMESTAMP, entity VARCHAR, reason VARCHAR, message VARCHAR)")
    if service is not None:
        job.con.execute("INSERT INTO _rollout VALUES ($1, $2, 'Deployment', 'rolled out a new version')", [at, service])
    job.con.execute("CREATE OR REPLACE VIEW events AS SELECT * FROM _rollout")
    job.rows["events"] = int(service is not None)
    job.cache.clear()


def measure(folder: Path, label: dict, before_s: float) -> tuple[float, list[tuple[str, float, bool]]] | None:
    """PR@1 with no change, and per rolled-out service (PR@1 after it, whether it ranked first); None for a
    job with events of its own."""
    job = Job.load(folder)
    try:
        if job.rows.get("events"):
            return None
        inv = Inventory.from_job(job)
        levels = {rc.get("level") or level(inv.kinds.get(rc["entity"])) for rc in label["root_causes"]}
        culprits = {rc["entity"] for rc in label["root_causes"]} | {rc.get("service") for rc in label["root_causes"]}
        culprits |= {job.entities[c].service for c in culprits if c in job.entities and job.entities[c].service}
        at = job.window.start - dt.timedelta(seconds=before_s)
        _with_rollout(job, None, at)
        plain = _score([e for e, _, _ in ranking(job)], label, inv, levels)[0]
        out = []
        for name, ent in sorted(job.entities.items()):
            if ent.kind != "service" or name in culprits:
                continue
            _with_rollout(job, name, at)
            answers = [e for e, _, _ in ranking(job)]
            top = mapped_answers(answers, inv, levels, 1)   # the first answer at the level scored
            changed_first = bool(top) and name in (top[0], getattr(job.entities.get(top[0]), "service", None))
            out.append((name, _score(answers, label, inv, levels)[0], changed_first))
        return plain, out
    finally:
        job.con.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", required=True, help="an import DEST (holding jobs/ and labels/)")
    ap.add_argument("--before", type=float, default=60.0, help="seconds before the window the rollout happens")
    ap.add_argument("--pattern", default="*")
    args = ap.parse_args()
    labels = labelled_jobs(Path(args.jobs).expanduser(), args.pattern)
    results = {j: measure(folder, label, args.before) for j, (folder, label) in labels.items()}
    labels = {j: v for j, v in labels.items() if results[j] is not None}
    groups = _groups({j: lab for j, (_, lab) in labels.items()})
    plain: dict[str, list[float]] = defaultdict(list)
    kept: dict[str, list[float]] = defaultdict(list)
    first: dict[str, list[bool]] = defaultdict(list)
    jobs_lost: dict[str, int] = defaultdict(int)
    for job_id, (folder, label) in labels.items():
        pr1, rollouts = results[job_id]
        group = groups[job_id]
        plain[group].append(pr1)
        first[group] += [f for _, _, f in rollouts]
        if pr1 == 1:
            kept[group] += [p for _, p, _ in rollouts]
            lost = [name for name, p, _ in rollouts if p < 1]
            jobs_lost[group] += bool(lost)
            if lost:
                print(f"{job_id}: right without a change, wrong after a rollout of {', '.join(lost)}", flush=True)
    print("\n| system | jobs | PR@1, no change | rollouts on jobs right without one | top answer still right "
          "| jobs losing it to some rollout | rollouts that put the changed service first |")
    print("|---|---|---|---|---|---|---|")
    for g in sorted(plain):
        right = sum(v == 1 for v in plain[g])
        print(f"| {g} | {len(plain[g])} | {100 * sum(plain[g]) / len(plain[g]):.1f} | {len(kept[g])} | "
              f"{100 * sum(kept[g]) / max(len(kept[g]), 1):.1f} | {jobs_lost[g]} of {right} | "
              f"{sum(first[g])} of {len(first[g])} |")


if __name__ == "__main__":
    main()
