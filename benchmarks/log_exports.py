"""Log lines from where an operator has them: what the ranking finds when a job's logs come from Loki,
Elasticsearch or the pods' container log files, the last two saying nothing beside the line (no level, no
trace id).

    python benchmarks/log_exports.py --jobs ~/.cache/rcagent/work

Each labelled job that has logs is written out as the exports of its telemetry (tests/exportwriter.py:
metrics as Prometheus query_range JSON, spans as OTLP, pods as kubectl JSON) and made into a job again by
`rcagent job create`, its logs seven ways:
- "Loki": a stream per pod and level, the level as a label and the trace id as structured metadata;
- "CRI files": each pod's `/var/log/pods/NS_POD_UID/CONTAINER/0.log`, the level and the trace id those the
  line states (rcagent.logline);
- "Docker files": each pod's json-file log in `/var/log/containers`, read likewise;
- "Elasticsearch": `_search` responses of 10,000 hits, each line a document as Filebeat ships it (the pod
  and node as Kubernetes metadata), read likewise;
- "CRI, traces": the CRI files with a Java stack trace after every error line, one frame a line (as a
  logger leaves it where no multiline stage joins it), which `job create` joins back into its line;
- "CRI, traces not joined": the same files with the joining left out (rcagent/exports/multiline.py, the
  ablation): each frame a line of its own;
- "OTLP, exceptions": OTLP log records (the level as `severityText`, the trace id as `traceId`), the same
  stack trace recorded beside every error line as `exception.*` attributes, which `job create` appends to
  the line.
`--variant NAME` (repeated) runs only those variants (the native job always runs).
PR@1 per system of the ranking and of NSigma / BARO / random on the native jobs and each variant's, in the
same run; and how many of each variant's lines carry the native level and trace id.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # tests.exportwriter

from rcagent.eval.rankbench import (_groups, jobs_from_arguments, pr1_by_method, tally,  # noqa: E402
                                    variant_table)
from tests.exportwriter import STACK_TRACE, write_exports             # noqa: E402

VARIANTS = {"native job": None, "Loki": "loki", "CRI files": "cri", "Docker files": "docker",
            "Elasticsearch": "elasticsearch", "CRI, traces": "cri-frames", "CRI, traces not joined": "unjoined",
            "OTLP, exceptions": "otlp"}
TRACE_TEXT = "\n" + "\n".join(STACK_TRACE)
SAME = "SELECT count(*) FROM read_parquet(?) a JOIN read_parquet(?) b USING (timestamp, entity) WHERE {}"


def created(native: Path, dest: Path, logs: str) -> Path:
    """The job made by `rcagent job create` from the exports of `native`, its logs written as `logs`
    ("unjoined": as "cri-frames", made in this process with the joining of frames left out)."""
    if logs == "unjoined":
        from unittest import mock

        from rcagent.exports.assemble import create_job
        periods = write_exports(native, dest / "exports", logs="cri-frames")
        with mock.patch("rcagent.exports.assemble.join_lines", lambda rows, files: (rows, 0)):
            create_job(dest / "job", [dest / "exports"], periods["window"], periods["baseline"])
        return dest / "job"
    periods = write_exports(native, dest / "exports", logs=logs)
    args = [str(Path(sys.executable).parent / "rcagent"), "job", "create", str(dest / "job"), "--from",
            str(dest / "exports"), "--window", periods["window"]]
    for b in periods["baseline"]:
        args += ["--baseline", b]
    subprocess.run(args, check=True, capture_output=True)
    return dest / "job"


def agreement(native: Path, job: Path) -> Counter:
    """Lines in both jobs (same time, pod and text), and of them those with the native level, trace id."""
    import duckdb
    con = duckdb.connect()
    a, b = str(native / "logs.parquet"), str(job / "logs.parquet")
    # a line and the stack trace joined to it (the "CRI, traces" variant) count as the native line
    match = "rtrim(a.message, chr(10)) = rtrim(replace(b.message, ?, ''), chr(10))"
    same = lambda cond: con.execute(SAME.format(cond), [a, b, TRACE_TEXT]).fetchone()[0]  # noqa: E731
    return Counter({"lines": same(match), "level": same(f"{match} AND a.level = b.level"),
                    "trace": same(f"{match} AND a.trace_id IS NOT DISTINCT FROM b.trace_id"),
                    "native lines": con.execute("SELECT count(*) FROM read_parquet(?)", [a]).fetchone()[0]})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", action="append", choices=list(VARIANTS), help="run this variant (default: all)")
    args, labels = jobs_from_arguments(ap)
    variants = {"native job": None} | ({v: VARIANTS[v] for v in args.variant} if args.variant else VARIANTS)
    labels = {j: v for j, v in labels.items() if (v[0] / "logs.parquet").exists()}
    groups = _groups({j: lab for j, (_, lab) in labels.items()})
    hits: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    agree: dict[str, Counter] = defaultdict(Counter)
    for n, (job_id, (folder, label)) in enumerate(sorted(labels.items()), 1):
        row = {}
        with tempfile.TemporaryDirectory() as tmp:
            for i, (v, logs) in enumerate(variants.items()):
                job = folder if logs is None else created(folder, Path(tmp) / str(i), logs)
                row[v] = pr1_by_method(job, label)
                if logs is not None:
                    agree[v] += agreement(folder, job)
        tally(hits, groups[job_id], row)
        print(f"  {n}/{len(labels)} {job_id}: " + ", ".join(f"{v} {row[v]['ranking']:.0f}" for v in variants),
              file=sys.stderr, flush=True)
    print(f"\nPR@1 of jobs made again from their exports, logs {len(variants) - 1} ways: the ranking "
          "(NSigma / BARO / random)\n")
    print(variant_table(hits, list(variants)))
    print("\nlines read back (same time, pod and text), and of them with the native level and trace id:\n")
    for v, c in agree.items():
        print(f"- {v}: {c['lines']} of {c['native lines']} lines, level {c['level']}, trace id {c['trace']}")


if __name__ == "__main__":
    main()
