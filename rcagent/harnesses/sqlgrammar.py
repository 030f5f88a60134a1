"""The query grammars of the SQL agent, as regular expressions for constrained decoding.

`free`: any one SELECT (or WITH) statement without placeholders, a second statement or a character that
would need escaping in JSON, its string literals closed; the database judges the rest. A capable model
writes what it likes; a tiny one writes tables and columns that do not exist, or aggregates that do not
bind (measured with SmolLM2: a fifth of its steps were queries DuckDB rejected, docs/benchmarks.md).

`schema` (the default): one SELECT over one of the job's tables that has rows, built from that table's own
columns and types, so a query the grammar admits also binds and runs:

    SELECT cols | *      FROM t [WHERE cond [AND cond]...] [ORDER BY col [DESC]] [LIMIT n]
    SELECT [cols,] aggs  FROM t [WHERE cond [AND cond]...] GROUP BY ALL [ORDER BY agg [DESC]] [LIMIT n]

Aggregates take the columns of their type (avg/sum of numbers, min/max of numbers and times, count of
anything); conditions compare a column with a literal of its type (text `=`/`!=`/`LIKE`/`IN`, numbers with a
number, times with a 'YYYY-MM-DD HH:MM[:SS]' literal on one of the job's days); `GROUP BY ALL` groups by
every plain column, so a grouped query never names a column it does not group. No joins, subqueries or
window functions: a model that needs them runs with `sql_grammar = "free"`.
"""
from __future__ import annotations

import datetime as dt

from rcagent.job import SCHEMAS

# free grammar: runs of plain text and closed literals alternate (one pass, no runaway backtracking);
# at most 5 x 150 plain characters and 4 literals of up to 60
_PLAIN = "[^'?$;\"\\\\\\n\\r\\t]{0,150}"
TEXT = "'[^'\"\\\\\\n\\r\\t]{0,60}'"
FREE = f"^(SELECT|WITH|select|with) {_PLAIN}({TEXT}{_PLAIN}){{0,4}}$"

NUMBER = r"-?[0-9]{1,9}([.][0-9]{1,4})?"   # [.], not \. (llama.cpp grammars know no such escape)
CLOCK = r"([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?"
LIMIT = r"( LIMIT ([1-9]|[1-9][0-9]|100))?"
MAX_CONDITIONS, MAX_COLUMNS, MAX_AGGREGATES, MAX_DAYS = 4, 5, 3, 31


def _any(items) -> str:
    return "(" + "|".join(items) + ")"


def _up_to(item: str, n: int, sep: str = ", ") -> str:
    """item, then up to n-1 more, separated by sep."""
    return f"{item}({sep}{item}){{0,{n - 1}}}" if n > 1 else item


def table_query(table: str, dates: list[str]) -> str:
    """The two query shapes over one table, from its columns and their types; time literals fall on `dates`."""
    types = SCHEMAS[table]
    cols = _any(types)
    numbers = [c for c, t in types.items() if t == "DOUBLE"]
    texts = [c for c, t in types.items() if t == "VARCHAR"]
    times = [c for c, t in types.items() if t == "TIMESTAMP"]
    aggregates = [r"count\(\*\)", rf"count\(DISTINCT {cols}\)"]
    if numbers:
        aggregates.append(rf"(avg|sum|min|max)\({_any(numbers)}\)")
    if times:
        aggregates.append(rf"(min|max)\({_any(times)}\)")
    aggregate = _any(aggregates)
    conditions = []
    if texts:
        conditions += [rf"{_any(texts)} (=|!=|LIKE|NOT LIKE) {TEXT}",
                       rf"{_any(texts)} IN \({_up_to(TEXT, 4)}\)"]
    if numbers:
        conditions.append(rf"{_any(numbers)} (=|!=|<|>|<=|>=) {NUMBER}")
    if times:
        conditions.append(rf"{_any(times)} (<|>|<=|>=) '{_any(dates)} {CLOCK}'")
    where = rf"( WHERE {_up_to(_any(conditions), MAX_CONDITIONS, ' AND ')})?"
    plain = (rf"SELECT (\*|{_up_to(cols, MAX_COLUMNS)}) FROM {table}{where}"
             rf"( ORDER BY {cols}( DESC)?)?{LIMIT}")
    grouped = (rf"SELECT ({cols}, ){{0,{MAX_COLUMNS - 2}}}{_up_to(aggregate, MAX_AGGREGATES)} FROM {table}{where}"
               rf" GROUP BY ALL( ORDER BY {aggregate}( DESC)?)?{LIMIT}")
    return _any([plain, grouped])


def pattern(kind: str, tables: list[str], dates: list[str]) -> str:
    """The query pattern of grammar `kind` ('schema' or 'free') over these tables (those with rows), with
    time literals on these dates (YYYY-MM-DD: the job's days, so no literal names a day that does not exist)."""
    if kind == "free":
        return FREE
    return "^" + _any(table_query(t, dates) for t in tables) + "$"


def job_dates(job) -> list[str]:
    """The days of the job's window and baseline periods, with a day's margin either side (over MAX_DAYS of
    them: any day from the 1st to the 28th, which every month has)."""
    days: set[str] = set()
    for period in [job.window, *job.baseline]:
        day = period.start.date() - dt.timedelta(days=1)
        while day <= period.end.date() + dt.timedelta(days=1):
            days.add(day.isoformat())
            day += dt.timedelta(days=1)
            if len(days) > MAX_DAYS:
                return [r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"]
    return sorted(days)
