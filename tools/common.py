"""Helpers shared by the tools: window-against-baseline statistics, number formats, log templates."""
from __future__ import annotations

import json
import math
import re

from rcagent.errorlike import one_of
from rcagent.job import Job
from rcagent.logline import message_of


def log_ratio(w: float, b: float) -> float:
    """10 x |log2| of the ratio of two rates or durations (+1 each: a few calls more or less of a rare one
    are no change): the overview's score of a call, latency or log signal."""
    return 10 * abs(math.log2((max(w, 0.0) + 1) / (max(b, 0.0) + 1)))


def metric_stats(job: Job, entities: list[str], metric: str | None = None) -> list[dict]:
    """Per (entity, metric): baseline mean/sd, window mean/min/max and a signed deviation score."""
    where = one_of("entity", "entities")
    params: dict = {"entities": list(entities)}
    if metric:
        where += " AND metric ILIKE $metric ESCAPE '\\'"
        params["metric"] = f"%{like_escape(metric)}%"
    rows = job.query(f"""
        SELECT entity, metric,
               avg(value) FILTER (WHERE {job.in_baseline('metrics')}) AS b_mean,
               stddev_samp(value) FILTER (WHERE {job.in_baseline('metrics')}) AS b_sd,
               count(value) FILTER (WHERE {job.in_baseline('metrics')}) AS b_n,
               avg(value) FILTER (WHERE {job.in_window()}) AS w_mean,
               min(value) FILTER (WHERE {job.in_window()}) AS w_min,
               max(value) FILTER (WHERE {job.in_window()}) AS w_max,
               count(value) FILTER (WHERE {job.in_window()}) AS w_n,
               min(value, 2) FILTER (WHERE {job.in_window()}), max(value, 2) FILTER (WHERE {job.in_window()})
        FROM metrics WHERE {where} GROUP BY entity, metric""", params)
    out = []
    for entity, name, b_mean, b_sd, b_n, w_mean, w_min, w_max, w_n, low2, high2 in rows:
        out.append({"entity": entity, "metric": name, "b_mean": b_mean, "b_sd": b_sd, "b_n": b_n,
                    "w_mean": w_mean, "w_min": w_min, "w_max": w_max, "w_n": w_n,
                    "score": series_deviation(job, entity, name, b_mean, b_sd, second(low2), second(high2))})
    out.sort(key=lambda r: -abs(r["score"]))
    return out


# a unit set off by anything but a letter: "LatencyP90(s)", "duration_seconds" (Prometheus' base units),
# "rpc_duration_ms_p99"
SECONDS = re.compile(r"(?i)(\(s\)|_s\b|(?<![a-z])sec(ond)?s?(?![a-z]))")
RATE = re.compile(r"(?i)(success|availab)")
MILLISECONDS = re.compile(r"(?i)(\(ms\)|(?<![a-z])ms(?![a-z])|millisec)")
COUNT = re.compile(r"(?i)(request|count|syscall|\bcalls\b|\(ops\))")
LATENCY = re.compile(r"(?i)(latency|duration|response.?time)")
QUALITY = re.compile(r"(?i)(success|error|fail|latency|duration|response.?time|timeout|availab|status)")
LATENCY_CALLS = 5        # a latency or own time per call is compared when each period has this many calls
RATE_CALLS = 20          # a rate borrows the flawless record of all entities from this many requests a sample
PER_TIME = re.compile(r"(?i)(rate|per.?(s|sec|second|m|min|minute)\b|/\s?(s|sec|m|min)\b|\b[qr]p[sm]\b)")
QUANTILE = re.compile(r"(?i)(?:^|[^a-z]|latency)p(\d\d(?:\.\d+)?)")


def like_escape(text: str) -> str:
    """Text matched literally by LIKE/ILIKE ... ESCAPE '\\' (its % and _ are not wildcards)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def second(extremes: list | None):
    """The second most extreme of a window's values (given the two most extreme), or the only one: a
    single sample (a spike) does not move a series."""
    if not extremes:
        return None
    return extremes[1] if len(extremes) > 1 else extremes[0]


def floor(mean: float, metric: str = "") -> float:
    """The smallest standard deviation a series of this metric is given (see deviation)."""
    if "%" in metric:   # a percentage: a few points matter whatever the level
        return 1.0
    if RATE.search(metric):   # a success rate or availability without a unit: a percentage or a ratio
        return 1.0 if abs(mean) > 1 else 0.01
    least = max(0.1 * abs(mean), 1e-3)
    # a time before a count: "http_request_duration_seconds" is a time that names requests
    if SECONDS.search(metric):   # a time in seconds: a blip of a few milliseconds is no change
        return max(least, 0.01)
    if MILLISECONDS.search(metric):
        return max(least, 10.0)
    if COUNT.search(metric) and not LATENCY.search(metric):   # a count of events: it moves by whole events,
        return max(least, math.sqrt(abs(mean)), 1.0)           # and by chance by its square root
    return least


def deviation(b_mean, b_sd, w_min, w_max, metric: str = "", least: float | None = None) -> float:
    """Signed deviation of the window's extreme value (callers pass the second most extreme: one spike
    does not count) from the baseline mean, in floored standard deviations.

    The floor is in the unit of the metric, read from its name: a percentage has one point (a success rate
    falling from 100% to 85% is 15 sd, however flat its baseline), and so has a success rate or
    availability whose name gives no unit (0.01 where it is a ratio); a count of events (requests, calls,
    syscalls, operations) one event, or its square root, the Poisson noise of a count (a rarely called endpoint called
    three times instead of none is no outage); a time in seconds at least 10 ms, in milliseconds at least
    10 ms (a blip on a 5 ms series does not dominate); anything else 10% of the
    baseline mean, and a small absolute amount, so that flat baselines do not turn noise into huge scores.
    A metric seen only in the window (no baseline) scores 0: nothing to compare. A caller that knows the
    chance spread better than the metric's name does (a success rate over a known count of requests) gives
    it as `least`, in place of the floor.
    """
    if b_mean is None or w_min is None or w_max is None:
        return 0.0
    sd = max(b_sd or 0.0, floor(b_mean, metric) if not least else least)
    up, down = (w_max - b_mean) / sd, (w_min - b_mean) / sd
    score = up if abs(up) >= abs(down) else down
    return max(-999.0, min(999.0, score))


def request_counts(job: Job) -> dict[str, tuple[float, float]]:
    """entity -> (mean requests a sample, all requests) in its baseline, where it has a count of requests,
    or a per-second rate of them (`NAME:rate`, as `job create` reads a counter) and so, over the seconds
    between its samples, a count (a rate per minute, say, says nothing of how many a sample holds).
    Cached on the job."""
    return _baseline_requests(job)[0]


def sample_seconds(job: Job) -> dict[tuple[str, str], float]:
    """(entity, metric) -> the seconds between its samples (the median gap: a baseline days before the
    window leaves one long gap among the short ones), for each per-second rate of more than one sample
    (a metric named `NAME:rate`, as `job create` names a counter's). Cached on the job."""
    if "sample_seconds" not in job.cache:
        rows = job.query("""SELECT entity, metric, median(gap) FROM (
                                SELECT entity, metric, epoch(timestamp) - epoch(lag(timestamp) OVER (
                                    PARTITION BY entity, metric ORDER BY timestamp)) AS gap
                                FROM metrics WHERE suffix(metric, ':rate') AND timestamp IS NOT NULL)
                            WHERE gap > 0 GROUP BY ALL""") if job.rows.get("metrics") else []
        job.cache["sample_seconds"] = {(e, m): step for e, m, step in rows}
    return job.cache["sample_seconds"]


def _baseline_requests(job: Job) -> tuple[dict[str, tuple[float, float]], float]:
    """request_counts, and flawless_requests: one pass over the baseline's counts and rates, cached."""
    if "baseline_requests" not in job.cache:
        counts, flawless = {}, {}   # flawless: entity -> every rate of it failed none (an entity counts once)
        if job.rows.get("metrics"):
            for e, m, mean, total, low in job.query(f"""
                    SELECT entity, metric, avg(value) FILTER (WHERE {job.in_baseline('metrics')}),
                           sum(value) FILTER (WHERE {job.in_baseline('metrics')}),
                           min(value) FILTER (WHERE {job.in_baseline('metrics')})
                    FROM metrics WHERE metric ILIKE '%request%' OR regexp_matches(metric, $rate) GROUP BY ALL""",
                                                  {"rate": RATE.pattern}):
                if mean is None:
                    continue
                if RATE.search(m):
                    flawless[e] = flawless.get(e, True) and low >= _scale(m, mean)
                elif QUALITY.search(m) is not None or SECONDS.search(m) is not None:
                    continue
                elif PER_TIME.search(m) is None:
                    counts[e] = (mean, total)
                elif step := sample_seconds(job).get((e, m)):   # a per-second rate: the requests of a
                    counts[e] = (mean * step, total * step)           # sample, over the seconds it covers
        served = sum(counts[e][1] or 0.0 for e, ok in flawless.items() if ok and e in counts)
        job.cache["baseline_requests"] = (counts, served)
    return job.cache["baseline_requests"]


def needs(metric: str) -> float:
    """The requests a sample needs for its latency to say more than one or two requests' time: a quantile
    q needs 1 / (1 - q) (a p95 20, below that it is the slowest request), a median or mean LATENCY_CALLS
    (as the call signals' quantiles)."""
    q = QUANTILE.search(metric)
    if q and 0.5 < float(q.group(1)) / 100 < 1:
        return round(1 / (1 - float(q.group(1)) / 100), 6)
    return LATENCY_CALLS


def too_few(job: Job, entity: str, metric: str) -> bool:
    """A latency series of an entity whose baseline sample holds fewer requests than it needs: one or two
    requests' time, no measure of the entity."""
    count = request_counts(job).get(entity)
    return LATENCY.search(metric) is not None and count is not None and count[0] < needs(metric)


def _scale(metric: str, mean: float) -> float:
    """100 for a rate in percent (named so, or above 1), else 1."""
    return 100.0 if "%" in metric or abs(mean) > 1 else 1.0


def rate_noise(mean: float, requests: float, served: float, metric: str, flawless: float = 0.0) -> float:
    """The chance spread of a success rate or availability over the requests of one sample: the binomial
    spread at the failure share the baseline allows (its failures plus three over its requests: the rule of
    three, a 95% bound where none failed). A rate of few requests moves by whole requests (2 failures of 4
    after 15 flawless ones is chance); one that never failed in a baseline of thousands counts from a few
    failures, less than the one point a rate's name alone gives. Where the entity failed none of its
    requests, its record is the longer of its own and `flawless` (see flawless_requests)."""
    scale = _scale(metric, mean)
    failed = max(0.0, 1 - mean / scale) * served
    record = served if failed >= 0.5 else max(served, flawless)
    p = min(1.0, (failed + 3) / (record + 3))
    return scale * math.sqrt(p * (1 - p) / requests)


def flawless_requests(job: Job) -> float:
    """The requests that all entities which failed none of theirs served in the baseline, together: the
    record an entity that failed none of its own is judged by, where it is longer than the entity's own. A
    short baseline (two samples before an onset) gives a service a few hundred flawless requests, and the
    rule of three then allows it a failure share near 1%; when nothing in the system failed any of its
    thousands of requests, a few failures of that service now are news. Only a rate of at least RATE_CALLS
    requests a sample borrows it (one failure is then at most 5 points of a sample): an entity of a few
    requests keeps its own record. Cached on the job."""
    return _baseline_requests(job)[1]


def series_deviation(job: Job, entity: str, metric: str, b_mean, b_sd, w_min, w_max) -> float:
    """deviation() of one series with what the entity's request count tells: a success rate's spread over
    that many requests a sample (rate_noise, with the flawless record of all entities where it failed none
    and serves RATE_CALLS a sample), and none for a latency of too few requests (too_few)."""
    if too_few(job, entity, metric):
        return 0.0
    least = None
    count = request_counts(job).get(entity)
    if RATE.search(metric) and b_mean is not None and count is not None and count[0] > 0:
        flawless = flawless_requests(job) if count[0] >= RATE_CALLS else 0.0
        least = rate_noise(b_mean, count[0], count[1], metric, flawless)
    return deviation(b_mean, b_sd, w_min, w_max, metric, least)


def fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, int) or float(x).is_integer() and abs(x) < 1e6:
        return str(int(x))
    ax = abs(x)
    if ax >= 1e5:
        return f"{x:.3g}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.{digits}g}"


def arrow(score: float) -> str:
    return "UP" if score > 0 else "DOWN" if score < 0 else "="


_MASKS = [
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uuid>"),
    (re.compile(r"\b[0-9a-f]{16,}\b", re.I), "<hex>"),
    (re.compile(r"\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b"), "<ip>"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?Z?"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(\.\d+)?\b"), "<time>"),
    (re.compile(r"(?<![#\w])-?\d+(\.\d+)?\b"), "<n>"),
]


def template(message: str) -> str:
    """A log line with its variable parts masked, so repeats fold together; of a JSON line, its message."""
    text = (message_of(message) or "").strip()
    for pattern, repl in _MASKS:
        text = pattern.sub(repl, text)
    return re.sub(r"\s+", " ", text)[:240]


def short(name: str, width: int = 44) -> str:
    return name if len(name) <= width else name[: width - 1] + "~"


def quoted(text: str, limit: int = 300) -> str:
    """Telemetry text (a log line, an event message) as one quoted, escaped string: newlines, escape codes
    and quotes cannot break out of it, so a log line cannot pose as a prompt header or an instruction."""
    text = str(text)
    cut = len(text) > limit
    return json.dumps(text[:limit] + ("..." if cut else ""), ensure_ascii=False)


def plain(text, limit: int = 60) -> str:
    """A telemetry name on one line: escaped like quoted() (newlines, escape codes) but without the quotes,
    and cut to `limit` characters with '~'."""
    body = json.dumps(str(text), ensure_ascii=False)[1:-1]
    return body if len(body) <= limit else body[: limit - 1] + "~"
