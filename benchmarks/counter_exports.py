"""Raw Prometheus counters: what the ranking finds when a job's per-second metrics come as running totals.

    python benchmarks/counter_exports.py --jobs ~/.cache/rcagent/work [--pattern 'tt-*']

An operator who exports `container_cpu_usage_seconds_total` or `http_requests_total` without `rate()` gets
the counter's running total, whose level says how long the process has run. Each labelled job is written
out as the exports of its telemetry (tests/exportwriter.py: metrics as Prometheus query_range JSON, spans
as OTLP, logs as Loki, pods as kubectl JSON) and made into a job again by `rcagent job create`, three ways:
- "as rates": the metrics as they are;
- "counters": the metrics that Prometheus exposes as counters (CPU time, network bytes, system calls and
  operations, which the jobs hold as per-second rates; requests, which PetSite's hold as counts a period:
  PER_SECOND and PER_SAMPLE below, by what they measure) as `NAME_total` running totals, which
  `job create` reads back as per-second rates;
- "running totals read as levels": the same running totals under a name that does not say counter, so
  that they are read as the levels they are (as every name was before `job create` knew counters).
PR@1 per system of the ranking and of NSigma / BARO / random on each variant's jobs, in the same run.
"""
from __future__ import annotations

import re
from collections import defaultdict
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # tests.exportwriter

from rcagent.eval.rankbench import (_groups, jobs_from_arguments, pr1_by_method, tally,  # noqa: E402
                                    variant_table)
from tests.exportwriter import write_exports                          # noqa: E402

# per-second rates (CPU, network bytes, system calls, operations) and counts a sample (requests a period)
PER_SECOND = re.compile(r"(?i)^(cpu|cpuusage\(m\)|network\w*bytes|syscall\w+|podworkload\(ops\))$")
PER_SAMPLE = re.compile(r"(?i)^requests_sum$")
VARIANTS = ("as rates", "counters", "running totals read as levels")


def created(native: Path, dest: Path, variant: str) -> Path:
    """The job made by `rcagent job create` from the exports of `native` written as `variant`."""
    import duckdb
    names = {r[0] for r in duckdb.connect().execute(
        "SELECT DISTINCT metric FROM read_parquet(?)", [str(native / "metrics.parquet")]).fetchall()}
    raw = variant != VARIANTS[0]
    periods = write_exports(native, dest / "exports",
                            counters=frozenset(n for n in names if raw and PER_SECOND.match(n)),
                            counts=frozenset(n for n in names if raw and PER_SAMPLE.match(n)))
    if variant == VARIANTS[2]:   # the same files, each counter renamed so that its name says nothing
        for file in (dest / "exports" / "prometheus").glob("*.json"):
            file.write_text(file.read_text().replace('_total"', '_running"'))
    args = [str(Path(sys.executable).parent / "rcagent"), "job", "create", str(dest / "job"), "--from", str(dest / "exports"),
            "--window", periods["window"]]
    for b in periods["baseline"]:
        args += ["--baseline", b]
    subprocess.run(args, check=True, capture_output=True)
    return dest / "job"


def main() -> None:
    _, labels = jobs_from_arguments()
    groups = _groups({j: lab for j, (_, lab) in labels.items()})
    hits: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for n, (job_id, (folder, label)) in enumerate(sorted(labels.items()), 1):
        with tempfile.TemporaryDirectory() as tmp:
            row = {v: pr1_by_method(created(folder, Path(tmp) / str(i), v), label) for i, v in enumerate(VARIANTS)}
        tally(hits, groups[job_id], row)
        print(f"  {n}/{len(labels)} {job_id}: " + ", ".join(f"{v} {row[v]['ranking']:.0f}" for v in VARIANTS),
              file=sys.stderr, flush=True)
    print("\nPR@1 of jobs made again from their exports: the ranking (NSigma / BARO / random)\n")
    print(variant_table(hits, list(VARIANTS)))


if __name__ == "__main__":
    main()
