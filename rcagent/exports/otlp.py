"""OpenTelemetry OTLP JSON: what the collector's `file` exporter writes (one export request per line:
`resourceSpans`, `resourceMetrics` or `resourceLogs`), or one such object per file.

As the OTLP/JSON encoding specifies: int64 fields (times, counts, `asInt`) are decimal strings (numbers are
accepted too), trace and span ids are hex strings, enums are integers (their names are accepted). A record
is named by its path in the request (`resourceSpans[0].scopeSpans[1].spans[4]`).

- The entity of a span, log record or data point is `k8s.pod.name` (its service `service.name`, its node
  `k8s.node.name`), else `service.name`; data point attributes override the resource's.
- Spans: `name` is the operation; an HTTP status attribute is the status, else status code 2 is `ERROR`.
- Metrics: gauges, delta sums and non-monotonic cumulative sums (an UpDownCounter: a level, such as the
  requests in flight; `isMonotonic` is left out when false) as they are; monotonic cumulative sums become
  per-second rates (`name:rate`);
  histograms (explicit and exponential) a mean (`name:mean`, from sum and count) and a rate of
  observations (`name:rate`); summaries one series per quantile. Other data point attributes name the
  series (`name{key=value}`). A unit of time or a percentage (`unit` `s`, `ms`, `%`) ends the name of a
  value in it (a gauge, a quantile, a histogram's mean: `http.server.request.duration:mean(s)`), where the
  ranking reads it: a 2 ms blip on a 5 ms latency is no change, whatever the series' own spread. Rates
  carry no unit.
- Log records: `severityText`, else `severityNumber`, else the level the body states (a JSON or logfmt
  field, a level word near its start: rcagent.logline); `traceId`, else one the body states. An exception
  recorded beside the body (`exception.stacktrace`, else `exception.type` and `exception.message`, as the
  OpenTelemetry appenders of Java's and Python's loggers write it) follows the body on the lines after it.
"""
from __future__ import annotations

import json

from rcagent.exports import EXCEPTIONS, Collected, Source, expect, instant
from rcagent.exports.multiline import with_exception
from rcagent.logline import described

KINDS = ("resourceSpans", "resourceMetrics", "resourceLogs")
SCOPES = {"resourceSpans": ("scopeSpans", "instrumentationLibrarySpans"),
          "resourceMetrics": ("scopeMetrics", "instrumentationLibraryMetrics"),
          "resourceLogs": ("scopeLogs", "instrumentationLibraryLogs")}
IDENTITY = {"service.name", "service.namespace", "service.instance.id", "service.version", "k8s.pod.name",
            "k8s.pod.uid", "k8s.node.name", "k8s.namespace.name", "k8s.deployment.name", "k8s.container.name",
            "host.name", "telemetry.sdk.name", "telemetry.sdk.language", "telemetry.sdk.version"}
UNITS_NAMED = ("s", "ms", "%")   # kept in a series' name, as the ranking's unit-aware floors read it
HTTP_STATUS = ("http.response.status_code", "http.status_code")   # gRPC codes: the span status says
SEVERITY = ((21, "FATAL"), (17, "ERROR"), (13, "WARN"), (9, "INFO"), (5, "DEBUG"), (1, "TRACE"))
CUMULATIVE = 2   # AggregationTemporality


def sniff(doc) -> bool:
    return isinstance(doc, dict) and any(k in doc for k in KINDS)


def value_of(any_value):
    """An OTLP AnyValue as a Python value (arrays and key-value lists as JSON text)."""
    if not isinstance(any_value, dict):
        return any_value
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in any_value:
            return any_value[key]
    if "intValue" in any_value:
        try:
            return int(any_value["intValue"])
        except (TypeError, ValueError):
            return any_value["intValue"]
    if "arrayValue" in any_value:
        return json.dumps([value_of(v) for v in (any_value["arrayValue"] or {}).get("values") or []])
    if "kvlistValue" in any_value:
        return json.dumps(attributes((any_value["kvlistValue"] or {}).get("values")))
    if "bytesValue" in any_value:
        return any_value["bytesValue"]
    return None


def attributes(items) -> dict:
    if not isinstance(items, list):
        return {}
    return {kv["key"]: value_of(kv.get("value")) for kv in items if isinstance(kv, dict) and "key" in kv}


def _identity(out: Collected, attrs: dict) -> str | None:
    pod, service = attrs.get("k8s.pod.name"), attrs.get("service.name") or attrs.get("k8s.deployment.name")
    pod = str(pod) if pod not in (None, "") else None
    service = str(service) if service not in (None, "") else None
    if pod:
        out.pod(pod, service, attrs.get("k8s.node.name") or None)
        return pod
    if service:
        out.services.setdefault(service, "service")
    return service


def read(doc: dict, src: Source, out: Collected) -> None:
    for kind in KINDS:
        if kind not in doc:
            continue
        for i, resource in enumerate(expect(doc[kind], list, src, kind, "the request's resources")):
            where = f"{kind}[{i}]"
            expect(resource, dict, src, where, "a resource entry")
            res_attrs = attributes((resource.get("resource") or {}).get("attributes"))
            scope_key = next((k for k in SCOPES[kind] if k in resource), SCOPES[kind][0])
            for j, scope in enumerate(expect(resource.get(scope_key) or [], list, src, f"{where}.{scope_key}", "the scopes")):
                at = f"{where}.{scope_key}[{j}]"
                expect(scope, dict, src, at, "a scope entry")
                if kind == "resourceSpans":
                    _spans(scope, res_attrs, src, at, out)
                elif kind == "resourceMetrics":
                    _metrics(scope, res_attrs, src, at, out)
                else:
                    _logs(scope, res_attrs, src, at, out)


def _spans(scope: dict, res_attrs: dict, src: Source, at: str, out: Collected) -> None:
    for k, span in enumerate(expect(scope.get("spans") or [], list, src, f"{at}.spans", "the spans")):
        where = f"{at}.spans[{k}]"
        expect(span, dict, src, where, "a span")
        if not span.get("traceId") or not span.get("spanId"):
            out.skip(src, "span without traceId or spanId")
            continue
        attrs = {**res_attrs, **attributes(span.get("attributes"))}
        entity = _identity(out, attrs)
        if entity is None:
            out.skip(src, "span whose resource names no service or pod")
            continue
        start = instant(span.get("startTimeUnixNano"), "ns", src, where + ".startTimeUnixNano")
        end = instant(span.get("endTimeUnixNano"), "ns", src, where + ".endTimeUnixNano")
        if end < start:
            raise src.error(where, "endTimeUnixNano is before startTimeUnixNano")
        try:      # the duration from the nanoseconds themselves (the instants keep microseconds)
            duration_ms = (int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])) / 1e6
        except (TypeError, ValueError):
            duration_ms = (end - start).total_seconds() * 1000.0
        code = (span.get("status") or {}).get("code")
        http = next((attrs[k] for k in HTTP_STATUS if attrs.get(k) not in (None, "")), None)
        if http is not None and str(http).isdigit() and int(http) >= 500:
            status = str(http)
        elif code in (2, "2", "STATUS_CODE_ERROR"):
            status = "ERROR"
        elif http is not None:
            status = str(http)
        elif code in (1, "1", "STATUS_CODE_OK"):
            status = "OK"
        else:
            status = None
        service = attrs.get("service.name") or attrs.get("k8s.deployment.name")
        out.traces.append((str(span["traceId"]).lower(), str(span["spanId"]).lower(),
                           str(span.get("parentSpanId") or "").lower() or None, start,
                           duration_ms, service and str(service), entity,
                           str(span.get("name") or ""), status))
        out.records["otlp spans"] += 1


def _point_value(point: dict, src: Source, where: str):
    for key in ("asDouble", "asInt"):
        if key in point:
            try:
                return float(point[key])
            except (TypeError, ValueError):
                raise src.error(where, f"{key} {str(point[key])[:30]!r} is not a number") from None
    return None


def _series_name(name: str, attrs: dict, extra: dict | None = None) -> str:
    labels = {k: v for k, v in attrs.items() if k not in IDENTITY}
    labels.update(extra or {})
    if not labels:
        return name
    return name + "{" + ",".join(f"{k}={labels[k]}" for k in sorted(labels)) + "}"


def _metrics(scope: dict, res_attrs: dict, src: Source, at: str, out: Collected) -> None:
    for k, metric in enumerate(expect(scope.get("metrics") or [], list, src, f"{at}.metrics", "the metrics")):
        where = f"{at}.metrics[{k}]"
        expect(metric, dict, src, where, "a metric")
        name = str(metric.get("name") or "")
        data_key = next((d for d in ("gauge", "sum", "histogram", "exponentialHistogram", "summary")
                         if d in metric), None)
        if not name or data_key is None:
            out.skip(src, "metric without a name or a known data type")
            continue
        data = expect(metric[data_key], dict, src, f"{where}.{data_key}", "the metric's data")
        cumulative = data.get("aggregationTemporality") in (CUMULATIVE, "AGGREGATION_TEMPORALITY_CUMULATIVE")
        if data_key == "sum" and data.get("isMonotonic") is not True:
            cumulative = False   # an UpDownCounter's cumulative value is a level, not a running total
        unit = f"({metric['unit']})" if metric.get("unit") in UNITS_NAMED else ""   # for values in it, not rates
        for n, point in enumerate(expect(data.get("dataPoints") or [], list, src, f"{where}.{data_key}.dataPoints",
                                         "the data points")):
            pwhere = f"{where}.{data_key}.dataPoints[{n}]"
            expect(point, dict, src, pwhere, "a data point")
            attrs = {**res_attrs, **attributes(point.get("attributes"))}
            entity = _identity(out, attrs)
            if entity is None:
                out.skip(src, "data point whose resource names no service or pod")
                continue
            ts = instant(point.get("timeUnixNano"), "ns", src, pwhere + ".timeUnixNano")
            if data_key in ("gauge", "sum"):
                value = _point_value(point, src, pwhere)
                if value is None:
                    out.skip(src, "data point without a value")
                    continue
                series = _series_name(name, attrs)
                if data_key == "sum" and cumulative:
                    out.cumulative.setdefault((entity, series + ":rate", "sum"), []).append((ts, value, None))
                else:
                    out.metrics.append((ts, entity, series + unit, value))
            elif data_key == "summary":
                for q in point.get("quantileValues") or []:
                    if isinstance(q, dict) and "value" in q:
                        series = _series_name(name, attrs, {"quantile": q.get("quantile", 0)})
                        out.metrics.append((ts, entity, series + unit, float(q["value"])))
            else:
                try:
                    count, total = float(point.get("count") or 0), float(point.get("sum") or 0)
                except (TypeError, ValueError):
                    raise src.error(pwhere, "count or sum is not a number") from None
                series = _series_name(name, attrs)
                if cumulative:
                    out.cumulative.setdefault((entity, series, "histogram"), []).append((ts, total, count))
                    out.units[series] = unit
                else:
                    start = point.get("startTimeUnixNano")
                    seconds = ((ts - instant(start, "ns", src, pwhere + ".startTimeUnixNano")).total_seconds()
                               if start not in (None, "", "0", 0) else 0)
                    if count > 0:
                        out.metrics.append((ts, entity, series + ":mean" + unit, total / count))
                    if seconds > 0:
                        out.metrics.append((ts, entity, series + ":rate", count / seconds))
            out.records["otlp data points"] += 1


def _logs(scope: dict, res_attrs: dict, src: Source, at: str, out: Collected) -> None:
    for k, record in enumerate(expect(scope.get("logRecords") or [], list, src, f"{at}.logRecords", "the log records")):
        where = f"{at}.logRecords[{k}]"
        expect(record, dict, src, where, "a log record")
        attrs = {**res_attrs, **attributes(record.get("attributes"))}
        entity = _identity(out, attrs)
        if entity is None:
            out.skip(src, "log record whose resource names no service or pod")
            continue
        when = record.get("timeUnixNano")
        if when in (None, "", "0", 0):
            when = record.get("observedTimeUnixNano")
        ts = instant(when, "ns", src, where + ".timeUnixNano")
        body = value_of(record.get("body"))
        level = record.get("severityText") or None
        number = record.get("severityNumber")
        if not level and isinstance(number, int):
            level = next((name for floor, name in SEVERITY if number >= floor), None)
        elif not level and isinstance(number, str) and number.startswith("SEVERITY_NUMBER_"):
            level = number.removeprefix("SEVERITY_NUMBER_").rstrip("0123456789") or None
        line = "" if body is None else str(body)
        level, trace = described(line, level, str(record.get("traceId") or "").lower() or None)
        line, added = with_exception(line, attrs.get("exception.type"), attrs.get("exception.message"),
                                     attrs.get("exception.stacktrace"))
        if added:
            out.records[EXCEPTIONS] += 1
        out.logs.append((ts, entity, level, line, trace))
        out.records["otlp log records"] += 1
