"""What counts as an error in a job's tables, as SQL conditions: shared by the tools, the overview and the
onset. Names and words are bound as query parameters, never written into the SQL text."""
from __future__ import annotations

ERROR_LEVELS = ("WARN", "WARNING", "ERROR", "FATAL", "SEVERE", "CRITICAL")
ERROR_WORDS = r"(?i)(exception|error|fail|timeout|timed out|refused|denied|unavailable|panic|traceback|reset by peer)"


def one_of(column: str, param: str) -> str:
    """SQL condition: the column's value is in the list bound to the named parameter `$param`.

    Names (entities, levels) are always bound as parameters, never written into the SQL text: they come
    from the telemetry, which is attacker-controlled."""
    return f"list_contains(${param}, {column})"


# SQL condition on the logs table: a warning-or-above level or error-like words; bind ERROR_PARAMS with it
ERROR_LIKE = f"({one_of('upper(level)', 'levels')} OR regexp_matches(message, $words))"
ERROR_PARAMS = {"levels": list(ERROR_LEVELS), "words": ERROR_WORDS}

# SQL condition on the traces table: an error span
ERR = "(upper(coalesce(status, '')) IN ('ERROR', 'STATUS_CODE_ERROR', '2') OR status LIKE '5%')"
