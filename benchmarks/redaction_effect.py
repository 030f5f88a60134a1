"""Redaction on every imported job: does the evidence ranking's top 5 stay the same, how much is redacted
(by kind), and what it adds to loading (median and max, loads side by side in one run).

    python benchmarks/redaction_effect.py [JOBS_DIR]     # default ~/.cache/rcagent/work/jobs (make import-all)
"""
from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from rcagent.job import Job
from rcagent.tools.overview import ranking


def top5(job: Job) -> list[tuple[str, float]]:
    return [(name, score) for name, score, _ in ranking(job)[:5]]


def main(jobs_dir: Path) -> None:
    changed, counts, with_any, plain_s, redacted_s = [], Counter(), 0, [], []
    folders = sorted(p for p in jobs_dir.iterdir() if (p / "job.yaml").is_file())
    for folder in folders:
        start = time.perf_counter()
        plain = Job.load(folder, redact=False)
        plain_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        redacted = Job.load(folder)
        redacted_s.append(time.perf_counter() - start)
        if top5(plain) != top5(redacted):
            changed.append(folder.name)
        counts.update(redacted.redactor.counts())
        with_any += bool(redacted.redactor.mapping)
        plain.con.close()
        redacted.con.close()
    print(f"jobs {len(folders)}: top 5 unchanged in {len(folders) - len(changed)}, changed in {changed or 'none'}")
    print(f"jobs with something redacted: {with_any}; distinct values by kind: {dict(counts)}")
    print(f"load without / with redaction: median {statistics.median(plain_s):.3f} / "
          f"{statistics.median(redacted_s):.3f} s, max {max(plain_s):.3f} / {max(redacted_s):.3f} s")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "~/.cache/rcagent/work/jobs").expanduser())
