"""Elasticsearch and OpenSearch: log documents as a `_search` returns them (`hits.hits[]._source`), or one
hit per line as `elasticdump` and scroll scripts write them (`{"_index", "_source"}`).

The fields are those Filebeat, Fluent Bit and Fluentd's Kubernetes metadata give, nested or dotted alike
(`{"kubernetes": {"pod": {"name": ...}}}` is `kubernetes.pod.name`):
- the time: `@timestamp` (RFC 3339, or milliseconds since the epoch as a number or digits), else
  `timestamp`, else `time`;
- the entity: the pod (`kubernetes.pod.name`, `kubernetes.pod_name`, `k8s.pod.name`), its service
  (`service.name`, `kubernetes.labels.app.kubernetes.io/name` and other label spellings, `kubernetes.labels.app`,
  `kubernetes.container.name`) and node (`kubernetes.node.name`, `kubernetes.host`, `host.name`); without a
  pod, the service, else the host;
- the line: `message`, else `log` (Fluentd's raw line), else `msg`;
- the level: `log.level`, `level` or `severity`, else the level the line states (rcagent.logline); the
  trace id: `trace.id`, `trace_id` or `traceId`, else one the line states;
- an exception recorded beside the line (ECS's `error.stack_trace`, else `error.type` and `error.message`;
  logstash-logback-encoder's `stack_trace`) follows the line on the lines after it.
A document that names no time or no entity is counted as skipped.
"""
from __future__ import annotations

from rcagent.exports import EXCEPTIONS, Collected, Source, expect, instant, rfc3339
from rcagent.exports.multiline import with_exception
from rcagent.logline import described

TIME = ("@timestamp", "timestamp", "time")
POD = ("kubernetes.pod.name", "kubernetes.pod_name", "k8s.pod.name")
SERVICE = ("service.name", "kubernetes.labels.app_kubernetes_io/name", "kubernetes.labels.app_kubernetes_io_name",
           "kubernetes.labels.app.kubernetes.io/name", "kubernetes.labels.app", "kubernetes.container.name",
           "kubernetes.container_name")
NODE = ("kubernetes.node.name", "kubernetes.host", "host.name", "host.hostname")
MESSAGE = ("message", "log", "msg")
LEVEL = ("log.level", "level", "severity")
TRACE = ("trace.id", "trace_id", "traceId")
STACK = ("error.stack_trace", "stack_trace")


def sniff(doc) -> bool:
    if not isinstance(doc, dict):
        return False
    hits = doc.get("hits")
    return (isinstance(hits, dict) and isinstance(hits.get("hits"), list)) or (
        "_index" in doc and isinstance(doc.get("_source"), dict))


def field(source: dict, name: str):
    """A field of a document by its dotted name, whether the document nests it or spells it dotted."""
    if name in source:
        return source[name]
    head, dot, rest = name.partition(".")
    while dot:
        inner = source.get(head)
        if isinstance(inner, dict):
            found = field(inner, rest)
            if found is not None:
                return found
        step, dot, rest = rest.partition(".")
        head = f"{head}.{step}"
    return None


def _first(source: dict, names) -> str | None:
    for name in names:
        value = field(source, name)
        if value not in (None, "") and not isinstance(value, (dict, list)):
            return str(value)
    return None


def _hit(hit, src: Source, where: str, out: Collected) -> None:
    expect(hit, dict, src, where, "a hit")
    source = expect(hit.get("_source"), dict, src, f"{where}._source", "the document")
    when = next((v for v in (field(source, k) for k in TIME) if v not in (None, "")), None)
    if when is None:
        out.skip(src, "document with no @timestamp")
        return
    at = f"{where}._source.@timestamp"
    epoch = isinstance(when, (int, float)) or (isinstance(when, str) and when.isdigit())
    ts = instant(when, "ms", src, at) if epoch else rfc3339(when, src, at)
    pod, service, node = _first(source, POD), _first(source, SERVICE), _first(source, NODE)
    if pod:
        out.pod(pod, service, node)
    elif service:
        out.services.setdefault(service, "service")
    entity = pod or service or node
    if entity == node and node:
        out.nodes.add(node)
    if entity is None:
        out.skip(src, "document that names no pod, service or host")
        return
    line = _first(source, MESSAGE) or ""
    trace = _first(source, TRACE)
    level, trace = described(line, _first(source, LEVEL), trace.lower() if trace else None)
    line, added = with_exception(line, _first(source, ("error.type",)), _first(source, ("error.message",)),
                                 _first(source, STACK))
    if added:
        out.records[EXCEPTIONS] += 1
    out.logs.append((ts, entity, level, line, trace))
    out.records["elasticsearch documents"] += 1


def read(doc: dict, src: Source, out: Collected) -> None:
    if "_source" in doc:     # one hit per line
        _hit(doc, src, "hit", out)
        return
    for i, hit in enumerate(doc["hits"]["hits"]):
        _hit(hit, src, f"hits.hits[{i}]", out)
