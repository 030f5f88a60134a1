"""Hostile job folders: job.yaml and the tables a careless or malicious source can produce. Each case is
held to the corpus's contract (tests/hostile.py).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from tests.hostile import META, Corpus

corpus = Corpus()
case = corpus.case


def analyze_with_meta(meta: str, says, name: str):
    """A job whose job.yaml is `meta`: analyze must refuse it with one line."""
    case(name, 2, says)(lambda b: b.analyze(b.job(meta=meta)) if b.script() else [])


# ---- job.yaml ----------------------------------------------------------------------------------------
GOOD = META.format(id="tiny")
for name, meta, says in [
    ("yaml-baseline-string", GOOD.replace("baseline: [", "baseline: 'yesterday' #["), "baseline"),
    ("yaml-baseline-int", GOOD.replace("baseline: [", "baseline: 5 #["), "baseline"),
    ("yaml-baseline-list-of-strings", GOOD.replace("baseline: [", "baseline: ['a', 'b'] #["), "baseline"),
    ("yaml-baseline-missing-end", GOOD.replace(", end: '2024-01-01T00:10:00Z'}]", "}]"), "baseline"),
    ("yaml-baseline-bad-time", GOOD.replace("start: '2024-01-01T00:00:00Z'", "start: 'noon'"), "not an ISO"),
    ("yaml-baseline-unknown-table", GOOD.replace("00:10:00Z'}]", "00:10:00Z', tables: [metricz]}]"), "metricz"),
    ("yaml-tables-list", GOOD + "tables: [metrics.csv]\n", "tables"),
    ("yaml-tables-string", GOOD + "tables: metrics.csv\n", "tables"),
    ("yaml-tables-unknown-name", GOOD + "tables: {metricz: m.csv}\n", "metricz"),
    ("yaml-tables-int-path", GOOD + "tables: {metrics: 5}\n", "tables.metrics"),
    ("yaml-tables-traversal", GOOD + "tables: {metrics: ../../outside/metrics.csv}\n", "outside the job"),
    ("yaml-tables-absolute", GOOD + "tables: {metrics: /etc/passwd}\n", "outside the job"),
    ("yaml-tables-missing-file", GOOD + "tables: {metrics: nope.csv}\n", "missing"),
    ("yaml-tables-bad-suffix", GOOD + "tables: {metrics: job.yaml}\n", "unsupported table format"),
    ("yaml-unknown-key", GOOD + "windwo: 1\n", "windwo: unknown key"),
    ("yaml-missing-id", GOOD.replace("id: tiny\n", ""), "id: missing"),
    ("yaml-missing-window", GOOD.replace("window:", "windowz:"), "window"),
    ("yaml-id-int", GOOD.replace("id: tiny", "id: 42"), "id"),
    ("yaml-id-list", GOOD.replace("id: tiny", "id: [a, b]"), "id"),
    ("yaml-id-empty", GOOD.replace("id: tiny", "id: ''"), "id"),
    ("yaml-alert-mapping", GOOD.replace("alert: checkout latency high", "alert: {a: 1}"), "alert"),
    ("yaml-system-int", GOOD.replace("system: test", "system: 7"), "system"),
    ("yaml-window-string", GOOD.replace("window: {start: '2024-01-01T00:10:00Z', end: '2024-01-01T00:20:00Z'}",
                                        "window: soon"), "window"),
    ("yaml-window-reversed", GOOD.replace("end: '2024-01-01T00:20:00Z'", "end: '2024-01-01T00:05:00Z'"),
     "ends before it starts"),
    ("yaml-window-bad-time", GOOD.replace("start: '2024-01-01T00:10:00Z'", "start: '2024-13-45T99:00:00Z'"),
     "not an ISO"),
    ("yaml-top-level-list", "- id: tiny\n", "expected a mapping"),
    ("yaml-top-level-string", "just text\n", "expected a mapping"),
    ("yaml-empty", "", "expected a mapping"),
    ("yaml-unclosed", "id: [oops\n", "not valid YAML"),
    ("yaml-alias-bomb", "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nid: *c\n", "aliases"),
    ("yaml-python-tag", "id: !!python/object/apply:os.system ['touch pwned']\n", "not valid YAML"),
    ("yaml-tab-indent", "id: tiny\n\twindow: x\n", "not valid YAML"),
]:
    analyze_with_meta(meta, says, name)


def _with_meta_bytes(b, data: bytes) -> list:
    job = b.job()
    (job / "job.yaml").write_bytes(data)
    b.script()
    return b.analyze(job)


case("yaml-not-utf8", 2, "not UTF-8")(lambda b: _with_meta_bytes(b, b"id: \xff\xfe tiny\n"))
case("yaml-binary", 2, "binary content")(lambda b: _with_meta_bytes(b, b"\x00\x01\x02ELF\x00" * 20))


@case("yaml-huge", 2, "bytes, more than")
def _(b):
    job = b.job()
    (job / "job.yaml").write_text(GOOD + "# " + "x" * 2_000_000 + "\n")
    b.script()
    return b.analyze(job)


@case("yaml-is-a-folder", 2, "job.yaml")
def _(b):
    job = b.job()
    (job / "job.yaml").unlink()
    (job / "job.yaml").mkdir()
    b.script()
    return b.analyze(job)


@case("job-folder-missing", 2, "job folder not found")
def _(b):
    b.script()
    return b.analyze(b.root / "nope")


@case("job-folder-is-a-file", 2, "job folder not found")
def _(b):
    (b.root / "file").write_text("x")
    b.script()
    return b.analyze(b.root / "file")


# ---- tables ------------------------------------------------------------------------------------------
def _with_table(b, name: str, content: bytes | str | None = None, link: Path | None = None) -> list:
    job = b.job()
    for suffix in (".parquet", ".csv"):
        (job / f"{name}{suffix}").unlink(missing_ok=True)
    target = job / f"{name}.csv"
    if link is not None:
        target.symlink_to(link)
    elif isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content)
    b.script()
    return b.analyze(job)


@case("table-symlink-outside", 2, "points outside the job folder")
def _(b):
    outside = b.root / "outside"
    outside.mkdir()
    (outside / "metrics.csv").write_text("timestamp,entity,metric,value\n2024-01-01 00:00:00,x,cpu,1\n")
    return _with_table(b, "metrics", link=outside / "metrics.csv")


@case("table-symlink-etc-passwd", 2, "points outside the job folder")
def _(b):
    return _with_table(b, "logs", link=Path("/etc/passwd"))


@case("table-symlink-dangling", 2, "metrics")
def _(b):
    return _with_table(b, "metrics", link=b.root / "gone.csv")


@case("table-symlink-to-folder", 2, "not a file")
def _(b):
    (b.root / "job").mkdir(parents=True, exist_ok=True)
    (b.root / "job" / "sub").mkdir()
    return _with_table(b, "metrics", link=b.root / "job" / "sub")


def _table_that_is_not_a_file(b, make) -> list:
    """A table's name taken by something that is not a regular file: refused, never skipped (a skipped
    table would be analysed as absent) and never opened (a FIFO would block the read forever)."""
    job = b.job()
    for suffix in (".parquet", ".csv"):
        (job / f"metrics{suffix}").unlink(missing_ok=True)
    make(job / "metrics.csv")
    b.script()
    return b.analyze(job)


case("table-is-a-folder", 2, "not a file")(lambda b: _table_that_is_not_a_file(b, Path.mkdir))
case("table-is-a-fifo", 2, "not a file")(lambda b: _table_that_is_not_a_file(b, os.mkfifo))


@case("table-missing-column", 2, "missing column(s) metric")
def _(b):
    return _with_table(b, "metrics", "timestamp,entity,value\n2024-01-01 00:00:00,a,1\n")


@case("table-bad-timestamp", 2, "unparseable 'timestamp'")
def _(b):
    return _with_table(b, "metrics", "timestamp,entity,metric,value\nyesterday,a,cpu,1\n")


@case("table-bad-value", 2, "unparseable 'value'")
def _(b):
    return _with_table(b, "metrics", "timestamp,entity,metric,value\n2024-01-01 00:00:00,a,cpu,lots\n")


@case("table-binary-garbage", 2, "metrics.csv")
def _(b):
    return _with_table(b, "metrics", bytes(range(256)) * 50)


@case("table-parquet-that-is-text", 2, "cannot be read")
def _(b):
    job = b.job()
    (job / "metrics.parquet").write_text("this is not parquet")
    b.script()
    return b.analyze(job)


@case("table-unbalanced-quotes", 0)
def _(b):
    return _with_table(b, "logs", 'timestamp,entity,level,message\n2024-01-01 00:11:00,checkout-pod-1,ERROR,"never closed\n')


@case("table-10mb-log-line-is-cut", 0, check=lambda b, r: None)
def _(b):
    line = "ERROR " + "A" * 10_000_000
    return _with_table(b, "logs", f"timestamp,entity,level,message\n2024-01-01 00:11:00,checkout-pod-1,ERROR,{line}\n"
                                  "2024-01-01 00:12:00,checkout-pod-1,ERROR,short\n")


def _nan_first(b, r):
    diagnosis = json.loads((b.ok / "d.json").read_text())
    assert diagnosis["root_causes"][0]["entity"] != "node-1"


@case("table-nan-in-baseline-never-wins", 0, check=_nan_first)
def _(b):
    rows = ["timestamp,entity,metric,value"]
    for m in range(20):
        rows.append(f"2024-01-01 00:{m:02d}:00,checkout-pod-1,cpu,{0.95 if m >= 12 else 0.2}")
        rows.append(f"2024-01-01 00:{m:02d}:00,node-1,disk,{'NaN' if m == 3 else ('inf' if m == 15 else 5)}")
    return _with_table(b, "metrics", "\n".join(rows) + "\n") + ["--out", b.ok / "d.json"]


@case("table-empty-file", 0)
def _(b):
    return _with_table(b, "events", "")


@case("table-header-only", 0)
def _(b):
    return _with_table(b, "events", "timestamp,entity,reason,message\n")


@case("table-extra-columns-are-ignored", 0)
def _(b):
    return _with_table(b, "events", "timestamp,entity,reason,message,\"x\"\"; DROP TABLE events;--\"\n"
                                    "2024-01-01 00:12:00,checkout-pod-1,BackOff,restart,1\n")


@case("table-column-name-injection", 2, "missing column(s)")
def _(b):
    return _with_table(b, "events", "timestamp,entity,\"reason\"\"); COPY (SELECT 1) TO 'x.csv'; --\",message\n"
                                    "2024-01-01 00:12:00,checkout-pod-1,a,b\n".replace(",message", ",messagez"))


test_hostile_input = corpus.test()


def test_the_corpus_is_large():
    assert len(corpus) >= 54, len(corpus)
    assert len({c.name for c in corpus}) == len(corpus)
