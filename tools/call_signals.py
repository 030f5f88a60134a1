"""The overview's call signals, from traces: calls a callee received against what its callers' own
requests would have made, its p95 latency (the median where its calls are few) and own time per call (at
most its typical 30 s stretch's from the onset), error spans, and the cross-span gap of each call edge (the
caller's side or the callee's); and the user traffic the call rates are scaled by."""
from __future__ import annotations

import datetime as dt
import math
import statistics
from collections import defaultdict
from typing import TYPE_CHECKING

from rcagent.job import Job
from rcagent.tools.calls import edges
from rcagent.tools.common import LATENCY_CALLS, log_ratio

if TYPE_CHECKING:
    from rcagent.tools.overview import RankingParams

CALLS_SD = 3.0           # a call count counts when it is this many Poisson deviations from the expected one
GAP_MIN_MS = 10.0        # a cross-span gap counts when it widened by this much (the time floor of metrics)
GAP_GREW, GAP_GREW_MS = 1.25, 1.0   # a gap grew at all: by a quarter and a millisecond (a caller's own slowness)


def traffic_factor(job: Job) -> float:
    """Entry requests per minute in the window over the baseline's (1.0 without traces or a trace baseline).
    Cached on the job."""
    if "traffic_factor" not in job.cache:
        factor = 1.0
        b_min = job.observed_seconds("traces", window=False) / 60
        w_min = job.observed_seconds("traces") / 60
        if b_min and w_min:
            edges(job)
            b, w = job.query(f"""SELECT count(*) FILTER (WHERE {job.in_baseline('traces', 'start')}),
                                        count(*) FILTER (WHERE {job.in_window('start')})
                                 FROM edges WHERE caller = '(entry)'""")[0]
            if b and w:
                factor = (w / w_min) / (b / b_min)
        job.cache["traffic_factor"] = factor
    return job.cache["traffic_factor"]


def call_signals(job: Job, rows: dict, params: RankingParams):
    """(entity, signal) from the calls it received (traces), per service and per pod."""
    b_min, w_min = job.observed_seconds("traces", window=False) / 60, job.observed_seconds("traces") / 60
    load = traffic_factor(job)  # call rates are judged against the baseline scaled by it
    # per callee: calls in the baseline and the window, error spans, latency in each at the quantile named
    for name, b, w, err, b_lat, w_lat, quantile in rows["calls"]:
        # Calls are compared with what the callers' own requests would have made: the baseline's calls
        # scaled by how many of the requests that led to them (the parent operations) the callers still
        # served. A callee whose callers stopped getting those requests lost its calls upstream (a
        # symptom); one whose callers still get them but no longer reach it is out. Entry spans, which
        # have no caller, are scaled by the change in user traffic.
        via = rows["led"].get(name)
        expected = b * via[1] / via[0] if via and via[0] else load * b / b_min * w_min
        b_rate, w_rate = expected / w_min, w / w_min
        # a count moves by chance about sqrt(expected): a few calls more or less of a rare call are no change
        beyond_chance = abs(w - expected) >= CALLS_SD * math.sqrt(expected + 1)
        if b_rate >= 1 and w == 0 and beyond_chance:  # an outage: it stopped receiving calls altogether
            yield name, (60 + log_ratio(b_rate, 0), f"incoming calls STOPPED ({b_rate:.0f}/min expected)", "calls")
        elif b_rate >= 1 and w_rate < b_rate and beyond_chance:
            # only fewer calls: more calls are the callers' doing (user traffic, a new call pattern,
            # retries), not the entity's; fewer mean requests fail or stall before they reach it
            s = log_ratio(w_rate, b_rate)
            if s >= params.call_min:
                yield name, (s, f"incoming calls {b_rate:.0f}->{w_rate:.0f}/min", "calls")
        own_rose = own_time_rose(rows, name, b, w, params)
        if own_rose:
            per_b, per_w = own_per_call(rows, name, b, w)
            yield name, (log_ratio(per_w, per_b), f"own time per call {per_b:.0f}->{per_w:.0f} ms", "calls")
        if b_lat is not None and w_lat is not None and w_lat > b_lat:
            # only slower calls: faster ones are no evidence of a fault (a failing entity that answers
            # faster shows it by its errors, scored below and from its logs)
            s = log_ratio(w_lat, b_lat)
            if s >= params.call_min:
                # a slower entity whose own time did not grow waits for a callee: a symptom, weighed less
                weight = params.symptom if waits(rows, name, own_rose) else 1.0
                yield name, (weight * s, f"latency {quantile} {b_lat:.0f}->{w_lat:.0f} ms"
                             + (" (waiting on callees)" if weight < 1 else ""), "calls")
        if err:
            yield name, (10 + 10 * math.log2(1 + err), f"{err} error spans", "calls")


def gap_signals(rows: dict, params: RankingParams):
    """(entity, signal) from the cross-span gap of each call edge (the caller's span minus the callee's:
    time spent between the two, in the network, queues or the caller's own sending and reading), only
    where it widened. A caller whose gap grew to most of its callees, and widened to at least two, is itself
    slow to send and read (a starved caller): the gap is its side, not theirs, and it is weighed by the
    share of its callees whose gap grew. Otherwise the gap is the callee's side (its network, its queue),
    weighed by the share of its callers' edges that widened."""
    wide, out, grew, starved = _widened(rows, params)
    into = defaultdict(list)
    for (caller, callee), w in wide.items():
        into[callee].append(None if caller in starved else w)
    for name in starved:
        s, bgap, wgap = max(w for w in out[name] if w)
        yield name, (s * grew[name] / len(out[name]), f"cross-span gap {bgap:.1f}->{wgap:.1f} ms (grew on "
                                                       f"{grew[name]} of its {len(out[name])} callees)", "calls")
    for name, found in into.items():
        widened = sorted(w for w in found if w)
        if widened:
            s, bgap, wgap = widened[-1]
            yield name, (s * len(widened) / len(found), f"cross-span gap {bgap:.1f}->{wgap:.1f} ms (widened "
                                                        f"on {len(widened)} of its {len(found)} callers)", "calls")


def _widened(rows: dict, params: RankingParams) -> tuple[dict, dict, dict, set]:
    """The gap of each call edge against its baseline: (caller, callee) -> (score, baseline, window) where
    it widened (else None); caller -> those of its edges; caller -> how many of its edges grew at all; the
    starved callers (slow to send and read: the gap widened on two or more of its callees, grew on most)."""
    wide, grown = {}, {}
    for caller, callee, bgap, wgap, _ in rows["gaps"]:
        if bgap is not None and wgap is not None:
            s = log_ratio(wgap, bgap)
            wide[(caller, callee)] = ((s, bgap, wgap) if wgap - max(bgap, 0.0) >= GAP_MIN_MS and s >= params.call_min
                                      else None)
            # grew at all, beyond the noise of a median: a caller slow on every call adds a little to each
            grown[(caller, callee)] = wgap - max(bgap, 0.0) >= GAP_GREW_MS and wgap >= GAP_GREW * max(bgap, 0.0)
    out, grew = defaultdict(list), defaultdict(int)
    for (caller, callee), w in wide.items():
        out[caller].append(w)
        grew[caller] += grown[(caller, callee)]
    widened_out = {caller: sum(1 for w in ws if w) for caller, ws in out.items()}
    starved = {c for c, n in widened_out.items() if n >= 2 and 2 * grew[c] >= len(out[c])}
    return wide, out, grew, starved


def peer_gap_signals(rows: dict, params: RankingParams):
    """(entity, signal) from a callee whose cross-span gap stands far above the gaps of its caller's other
    callees, where the traces have no fault-free baseline of their own. The same caller sends to all its
    callees through the same stack, so their gaps are alike; one callee far slower on every caller is slow
    on the network (a delay on its pod's interface), a fault that may predate the window's first spans, so
    that only its peers show it. Weighed by the share of its callers (of three callees or more) on which it
    stands out; a caller starved against the window's part before the onset (its gaps grew on most of its
    callees) is the side its gaps show, and compares none of them."""
    if not rows["peer_gaps"]:
        return
    starved = _widened(rows, params)[3]
    sent: dict[str, dict[str, float]] = defaultdict(dict)
    for caller, callee, _, wgap, calls in rows["gaps"]:
        if wgap is not None and calls >= LATENCY_CALLS and caller not in starved:
            sent[caller][callee] = wgap
    judged, out = defaultdict(int), defaultdict(list)
    for caller, gaps in sent.items():
        if len(gaps) < 3:   # a median of two or more peers: with one, which of the two is odd is unknown
            continue
        for callee, gap in gaps.items():
            peers = statistics.median(g for c, g in gaps.items() if c != callee)
            judged[callee] += 1
            s = log_ratio(gap, peers)
            if gap - max(peers, 0.0) >= GAP_MIN_MS and s >= params.call_min:
                out[callee].append((s, peers, gap))
    for callee, found in out.items():
        s, peers, gap = max(found)
        yield callee, (s * len(found) / judged[callee], f"cross-span gap {gap:.1f} ms against {peers:.1f} ms "
                                                          f"to its callers' other callees (on {len(found)} of its "
                                                          f"{judged[callee]} callers)", "calls")


def waits(rows: dict, name: str, own_rose: bool | None) -> bool:
    """Whether a slower entity waits on its callees: its own time per call did not grow while it made calls
    (an entity that calls nothing waits on nothing: all its time is its own)."""
    return own_rose is False and name in rows["callers"]


def own_time_rose(rows: dict, name: str, b: int, w: int, params: RankingParams) -> bool | None:
    """Whether the time spent in the entity itself per call (its spans minus their children: what it adds
    to a request, as opposed to what its callees add) grew; None when unknown (fewer than LATENCY_CALLS calls in
    either period: a mean of one or two calls is those calls)."""
    own_b, own_w = rows["own"].get(name, (None, None))
    if not (min(b, w) >= LATENCY_CALLS and own_b is not None and own_w is not None):
        return None
    per_b, per_w = own_per_call(rows, name, b, w)
    return per_w - per_b >= GAP_MIN_MS and log_ratio(per_w, per_b) >= params.call_min


def typical_own_time(job: Job, onset: dt.datetime, bucket_min: int) -> dict[str, float]:
    """service or pod -> its typical own time per call from the onset on, in ms: the median over the window's
    30 s stretches with `bucket_min` calls or more of the stretch's own time per call. A fault lasts from its
    onset; a few calls that ran long in one stretch (a pause, a retry) raise the mean of the window but not
    the typical stretch (as the latency of the incident is its typical 30 s p95). Run after own_time."""
    win = job.in_window("start")
    out = {}
    for column, level in (("svc", "callee"), ("entity", "callee_pod")):   # columns of own_spans and edges
        out |= dict(job.query(f"""
            WITH own AS (SELECT {column} AS name, time_bucket(INTERVAL 30 SECOND, start) AS t, sum(own_ms) AS ms
                         FROM own_spans WHERE {column} IS NOT NULL AND {win} AND start >= $onset GROUP BY 1, 2),
                 calls AS (SELECT {level} AS name, time_bucket(INTERVAL 30 SECOND, start) AS t, count(*) AS n
                           FROM edges WHERE {level} IS NOT NULL AND {win} AND start >= $onset GROUP BY 1, 2
                           HAVING count(*) >= $n)
            SELECT name, median(coalesce(ms, 0) / n) FROM calls LEFT JOIN own USING (name, t) GROUP BY 1""",
                              {"onset": onset, "n": bucket_min}))
    return out


def own_per_call(rows: dict, name: str, b: int, w: int) -> tuple[float, float]:
    """(baseline, window) own time per call of an entity with own times, the window's at most its typical
    stretch's (typical_own_time)."""
    own_b, own_w = rows["own"][name]
    typical = rows.get("own_typical", {}).get(name)
    return own_b / b, (own_w / w if typical is None else min(own_w / w, typical))


def requests_that_led(job: Job) -> dict[str, tuple[int, int]]:
    """service or pod -> (baseline, window) counts of the caller spans whose operations called it in the
    baseline: the requests its callers served that used to lead to it."""
    base, win = job.in_baseline("traces", "p.start"), job.in_window("p.start")
    out = {}
    for column in ("callee", "callee_pod"):   # a column of the edges table
        for name, b, w in job.query(f"""
                WITH led AS (SELECT DISTINCT {column} AS callee, caller, caller_operation AS op FROM edges
                             WHERE caller <> '(entry)' AND {column} IS NOT NULL
                               AND {job.in_baseline('traces', 'start')})
                SELECT led.callee, count(*) FILTER (WHERE {base}), count(*) FILTER (WHERE {win})
                FROM led JOIN spans p ON p.svc = led.caller AND p.operation IS NOT DISTINCT FROM led.op
                GROUP BY 1"""):
            out[name] = (b, w)
    return out


def own_time(job: Job) -> dict[str, tuple]:
    """service or pod -> (own time in the baseline, in the window), in ms: the sum over its spans of the
    span's duration minus its direct children's (at least 0), i.e. the time not spent waiting for callees."""
    win, base = job.in_window("start"), job.in_baseline("traces", "start")
    job.con.execute("""
        CREATE OR REPLACE TEMP TABLE own_spans AS
        SELECT p.svc, p.entity, p.start, greatest(p.duration_ms - coalesce(sum(c.duration_ms), 0), 0) AS own_ms
        FROM spans p LEFT JOIN spans c ON c.trace_id = p.trace_id AND c.parent_id = p.span_id
        GROUP BY p.trace_id, p.span_id, p.svc, p.entity, p.start, p.duration_ms""")
    out = {}
    for column in ("svc", "entity"):
        for name, b, w in job.query(f"""SELECT {column}, sum(own_ms) FILTER (WHERE {base}),
                                               sum(own_ms) FILTER (WHERE {win})
                                        FROM own_spans WHERE {column} IS NOT NULL GROUP BY 1"""):
            out[name] = (b, w)
    return out
