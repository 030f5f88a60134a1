"""The SQLite store: migrations, OBSK snapshots and paging, the model-call cache."""
from __future__ import annotations

from rcagent.store import MIGRATIONS, Store


def test_migrations_apply_once(tmp_path):
    path = tmp_path / "s.db"
    Store(path)
    again = Store(path)
    names = [r["name"] for r in again.db["_migrations"].rows]
    # each migration recorded once, in order, numbered without a gap
    assert names == [name for name, _ in MIGRATIONS]
    assert [int(n[:3]) for n in names] == list(range(1, len(names) + 1))
    assert names[:7] == ["001_initial", "002_stabilizers", "003_experts", "004_samples", "005_span_agents",
                         "006_owner", "007_graph_walk"]
    assert {"runs", "steps", "snapshots", "llm_cache", "graph_walk"} <= set(again.db.table_names())


def test_a_store_from_before_the_stabilizers_is_upgraded(tmp_path):
    import sqlite_utils
    from rcagent.store import _m001_initial
    old = sqlite_utils.Database(tmp_path / "old.db")
    _m001_initial(old)
    old["_migrations"].insert({"name": "001_initial", "applied": "2026-11-29"}, pk="name")
    old["steps"].insert({"run_id": "r", "step": 1, "action": "logs"})
    store = Store(tmp_path / "old.db")
    assert {"handler", "repairs"} <= set(store.db["steps"].columns_dict)
    assert store.steps("r")[0]["action"] == "logs"


def test_snapshots_are_keyed_per_run_and_listed(store):
    run = store.start_run("job", "/x", "scripted", "m", {})
    other = store.start_run("job", "/x", "scripted", "m", {})
    k1 = store.put_snapshot(run, 1, "logs", "a" * 5000)
    k2 = store.put_snapshot(run, 2, "calls", "b" * 10)
    store.put_snapshot(other, 1, "logs", "c")
    assert (k1, k2) == ("S1", "S2") and store.snapshot(run, k1) == "a" * 5000
    assert store.snapshot(other, "S1") == "c"
    assert [k["key"] for k in store.snapshot_keys(run)] == [k1, k2]
    assert store.snapshot(run, "nope") is None


def test_cache_is_keyed_by_the_full_request(store):
    req = {"backend": "b", "model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": 0}
    store.cache(req, [{"text": "x"}])
    assert store.cached(req) == [{"text": "x"}]
    assert store.cached({**req, "seed": 1}) is None


def test_steps_saved_and_run_ended(store):
    run = store.start_run("job", "/x", "scripted", "m", {})
    store.add_step(run, 1, thought="t", action="overview", arguments={}, valid=1)
    store.end_run(run, "finalized", {"root_causes": []})
    assert store.steps(run)[0]["action"] == "overview"
    assert store.get_run(run[:5])["status"] == "finalized"
