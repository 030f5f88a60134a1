"""What counts as an error in a job's tables, as SQL conditions and as one Python test: shared by the tools,
the overview, the onset and the experts. Names and words are bound as query parameters, never written into
the SQL text.

A log line is an error line when its level is a warning or worse, or when what it says holds an error-like
word. What it says is its text without the names of its fields: a JSON key (`"error": null`,
`"upstream_transport_failure_reason": null` in a proxy's access log) or a logfmt key (`timeout=30s`,
`err=<nil>`) names a field, not a failure; the value (`"error": "connection refused"`) still counts. A level
below a warning does not overrule the words: clients log refused connections and lost brokers at INFO."""
from __future__ import annotations

import re

ERROR_LEVELS = ("WARN", "WARNING", "ERROR", "ERR", "FATAL", "SEVERE", "CRITICAL", "CRIT", "ALERT", "EMERG", "PANIC")
# a field's name: a JSON key with its colon, a logfmt key with its equals sign (RE2 and Python alike)
FIELD_NAMES = r'"[^"\\]*" *:|[A-Za-z_][A-Za-z0-9_.-]*='
ERROR_WORDS = r"(?i)(exception|error|fail|timeout|timed out|refused|denied|unavailable|panic|traceback|reset by peer)"


def one_of(column: str, param: str) -> str:
    """SQL condition: the column's value is in the list bound to the named parameter `$param`.

    Names (entities, levels) are always bound as parameters, never written into the SQL text: they come
    from the telemetry, which is attacker-controlled."""
    return f"list_contains(${param}, {column})"


# SQL condition on the logs table: a warning-or-above level or error-like words outside field names; bind
# ERROR_PARAMS with it
ERROR_LIKE = (f"({one_of('upper(level)', 'levels')} "
              f"OR regexp_matches(regexp_replace(message, $field_names, ' ', 'g'), $words))")
ERROR_PARAMS = {"levels": list(ERROR_LEVELS), "words": ERROR_WORDS, "field_names": FIELD_NAMES}
_WORDS, _FIELD_NAMES = re.compile(ERROR_WORDS), re.compile(FIELD_NAMES)


def is_error_line(level: str | None, message: str | None) -> bool:
    """The rule of ERROR_LIKE for one line in Python."""
    if str(level or "").upper() in ERROR_LEVELS:
        return True
    return bool(_WORDS.search(_FIELD_NAMES.sub(" ", message or "")))


# SQL condition on the traces table: an error span
ERR = "(upper(coalesce(status, '')) IN ('ERROR', 'STATUS_CODE_ERROR', '2') OR status LIKE '5%')"
