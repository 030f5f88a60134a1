"""Hostile command lines and files around a run: options, config files, stores, labels and result lines,
archives to import, batch folders and results, serve's engine flags. Each case is held to the corpus's
contract (tests/hostile.py).
"""
from __future__ import annotations

import io
import json
import os
import sqlite3
import tarfile
from pathlib import Path

from tests.hostile import META, Corpus, run_cli

corpus = Corpus()
case = corpus.case


# ---- options -----------------------------------------------------------------------------------------
for name, more, says in [
    ("opt-max-steps-zero", ["--max-steps", "0"], "--max-steps"),
    ("opt-max-steps-text", ["--max-steps", "many"], "--max-steps"),
    ("opt-max-steps-huge", ["--max-steps", "100000"], "--max-steps"),
    ("opt-backend-unknown", ["--backend", "cloud"], "--backend"),
    ("opt-base-url-unparseable", ["--base-url", "http://[::1"], "base_url"),
    ("opt-base-url-not-http", ["--base-url", "ftp://127.0.0.1/v1"], "base_url"),
    ("opt-base-url-no-host", ["--base-url", "http://"], "base_url"),
    ("opt-base-url-remote", ["--backend", "openai", "--base-url", "http://10.9.8.7:8000/v1"], "non-loopback"),
    ("opt-mode-unknown", ["--mode", "spans"], "--mode"),
    ("opt-samples-zero", ["--samples", "0"], "--samples"),
    ("opt-format-unknown", ["--format", "xml"], "--format"),
    ("opt-unknown-flag", ["--frobnicate"], "frobnicate"),
    ("opt-config-missing", ["--config", "/nonexistent/config.toml"], "config file not found"),
    ("opt-out-missing-folder", ["--out", "/nonexistent/dir/d.json"], "does not exist"),
    ("opt-out-is-a-folder", ["--out", "."], "is a directory"),
]:
    @case(name, 2, says)
    def _(b, more=more):
        b.script()
        return b.analyze(b.job(), *more)


# ---- the config file ---------------------------------------------------------------------------------
for name, toml, says in [
    ("config-unknown-key", "max_stepz = 3\n", "max_stepz: unknown setting"),
    ("config-ranking-typo", 'ranking = "fuse"\n', "ranking"),
    ("config-experts-string", 'experts = "false"\n', "experts"),
    ("config-allow-remote-string", 'allow_remote = "false"\n', "allow_remote"),
    ("config-max-steps-zero", "max_steps = 0\n", "max_steps"),
    ("config-max-steps-negative", "max_steps = -1\n", "max_steps"),
    ("config-max-steps-string", 'max_steps = "15"\n', "max_steps"),
    ("config-temperature-string", 'temperature = "hot"\n', "temperature"),
    ("config-temperature-nan", "temperature = nan\n", "temperature"),
    ("config-temperature-inf", "temperature = inf\n", "temperature"),
    ("config-mode-typo", 'mode = "spans"\n', "mode"),
    ("config-backend-typo", 'backend = "cloud"\n', "backend"),
    ("config-base-url-bad", 'base_url = "http://[::1"\n', "base_url"),
    ("config-samples-huge", "samples = 1000\n", "samples"),
    ("config-threads-zero", "threads = 0\n", "threads"),
    ("config-yaml-rounds", "yaml_rounds = 99\n", "yaml_rounds"),
    ("config-store-int", "store = 5\n", "store"),
    ("config-aggregate-typo", 'aggregate = "mean"\n', "aggregate"),
    ("config-not-toml", "this is = = not toml\n", "not valid TOML"),
    ("config-table-value", "[max_steps]\nx = 1\n", "max_steps"),
]:
    @case(name, 2, says)
    def _(b, toml=toml):
        (b.root / "c.toml").write_text(toml)
        b.script()
        return b.analyze(b.job(), "--config", b.root / "c.toml")


@case("config-not-utf8", 2, "not UTF-8")
def _(b):
    (b.root / "c.toml").write_bytes(b"model = '\xff'\n")
    b.script()
    return b.analyze(b.job(), "--config", b.root / "c.toml")


@case("config-typo-stops-batch-before-any-job", 2, "ranking",
      check=lambda b, r: (not (b.ok / "r.jsonl").exists()) or (b.ok / "r.jsonl").read_text() == "")
def _(b):
    (b.root / "c.toml").write_text('ranking = "fuse"\n')
    b.job("jobs/a", job_id="a")
    return ["batch", "--jobs", b.root / "jobs", "--out", b.ok / "r.jsonl", "--method", "nsigma", "--quiet",
            "--config", b.root / "c.toml"]


# ---- stores ------------------------------------------------------------------------------------------
def _analyze_with_store(b, store: Path) -> list:
    b.script()
    args = b.analyze(b.job())
    args[args.index("--store") + 1] = store
    return args


@case("store-not-sqlite", 2, "cannot use this store")
def _(b):
    (b.ok / "s.db").write_text("not a database at all, just text " * 100)
    return _analyze_with_store(b, b.ok / "s.db")


@case("store-is-a-folder", 2, "s.db")
def _(b):
    (b.ok / "s.db").mkdir()
    return _analyze_with_store(b, b.ok / "s.db")


@case("store-parent-is-a-file", 2, "cannot create the store")
def _(b):
    (b.ok / "file").write_text("x")
    return _analyze_with_store(b, b.ok / "file" / "s.db")


@case("store-unwritable-place", 2, "cannot create the store")
def _(b):
    return _analyze_with_store(b, Path("/proc/rcagent/s.db"))


@case("store-locked", 2, "cannot use this store")
def _(b):
    con = sqlite3.connect(b.ok / "s.db")
    con.execute("CREATE TABLE x (a)")
    con.execute("BEGIN EXCLUSIVE")
    b.locker = con     # kept open (locked) until the case ends
    return _analyze_with_store(b, b.ok / "s.db")


@case("store-of-another-program", 0)
def _(b):
    con = sqlite3.connect(b.ok / "s.db")
    con.execute("CREATE TABLE notes (a)")
    con.commit()
    con.close()
    return _analyze_with_store(b, b.ok / "s.db")


@case("show-store-missing-creates-nothing", 2, "no store there",
      check=lambda b, r: not (b.root / "nowhere").exists())
def _(b):
    return ["show", "abc", "--store", b.root / "nowhere" / "deep" / "s.db"]


@case("runs-store-missing-creates-nothing", 2, "no store there",
      check=lambda b, r: not (b.root / "nowhere").exists())
def _(b):
    return ["runs", "--store", b.root / "nowhere" / "s.db"]


@case("show-percent-is-no-pattern", 2, "no run")
def _(b):
    run_cli(_analyze_with_store(b, b.store), b.root)
    return ["show", "%", "--store", b.store]


@case("show-underscore-is-no-pattern", 2, "no run")
def _(b):
    run_cli(_analyze_with_store(b, b.store), b.root)
    return ["show", "_", "--store", b.store]


@case("show-store-not-sqlite", 2, "cannot use this store")
def _(b):
    (b.ok / "s.db").write_text("garbage " * 200)
    return ["show", "x", "--store", b.ok / "s.db"]


@case("show-store-of-another-program", 2, "not an rcagent store")
def _(b):
    con = sqlite3.connect(b.ok / "s.db")
    con.execute("CREATE TABLE notes (a)")
    con.commit()
    con.close()
    return ["runs", "--store", b.ok / "s.db"]


@case("show-snapshot-missing", 2, "has no snapshot")
def _(b):
    run_cli(_analyze_with_store(b, b.store), b.root)
    run_id = sqlite3.connect(b.store).execute("SELECT id FROM runs").fetchone()[0]
    return ["show", run_id, "--snapshot", "../../etc/passwd", "--store", b.store]


@case("runs-limit-zero", 2, "--limit")
def _(b):
    return ["runs", "--limit", "0", "--store", b.store]


# ---- eval: labels and result lines -------------------------------------------------------------------
LABEL = "job: tiny\nsource: test\nsystem: test\nroot_causes: [{entity: checkout, level: service}]\n"


def _eval(b, label: str | bytes | None = LABEL, line: dict | str | None = None, job_id: str = "tiny") -> list:
    b.job(f"jobs/{job_id}" if "/" not in job_id else "jobs/tiny")
    labels = b.root / "labels"
    labels.mkdir(exist_ok=True)
    if label is not None:
        target = labels / "tiny.yaml"
        target.write_bytes(label) if isinstance(label, bytes) else target.write_text(label)
    row = line if line is not None else {"job": job_id, "method": "nsigma", "status": "answered",
                                         "root_causes": [{"entity": "checkout", "score": 1}], "wall_s": 0.1}
    (b.root / "r.jsonl").write_text(row if isinstance(row, str) else json.dumps(row) + "\n")
    return ["eval", b.root / "r.jsonl", "--labels", labels, "--jobs", b.root / "jobs"]


case("eval-label-not-yaml", 2, "not valid YAML")(lambda b: _eval(b, "root_causes: [oops\n"))
case("eval-label-not-mapping", 2, "a label is a mapping")(lambda b: _eval(b, "- just a list\n"))
case("eval-label-no-root-causes", 2, "root_causes")(lambda b: _eval(b, "job: tiny\nsource: test\n"))
case("eval-label-root-causes-empty", 2, "root_causes")(lambda b: _eval(b, "root_causes: []\n"))
case("eval-label-root-causes-strings", 2, "root_causes")(lambda b: _eval(b, "root_causes: [checkout]\n"))
case("eval-label-alias-bomb", 2, "aliases")(lambda b: _eval(b, "a: &a [x, x]\nroot_causes: *a\n"))
case("eval-label-not-utf8", 2, "not UTF-8")(lambda b: _eval(b, b"root_causes: \xff\n"))
case("eval-line-wrong-types", 2, "wall_s")(lambda b: _eval(b, line={"job": "tiny", "wall_s": "fast"}))
case("eval-line-root-causes-string", 2, "root_causes")(lambda b: _eval(b, line={"job": "tiny", "root_causes": "x"}))
case("eval-line-job-int", 2, "job")(lambda b: _eval(b, line={"job": 5}))
case("eval-line-traversal-id", 2, "not a plain name")(lambda b: _eval(b, line={"job": "../../../../etc/passwd"},
                                                                       job_id="../../../../etc/passwd"))
case("eval-line-absolute-id", 2, "not a plain name")(lambda b: _eval(b, line={"job": "/etc/passwd"}))
case("eval-results-not-json", 2, "no result lines")(lambda b: _eval(b, line="not json at all\n"))
case("eval-results-deep-json", 2, "no result lines")(lambda b: _eval(b, line="[" * 100000 + "\n"))
case("eval-results-missing", 2, "results file not found")(
    lambda b: _eval(b)[:1] + [b.root / "none.jsonl"] + _eval(b)[2:])
case("eval-labels-missing", 2, "--labels")(lambda b: _eval(b)[:3] + [b.root / "nolabels"] + _eval(b)[4:])
case("eval-cases-missing-folder", 2, "does not exist")(lambda b: _eval(b) + ["--cases", "/nonexistent/c.jsonl"])
case("eval-by-unknown", 2, "--by")(lambda b: _eval(b) + ["--by", "colour"])
case("eval-bleurt-without-text", 2, "--bleurt")(lambda b: _eval(b) + ["--bleurt", b.root])
case("eval-good", 0)(lambda b: _eval(b))


@case("eval-results-not-utf8", 2, "not UTF-8")
def _(b):
    args = _eval(b)
    (b.root / "r.jsonl").write_bytes(b'{"job": "\xff"}\n')
    return args


# ---- import ------------------------------------------------------------------------------------------
def _tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:xz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _nezha_like(junk: bytes) -> dict[str, bytes]:
    return {"nezha/rca_data/2023-01-29/2023-01-29-fault_list.json":
            b'{"1": [{"inject_time": "2023-01-29 08:43:00", "inject_pod": "ts-a-1-2", "inject_type": "cpu"}]}',
            "nezha/rca_data/2023-01-29/metric/x_metric.csv": junk}


def _nothing_extracted_left(b, r) -> bool:
    """An import extracts an archive into a temporary folder of the cache and removes it, failed or not."""
    return not [p for p in (b.root / "home").rglob("*") if p.parent.name == "data" and p.parent.parent.name == "rcagent"]


@case("import-truncated-archive", 2, "cannot extract", allowed=("home/.cache",), check=_nothing_extracted_left)
def _(b):
    full = _tar(b.root / "full.tar.xz", {"nezha/a.csv": os.urandom(200_000)}).read_bytes()
    (b.root / "cut.tar.xz").write_bytes(full[: len(full) // 2])
    return ["import", "nezha", b.root / "cut.tar.xz", b.ok / "dest"]


@case("import-not-an-archive", 2, "cannot extract", allowed=("home/.cache",))
def _(b):
    (b.root / "x.tar.xz").write_text("plain text")
    return ["import", "rcd", b.root / "x.tar.xz", b.ok / "dest"]


@case("import-unexpected-folders", 2, "no 'nezha' folder", allowed=("home/.cache",), check=_nothing_extracted_left)
def _(b):
    return ["import", "nezha", _tar(b.root / "a.tar.xz", {"other/readme.txt": b"hi"}), b.ok / "dest"]


@case("import-junk-csv", 2, "nezha", allowed=("home/.cache",))
def _(b):
    return ["import", "nezha", _tar(b.root / "a.tar.xz", _nezha_like(b"\x00\x01garbage\xff\n1,2\n")), b.ok / "dest"]


@case("import-junk-json", 2, "nezha", allowed=("home/.cache",))
def _(b):
    files = _nezha_like(b"a,b\n1,2\n")
    files["nezha/rca_data/2023-01-29/2023-01-29-fault_list.json"] = b'{"1": [{"oops": 1}]}'
    return ["import", "nezha", _tar(b.root / "a.tar.xz", files), b.ok / "dest"]


@case("import-member-escapes", 2, "cannot extract", allowed=("home/.cache",))
def _(b):
    return ["import", "nezha", _tar(b.root / "a.tar.xz", {"../../../escaped.txt": b"x"}), b.ok / "dest"]


@case("import-absolute-member", 2, "no 'nezha' folder", allowed=("home/.cache",),
      check=lambda b, r: not Path("/tmp/rcagent-abs-member.txt").exists())
def _(b):
    return ["import", "nezha", _tar(b.root / "a.tar.xz", {"/tmp/rcagent-abs-member.txt": b"x"}), b.ok / "dest"]


@case("import-source-missing", 2, "source not found")
def _(b):
    return ["import", "rcd", b.root / "none.tar.xz", b.ok / "dest"]


@case("import-dest-is-a-file", 2, "dest", allowed=("home/.cache",))
def _(b):
    (b.ok / "dest").write_text("x")
    return ["import", "rcd", _tar(b.root / "a.tar.xz", {"sock-shop-data/x/y/z.txt": b"x"}), b.ok / "dest"]


@case("import-kind-unknown", 2, "kaggle")
def _(b):
    return ["import", "kaggle", b.root, b.ok / "dest"]


@case("import-column-name-injection", 0, allowed=("home/.cache",),
      check=lambda b, r: not (b.root / "cwd" / "x.csv").exists() and (b.ok / "dest" / "jobs").is_dir())
def _(b):
    csv = b'time,"carts""); COPY (SELECT 1) TO \'x.csv\'; --_cpu",carts_latency\n1,2,3\n2,4,5\n'
    return ["import", "rcd", _tar(b.root / "a.tar.xz", {"sock-shop-data/carts-cpu/1/anomalous.csv": csv,
                                                        "sock-shop-data/carts-cpu/1/normal.csv": csv}),
            b.ok / "dest"]


@case("import-dest-with-quotes", 0, allowed=("home/.cache",),
      check=lambda b, r: len(list((b.ok / "it's \"here\"" / "jobs").iterdir())) == 1)
def _(b):
    csv = b"time,carts_cpu,carts_latency\n1,2,3\n2,4,5\n"
    return ["import", "rcd", _tar(b.root / "a.tar.xz", {"sock-shop-data/carts-cpu/1/anomalous.csv": csv,
                                                        "sock-shop-data/carts-cpu/1/normal.csv": csv}),
            b.ok / "it's \"here\""]


# ---- batch -------------------------------------------------------------------------------------------
@case("batch-two-folders-one-id", 2, "both have the job id")
def _(b):
    b.job("jobs/a", job_id="same")
    b.job("jobs/b", job_id="same")
    return ["batch", "--jobs", b.root / "jobs", "--out", b.ok / "r.jsonl", "--method", "nsigma", "--quiet"]


@case("batch-bad-job-yaml-stops-before-any-job", 2, "windwo",
      check=lambda b, r: not (b.ok / "r.jsonl").exists() or not (b.ok / "r.jsonl").read_text())
def _(b):
    b.job("jobs/a", job_id="a")
    b.job("jobs/b", meta=META.format(id="b") + "windwo: 1\n")
    return ["batch", "--jobs", b.root / "jobs", "--out", b.ok / "r.jsonl", "--method", "nsigma", "--quiet"]


@case("batch-out-missing-folder", 2, "does not exist")
def _(b):
    b.job("jobs/a", job_id="a")
    return ["batch", "--jobs", b.root / "jobs", "--out", "/nonexistent/r.jsonl", "--method", "nsigma"]


@case("batch-concurrency-zero", 2, "--concurrency")
def _(b):
    return ["batch", "--jobs", b.root, "--out", b.ok / "r.jsonl", "--concurrency", "0"]


@case("batch-jobs-missing", 2, "not a folder")
def _(b):
    return ["batch", "--jobs", b.root / "none", "--out", b.ok / "r.jsonl", "--method", "nsigma"]


@case("batch-no-jobs", 2, "no job folders")
def _(b):
    (b.root / "empty").mkdir()
    return ["batch", "--jobs", b.root / "empty", "--out", b.ok / "r.jsonl", "--method", "nsigma"]


@case("batch-existing-results-without-resume", 2, "--resume")
def _(b):
    b.job("jobs/a", job_id="a")
    (b.ok / "r.jsonl").write_text('{"job": "a"}\n')
    return ["batch", "--jobs", b.root / "jobs", "--out", b.ok / "r.jsonl", "--method", "nsigma"]


def _resumed_nothing(b, r):
    lines = (b.ok / "r.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["job"] == "not-the-folder-name"


@case("batch-resume-id-differs-from-folder", 0, check=_resumed_nothing)
def _(b):
    b.job("jobs/folder", job_id="not-the-folder-name")
    args = ["batch", "--jobs", b.root / "jobs", "--out", b.ok / "r.jsonl", "--method", "nsigma", "--quiet"]
    assert run_cli(args, b.root).code == 0
    return args + ["--resume"]


@case("batch-locked-output", 2, "another batch is writing")
def _(b):
    import fcntl

    b.job("jobs/a", job_id="a")
    handle = (b.ok / "r.jsonl.lock").open("a")
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    b.locker = handle
    return ["batch", "--jobs", b.root / "jobs", "--out", b.ok / "r.jsonl", "--method", "nsigma", "--quiet"]


# ---- serve -------------------------------------------------------------------------------------------
for name, extra, says in [
    ("serve-host-all-interfaces", ["--", "--host", "0.0.0.0"], "beyond loopback"),
    ("serve-host-inline", ["--", "--host=192.168.1.5"], "beyond loopback"),
    ("serve-hostname-public", ["--", "--hostname", "example.org"], "beyond loopback"),
    ("serve-port-out-of-range", ["--port", "70000"], "--port"),
    ("serve-threads-zero", ["--threads", "0"], "--threads"),
]:
    @case(name, 2, says)
    def _(b, extra=extra):
        return ["serve", "--model", "smollm2", "--log", b.ok / "serve.log", *extra]


test_hostile_input = corpus.test()


def test_the_corpus_is_large():
    assert len(corpus) >= 98, len(corpus)
    assert len({c.name for c in corpus}) == len(corpus)
