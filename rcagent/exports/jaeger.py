"""Jaeger: the JSON of its query API and UI export (`/api/traces`, `/api/traces/{id}`: `data[]`, each
trace with `spans` and `processes`).

`startTime` and `duration` are microseconds. The parent is the `CHILD_OF` reference (else the first
`FOLLOWS_FROM`, else `parentSpanID`). A span's process gives its service (`serviceName`) and its pod (the
`k8s.pod.name`, `hostname` or `pod` tag), and its node (`k8s.node.name`); the span's tags its status (an
`http.status_code` of 500 or more, else `error=true` as `ERROR`).
"""
from __future__ import annotations

from rcagent.exports import Collected, Source, expect, instant

POD_TAGS = ("k8s.pod.name", "pod", "hostname")


def sniff(doc) -> bool:
    return (isinstance(doc, dict) and isinstance(doc.get("data"), list)
            and all(isinstance(t, dict) and "spans" in t for t in doc["data"][:3]) and bool(doc["data"]))


def _tags(items) -> dict:
    if not isinstance(items, list):
        return {}
    return {t["key"]: t.get("value") for t in items if isinstance(t, dict) and "key" in t}


def _parent(span: dict) -> str | None:
    refs = [r for r in span.get("references") or [] if isinstance(r, dict)]
    for kind in ("CHILD_OF", "FOLLOWS_FROM"):
        ref = next((r for r in refs if r.get("refType") == kind and r.get("spanID")), None)
        if ref:
            return str(ref["spanID"]).lower()
    return str(span["parentSpanID"]).lower() if span.get("parentSpanID") else None


def read(doc: dict, src: Source, out: Collected) -> None:
    for i, trace in enumerate(doc["data"]):
        where = f"data[{i}]"
        processes = expect(trace.get("processes") or {}, dict, src, f"{where}.processes", "the processes")
        for k, span in enumerate(expect(trace.get("spans"), list, src, f"{where}.spans", "the spans")):
            at = f"{where}.spans[{k}]"
            expect(span, dict, src, at, "a span")
            if not span.get("traceID") or not span.get("spanID"):
                out.skip(src, "span without traceID or spanID")
                continue
            process = span.get("process") or processes.get(span.get("processID"))
            if not isinstance(process, dict) or not process.get("serviceName"):
                out.skip(src, "span whose process names no service")
                continue
            service = str(process["serviceName"])
            ptags = _tags(process.get("tags"))
            pod = next((str(ptags[t]) for t in POD_TAGS if ptags.get(t) not in (None, "")), None)
            if pod:
                out.pod(pod, service, ptags.get("k8s.node.name") or None)
            else:
                out.services.setdefault(service, "service")
            start = instant(span.get("startTime"), "us", src, f"{at}.startTime")
            try:
                duration_ms = float(span.get("duration") or 0) / 1000.0
            except (TypeError, ValueError):
                raise src.error(f"{at}.duration", "duration is not a number of microseconds") from None
            tags = _tags(span.get("tags"))
            http = tags.get("http.status_code") or tags.get("http.response.status_code")
            if http is not None and str(http).isdigit() and int(http) >= 500:
                status = str(http)
            elif tags.get("error") in (True, "true", "True"):
                status = "ERROR"
            else:
                status = str(http) if http is not None else None
            out.traces.append((str(span["traceID"]).lower(), str(span["spanID"]).lower(), _parent(span), start,
                               duration_ms, service, pod or service, str(span.get("operationName") or ""), status))
            out.records["jaeger spans"] += 1
