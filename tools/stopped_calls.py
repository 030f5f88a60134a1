"""A caller that no longer calls: two or more callees that only it calls stopped receiving requests (their
count of requests never stopped in the baseline) while it still serves its own, and none of its callees got
worse on its own account. It fails before it calls them (an exception, a wrong early return): two callees
out at once are less likely than their one caller no longer reaching them, and a caller that stopped at a
later step because an earlier callee failed is explained by that callee. From metrics and the topology
alone, so it holds where no trace shows the missing calls. No system, dataset or service is named here."""
from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from rcagent.job import Job
from rcagent.onset import usual_step
from rcagent.tools.common import QUALITY
from rcagent.tools.metric_signals import callees, service_of
from rcagent.tools.reasons import own_worse

TRAFFIC = re.compile(r"(?i)(request|workload|\(ops\)|\bcalls\b)")   # a count of requests an entity served
STOPPED_SAMPLES = 2      # samples of no requests at the window's end that make a stop
STOPPED_MIN = 2          # callees that stopped at once, for their caller to be named
STOPPED_SCORE = 12.0     # about a metric 10 sd off its baseline


def stopped_flags(job: Job) -> dict[str, list[bool]]:
    """entity -> for each of its traffic series with a baseline: whether it stopped in the window (never 0
    in the baseline; in the window not 0 until it is, then 0 to the end, for at least STOPPED_SAMPLES; its
    last request no more than a sample before the window, so a flow idle since before it did not stop
    here). Cached: it depends on the job alone, not on the ranking's setting."""
    if "stopped_flags" in job.cache:
        return job.cache["stopped_flags"]
    if not job.rows.get("metrics"):
        return {}
    base, win = job.in_baseline("metrics"), job.in_window()
    out: dict[str, list[bool]] = defaultdict(list)
    bounds = {"traffic": TRAFFIC.pattern, "start": job.window.start,
              "since": job.window.start - dt.timedelta(seconds=usual_step(job) or 0)}
    for entity, metric, b_low, just_before, values in job.query(f"""
            SELECT entity, metric, min(value) FILTER (WHERE {base}),
                   coalesce(max(timestamp) FILTER (WHERE {base} AND value <> 0 AND timestamp <= $start) >= $since,
                            false),
                   list(value ORDER BY timestamp) FILTER (WHERE {win} AND value IS NOT NULL)
            FROM metrics WHERE regexp_matches(metric, $traffic) GROUP BY ALL""", bounds):
        if QUALITY.search(metric) is not None or b_low is None or not values:
            continue
        on = next((i for i, v in enumerate(values) if v == 0), len(values))
        out[entity].append(b_low > 0 and len(values) - on >= STOPPED_SAMPLES and not any(values[on:])
                           and (on > 0 or just_before))
    job.cache["stopped_flags"] = out
    return out


def stopped_callees(job: Job, found: dict) -> list[tuple[str, list[str]]]:
    """(caller, its callees that stopped) for each caller service named (module docstring) and its pods that
    still serve; `found` holds the other signals (entity -> [(score, reason, source)])."""
    flags = stopped_flags(job)
    by_service: dict[str, list[bool]] = defaultdict(list)
    for entity, fs in flags.items():
        by_service[service_of(job, entity)] += fs
    callers_of: dict[str, set[str]] = defaultdict(set)
    for caller, them in callees(job).items():
        for callee in them:
            if service_of(job, callee) != service_of(job, caller):
                callers_of[service_of(job, callee)].add(service_of(job, caller))
    out = []
    for caller in sorted({c for who in callers_of.values() for c in who}):
        if not by_service.get(caller) or all(by_service[caller]):
            continue
        mine = sorted(c for c, who in callers_of.items() if who == {caller} and by_service.get(c)
                      and all(by_service[c]))
        theirs = [c for c, who in callers_of.items() if caller in who]
        if len(mine) < STOPPED_MIN or any(own_worse(why, src) for c in theirs for _, why, src in found.get(c, [])):
            continue
        serving = sorted(e for e, fs in flags.items() if e != caller and service_of(job, e) == caller
                         and not all(fs))
        out += [(e, mine) for e in [caller, *serving]]
    return out


def stopped_call_signals(job: Job, found: dict):
    """(entity, signal) of each caller named by stopped_callees."""
    for entity, mine in stopped_callees(job, found):
        yield entity, (STOPPED_SCORE, f"its calls to {', '.join(mine)} stopped while it still served requests",
                       "calls")
