"""A plain change log from CI/CD: CSV (a header row) or YAML (a list, or a mapping with `changes:`), one
change per row with `time` (or `timestamp`), `entity`, `kind` (Deployment, ConfigChange, Scale, Restart,
...) and `description`. Times are RFC 3339 (an offset is converted to UTC; none is read as UTC).
"""
from __future__ import annotations

import datetime as dt

from rcagent.exports import Collected, Source, rfc3339

TIME = ("time", "timestamp")


def rows_of(doc):
    """The change rows of a parsed CSV or YAML document, or None when it is not a change log."""
    rows = doc.get("changes") if isinstance(doc, dict) else doc
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        return None
    first = rows[0]
    if "entity" not in first or not any(k in first for k in TIME):
        return None
    return rows


def sniff(doc) -> bool:
    return rows_of(doc) is not None


def read(doc, src: Source, out: Collected) -> None:
    for i, row in enumerate(rows_of(doc)):
        where = f"row {i + 1}"
        when = next((row[k] for k in TIME if row.get(k) not in (None, "")), None)
        if isinstance(when, dt.datetime):   # YAML reads an unquoted time itself
            when = when.astimezone(dt.timezone.utc).replace(tzinfo=None) if when.tzinfo else when
        else:
            when = rfc3339(str(when) if when is not None else None, src, where)
        if not row.get("entity"):
            raise src.error(where, "a change needs an entity")
        out.events.append((when, str(row["entity"]), str(row.get("kind") or "Change"),
                           str(row.get("description") or "")))
        out.records["changes"] += 1
