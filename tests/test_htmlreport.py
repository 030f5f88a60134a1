"""The HTML report opened in a real browser: Debian's Chromium, headless, driven by Playwright, with every
request that is not the page's own file refused. Skipped (with the reason) where no browser is installed.
Screenshots are kept in test-artifacts/ (or $RCAGENT_ARTIFACTS)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rcagent.store import Store
from tests.test_cli import rcagent

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("RCAGENT_ARTIFACTS", ROOT / "test-artifacts"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# as this machine's probe starts it: without the background-networking flags Chromium tries to reach
# Google's hosts at every start
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if not CHROMIUM:
        pytest.skip("no Chromium on this machine (apt-get install chromium)")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def open_offline(browser, page_file: Path):
    """The page in a fresh context where only file:// loads: returns (page, console errors, refused URLs)."""
    context = browser.new_context(viewport={"width": 1200, "height": 1400})
    refused, errors = [], []

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()
    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.resolve().as_uri())
    return page, errors, refused


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path


def test_a_real_trainticket_run_renders_every_part_offline(browser, job_of, tmp_path):
    from tests.conftest import CONTACTS_CASE
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"thought": "look at logs", "action": "logs", "arguments": {"entity": "ts-contacts-service"}},
        {"thought": "look again", "action": "logs", "arguments": {"entity": "ts-contacts-service"}},
        {"thought": "and its calls", "action": "calls", "arguments": {"entity": "ts-contacts-service"}},
        {"thought": "its metrics", "action": "metrics", "arguments": {"entity": "ts-contacts-service"}},
        {"thought": "done", "action": "finalize", "arguments": {
            "root_causes": ["ts-contacts-service"], "root_cause": "contacts fails", "solution": "fix it",
            "evidence": ["NEW ERROR line <script>document.title='pwned'</script>", "calls into it fail"],
            "responsibility": "contacts team"}}]))
    db, out, page_file = tmp_path / "s.db", tmp_path / "d.json", tmp_path / "run.html"
    r = rcagent("analyze", "--job", job_of(CONTACTS_CASE), "--backend", "scripted", "--script", script,
                "--store", db, "--out", out, "--html", page_file, "--quiet")
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    store = Store(db, create=False)
    steps, snapshots = store.steps(d["run_id"]), store.snapshot_keys(d["run_id"])

    page, errors, refused = open_offline(browser, page_file)
    shot = screenshot(page, "report-trainticket-run.png")
    assert shot.stat().st_size > 10_000
    assert errors == [] and refused == []
    assert page.title() == f"rcagent: {d['job']}"
    # the diagnosis
    assert page.locator("h1").inner_text() == f"Diagnosis of {d['job']}"
    assert page.locator("table.causes tr").count() == len(d["root_causes"]) + 1
    assert page.locator("table.causes tr").nth(1).inner_text().split("\t")[1] == "ts-contacts-service"
    assert page.locator(".root-cause").inner_text() == d["root_cause"]
    assert page.locator(".solution").inner_text() == d["solution"]
    # the evidence: every item, as text (the script tag stays text: nothing ran)
    items = page.locator("ul.evidence li")
    assert items.count() == len(d["evidence"]) and "<script>" in items.nth(0).inner_text()
    assert page.title() != "pwned"
    charts = page.locator("svg.chart")
    assert charts.count() >= 3
    for i in range(charts.count()):
        chart = charts.nth(i)
        assert chart.is_visible() and chart.locator("polyline").count() == 1
        assert chart.locator("rect.window").count() == 1
        assert chart.bounding_box()["width"] > 100
    # the investigation: every step, each verdict; the snapshots expand
    assert page.locator("li.step").count() == len(steps)
    assert page.locator("li.step .bad").count() >= 1          # the repeated call was refused
    details = page.locator("details.snapshot")
    assert details.count() == len(snapshots) >= 2
    first = details.nth(0)
    assert not first.locator("pre").is_visible()
    first.locator("summary").click()
    assert first.get_attribute("open") is not None and first.locator("pre").is_visible()
    assert "Entities ranked by anomaly score" in first.locator("pre").inner_text()
    # a step's link to its snapshot goes there
    link = page.locator("li.step a[href^='#snap-']").first
    target = link.get_attribute("href")
    link.click()
    assert page.url.endswith(target)
    # the figures
    figures = page.locator("table.figures").inner_text()
    assert "scripted" in figures and f"{d['steps']} (" in figures and "redacted" in figures
    page.context.close()


@pytest.mark.parametrize("mode", ["graph", "span"])
def test_graph_and_span_mode_pages_draw_their_picture(browser, job_of, tmp_path, mode):
    from tests.conftest import CONTACTS_CASE
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["not json"] * 400))     # the walk and the span tree run on the evidence
    page_file = tmp_path / f"{mode}.html"
    r = rcagent("analyze", "--job", job_of(CONTACTS_CASE), "--backend", "scripted", "--script", script,
                "--store", tmp_path / "s.db", "--mode", mode, "--html", page_file, "--quiet")
    assert r.returncode == 0, r.stderr
    page, errors, refused = open_offline(browser, page_file)
    screenshot(page, f"report-{mode}-mode.png")
    assert errors == [] and refused == []
    picture = page.locator(".picture svg")
    assert picture.count() == 1 and picture.is_visible()
    assert picture.locator("rect").count() >= 3
    if mode == "graph":
        assert page.locator("table.walk tr").count() >= 3
    page.context.close()


def test_the_batch_report_of_the_sixty_job_sample(browser, imported, tmp_path):
    dest = imported["dest"]
    db = tmp_path / "s.db"
    answer = json.dumps({"analysis": "The service fails.", "root_causes": ["ts-contacts-service"],
                         "solution": "Roll it back."})
    script = tmp_path / "script.json"
    script.write_text(json.dumps([answer] * 60))
    results = []
    for name, extra in (("nsigma", ["--method", "nsigma"]), ("overview", ["--method", "overview"]),
                        ("oneshot", ["--mode", "oneshot", "--backend", "scripted", "--script", script])):
        out = tmp_path / f"{name}.jsonl"
        r = rcagent("batch", "--jobs", dest / "jobs", "--out", out, "--sample", 60, "--seed", 0, "--store", db,
                    "--quiet", *extra)
        assert r.returncode == 0, r.stderr
        results.append(out)
    page_file = tmp_path / "evaluation.html"
    r = rcagent("report", "--batch", results[0], "--batch", results[1], "--batch", results[2],
                "--labels", dest / "labels", "--store", db, "--out", page_file)
    assert r.returncode == 0, r.stderr
    assert "60 run pages" in r.stdout
    page, errors, refused = open_offline(browser, page_file)
    screenshot(page, "report-batch-60.png")
    assert errors == [] and refused == []
    assert page.locator("table.methods tr").count() == 4            # header and three methods
    assert page.locator(".plot svg").count() == 1 and page.locator(".plot svg").is_visible()
    assert page.locator("table.cases tr").count() == 1 + 3 * 60
    links = page.locator("table.cases a")
    assert links.count() == 60                                       # the runs in the store: the one-shot ones
    links.first.click()
    page.wait_for_load_state()
    assert page.locator("h1").inner_text().startswith("Diagnosis of ")
    assert page.locator("li.step").count() >= 1 and errors == [] and refused == []
    page.context.close()


def test_report_errors_are_one_line(tmp_path):
    r = rcagent("report")
    assert r.returncode == 2 and "RUN_ID" in r.stderr
    Store(tmp_path / "s.db")
    r = rcagent("report", "nope", "--store", tmp_path / "s.db", "--out", tmp_path / "x.html")
    assert r.returncode == 2 and "no run 'nope'" in r.stderr and not (tmp_path / "x.html").exists()
    r = rcagent("report", "--batch", tmp_path / "missing.jsonl", "--labels", tmp_path, "--out", tmp_path / "e.html")
    assert r.returncode == 2 and "missing.jsonl" in r.stderr
