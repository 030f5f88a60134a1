"""Prometheus: the JSON of `/api/v1/query_range` (`resultType` `matrix`; `vector` from `/api/v1/query` too),
one file per query or several results in one file.

`values` are `[unix seconds, "value"]` pairs, the value a string; `"NaN"`, `"+Inf"` and `"-Inf"` samples
are counted and left out (a job reads NaN as missing anyway). The series' labels give:
- the entity: `pod` (also `pod_name`, `kubernetes_pod_name`), else a service (`service`, `service_name`,
  `app_kubernetes_io_name`, `app`), else a node (`node`, `kubernetes_node`, `nodename`), else `job`, else
  `instance`; a pod's `service`-like and `node`-like labels name its service and node;
- the metric: `__name__` (a query result without one, such as `rate(x[1m])`, takes the file's name), with
  the labels that are neither the entity's nor scrape bookkeeping as `name{key=value}`.
A raw counter (a `__name__` ending in `_total` or `_bucket`, the Prometheus naming rules) is a running
total: its level says how long the process has run, not how it behaves, and compared with an earlier
baseline it always looks risen. It is read as its per-second increase, named as a recording rule would
name it (`http_requests_total{code=500}` -> `http_requests{code=500}:rate`), a fall taken for a reset.
A histogram's or summary's `_sum` and `_count` of the same labels become its mean and rate
(`http_request_duration_seconds:mean`, `:rate`), as OTLP's cumulative histograms do. A series so named
that goes up and down, or a `_count` with no `_sum` (a gauge of open connections), stays as it is
(Collected._counters).
Tempo's and the OpenTelemetry collector's service-graph series (`traces_service_graph_request_total`
and the like, labels `client` and `server`) give the call relations and are not kept as metrics.
"""
from __future__ import annotations

import math
from pathlib import Path

from rcagent.exports import Collected, Source, expect, instant

POD = ("pod", "pod_name", "kubernetes_pod_name")
SERVICE = ("service", "service_name", "app_kubernetes_io_name", "app")
NODE = ("node", "kubernetes_node", "nodename")
BOOKKEEPING = {"__name__", "job", "instance", "namespace", "container", "endpoint", "prometheus", "id", "image",
               "name", "uid", "pod_template_hash", "kubernetes_namespace", "container_name", "metrics_path",
               *POD, *SERVICE, *NODE}
SERVICE_GRAPH = "traces_service_graph_"
COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


def sniff(doc) -> bool:
    return (isinstance(doc, dict) and isinstance(doc.get("data"), dict)
            and doc["data"].get("resultType") in ("matrix", "vector"))


def _first(labels: dict, keys) -> str | None:
    return next((str(labels[k]) for k in keys if labels.get(k) not in (None, "")), None)


def read(doc: dict, src: Source, out: Collected) -> None:
    if doc.get("status") not in (None, "success"):
        raise src.error("status", f"the query failed ({str(doc.get('error') or doc.get('status'))[:80]})")
    data = doc["data"]
    fallback = Path(src.file).name.split(".")[0]
    for i, series in enumerate(expect(data.get("result"), list, src, "data.result", "the results")):
        where = f"data.result[{i}]"
        expect(series, dict, src, where, "a series")
        labels = expect(series.get("metric") or {}, dict, src, f"{where}.metric", "the labels")
        name = str(labels.get("__name__") or fallback)
        if name.startswith(SERVICE_GRAPH) and labels.get("client") and labels.get("server"):
            out.calls.add((str(labels["client"]), str(labels["server"])))
            out.services.setdefault(str(labels["client"]), "service")
            out.services.setdefault(str(labels["server"]), "service")
            out.records["prometheus service-graph series"] += 1
            continue
        pod, service, node = _first(labels, POD), _first(labels, SERVICE), _first(labels, NODE)
        if pod:
            out.pod(pod, service, node)
            entity = pod
        elif service:
            out.services.setdefault(service, "service")
            entity = service
        elif node:
            out.nodes.add(node)
            entity = node
        else:
            entity = _first(labels, ("job", "instance"))
            if entity is None:
                out.skip(src, "series whose labels name no pod, service, node, job or instance")
                continue
            out.services.setdefault(entity, "service")
        rest = {k: v for k, v in labels.items() if k not in BOOKKEEPING}
        braces = "{" + ",".join(f"{k}={rest[k]}" for k in sorted(rest)) + "}" if rest else ""
        metric = name + braces
        counter = None   # the points of a series named as a counter, judged when every file is read
        suffix = next((s for s in COUNTER_SUFFIXES if name.endswith(s)), None)
        if labels.get("__name__") and suffix:
            counter = out.counters.setdefault((entity, name.removesuffix(suffix), braces, suffix), [])
        points = series["values"] if "values" in series else [series.get("value")]
        for n, pair in enumerate(expect(points, list, src, f"{where}.values", "the samples")):
            at = f"{where}.values[{n}]"
            if not isinstance(pair, list) or len(pair) != 2:
                raise src.error(at, "a sample should be [unix seconds, \"value\"]")
            ts = instant(pair[0], "s", src, at)
            try:
                value = float(pair[1])
            except (TypeError, ValueError):
                raise src.error(at, f"value {str(pair[1])[:30]!r} is not a number") from None
            if not math.isfinite(value):
                out.skip(src, "NaN or infinite sample")
                continue
            if counter is None:
                out.metrics.append((ts, entity, metric, value))
            else:
                counter.append((ts, value))
            out.records["prometheus samples"] += 1
