"""How much the ranking depends on the telemetry's resolution and kinds: the same incidents with coarser
metrics, sampled traces, or without traces or logs at all.

    python benchmarks/resolution.py --jobs ~/.cache/rcagent/work [--pattern 'ob-*']

Monitoring differs from one site to the next: a scrape interval twice as long, tracing that keeps one trace
in four, no tracing or no central logs at all. The rankings were built on each dataset's own telemetry, so a
sceptic asks whether they only work there. Per system, PR@1 of the default ranking (and NSigma / BARO / random on the same data, in the same run)
with the telemetry as imported and thinned in memory (the job's files are not touched):
- metrics every 2nd sample: each series keeps every other sample, baseline and window alike (the step
  doubles);
- traces 1 in 4: whole traces kept by their id's hash, as head-based sampling keeps them (only jobs with
  traces); each job is sampled four times, the four disjoint quarters of its traces, and scored by the mean
  of the four (one sample's figure moves by several cases with the sample drawn);
- no traces, no logs, metrics only: the table (or both) emptied, as a job without its file reads (only jobs
  that have it);
- logs as JSON lines: each log line as a structured logger writes it, its text the `message` field of a
  JSON object beside a time, a version, a logger, a thread and the level (logback's JSON encoder's fields),
  as a site whose services log JSON ships them (only jobs with logs);
- logs behind a longer header: each log line after the header Spring Boot's default pattern writes (date,
  time, level, process id, `---`, thread), as a site with another log pattern ships them (only jobs with
  logs).
Jobs whose tables were split at an onset are split again at the onset found in the thinned data.
"""
from __future__ import annotations

from collections import defaultdict

from rcagent.eval.rankbench import BASELINES, _groups, jobs_from_arguments, pr1_by_method
from rcagent.job import Job
from rcagent.onset import split_at_onset, undo_split

VARIANTS = ("as imported", "metrics every 2nd sample", "traces 1 in 4", "no traces", "no logs", "metrics only",
            "logs as JSON lines", "logs behind a longer header")
METHODS = ("ranking", *BASELINES)
NONE = "WHERE false"
KEEP = {  # the tables thinned, each with the clause that keeps its rows
    "metrics every 2nd sample": {"metrics": "QUALIFY row_number() OVER (PARTITION BY entity, metric ORDER BY timestamp) % 2 = 0"},
    "traces 1 in 4": {"traces": "WHERE md5_number(trace_id) % 4 = {part}"},   # md5: the same quarters everywhere
    "no traces": {"traces": NONE},
    "no logs": {"logs": NONE},
    "metrics only": {"traces": NONE, "logs": NONE},
}

REWRITE = {  # the tables rewritten, each with the query that gives its new rows
    "logs as JSON lines": {"logs": """
        SELECT * REPLACE ('{"@timestamp":"' || strftime(timestamp, '%Y-%m-%dT%H:%M:%S.%gZ') || '","@version":"1",'
                          || '"message":' || to_json(message) || ',"logger_name":"app","thread_name":"exec-'
                          || (md5_number(coalesce(trace_id, message)) % 10) || '","level":"' || coalesce(level, 'INFO')
                          || '"}' AS message) FROM logs"""},
    "logs behind a longer header": {"logs": """
        SELECT * REPLACE (strftime(timestamp, '%Y-%m-%d %H:%M:%S.%g') || '  ' || coalesce(level, 'INFO')
                          || ' 1 --- [nio-8080-exec-' || (md5_number(coalesce(trace_id, message)) % 10) || '] '
                          || message AS message) FROM logs"""},
}


SAMPLES = {"traces 1 in 4": 4}   # a variant drawn as several disjoint samples, each job scored by their mean


def thin(job: Job, variant: str, part: int = 0) -> bool:
    """The job with its tables thinned as `variant` says (its `part`-th sample where it draws several);
    False when the job has none of them."""
    tables = {t: f"SELECT * FROM {t} " + keep.format(part=part) for t, keep in KEEP.get(variant, {}).items()}
    tables.update(REWRITE.get(variant, {}))
    tables = {t: select for t, select in tables.items() if job.rows.get(t)}
    if not tables:
        return False
    undo_split(job)
    for table, select in tables.items():
        job.con.execute(f"CREATE OR REPLACE TABLE _thin_{table} AS {select}")
        job.con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM _thin_{table}")
        job.rows[table] = job.con.execute(f"SELECT count(*) FROM _thin_{table}").fetchone()[0]
        if not job.rows[table]:
            job.files.pop(table, None)     # as a job without the table's file
    job.cache.clear()
    split_at_onset(job)
    return True


def _mean_pr1(samples: list[dict[str, float] | None]) -> dict[str, float] | None:
    """Each method's PR@1 averaged over a variant's samples (None: the variant does not apply)."""
    if any(s is None for s in samples):
        return None
    return {m: sum(s[m] for s in samples) / len(samples) for m in samples[0]}


def main() -> None:
    _, labels = jobs_from_arguments()
    groups = _groups({j: lab for j, (_, lab) in labels.items()})
    hits: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for job_id, (folder, label) in labels.items():
        row = {v: _mean_pr1([pr1_by_method(folder, label, None if v == VARIANTS[0] else
                                           lambda job, v=v, part=part: thin(job, v, part))
                             for part in range(SAMPLES.get(v, 1))]) for v in VARIANTS}
        for v, pr1 in row.items():
            for m in METHODS:
                for g in (groups[job_id], "all"):
                    if pr1 is not None:
                        hits[g][v, m].append(pr1[m])
                    if v != "as imported" and pr1 is not None:   # the same jobs, as imported
                        hits[g][f"{v} (as imported)", m].append(row["as imported"][m])
        changed = [v for v in VARIANTS[1:] if row[v] is not None and row[v]["ranking"] != row[VARIANTS[0]]["ranking"]]
        if changed:
            print(f"{job_id}: " + ", ".join(f"{v} {'found' if row[v]['ranking'] > row[VARIANTS[0]]['ranking'] else 'lost'}"
                                            + (f" ({row[v]['ranking']:.2f})" if v in SAMPLES else "") for v in changed),
                  flush=True)
    print("\nPR@1 of the ranking (NSigma / BARO / random); for a thinned variant, on the jobs it applies to, "
          "beside the same jobs as imported\n")
    print("| system | as imported | " + " | ".join(VARIANTS[1:]) + " |")
    print("|---|---|" + "---|" * (len(VARIANTS) - 1))
    for g in sorted(hits, key=lambda g: (g == "all", g)):
        def cell(key: str) -> str:
            vals = hits[g][key, "ranking"]
            if not vals:
                return "-"
            return (f"{100 * sum(vals) / len(vals):.1f} ("
                    + " / ".join(f"{100 * sum(hits[g][key, m]) / len(vals):.1f}" for m in METHODS[1:]) + ")")
        cells = [f"{cell(VARIANTS[0])} [{len(hits[g][VARIANTS[0], 'ranking'])}]"]
        cells += [f"{cell(v)} against {cell(v + ' (as imported)').split(' (')[0]} [{len(hits[g][v, 'ranking'])}]"
                  if hits[g][v, "ranking"] else "-" for v in VARIANTS[1:]]
        print(f"| {g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
