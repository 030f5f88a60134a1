"""Loki: the JSON of `/loki/api/v1/query_range` (`resultType` `streams`) and the lines of
`logcli query --output=jsonl` (`{"timestamp", "line", "labels"}`).

query_range timestamps are nanoseconds since the epoch as strings; a value may carry a third element,
the structured metadata (`{"structuredMetadata": {...}}` with the categorize-labels encoding, or a plain
object). logcli's timestamps are RFC 3339 with nanoseconds and an offset. The stream's labels give the
entity as for Prometheus (`pod`, else a service label, else `job`, else `instance`), the level (`level`,
`detected_level`, `severity`) and a trace id (`trace_id`, `traceID`, `traceId`, also in structured metadata);
where neither labels nor metadata give them, the line itself (a JSON or logfmt field, klog's letter, a level
word near the start: rcagent.logline).
"""
from __future__ import annotations

from rcagent.exports import Collected, Source, expect, instant, rfc3339
from rcagent.exports.prometheus import NODE, POD, SERVICE, _first
from rcagent.logline import described

LEVEL = ("level", "detected_level", "severity", "severity_text")
TRACE = ("trace_id", "traceID", "traceId", "traceid")


def sniff(doc) -> bool:
    if isinstance(doc, dict) and isinstance(doc.get("data"), dict):
        return doc["data"].get("resultType") == "streams"
    return isinstance(doc, dict) and "line" in doc and "timestamp" in doc


def _entity(labels: dict, src: Source, out: Collected) -> str | None:
    pod, service, node = _first(labels, POD), _first(labels, SERVICE), _first(labels, NODE)
    if pod:
        out.pod(pod, service, node)
        return pod
    entity = service or _first(labels, ("service_name", "job", "instance"))
    if entity:
        out.services.setdefault(entity, "service")
    return entity


def _row(ts, entity: str, level, line: str, trace) -> tuple:
    """A logs row: the level and trace id as labelled, else as the line states them (also when the label
    names no level: Loki's `detected_level` is `unknown` where it found none)."""
    level, trace = described(line, level, trace)
    return ts, entity, level, line, trace


def read(doc: dict, src: Source, out: Collected) -> None:
    if "line" in doc:        # one logcli JSON line
        labels = expect(doc.get("labels") or {}, dict, src, "labels", "the labels")
        entity = _entity(labels, src, out)
        if entity is None:
            out.skip(src, "log line whose labels name no pod, service, job or instance")
            return
        ts = rfc3339(doc.get("timestamp"), src, "timestamp")
        out.logs.append(_row(ts, entity, _first(labels, LEVEL), str(doc.get("line") or ""), _first(labels, TRACE)))
        out.records["loki lines"] += 1
        return
    if doc.get("status") not in (None, "success"):
        raise src.error("status", f"the query failed ({str(doc.get('error') or doc.get('status'))[:80]})")
    for i, stream in enumerate(expect(doc["data"].get("result"), list, src, "data.result", "the streams")):
        where = f"data.result[{i}]"
        expect(stream, dict, src, where, "a stream")
        labels = expect(stream.get("stream") or {}, dict, src, f"{where}.stream", "the stream's labels")
        entity = _entity(labels, src, out)
        values = expect(stream.get("values") or [], list, src, f"{where}.values", "the entries")
        if entity is None:
            out.skip(src, "log line whose labels name no pod, service, job or instance", len(values))
            continue
        level, trace = _first(labels, LEVEL), _first(labels, TRACE)
        for n, entry in enumerate(values):
            at = f"{where}.values[{n}]"
            if not isinstance(entry, list) or len(entry) not in (2, 3) or not isinstance(entry[1], str):
                raise src.error(at, "an entry should be [\"nanoseconds\", \"line\"] (and metadata)")
            ts = instant(entry[0], "ns", src, at)
            meta = entry[2] if len(entry) == 3 and isinstance(entry[2], dict) else {}
            meta = {**(meta.get("structuredMetadata") or {}), **(meta.get("parsed") or {}),
                    **{k: v for k, v in meta.items() if k not in ("structuredMetadata", "parsed")}}
            out.logs.append(_row(ts, entity, _first(meta, LEVEL) or level, entry[1], _first(meta, TRACE) or trace))
            out.records["loki lines"] += 1
