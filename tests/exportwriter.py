"""Write a job out as the exports an operations team has (for the round-trip tests of `rcagent job create`).

- metrics: Prometheus `/api/v1/query_range` JSON, one file per metric (a pod's series labelled `pod` and
  `namespace`, a node's `node` and `instance`, anything else `service`; a missing value as `"NaN"`), and
  the call relations as Tempo's service-graph series (`traces_service_graph_request_total`);
- spans: OTLP JSON lines as the collector's file exporter writes them (one resource per service and pod);
- logs: Loki `/loki/api/v1/query_range` JSON (one stream per entity and level; the trace id as structured
  metadata, as the categorize-labels encoding returns it), or each pod's container log file with neither
  (`logs="cri"`: /var/log/pods/NAMESPACE_POD_UID/CONTAINER/0.log, `"cri-rotated"` with its first two thirds in
  the rotated files 0.log.DATE-TIME.gz and 0.log.DATE-TIME; `"docker"`: json-file lines in
  /var/log/containers/POD_NAMESPACE_CONTAINER-ID.log; `"kubectl"`: `kubectl logs --timestamps` as POD.log;
  `"elasticsearch"`: `_search` responses of Filebeat's documents; `"cri-frames"`: as `"cri"`, every line that
  states the level ERROR followed by STACK_TRACE one frame a line, as a Java logger's `error(msg, e)` leaves
  it where no multiline stage joins it; `"otlp"`: OTLP log records as the collector's file exporter writes
  them, the level as `severityText`, the trace id as `traceId`, and on every line of level ERROR the
  exception STACK_TRACE as the attributes `exception.type`, `exception.message` and `exception.stacktrace`,
  as OpenTelemetry's logger appenders record `error(msg, e)`);
- events: `kubectl get events -o json`; pods and workloads: `kubectl get pods,deploy,rs -o json` (each pod
  owned by a ReplicaSet of its service's Deployment, on its node; a workload's kind as its
  `app.kubernetes.io/component` label; created a week before the window, so no change is invented).
"""
from __future__ import annotations

import datetime as dt
import json
import math
import re
from pathlib import Path

import duckdb

from rcagent.logline import described

EPOCH = dt.datetime(1970, 1, 1)
STACK_TRACE = ["java.lang.RuntimeException: request failed", "\tat com.example.Client.call(Client.java:88)",
               "\tat com.example.Service.handle(Service.java:31)",
               "Caused by: java.net.SocketTimeoutException: Read timed out",
               "\tat java.base/java.net.SocketInputStream.read(SocketInputStream.java:183)", "\t... 9 more"]


def nanos(ts: dt.datetime) -> int:
    delta = ts - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def rfc(ts: dt.datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%SZ")


def _rows(con, job: Path, table: str) -> list[tuple]:
    f = job / f"{table}.parquet"
    return con.execute("SELECT * FROM read_parquet(?)", [str(f)]).fetchall() if f.exists() else []


def _running_total(points: list, per_second: bool) -> list:
    """A rate's samples as a counter's: each sample adds its count (a per-second rate times the seconds
    since the previous sample; a missing one adds nothing), from an arbitrary start."""
    total, out = 1e6, []
    for i, (t, value) in enumerate(sorted(points)):
        if i and value != "NaN":
            total += float(value) * ((t - out[-1][0]) if per_second else 1)
        out.append([t, repr(total)])
    return out


def rfc_nanos(ts: dt.datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def _container_logs(rows: list[tuple], out: Path, form: str) -> None:
    """Each entity's log lines as its container's log file, in the format of `form`."""
    import gzip
    import hashlib
    import uuid
    by_entity: dict[str, list] = {}
    for ts, entity, _level, message, _trace in sorted(rows, key=lambda r: (r[1], r[0])):
        by_entity.setdefault(entity, []).append((ts, message.rstrip("\n")))
    for entity, lines in by_entity.items():
        digest = hashlib.sha256(entity.encode()).hexdigest()
        if form in ("cri", "cri-rotated", "cri-frames"):
            def cri(part: list) -> str:
                return "".join(f"{rfc_nanos(t)} stdout F {m}\n" + (
                    "".join(f"{rfc_nanos(t)} stderr F {frame}\n" for frame in STACK_TRACE)
                    if form == "cri-frames" and described(m)[0] == "ERROR" else "") for t, m in part)
            path = out / "var/log/pods" / f"default_{entity}_{uuid.UUID(digest[:32])}" / "app" / "0.log"
            text = cri(lines)
            if form == "cri-rotated" and len(lines) >= 3:   # the kubelet's rotation: older thirds, the oldest gzipped
                path.parent.mkdir(parents=True, exist_ok=True)
                third = len(lines) // 3
                (path.parent / "0.log.20000101-000000.gz").write_bytes(gzip.compress(cri(lines[:third]).encode()))
                (path.parent / "0.log.20000101-000100").write_text(cri(lines[third:2 * third]))
                text = cri(lines[2 * third:])
        elif form == "docker":
            path = out / "var/log/containers" / f"{entity}_default_app-{digest}.log"
            text = "".join(json.dumps({"log": m + "\n", "stream": "stdout", "time": rfc_nanos(t)}) + "\n"
                           for t, m in lines)
        else:
            path = out / "kubectl" / f"{entity}.log"
            text = "".join(f"{rfc_nanos(t)} {m}\n" for t, m in lines)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _otlp_logs(rows: list[tuple], entities: dict, out: Path) -> None:
    """The log lines as OTLP log records, one resource per pod (its service and node) or service."""
    kind, message = STACK_TRACE[0].split(": ", 1)
    exception = [{"key": "exception.type", "value": {"stringValue": kind}},
                 {"key": "exception.message", "value": {"stringValue": message}},
                 {"key": "exception.stacktrace", "value": {"stringValue": "\n".join(STACK_TRACE)}}]
    by_entity: dict[str, list] = {}
    for ts, entity, level, text, trace in sorted(rows, key=lambda r: (r[1], r[0])):
        record = {"timeUnixNano": str(nanos(ts)), "body": {"stringValue": text.rstrip("\n")}, "attributes": []}
        if level:
            record["severityText"] = level
        if trace:
            record["traceId"] = trace
        if level == "ERROR":
            record["attributes"] = exception
        by_entity.setdefault(entity, []).append(record)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "logs.jsonl").open("w") as fh:
        for entity, records in sorted(by_entity.items()):
            _, k, service, node = entities.get(entity) or (entity, None, None, None)
            attrs = [{"key": "service.name", "value": {"stringValue": service or entity}}]
            if k == "pod":
                attrs.append({"key": "k8s.pod.name", "value": {"stringValue": entity}})
                if node:
                    attrs.append({"key": "k8s.node.name", "value": {"stringValue": node}})
            for i in range(0, len(records), 1000):
                fh.write(json.dumps({"resourceLogs": [{"resource": {"attributes": attrs}, "scopeLogs": [
                    {"scope": {"name": "rcagent-test"}, "logRecords": records[i:i + 1000]}]}]}) + "\n")


def _search_pages(rows: list[tuple], entities: dict, out: Path, page: int = 10_000) -> None:
    """The log lines as Elasticsearch `_search` responses of `page` hits each (its default result window),
    each document as Filebeat ships a container's line: the pod and node as Kubernetes metadata, nested."""
    out.mkdir(parents=True, exist_ok=True)
    hits = []
    for n, (ts, entity, _level, message, _trace) in enumerate(sorted(rows, key=lambda r: (r[0], r[1]))):
        kube = {"pod": {"name": entity}, "namespace": "default"}
        if entities.get(entity) and entities[entity][3]:
            kube["node"] = {"name": entities[entity][3]}
        hits.append({"_index": "logs-k8s", "_id": str(n), "_source": {
            "@timestamp": rfc_nanos(ts), "message": message.rstrip("\n"), "stream": "stdout", "kubernetes": kube}})
    for k in range(0, len(hits), page):
        (out / f"search-{k // page}.json").write_text(json.dumps({"took": 3, "timed_out": False, "hits": {
            "total": {"value": len(hits), "relation": "eq"}, "hits": hits[k:k + page]}}))


def write_exports(job: Path, out: Path, counters: frozenset[str] = frozenset(),
                  counts: frozenset[str] = frozenset(), logs: str = "loki") -> dict:
    """Write `job`'s tables under `out` (prometheus/, otlp/, loki/ or logs/, kubernetes/); returns job.yaml's window
    and baseline as `--window`/`--baseline` texts. The metrics named in `counters` (rates per second) and
    in `counts` (counts a sample) are written as Prometheus counters, `NAME_total`: their running total
    from an arbitrary start, as a raw counter query returns them."""
    import yaml
    meta = yaml.safe_load((job / "job.yaml").read_text())
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    entities = {e[0]: e for e in _rows(con, job, "entities")}
    kind = {k: e[1] for k, e in entities.items()}
    for d in ("prometheus", "otlp", "loki", "kubernetes"):
        (out / d).mkdir(parents=True, exist_ok=True)

    def labels(entity: str) -> dict:
        if kind.get(entity) == "pod":
            return {"pod": entity, "namespace": "default", "job": "kubernetes-pods"}
        if kind.get(entity) == "node":
            return {"node": entity, "instance": f"{entity}:9100", "job": "node-exporter"}
        return {"service": entity, "namespace": "default", "job": "kubernetes-services"}

    series: dict[str, dict[str, list]] = {}
    for ts, entity, metric, value in _rows(con, job, "metrics"):
        value = "NaN" if value is None or not math.isfinite(value) else repr(float(value))
        series.setdefault(metric, {}).setdefault(entity, []).append([nanos(ts) / 1e9, value])
    for metric in (counters | counts) & series.keys():
        series[metric + "_total"] = {e: _running_total(points, metric in counters)
                                     for e, points in series.pop(metric).items()}
    for n, (metric, by_entity) in enumerate(sorted(series.items())):
        doc = {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"__name__": metric, **labels(e)}, "values": v} for e, v in sorted(by_entity.items())]}}
        slug = re.sub(r"[^A-Za-z0-9]+", "_", metric).strip("_")
        (out / "prometheus" / f"{n:02d}-{slug}.json").write_text(json.dumps(doc))
    calls = [(a, b) for a, b, k in _rows(con, job, "relations") if k == "calls"]
    if calls:
        at = nanos(dt.datetime.fromisoformat(meta["window"]["start"].rstrip("Z"))) / 1e9
        doc = {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"__name__": "traces_service_graph_request_total", "client": a, "server": b},
             "values": [[at, "1"]]} for a, b in calls]}}
        (out / "prometheus" / "service_graph.json").write_text(json.dumps(doc))

    spans: dict[tuple, list] = {}
    for trace, span, parent, start, ms, service, entity, op, status in _rows(con, job, "traces"):
        begin = nanos(start)
        record = {"traceId": trace, "spanId": span, "parentSpanId": parent or "", "name": op, "kind": 2,
                  "startTimeUnixNano": str(begin), "endTimeUnixNano": str(begin + round(ms * 1e6)),
                  "attributes": [], "status": {}}
        if status and status.isdigit():
            record["attributes"].append({"key": "http.response.status_code", "value": {"intValue": status}})
            if int(status) >= 500:
                record["status"] = {"code": 2}
        elif status == "ERROR":
            record["status"] = {"code": 2, "message": "error"}
        spans.setdefault((service, entity), []).append(record)
    with (out / "otlp" / "traces.jsonl").open("w") as fh:
        for (service, entity), records in sorted(spans.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
            attrs = [{"key": "service.name", "value": {"stringValue": service or entity}}]
            if kind.get(entity) == "pod":
                attrs.append({"key": "k8s.pod.name", "value": {"stringValue": entity}})
                if entities[entity][3]:
                    attrs.append({"key": "k8s.node.name", "value": {"stringValue": entities[entity][3]}})
            for i in range(0, len(records), 1000):   # the exporter writes a request per batch
                fh.write(json.dumps({"resourceSpans": [{"resource": {"attributes": attrs}, "scopeSpans": [
                    {"scope": {"name": "rcagent-test"}, "spans": records[i:i + 1000]}]}]}) + "\n")

    streams: dict[tuple, list] = {}
    if logs == "elasticsearch":
        _search_pages(_rows(con, job, "logs"), entities, out / "elasticsearch")
    elif logs == "otlp":
        _otlp_logs(_rows(con, job, "logs"), entities, out / "otlp")
    elif logs != "loki":
        _container_logs(_rows(con, job, "logs"), out / "logs", logs)
    for ts, entity, level, message, trace in _rows(con, job, "logs") if logs == "loki" else []:
        entry = [str(nanos(ts)), message]
        if trace:
            entry.append({"structuredMetadata": {"trace_id": trace}})
        streams.setdefault((entity, level), []).append(entry)
    result = []
    for (entity, level), values in sorted(streams.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        stream = dict(labels(entity))
        stream.pop("job")
        if level:
            stream["level"] = level
        result.append({"stream": stream, "values": values})
    if result:
        (out / "loki" / "query_range.json").write_text(json.dumps(
            {"status": "success", "data": {"resultType": "streams", "result": result, "stats": {}}}))

    events = [{"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"e{n}", "namespace": "default"},
               "involvedObject": {"kind": {"pod": "Pod", "node": "Node"}.get(kind.get(entity), "Deployment"),
                                  "name": entity, "namespace": "default"},
               "reason": reason, "message": message, "lastTimestamp": rfc(ts), "type": "Normal"}
              for n, (ts, entity, reason, message) in enumerate(_rows(con, job, "events"))]
    (out / "kubernetes" / "events.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": events}))

    created = rfc(dt.datetime.fromisoformat(meta["window"]["start"].rstrip("Z")) - dt.timedelta(days=7))
    items = []
    services = sorted({e[0] for e in entities.values() if e[1] not in ("pod", "node")}
                      | {e[2] for e in entities.values() if e[1] == "pod" and e[2]})
    for svc in services:
        labels_ = {"app.kubernetes.io/name": svc}
        if kind.get(svc) not in (None, "service"):
            labels_["app.kubernetes.io/component"] = kind[svc]
        items.append({"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": svc, "namespace": "default", "labels": labels_,
                                   "creationTimestamp": created}})
    for name, (_, k, svc, node) in sorted(entities.items()):
        if k != "pod" or not svc:
            continue
        rs = name.rsplit("-", 1)[0]
        items.append({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                      "metadata": {"name": rs, "namespace": "default", "creationTimestamp": created,
                                   "annotations": {"deployment.kubernetes.io/revision": "1"},
                                   "ownerReferences": [{"kind": "Deployment", "name": svc}]}})
        items.append({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": name, "namespace": "default", "creationTimestamp": created,
                                   "ownerReferences": [{"kind": "ReplicaSet", "name": rs}]},
                      "spec": {"nodeName": node} if node else {},
                      "status": {"phase": "Running", "containerStatuses": [{"name": svc, "restartCount": 0}]}})
    (out / "kubernetes" / "workloads.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))

    def span_text(p: dict) -> str:
        return f"{p['start']}..{p['end']}" + (f"@{','.join(p['tables'])}" if p.get("tables") else "")
    return {"window": span_text(meta["window"]),
            "baseline": [span_text(p) for p in meta.get("baseline") or []]}
