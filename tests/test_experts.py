"""The log expert: Louvain clusters of real logs, citations checked against real lines, bounded inputs."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rcagent.controller import Controller
from rcagent.experts.logcluster import MAX_LINES, cluster_logs
from rcagent.experts.logexpert import degenerate, real_lines, verify
from rcagent.job import Job
from rcagent.serving.scripted import ScriptedBackend
from tests.test_job import META, write

CONTACTS = "ts-contacts-service"
ERROR_LINE = "No contacts according to contactsId"


def test_clusters_of_a_real_job_put_the_error_cluster_first(contacts_job):
    clusters = cluster_logs(contacts_job, CONTACTS)
    assert len(clusters) >= 2
    first = clusters[0]
    assert first.error_like and any(ERROR_LINE in t for t in first.templates)
    lines = set(real_lines(contacts_job, CONTACTS))
    assert all(line in lines for c in clusters for line in c.examples)   # examples are real lines


def test_verify_keeps_real_citations_and_discards_invented_ones(contacts_job):
    lines = real_lines(contacts_job, CONTACTS)
    real = next(line for line in lines if ERROR_LINE in line)
    findings = [
        {"finding": "contacts are missing", "evidence": [real[:-3]]},            # a slightly cut real line
        {"finding": "the database is down", "evidence": ["ERROR c.s.ContactsServiceImpl#99 connection refused to mysql"]},
        {"finding": "too short to prove", "evidence": ["ERROR"]},
    ]
    kept, discarded = verify(findings, lines)
    assert discarded == 2 and [f["finding"] for f in kept] == ["contacts are missing"]
    assert kept[0]["evidence"] == [real]                                     # replaced by the real line


def expert_run(job, store, settings, evidence: list[str]):
    settings.experts = True
    call = {"thought": "read the logs", "action": "log_expert", "arguments": {"entity": CONTACTS}}
    answer = {"findings": [{"evidence": evidence[:1], "finding": "contacts not found errors rose"},
                           {"evidence": evidence[1:], "finding": "an invented outage"}]}
    final = {"thought": "done", "action": "finalize", "arguments": {
        "root_causes": [CONTACTS], "root_cause": "The contacts service fails to find contacts",
        "solution": "Roll back the contacts service", "evidence": ["contacts errors rose in the window"],
        "responsibility": "contacts team"}}
    backend = ScriptedBackend([json.dumps(call), "The error cluster grew.", json.dumps(answer), json.dumps(final)])
    d = Controller(job, backend, store, settings).run()
    return d, backend


def test_a_cited_id_stands_for_its_line(contacts_job, store, settings):
    from rcagent.experts.logexpert import choose_chunks, number_lines
    chunks, ids = number_lines(choose_chunks(cluster_logs(contacts_job, CONTACTS), contacts_job.alert))
    first_error = next(k for k, line in ids.items() if ERROR_LINE in line)
    d, _ = expert_run(contacts_job, store, settings, [first_error, "L999"])
    step = store.steps(d.run_id)[0]
    assert json.loads(step["expert"]) == {"clusters": len(cluster_logs(contacts_job, CONTACTS)), "kept": 1,
                                          "discarded": 1}
    assert f"evidence: {ids[first_error][:80]}" in step["observation"]


def test_log_expert_through_the_controller_reports_discarded_findings(contacts_job, store, settings):
    real = next(line for line in real_lines(contacts_job, CONTACTS) if ERROR_LINE in line)
    d, backend = expert_run(contacts_job, store, settings, [real, "16:42:00 ERROR mysql is down, connection refused"])
    assert d.finalized and d.invalid_steps == 0 and d.llm_calls == 4        # two of them the expert's
    # the expert's second call was constrained to the ids of the lines it was shown
    schema = backend.calls[2]["schema"]
    ids = schema["properties"]["findings"]["items"]["properties"]["evidence"]["items"]["enum"]
    assert ids[:2] == ["L1", "L2"] and f"[{ids[0]}] " in backend.calls[1]["messages"][0]["content"]
    step = store.steps(d.run_id)[0]
    assert step["action"] == "log_expert" and json.loads(step["expert"])["discarded"] == 1
    assert json.loads(step["expert"])["kept"] == 1
    assert "1 discarded (evidence matched no real line)" in step["observation"]
    assert f"evidence: {real[:100]}" in step["observation"]
    # the full clustering is behind a snapshot key
    assert step["snapshot"] and "Clusters (most changed first)" in store.snapshot(d.run_id, step["snapshot"])


def test_the_expert_tool_is_offered_only_when_experts_are_on(contacts_job, store, settings):
    from rcagent.experts import expert_tools
    from rcagent.tools import load_builtin_tools
    assert "log_expert" not in load_builtin_tools()
    assert expert_tools()["log_expert"].expert


def test_no_logs_gives_a_plain_answer(tmp_path, store, settings):
    job = Job.load(write(tmp_path / "j", entities="id,kind\ncart,service\n"))
    assert cluster_logs(job, "cart") == []
    from rcagent.experts import ExpertCalls, expert_tools
    from rcagent.tools import run_tool
    settings.experts = True
    c = Controller(job, ScriptedBackend([]), store, settings)
    out = run_tool(expert_tools()["log_expert"], job, {"entity": "cart"}, ctx=ExpertCalls(c.model, c.trajectory.expert_figures))
    assert "no log lines" in out and c.trajectory.expert_figures == {"clusters": 0, "kept": 0, "discarded": 0}


def _log_job(tmp_path, lines: list[str]):
    rows = ["timestamp,entity,level,message"]
    for i, line in enumerate(lines):
        minute = 10 + (i % 10) if i % 2 else i % 10          # half in the window, half in the baseline
        rows.append(f"2024-01-01T00:{minute:02d}:{i % 60:02d}Z,cart,INFO,{line}")
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "logs.csv").write_text("\n".join(rows) + "\n")
    return Job.load(write(tmp_path / "j", entities="id,kind\ncart,service\n"))


def test_one_huge_repeated_line_stays_bounded(tmp_path):
    job = _log_job(tmp_path, ["GET /cart 200 ok"] * (2 * MAX_LINES + 10_000))
    [cluster] = cluster_logs(job, "cart")
    assert cluster.examples == ["GET /cart 200 ok"]
    assert cluster.window + cluster.baseline == pytest.approx(2 * MAX_LINES + 10_000, rel=0.01)  # scaled back


def test_binary_junk_in_a_log_is_cleaned(tmp_path):
    junk = "\x00\x01\x02binary\x7f\x1b[31m ERROR payment failed \x03"
    job = _log_job(tmp_path, [junk] * 20 + ["normal line about checkout"] * 20)
    clusters = cluster_logs(job, "cart")
    examples = [line for c in clusters for line in c.examples]
    assert all(ch.isprintable() for line in examples for ch in line)
    assert any("ERROR payment failed" in line for line in examples)
    assert next(c for c in clusters if any("payment" in t for t in c.templates)).error_like


def test_degenerate_thoughts_are_recognized():
    assert degenerate("1. " + " ".join(f"{i}." for i in range(200)))
    assert degenerate("The incident is bad. " * 30)
    assert not degenerate("The error cluster of ts-contacts-service grew four times while its traffic grew "
                          "as much, so the errors follow the load; the NEW template about missing contacts "
                          "appears only in the window and points at the contacts lookup.")


# ---- code expert -------------------------------------------------------------------------------------
TRAVEL = """package travel.service;

import org.springframework.web.client.RestTemplate;
import travel.route.RouteService;

public class TravelServiceImpl {
    private RestTemplate rest;
    private RouteService routes;

    public Trip query(String id) {
        Route r = routes.getRoute(id);
        if (r == null) {
            return null;   // a missing route returns null to the caller
        }
        return new Trip(r);
    }
}
"""
ROUTE = """package travel.route;

public class RouteService {
    public Route getRoute(String id) {
        return repository.findById(id);
    }
}
"""


class Follower:
    """A scripted expert model that always recommends the first class it is offered."""
    name, model = "scripted", "follower"

    def __init__(self):
        self.calls = []

    def complete(self, messages, *, schema=None, n=1, temperature=0.0, max_tokens=1024):
        from rcagent.serving import Completion
        self.calls.append({"messages": messages, "schema": schema})
        offered = (schema or {}).get("properties", {}).get("next", {}).get("items", {}).get("enum") or []
        text = json.dumps({"summary": f"read call {len(self.calls)}", "next": offered[:1]})
        return [Completion(text, 10, 10)]


def code_job(tmp_path, files: dict[str, str]):
    folder = write(tmp_path / "job", entities="id,kind\ntravel,service\n")
    for rel, text in files.items():
        (folder / "code" / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / "code" / rel).write_text(text)
    return Job.load(folder)


def run_code_expert(job, target, backend, store, settings):
    from rcagent.experts import ExpertCalls, expert_tools
    from rcagent.tools import run_tool
    settings.experts = True
    c = Controller(job, backend, store, settings)
    return run_tool(expert_tools()["code_expert"], job, {"target": target}, ctx=ExpertCalls(c.model, c.trajectory.expert_figures)), c


def test_code_expert_follows_the_code_and_stops_at_external_dependencies(tmp_path, store, settings):
    job = code_job(tmp_path, {"travel/service/TravelServiceImpl.java": TRAVEL, "travel/route/RouteService.java": ROUTE})
    out, c = run_code_expert(job, "t.s.TravelServiceImpl#13", Follower(), store, settings)
    assert out.startswith("Code expert on t.s.TravelServiceImpl#13: read 2 file(s); stopped because the queue was exhausted")
    assert "travel/service/TravelServiceImpl.java lines 1-17: read call 1" in out
    assert "travel/route/RouteService.java lines 1-7: read call 2" in out
    assert "org.springframework.web.client.RestTemplate" in out
    first = c.backend.calls[0]
    assert "   13             return null;" in first["messages"][0]["content"]       # numbered lines
    assert first["schema"]["properties"]["next"]["items"]["enum"] == ["RouteService"]
    assert c.trajectory.expert_figures == {"files": 2, "queued_left": 0, "external": 1}
    assert "code_expert" in Controller(job, Follower(), store, settings).tools


def test_code_expert_reads_nothing_outside_code(tmp_path, store, settings):
    outside = tmp_path / "secret.java"
    outside.write_text("class Secret { String password = \"hunter2\"; }")
    job = code_job(tmp_path, {"travel/TravelServiceImpl.java": TRAVEL})
    (job.path / "code" / "Secret.java").symlink_to(outside)
    (job.path / "code" / "linked").symlink_to(tmp_path, target_is_directory=True)
    for target in ("../../secret.java", str(outside), "Secret", "Secret.java", "linked/secret.java", "../job.yaml"):
        out, _ = run_code_expert(job, target, Follower(), store, settings)
        assert "not a file or class under code/" in out and "hunter2" not in out, target


def test_code_expert_caps_the_size_it_reads(tmp_path, store, settings):
    from rcagent.experts.codeexpert import MAX_BYTES, read_window
    job = code_job(tmp_path, {"Big.java": "// filler line\n" * (MAX_BYTES // 5)})
    text, start, end = read_window(job.path / "code" / "Big.java", 10_000_000)
    assert end <= MAX_BYTES // 15 + 1 and text.count("\n") <= 2 * 40


def test_code_expert_is_not_offered_without_code(contacts_job, store, settings):
    settings.experts = True
    c = Controller(contacts_job, ScriptedBackend([]), store, settings)
    assert "log_expert" in c.tools and "code_expert" not in c.tools


def test_code_expert_on_a_real_installed_package(tmp_path, store, settings):
    """A real code tree: json_repair's source, copied into a job. The incident we describe: a log pipeline
    that repairs model output with json_repair returned a truncated object; the frame points at the parser."""
    import shutil
    import json_repair
    src = Path(json_repair.__file__).parent
    job = code_job(tmp_path, {})
    shutil.copytree(src, job.path / "code" / "json_repair", ignore=shutil.ignore_patterns("__pycache__"))
    out, c = run_code_expert(job, "json_repair/json_parser.py:40", Follower(), store, settings)
    assert out.startswith("Code expert on json_repair/json_parser.py:40: read ")
    assert "json_repair/json_parser.py lines 1-80" in out
    # it followed a module the parser mentions, inside the package
    read = [line for line in out.splitlines() if line.startswith("json_repair/")]
    assert len(read) >= 2 and all(" lines " in line for line in read)


@pytest.mark.model
def test_code_expert_with_the_real_model_on_an_installed_package(tmp_path, store):
    """The same incident with SmolLM2: the expert must stay inside code/, name files and lines it read,
    and recommend only classes that exist in the tree (the grammar enumerates them)."""
    import shutil

    import json_repair

    from rcagent.config import Settings
    from rcagent.serving import make_backend
    job = code_job(tmp_path, {})
    shutil.copytree(Path(json_repair.__file__).parent, job.path / "code" / "json_repair",
                    ignore=shutil.ignore_patterns("__pycache__"))
    settings = Settings(backend="local", store=str(tmp_path / "s.db"))
    out, c = run_code_expert(job, "json_repair/json_parser.py:40", make_backend(settings), store, settings)
    assert out.startswith("Code expert on json_repair/json_parser.py:40: read ") and c.model.llm_calls >= 1
    read = [m.group(1) for line in out.splitlines() if (m := re.match(r"(\S+) lines \d+-\d+:", line))]
    assert read and read[0] == "json_repair/json_parser.py" and len(read) <= 4
    assert all((job.path / "code" / path).is_file() for path in read)
