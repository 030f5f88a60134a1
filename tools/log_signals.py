"""The overview's log signals: per entity and log template (what a line says: a JSON line's message field,
the logger's header before it left out, numbers and ids masked, a "#46" source line kept),
error-like lines beyond their share of the entity's lines, error-like lines never written in the baseline
(a failing code path), and routine lines that stopped or fell to a fraction of their share (an exception
thrown before them); where log lines carry trace ids, routine lines that the calls of an operation no
longer write, judged per request; error-like lines that requests of a type the entity never served
before write are that request type's routine and not counted."""
from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from typing import TYPE_CHECKING

from rcagent.errorlike import ERROR_LIKE, ERROR_PARAMS
from rcagent.job import Job
from rcagent.logline import LEVEL_WORDS, message_sql
from rcagent.tools.calls import edges
from rcagent.tools.common import LATENCY_CALLS, log_ratio, plain

if TYPE_CHECKING:
    from rcagent.tools.overview import RankingParams

LINE_MIN = 8             # a routine log line that stops counts when this many were expected in the window
LINE_SD = 3.0            # ... and one whose share of the entity's lines fell by this many deviations (z-test)
NEW_MIN = 3              # an error-like line new in the window counts from this many lines (one odd line proves little)
ROUTINE = "log line "    # how the reason of a routine line that stopped or fell begins
# the header a logger writes before the message, once masked: times and numbers, a level, a [thread], dashes
HEADER = rf"^(\s*(<n>|<id>|\[[^\]]{{0,40}}\]|({LEVEL_WORDS})\b|---|[-:|,]))+\s*"
# a log message as its template: what it says (a JSON line's message field: rcagent.logline), long hex ids
# and numbers masked, a "#46" source line number kept, the header before the message left out (its 64
# characters are the message's, however long the header a site's log pattern writes)
TEMPLATE = (f"left(regexp_replace(regexp_replace(regexp_replace({message_sql('message')}, '[0-9a-fA-F-]{{16,}}', "
            f"'<id>', 'g'), '(^|[^#0-9A-Za-z])-?[0-9]+([.:][0-9]+)*', '\\1<n>', 'g'), '{HEADER}', ''), 64)")


def log_lines(job: Job) -> str:
    """A temp table of the job's log lines with their template (numbers and long hex ids masked; a "#46"
    source line number kept), whether they read as warnings or errors, the service of their entity, and
    whether they name another service (a failure of that one, as it saw it). Templates are made once per
    connection: the window's part before its onset reads the same table."""
    if "log_lines" not in job.cache:
        services = sorted(e.id for e in job.entities.values() if e.kind == "service" and len(e.id) >= 3)
        # one regular expression finds the few lines that name any service (a substring search per service
        # and line is most of the cost); only those are checked for a service other than their own
        job.con.execute(f"""
                CREATE OR REPLACE TEMP TABLE log_lines AS
                SELECT l.entity, l.timestamp, l.trace_id, coalesce(e.service, l.entity) AS service,
                       {TEMPLATE} AS line, {ERROR_LIKE} AS bad,
                       CASE WHEN regexp_matches(message, $any_service)
                            THEN len(list_filter($services::VARCHAR[], lambda x: x <> coalesce(e.service, l.entity)
                                                                            AND contains(message, x))) > 0
                            ELSE false END AS names_other
                FROM logs l LEFT JOIN entities e ON l.entity = e.id""",
                        {**ERROR_PARAMS, "services": services, "any_service": any_of(services)})
        job.cache["log_lines"] = True
    return "log_lines"


def log_rows(job: Job) -> list[tuple]:
    """(entity, template, error-like?, baseline lines, window lines, window lines naming another service)."""
    if not job.rows.get("logs"):
        return []
    log_lines(job)
    base, win = job.in_baseline("logs"), job.in_window()
    unseen = new_request_lines(job)
    return job.query(f"""
            SELECT entity, line, bad, count(*) FILTER (WHERE {base}), count(*) FILTER (WHERE {win}),
                   count(*) FILTER (WHERE {win} AND names_other)
            FROM log_lines l WHERE ({base} OR {win}) AND NOT (bad AND EXISTS (
                SELECT 1 FROM {unseen} u WHERE u.trace_id = l.trace_id AND u.entity = l.entity)) GROUP BY ALL""")


def new_request_lines(job: Job) -> str:
    """A temp table of (trace id, entity) for the window's requests of a type the entity never served in
    the baseline, although it served others: an operation called for the first time (traffic that began
    at the onset, a new feature used). Their error-like lines have nothing to be compared with, so the
    log signals leave them out: a warning such a request writes every time is its routine, not a failing
    code path. Empty without trace ids in logs or without baseline traces."""
    if "new_request_lines" not in job.cache:
        job.con.execute("CREATE OR REPLACE TEMP TABLE new_request_lines (trace_id VARCHAR, entity VARCHAR)")
        if job.rows.get("traces") and job.baseline_seconds("traces") > 0:
            edges(job)
            base, win = job.in_baseline("traces", "start"), job.in_window("start")
            job.con.execute(f"""
                INSERT INTO new_request_lines
                WITH calls AS (SELECT trace_id, coalesce(callee_pod, callee) AS who, operation, {base} AS b
                               FROM edges WHERE trace_id IS NOT NULL AND ({base} OR {win})),
                     served AS (SELECT who FROM calls GROUP BY who HAVING bool_or(b)),
                     ops AS (SELECT who, operation, bool_or(b) AS seen FROM calls GROUP BY ALL),
                     per_trace AS (SELECT c.trace_id, c.who, bool_and(NOT o.seen) AS all_new
                                   FROM calls c JOIN ops o USING (who, operation) WHERE NOT c.b GROUP BY ALL)
                SELECT DISTINCT l.trace_id, l.entity FROM log_lines l
                JOIN per_trace p ON p.trace_id = l.trace_id AND p.all_new
                JOIN served s ON s.who = p.who
                WHERE l.entity = p.who OR l.service = p.who""")
        job.cache["new_request_lines"] = True
    return "new_request_lines"


def any_of(names: list[str]) -> str:
    """A regular expression (RE2) that matches wherever one of the names occurs as written: every character
    but a letter or digit spelled as its code point, so that no name is read as a pattern; none matches
    nothing."""
    def literal(name: str) -> str:
        return "".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}" for c in name)
    return "|".join(literal(n) for n in names) if names else "[^\\x{0}-\\x{10ffff}]"


def one_line(template: str) -> str:
    """A template as a reason's quote: every run of whitespace (a newline, a tab, two spaces) one space."""
    return " ".join(template.split())[:80]


def share_fell(b: int, b_all: int, w: int, w_all: int) -> bool:
    """A line's share of the entity's lines fell beyond chance (two-proportion z-test, LINE_SD deviations)."""
    p = (b + w) / (b_all + w_all)
    sd = math.sqrt(p * (1 - p) * (1 / b_all + 1 / w_all))
    return sd > 0 and (b / b_all - w / w_all) / sd >= LINE_SD


def share_rose(b: int, b_all: int, w: int, w_all: int) -> bool:
    """A line's share of the entity's lines rose beyond chance (the same test, the other way)."""
    return share_fell(w, w_all, b, b_all)


def log_signals(lines: list[tuple], b_min: float, w_min: float, params: RankingParams):
    """(entity, signal) from per-template log counts. Error-like lines are judged by their share of the
    entity's lines (a service that logs a warning per request logs more of them when it is busier, not
    because it fails), a rise counting only beyond the chance of the baseline's share (a share of a few
    lines is rough), and by their rate where the entity has no baseline lines; an error-like line new in the
    window that names no other service marks a failing code path of the entity's own; a routine line that
    the entity wrote steadily in the baseline and stopped writing (or writes far less of, for its share of
    the entity's lines) while it still logs means its code took another path: an exception thrown before it.
    b_min is the baseline's length in minutes scaled by the change in user traffic."""
    if w_min <= 0:   # the window holds at most one instant of logs: no rate to speak of
        return
    per: dict[str, list] = defaultdict(list)
    named: dict[str, int] = defaultdict(int)
    new: dict[str, list] = defaultdict(list)
    for entity, line, bad, b, w, other in lines:
        per[entity].append((line, bad, b, w))
        named[entity] += other if bad else 0
        if bad and b == 0 and w - other > 0:
            new[entity].append((w - other, line))
    for entity, items in per.items():
        b_all, w_all = sum(b for _, _, b, _ in items), sum(w for _, _, _, w in items)
        b_bad, w_bad = sum(b for _, bad, b, _ in items if bad), sum(w for _, bad, _, w in items if bad)
        if b_all >= 10:
            expected = w_all * b_bad / b_all
        else:
            expected = b_bad / b_min * w_min if b_min else 0.0
        # a rise of the share, like a fall, must be beyond chance (two of 15 lines estimate a share roughly)
        if w_bad > expected and (b_all < 10 or share_rose(b_bad, b_all, w_bad, w_all)):
            s = 10 * (w_bad - expected) / w_min / math.sqrt(expected / w_min + 1)
            if s >= params.call_min:
                # lines that name another service report that one's failure as the entity saw it (a
                # refused call, no instance to call): a symptom, like a latency its callees explain
                share = min(named[entity] / w_bad, 1.0)
                note = f", {share:.0%} naming another service" if share >= 0.05 else ""
                yield entity, (min(s, 100.0) * (1 - share * (1 - params.symptom)),
                               f"error-like logs {expected / w_min:.1f}->{w_bad / w_min:.1f}/min "
                               f"(expected from its log volume{note})", "logs")
        if b_all < 10 or w_all < 5:
            continue
        # an error-like line the entity never wrote in a baseline where it logged, and that names no other
        # service: a code path of its own that now fails (an exception it throws, not one it was handed)
        fresh = sum(n for n, _ in new[entity])
        if fresh >= NEW_MIN:
            first = max(new[entity])[1]
            yield entity, (min(10 * fresh / w_min, 100.0),
                           f"error-like log line new in the window ({fresh} lines, none before): {one_line(first)}", "logs")
        for line, bad, b, w in items:
            expected = w_all * b / b_all
            # a line that fell rather than stopped needs a baseline of its own, a real drop and one beyond
            # the chance of its share of the lines (a line seen 3 times proves no share)
            fell = b >= LINE_MIN and w <= params.line_fell * expected and share_fell(b, b_all, w, w_all)
            if not bad and expected >= LINE_MIN and (w == 0 or fell):
                what = "stopped" if w == 0 else f"fell to {w}"
                yield entity, (log_ratio(expected / w_min, w / w_min),
                               f"{ROUTINE}{what} ({expected:.0f} expected): {one_line(line)}", "logs")


def request_line_rows(job: Job, since: dt.datetime | None = None) -> list[tuple]:
    """Routine log lines tied to the calls that wrote them (the line's trace id, the entity's span in that
    trace): (entity, template, the called operation, calls of it that wrote the line and calls of it, in
    the baseline, then in the window from `since`, default its start). Empty without trace ids in logs."""
    if not (job.rows.get("logs") and job.rows.get("traces")):
        return []
    edges(job)
    log_lines(job)
    since = since or job.window.start
    base, win = job.in_baseline("traces", "start"), f"({job.in_window('start')} AND start >= $since)"
    return job.query(f"""
            WITH calls AS (SELECT trace_id, callee, callee_pod, operation, bool_or({base}) AS b, bool_or({win}) AS w
                           FROM edges WHERE trace_id IS NOT NULL AND ({base} OR {win}) GROUP BY 1, 2, 3, 4),
                 ops AS (SELECT coalesce(callee_pod, callee) AS who, operation, count(*) FILTER (WHERE b) AS n_b,
                                count(*) FILTER (WHERE w) AS n_w FROM calls GROUP BY 1, 2),
                 lines AS (SELECT DISTINCT trace_id, entity, service, line FROM log_lines
                           WHERE trace_id IS NOT NULL AND NOT bad),
                 wrote AS (SELECT l.entity, l.line, c.operation, coalesce(c.callee_pod, c.callee) AS who,
                                  count(*) FILTER (WHERE c.b) AS k_b, count(*) FILTER (WHERE c.w) AS k_w
                           FROM lines l JOIN calls c ON l.trace_id = c.trace_id
                                AND (c.callee_pod = l.entity OR (c.callee_pod IS NULL AND c.callee = l.service))
                           GROUP BY ALL)
            SELECT w.entity, w.line, w.operation, w.k_b, o.n_b, w.k_w, o.n_w
            FROM wrote w JOIN ops o USING (who, operation) WHERE w.k_b > 0""", {"since": since})


def request_line_signals(rows: list[tuple], w_min: float, params: RankingParams):
    """(entity, signal) from the routine lines its calls no longer write: the calls of an operation still
    arrive, but fewer of them reach a line most of them wrote in the baseline (a two-proportion z-test,
    LINE_SD deviations): the code took another path in those very requests, an exception thrown before
    the line. Judged per request, a change of the mix of requests (another operation called less) moves
    nothing here, unlike a line's share of all the entity's lines. It counts from LATENCY_CALLS expected
    calls, the floor of every per-call comparison, not from LINE_MIN lines: the test decides beyond it, and
    where traces are sampled an operation's calls are the sampled few (every call of a sampled trace is
    kept, so each is a whole request)."""
    if w_min <= 0:
        return
    best: dict[tuple[str, str], tuple] = {}
    for entity, line, op, k_b, n_b, k_w, n_w in rows:
        if not n_b or not n_w:
            continue
        expected = n_w * k_b / n_b
        if expected >= LATENCY_CALLS and k_w <= params.line_fell * expected and share_fell(k_b, n_b, k_w, n_w):
            s = log_ratio(expected / w_min, k_w / w_min)
            if s > best.get((entity, line), (0.0,))[0]:
                what = "stopped" if k_w == 0 else "fell"
                best[(entity, line)] = (s, f"{ROUTINE}{what} in its calls: written by {k_w} of {n_w} calls of "
                                           f"{plain(op, 48)} ({expected:.0f} expected): {one_line(line)}", "logs")
    for (entity, _), signal in best.items():
        yield entity, signal
