"""Kubernetes: `kubectl get events -o json` and `kubectl get pods,deploy,rs -o json` (a `List` of items,
or one object), core `v1` events and `events.k8s.io/v1` ones alike.

- Pod: an entity with its service (the Deployment that owns its ReplicaSet, else its StatefulSet or
  DaemonSet, else its `app.kubernetes.io/name` or `app` label) and its node (`spec.nodeName`); its
  creation is a `Created` event, and each container that restarted a `Restarted` event at its last
  termination (reason and exit code in the message).
- ReplicaSet: a `Deployment` event of its Deployment at its creation (revision and images in the message):
  the rollouts. Deployment, StatefulSet, DaemonSet: a service; `app.kubernetes.io/component` of
  `database`, `cache` or `queue` (or a `db`, `mysql`, `postgres`, `redis`, `mongo` one) gives its kind.
- Event: (time, involved object, reason, message); an event about a ReplicaSet or a Deployment is its
  service's. Its time is `lastTimestamp`, else `eventTime`, else `firstTimestamp`, else its creation.
Other kinds of item (Service, ConfigMap, ...) are counted as skipped.
"""
from __future__ import annotations

from rcagent.exports import Collected, Source, expect, rfc3339

WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")
KIND_OF_COMPONENT = {"database": "database", "db": "database", "mysql": "database", "postgres": "database",
                     "postgresql": "database", "mongo": "database", "mongodb": "database", "cache": "cache",
                     "redis": "cache", "memcached": "cache", "queue": "queue", "broker": "queue"}
ITEM_KINDS = ("Pod", "ReplicaSet", "Event", *WORKLOADS)


def sniff(doc) -> bool:
    if not isinstance(doc, dict) or "apiVersion" not in doc:
        return False
    return doc.get("kind") in ITEM_KINDS or (str(doc.get("kind", "")).endswith("List") and "items" in doc)


def read(doc: dict, src: Source, out: Collected) -> None:
    items = (expect(doc["items"], list, src, "items", "the items") if "items" in doc else [doc])
    replica_sets: dict[str, str] = {}     # ReplicaSet -> Deployment, for pods listed before or after
    for item in items:
        if isinstance(item, dict) and item.get("kind") == "ReplicaSet":
            owner = _owner(item.get("metadata") or {}, ("Deployment",))
            if owner:
                replica_sets[(item.get("metadata") or {}).get("name")] = owner
    for i, item in enumerate(items):
        where = f"items[{i}]"
        expect(item, dict, src, where, "an item")
        kind = item.get("kind") or ("Event" if "involvedObject" in item or "regarding" in item else None)
        meta = expect(item.get("metadata") or {}, dict, src, f"{where}.metadata", "the metadata")
        if kind == "Pod":
            _pod(item, meta, replica_sets, src, where, out)
        elif kind == "ReplicaSet":
            _replica_set(item, meta, src, where, out)
        elif kind in WORKLOADS:
            _workload(meta, out)
        elif kind == "Event":
            _event(item, meta, replica_sets, src, where, out)
        else:
            out.skip(src, f"Kubernetes item of kind {str(kind)[:40]}")
            continue
        out.records[f"kubernetes {kind.lower()}s"] += 1


def _owner(meta: dict, kinds) -> str | None:
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("kind") in kinds and ref.get("name"):
            return str(ref["name"])
    return None


def _labels(meta: dict) -> dict:
    labels = meta.get("labels")
    return labels if isinstance(labels, dict) else {}


def _workload(meta: dict, out: Collected) -> str | None:
    name = meta.get("name")
    if not name:
        return None
    component = str(_labels(meta).get("app.kubernetes.io/component") or "").lower()
    kind = KIND_OF_COMPONENT.get(component, "service")
    if out.services.get(name) in (None, "service"):
        out.services[str(name)] = kind
    return str(name)


def _pod(item: dict, meta: dict, replica_sets: dict, src: Source, where: str, out: Collected) -> None:
    name = meta.get("name")
    if not name:
        out.skip(src, "pod without a name")
        return
    rs = _owner(meta, ("ReplicaSet",))
    labels = _labels(meta)
    service = (replica_sets.get(rs) or _owner(meta, ("StatefulSet", "DaemonSet"))
               or labels.get("app.kubernetes.io/name") or labels.get("app"))
    if not service and rs and "-" in rs:   # a ReplicaSet not listed: its name is the Deployment's plus a hash
        service = rs.rsplit("-", 1)[0]
    node = (item.get("spec") or {}).get("nodeName")
    out.pod(str(name), service and str(service), node and str(node))
    if meta.get("creationTimestamp"):
        out.events.append((rfc3339(meta["creationTimestamp"], src, f"{where}.metadata.creationTimestamp"), str(name),
                           "Created", f"pod created{f' by ReplicaSet {rs}' if rs else ''}"
                                      f"{f' on node {node}' if node else ''}"))
    for c in (item.get("status") or {}).get("containerStatuses") or []:
        if not isinstance(c, dict) or not c.get("restartCount"):
            continue
        last = ((c.get("lastState") or {}).get("terminated") or {})
        when = last.get("finishedAt") or (((c.get("state") or {}).get("running") or {}).get("startedAt"))
        if not when:
            out.skip(src, "container restart without a time")
            continue
        why = ", ".join(str(x) for x in (last.get("reason"), last.get("exitCode") is not None
                                         and f"exit code {last['exitCode']}") if x)
        out.events.append((rfc3339(when, src, f"{where}.status.containerStatuses"), str(name), "Restarted",
                           f"container {c.get('name')} restarted ({c['restartCount']} restarts in all)"
                           + (f"; last terminated: {why}" if why else "")))


def _replica_set(item: dict, meta: dict, src: Source, where: str, out: Collected) -> None:
    deployment = _owner(meta, ("Deployment",))
    if not deployment or not meta.get("creationTimestamp"):
        out.skip(src, "ReplicaSet without a Deployment or a creation time")
        return
    out.services.setdefault(deployment, "service")
    revision = (meta.get("annotations") or {}).get("deployment.kubernetes.io/revision")
    containers = ((((item.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [])
    images = ", ".join(str(c.get("image")) for c in containers if isinstance(c, dict) and c.get("image"))
    out.events.append((rfc3339(meta["creationTimestamp"], src, f"{where}.metadata.creationTimestamp"), deployment,
                       "Deployment", f"rollout of {deployment}: ReplicaSet {meta.get('name')} created"
                                     + (f" (revision {revision})" if revision else "")
                                     + (f", image {images}" if images else "")))


def _event(item: dict, meta: dict, replica_sets: dict, src: Source, where: str, out: Collected) -> None:
    obj = item.get("involvedObject") or item.get("regarding") or {}
    name, kind = obj.get("name"), obj.get("kind")
    if not name:
        out.skip(src, "event without an involved object")
        return
    if kind == "ReplicaSet":
        name = replica_sets.get(name) or (name.rsplit("-", 1)[0] if "-" in name else name)
        out.services.setdefault(str(name), "service")
    elif kind in WORKLOADS:
        out.services.setdefault(str(name), "service")
    elif kind == "Node":
        out.nodes.add(str(name))
    for key in ("lastTimestamp", "eventTime", "deprecatedLastTimestamp", "firstTimestamp"):
        if item.get(key):
            when = rfc3339(item[key], src, f"{where}.{key}")
            break
    else:
        if not meta.get("creationTimestamp"):
            out.skip(src, "event without a time")
            return
        when = rfc3339(meta["creationTimestamp"], src, f"{where}.metadata.creationTimestamp")
    message = item.get("message") or item.get("note") or ""
    out.events.append((when, str(name), item.get("reason") or None, str(message)))
