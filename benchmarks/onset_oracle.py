"""How much of the no-baseline gap is the onset search's, and how much the missing baseline's.

    python benchmarks/onset_oracle.py --jobs ~/.cache/rcagent/work

Per system, PR@1 of the default ranking on the full jobs and on their no-baseline variant three ways: split
at the onset the series agree on (what `rcagent bench ranking` reports), split at the label's injection time
(an oracle onset: no detector can do better at placing it; only jobs whose label gives an injection time
inside the window), and not split at all (the whole window against peers only). If the oracle onset does
no better than the found one, a better onset search cannot close the gap: the part of the window before the
fault's start does not hold what a fault-free baseline does.
"""
from __future__ import annotations

import argparse
import datetime as dt
from collections import defaultdict
from pathlib import Path

from rcagent.eval.labels import load_label
from rcagent.eval.rankbench import _groups, _score
from rcagent.eval.scoring import Inventory, level
from rcagent.job import Job, parse_time
from rcagent.onset import without_baseline
from rcagent.tools.overview import ranking

VARIANTS = ("full", "found onset", "injection time", "no split")


def _injected(label: dict) -> dt.datetime | None:
    return parse_time(label["inject_time"], "label inject_time") if label.get("inject_time") else None


def _pr1(folder: Path, label: dict, variant: str, injected: dt.datetime | None) -> float | None:
    job = Job.load(folder)
    try:
        inv = Inventory.from_job(job)
        levels = {rc.get("level") or level(inv.kinds.get(rc["entity"])) for rc in label["root_causes"]}
        if variant == "injection time":   # none when the label gives none inside the window
            if injected is None or without_baseline(job, at=injected) is None:
                return None
        elif variant == "found onset":
            without_baseline(job)
        elif variant == "no split":
            without_baseline(job, at=job.window.end)   # an onset at the window's end splits nothing
        return _score([e for e, _, _ in ranking(job)], label, inv, levels)[0]
    finally:
        job.con.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", required=True, help="an import DEST (holding jobs/ and labels/)")
    root = Path(ap.parse_args().jobs).expanduser()
    labels = {p.name: (p, load_label(root / "labels", p.name)) for p in sorted((root / "jobs").iterdir()) if p.is_dir()}
    labels = {j: v for j, v in labels.items() if v[1]}
    groups = _groups({j: lab for j, (_, lab) in labels.items()})
    hits: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for job_id, (folder, label) in labels.items():
        injected = _injected(label)
        for variant in VARIANTS:
            pr1 = _pr1(folder, label, variant, injected)
            if pr1 is not None:
                hits[groups[job_id]][variant].append(pr1)
    print("| system | " + " | ".join(VARIANTS) + " |")
    print("|---" * (len(VARIANTS) + 1) + "|")
    for group in sorted(hits):
        cells = []
        for variant in VARIANTS:
            got = hits[group][variant]
            cells.append(f"{100 * sum(got) / len(got):.1f} ({len(got)})" if got else "-")
        print(f"| {group} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
