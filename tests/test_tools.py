"""Information tools on real jobs: entity parameter, window against baseline, rises and drops."""
from __future__ import annotations

import shutil

import duckdb
import pytest

from rcagent.errors import UnknownEntity
from rcagent.job import Job
from rcagent.tools import load_builtin_tools, run_tool
from rcagent.tools.overview import ranking

TOOLS = load_builtin_tools()


def test_registry_keeps_tools_minimal():
    assert {"overview", "metrics", "logs", "calls", "events", "topology"} <= set(TOOLS)
    for tool in TOOLS.values():
        assert len(tool.params) <= 2 and tool.doc
        entity_params = [p for p in tool.params if p.entity]
        assert len(entity_params) <= 1


def test_logs_fold_new_error_template(contacts_job):
    text = run_tool(TOOLS["logs"], contacts_job, {"entity": "ts-contacts-service"})
    assert "NEW" in text and "No contacts according to contactsId" in text
    line = next(l for l in text.splitlines() if "NEW" in l)
    assert "<hex>" in line  # trace ids masked, so repeats fold into one template


def test_logs_query_searches_all_lines(contacts_job):
    text = run_tool(TOOLS["logs"], contacts_job, {"entity": "ts-contacts-service", "query": "findContactsById"})
    assert 'lines matching "findContactsById"' in text


def test_metrics_compare_window_with_baseline(contacts_job):
    text = run_tool(TOOLS["metrics"], contacts_job, {"entity": "ts-contacts-service", "metric": "cpu"})
    assert "CpuUsageRate(%)" in text and "baseline" in text and "MemoryUsage" not in text


def test_calls_show_callers_rates_and_gap(contacts_job):
    text = run_tool(TOOLS["calls"], contacts_job, {"entity": "ts-contacts-service"})
    assert "ts-preserve-service" in text and "gap" in text and "08:43" in text


def test_calls_gap_is_caller_span_minus_callee_span(contacts_job):
    from rcagent.tools.calls import edges
    edges(contacts_job)
    row = contacts_job.query("""
        SELECT e.gap_ms, p.duration_ms - c.duration_ms FROM edges e
        JOIN traces c ON c.trace_id = e.trace_id AND c.start = e.start AND c.entity = e.callee_pod
        JOIN traces p ON p.span_id = c.parent_id AND p.trace_id = c.trace_id
        WHERE e.gap_ms IS NOT NULL LIMIT 1""")[0]
    assert row[0] == pytest.approx(row[1])


def test_topology_and_events(contacts_job):
    text = run_tool(TOOLS["topology"], contacts_job, {"entity": "ts-contacts-service-866bd68c97-xcqfx"})
    assert "service: ts-contacts-service" in text and "node: 33.33.33." in text
    assert "no events table" in run_tool(TOOLS["events"], contacts_job, {"entity": "ts-contacts-service"})


def test_unknown_entity_says_did_you_mean(contacts_job):
    with pytest.raises(UnknownEntity) as err:
        run_tool(TOOLS["metrics"], contacts_job, {"entity": "contact-svc"})
    assert "ts-contacts-service" in err.value.suggestions


def test_overview_ranks_real_cpu_fault(job_of):
    # SockShop user-cpu: the CPU hog's service must top the ranking
    job = Job.load(job_of("user-cpu/1"))
    assert ranking(job)[0][0] == "user"
    assert run_tool(TOOLS["overview"], job, {}).splitlines()[2].split()[1] == "user"


def test_overview_ranks_a_service_that_stops_receiving_calls(tmp_path, job_of):
    """Drop every span of ts-travel-service in the window of a real job: the silent service must rank high."""
    src = job_of("2023-01-29_08_43")
    dst = tmp_path / "silent"
    shutil.copytree(src, dst)
    job = Job.load(src)
    w = job.window
    duckdb.execute(f"""COPY (SELECT * FROM read_parquet('{src / 'traces.parquet'}')
                     WHERE NOT (service = 'ts-travel-service' AND start >= TIMESTAMP '{w.start}'
                                AND start < TIMESTAMP '{w.end}'))
                     TO '{dst / 'traces.parquet'}' (FORMAT parquet)""")
    silent = Job.load(dst)
    top = [e for e, _, _ in ranking(silent, "service")[:3]]
    assert "ts-travel-service" in top
    assert "DISAPPEARED" in run_tool(TOOLS["calls"], silent, {"entity": "ts-travel-service", "direction": "out"}) \
        or "incoming calls" in " ".join(r for e, _, rs in ranking(silent) if e == "ts-travel-service" for r in rs)


def test_tools_answer_on_every_system(job_of):
    for case in ("2022-08-22_05_18", "carts-mem/1", "low_traffic/train/issue_0"):
        job = Job.load(job_of(case))
        top = ranking(job)[0][0]
        for name in ("metrics", "logs", "calls", "events", "topology"):
            assert run_tool(TOOLS[name], job, {"entity": top}).strip()


def test_tools_without_data_are_not_offered(job_of, contacts_job, tmp_path):
    """A SockShop job has metrics only: logs, calls, events and the log expert could only say "no data"."""
    from rcagent.controller import Controller
    from rcagent.config import Settings
    from rcagent.serving.scripted import ScriptedBackend
    from rcagent.store import Store

    store, settings = Store(tmp_path / "s.db"), Settings(backend="scripted", experts=True)
    sockshop = Controller(Job.load(job_of("carts-mem/1")), ScriptedBackend([]), store, settings)
    assert set(sockshop.tools) == {"overview", "metrics", "topology"}
    trainticket = Controller(contacts_job, ScriptedBackend([]), store, settings)
    assert {"logs", "calls", "log_expert"} <= set(trainticket.tools) and "events" not in trainticket.tools


def test_call_rates_are_judged_against_user_traffic(tmp_path):
    """Synthetic edge case: traffic doubles; a service that doubles with it is normal, one that merely keeps its
    rate receives fewer calls than the traffic brings (a quarter of them)."""
    meta = ("id: t\nalert: busy\nwindow: {start: '2024-01-01T00:10:00Z', end: '2024-01-01T00:20:00Z'}\n"
            "baseline: [{start: '2024-01-01T00:00:00Z', end: '2024-01-01T00:10:00Z'}]\n")
    (tmp_path / "job.yaml").write_text(meta)
    (tmp_path / "entities.csv").write_text("id,kind\nfront,service\nsteady,service\nhot,service\n")
    rows = ["trace_id,span_id,parent_id,start,duration_ms,service,entity,operation,status"]

    def trace(i, minute, second, callees):
        root = f"r{i}"
        rows.append(f"t{i},{root},,2024-01-01 00:{minute:02d}:{second:02d},10,front,front,GET /,")
        for k, svc in enumerate(callees):
            rows.append(f"t{i},{root}-{k},{root},2024-01-01 00:{minute:02d}:{second:02d},5,{svc},{svc},call,")

    n = 0
    for minute in range(10):          # baseline: 20 requests a minute, each calls steady and hot
        for j in range(20):
            trace(n, minute, j, ["steady", "hot"])
            n += 1
    for minute in range(10, 20):      # window: 40 a minute (traffic x2); only every 4th calls hot (10, not 40)
        for j in range(40):
            trace(n, minute, j, ["steady"] + (["hot"] if j % 4 == 0 else []))
            n += 1
    (tmp_path / "traces.csv").write_text("\n".join(rows) + "\n")
    job = Job.load(tmp_path)
    from rcagent.tools.call_signals import traffic_factor
    assert traffic_factor(job) == pytest.approx(2.0)
    ranked = {e: reasons for e, _, reasons in ranking(job)}
    assert any("incoming calls 40->10/min" in r for r in ranked["hot"])
    assert not any("incoming calls" in r for r in ranked.get("steady", []))
    assert "2.0x the baseline" in run_tool(TOOLS["overview"], job, {})
