"""Finding job folders, their systems, and an even seeded sample across systems: for batch, the benchmarks
and the CLI alike."""
from __future__ import annotations

import random
from pathlib import Path

from rcagent.errors import BadInput


def find_jobs(folder: Path) -> list[Path]:
    folder = folder / "jobs" if (folder / "jobs").is_dir() else folder
    jobs = sorted(p.parent for p in folder.glob("*/job.yaml"))
    if not jobs:
        raise BadInput(f"{folder}: no job folders (folders holding a job.yaml)")
    return jobs


def job_system(job: Path) -> str:
    from rcagent.job import read_meta

    return read_meta(job).system


def sample(jobs: list[Path], limit: int, seed: int) -> list[Path]:
    """`limit` jobs spread evenly over the systems: shuffled per system (seeded), then taken in turn."""
    by_system: dict[str, list[Path]] = {}
    for job in jobs:
        by_system.setdefault(job_system(job), []).append(job)
    rng = random.Random(seed)
    queues = []
    for system in sorted(by_system):
        members = sorted(by_system[system])
        rng.shuffle(members)
        queues.append(members)
    picked: list[Path] = []
    while len(picked) < limit and any(queues):
        for q in queues:
            if q and len(picked) < limit:
                picked.append(q.pop(0))
    return picked
