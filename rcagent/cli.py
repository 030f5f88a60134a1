"""The `rcagent` command line: import, analyze, batch, eval, serve, show, runs, bench."""
from __future__ import annotations

import functools
import json
import os
import signal
import sys
from pathlib import Path

import click

from rcagent.config import load_settings
from rcagent.errors import BackendError, BadInput


def output_format(fn):
    """One reusable option for output formats (sqlite-utils style)."""
    @click.option("--format", "fmt", type=click.Choice(["text", "json", "md"]), default="text",
                  show_default=True, help="Output format.")
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


def model_options(fn):
    """Options that choose and configure the model backend; they override the config file."""
    options = [
        click.option("--config", type=click.Path(dir_okay=False), help="Config file (TOML)."),
        click.option("--backend", type=click.Choice(["local", "openai", "transformers", "scripted"]),
                     help="Model backend (default: local llama.cpp)."),
        click.option("--model", help="Model: smollm2 | gemma3 | qwen2.5-coder-1.5b (make qwen) | a .gguf path (local); "
                                       "the served name (openai)."),
        click.option("--base-url", help="OpenAI-compatible server URL, e.g. http://127.0.0.1:8000/v1."),
        click.option("--allow-remote", is_flag=True, default=None,
                     help="Allow a non-loopback --base-url (telemetry leaves the machine)."),
        click.option("--max-steps", type=click.IntRange(1, 200), help="Step limit (default 15)."),
        click.option("--experts/--no-experts", default=None,
                     help="Offer the expert agents (log_expert, code_expert) as tools (off by default)."),
        click.option("--store", type=click.Path(dir_okay=False), help="SQLite store of runs and snapshots."),
        click.option("--script", type=click.Path(dir_okay=False),
                     help="Scripted backend: JSON file with the list of model responses to replay."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def run_options(fn):
    """How the agent runs (analyze and batch): the mode and self-consistency at finalization."""
    options = [
        click.option("--mode", type=click.Choice(["react", "span", "oneshot", "sql", "graph"]),
                     help="react: one controller (default); span: one agent per span of the anomalous request "
                          "(RCLAgent), in parallel, jobs without traces fall back to react; oneshot: the whole case "
                          "as one evidence package, one call; sql: a ReAct loop of read-only SQL over the job's "
                          "tables (oneshot and sql: RCAtlas's free harnesses); graph: a walk over the anomaly fusion "
                          "graph from the alert to the source, each suspect checked by a verifier (GAMA)."),
        click.option("--samples", type=click.IntRange(1, 64),
                     help="Sample this many finalizations from the greedy run's last prefix and aggregate them "
                          "(self-consistency; 1 = off, the paper uses 10)."),
        click.option("--aggregate", type=click.Choice(["embed", "llm"]),
                     help="How the sampled texts are merged: embed (nearest the MiniLM centroid; needs the eval "
                          "extra) or llm (the model merges them)."),
        click.option("--no-redact", "no_redact", is_flag=True, default=None,
                     help="Show the job's text as it is: no placeholders for secrets, e-mail and IP addresses "
                          "(redaction is on by default; the config's `redact`)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def writable_file(path: str, option: str) -> Path:
    """An output file given on the command line, checked before the work: its folder exists and can be
    written, and it is not a folder (an error after an hour of work would lose the result)."""
    file = Path(path).expanduser()
    folder = file.parent
    if not folder.is_dir():
        raise BadInput(f"{option} {path}: the folder {folder} does not exist")
    if file.is_dir():
        raise BadInput(f"{option} {path}: is a folder")
    if not os.access(folder, os.W_OK) or (file.exists() and not os.access(file, os.W_OK)):
        raise BadInput(f"{option} {path}: not writable")
    return file


def model_settings(config, backend, model, base_url, allow_remote, max_steps, script, experts=None, **more):
    """Settings from the config file and the model_options flags (a backend's default model name if none)."""
    settings = load_settings(config, backend=backend, model=model, base_url=base_url, allow_remote=allow_remote,
                             max_steps=max_steps, script=script, experts=experts, **more)
    if backend and not model and backend != "local":
        settings.model = {"openai": "default", "scripted": "scripted"}.get(backend, settings.model)
    return settings


class Group(click.Group):
    def main(self, args=None, prog_name=None, standalone_mode=True, **extra):
        """Every error a user can cause exits 2 with one line; anything else exits 1 with one line and the
        path of a log holding the traceback; an interrupt exits 130. Nothing prints a traceback."""
        try:
            return super().main(args=args, prog_name=prog_name or "rcagent", standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
            click.echo(one_line(f"error: {exc.format_message()}{hint}"), err=True)
            sys.exit(2)
        except BadInput as exc:
            click.echo(one_line(f"error: {exc}"), err=True)
            sys.exit(2)
        except BackendError as exc:
            click.echo(one_line(f"model backend error: {exc}"), err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except Exception as exc:  # noqa: BLE001 - the last resort: one line for the user, the traceback in a log
            log = _write_traceback()
            click.echo(one_line(f"internal error: {type(exc).__name__}: {exc}") + f" (traceback: {log})", err=True)
            sys.exit(1)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rcagent")
def cli():
    """rcagent: offline root-cause analysis of microservice incidents with a local model."""


@cli.command("import")
@click.argument("kind", type=click.Choice(["nezha", "rcd", "petshop", "changerca"]))
@click.argument("src", type=click.Path())
@click.argument("dest", type=click.Path(file_okay=False))
@output_format
def import_cmd(kind, src, dest, fmt):
    """Import a public RCA dataset (archive or extracted folder) into DEST/jobs and DEST/labels."""
    from rcagent.importers import run_import

    from rcagent.progress import counter

    step = counter("jobs imported")
    report = run_import(kind, src, dest, progress=lambda job_id, i, n: step(i, n))
    if fmt == "json":
        click.echo(json.dumps({"source": report.source, "jobs": len(report.jobs), "systems": report.systems,
                               "lacking": report.lacking}, indent=2))
        return
    click.echo(f"Imported {len(report.jobs)} jobs from {kind} into {Path(dest) / 'jobs'}: "
               + ", ".join(f"{s} {n}" for s, n in report.systems.items()))
    by_missing: dict[str, int] = {}
    for tables in report.lacking.values():
        key = ", ".join(tables)
        by_missing[key] = by_missing.get(key, 0) + 1
    for tables, n in sorted(by_missing.items()):
        click.echo(f"  {n} jobs lack: {tables}")


@cli.group("job")
def job_group():
    """Make a job (one incident folder) from your own telemetry exports."""


@job_group.command("create")
@click.argument("dest", type=click.Path(file_okay=False))
@click.option("--from", "sources", required=True, multiple=True, type=click.Path(),
              help="An export file or folder (OTLP JSON, Prometheus or Loki query_range JSON, logcli JSON lines, "
                   "Jaeger JSON, kubectl JSON, a change log as CSV or YAML); repeat for more.")
@click.option("--window", required=True, help="The flagged period, START..END (RFC 3339, UTC unless an offset is given).")
@click.option("--baseline", multiple=True,
              help="A fault-free period, START..END, optionally @table,table (default: every table); repeat for more.")
@click.option("--alert", help="What monitoring showed (default: the window).")
@click.option("--system", default="unknown", show_default=True, help="The system's name, for your own records.")
@click.option("--id", "job_id", help="The job's id (default: DEST's folder name).")
@click.option("--force", is_flag=True, help="Replace DEST if it is a job folder already (never another folder).")
@output_format
def job_create(dest, sources, window, baseline, alert, system, job_id, force, fmt):
    """Assemble one job in DEST from export files, derive its entities and relations, validate it and
    print what it holds."""
    from rcagent.exports.assemble import create_job

    made = create_job(Path(dest), [Path(s) for s in sources], window, list(baseline), alert, system, job_id, force)
    skipped = [{"file": f, "reason": r, "records": n} for (f, r), n in sorted(made.skipped.items())]
    if fmt == "json":
        click.echo(json.dumps({"job": str(made.folder), "rows": made.rows, "entities": made.kinds,
                               "files": dict(made.formats), "records": dict(made.records), "skipped": skipped,
                               "renamed": made.renamed}, indent=2))
        return
    click.echo(f"Created the job {made.folder} from {sum(made.formats.values())} files ("
               + ", ".join(f"{k} {n}" for k, n in sorted(made.formats.items())) + ")")
    click.echo("  rows: " + ", ".join(f"{t} {n}" for t, n in made.rows.items()))
    click.echo("  entities: " + (", ".join(f"{k} {n}" for k, n in sorted(made.kinds.items())) or "none"))
    for name, new in sorted(made.renamed.items()):
        click.echo(f"  named as one entity: {name} -> {new}")
    for row in skipped:
        click.echo(f"  skipped {row['records']} {row['reason']} in {row['file']}")


@cli.command()
@click.option("--job", "job_dir", required=True, type=click.Path(), help="The incident folder (job.yaml + tables).")
@model_options
@run_options
@click.option("--out", type=click.Path(dir_okay=False), help="Write the diagnosis as JSON to this file.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False),
              help="Write the run's report as one self-contained HTML page (as `rcagent report` does).")
@click.option("--quiet", is_flag=True, help="No progress lines.")
@output_format
def analyze(job_dir, config, backend, model, base_url, allow_remote, max_steps, experts, store, script, mode,
            samples, aggregate, no_redact, out, html_file, quiet, fmt):
    """Diagnose one incident and print the root causes, explanation, solution and evidence."""
    from rcagent import modes
    from rcagent.job import Job
    from rcagent.report import render
    from rcagent.serving import make_backend
    from rcagent.store import Store

    settings = model_settings(config, backend, model, base_url, allow_remote, max_steps, script, experts, store=store,
                              mode=mode, samples=samples, aggregate=aggregate,
                              redact=False if no_redact else None)
    out_file = writable_file(out, "--out") if out else None
    html_path = writable_file(html_file, "--html") if html_file else None
    job = Job.load(job_dir, redact=settings.redact)
    db = Store(settings.store_path())
    llm = make_backend(settings)       # before any output: a bad script or server URL is one line
    stop_on_sigterm()
    click.echo(f"Loaded {job.id} ({job.system}): {len(job.entities)} entities; model {settings.backend}/{settings.model}",
               err=True)

    def progress(ev):
        if quiet:
            return
        extra = f"  ! {ev['error'][:80]}" if ev["error"] else ""
        click.echo(f"  step {ev['step']:>2}/{ev['max_steps']}  {ev['action']:<13} {str(ev['entity'])[:48]:<48} "
                   f"{ev['tokens']:>5} tok{' (cached)' if ev['cached'] else ''}{extra}", err=True)

    try:
        diagnosis = modes.run(job, llm, db, settings, progress=progress,
                              graph_dir=settings.store_path().parent / "graphs")
    except KeyboardInterrupt:
        click.echo("\ninterrupted: the run is kept in the store, marked interrupted", err=True)
        sys.exit(130)
    if out_file:   # the diagnosis is saved before anything else can fail
        out_file.write_text(json.dumps(diagnosis.to_dict(), indent=2))
    if html_path:
        from rcagent.htmlreport import run_page

        html_path.write_text(run_page(db, diagnosis.run_id), encoding="utf-8")
    click.echo(render(diagnosis, fmt))


@cli.command()
@click.argument("run_id")
@click.option("--store", type=click.Path(dir_okay=False), help="SQLite store of runs and snapshots.")
@click.option("--snapshots", is_flag=True, help="List the run's snapshot keys instead of its steps.")
@click.option("--snapshot", "key", help="Print one stored observation of the run in full (e.g. S2).")
@click.option("--redactions", is_flag=True,
              help="List what redaction replaced in the run's job: each placeholder and its original value "
                   "(for you at this machine; never shown to the model).")
@output_format
def show(run_id, store, snapshots, key, redactions, fmt):
    """Replay a stored run step by step (RUN_ID may be a unique prefix)."""
    from rcagent.report import render_steps
    from rcagent.store import Store

    db = Store(load_settings(None, store=store).store_path(), create=False)
    run = db.get_run(run_id)
    if run is None:
        raise BadInput(f"no run {run_id!r} in {db.path} (or the prefix names more than one; see rcagent runs)")
    if key:
        text = db.snapshot(run["id"], key)
        if text is None:
            raise BadInput(f"run {run['id']} has no snapshot '{key}' (see --snapshots)")
        click.echo(text)
        return
    if redactions:
        rows = db.redactions(run["id"])
        if fmt == "json":
            click.echo(json.dumps(rows, indent=2))
        else:
            click.echo("\n".join(f"{r['placeholder']}  {r['kind']}  {r['value']!r}" for r in rows) or "nothing redacted")
        return
    if snapshots:
        keys = db.snapshot_keys(run["id"])
        if fmt == "json":
            click.echo(json.dumps(keys, indent=2))
        else:
            click.echo("\n".join(f"{k['key']}  step {k['step']}  {k['tool']}  {k['chars']} chars" for k in keys)
                       or "no snapshots")
        return
    click.echo(render_steps(run, db.steps(run["id"]), fmt, samples=db.samples(run["id"]),
                            agents=db.span_agents(run["id"]), walk=db.walk_events(run["id"])))


@cli.command("report")
@click.argument("run_id", required=False)
@click.option("--out", type=click.Path(dir_okay=False),
              help="The HTML file to write (default: report-RUN_ID.html, or evaluation.html with --batch).")
@click.option("--store", type=click.Path(dir_okay=False), help="SQLite store of runs and snapshots.")
@click.option("--batch", "batch_files", multiple=True, type=click.Path(dir_okay=False),
              help="Render the evaluation of these batch results (JSONL) instead of one run; repeat for more.")
@click.option("--labels", "labels_dir", type=click.Path(file_okay=False), help="With --batch: the labels folder.")
def report_cmd(run_id, out, store, batch_files, labels_dir):
    """Write a run's diagnosis, evidence and investigation as one self-contained HTML page (no network
    needed to open it); with --batch, the evaluation with a page per run linked from each case."""
    from rcagent.store import Store

    if bool(run_id) == bool(batch_files):
        raise BadInput("give a RUN_ID, or --batch results with --labels")
    path = writable_file(out or (f"report-{run_id}.html" if run_id else "evaluation.html"), "--out")
    store_path = load_settings(None, store=store).store_path()
    if run_id:
        from rcagent.htmlreport import run_page

        path.write_text(run_page(Store(store_path, create=False), run_id), encoding="utf-8")
        click.echo(f"wrote {path}")
        return
    if not labels_dir:
        raise BadInput("--batch needs --labels (the folder of label files)")
    from rcagent.eval.evalpage import write_batch

    pages = write_batch([Path(b).expanduser() for b in batch_files], Path(labels_dir).expanduser(), path,
                        Store(store_path, create=False) if store_path.is_file() else None)
    click.echo(f"wrote {path} and {pages} run pages")


@cli.command()
@click.option("--store", type=click.Path(dir_okay=False), help="SQLite store of runs and snapshots.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1), help="How many runs.")
@output_format
def runs(store, limit, fmt):
    """List recent runs in the store."""
    from rcagent.store import Store

    db = Store(load_settings(None, store=store).store_path(), create=False)
    rows = db.runs(limit)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    for r in rows:
        click.echo(f"{r['id']}  {r['started'][:19]}  {r['job']:<14} {r['backend']}/{r['model']}  {r['status']}")


@cli.group()
def bench():
    """Benchmarks on imported jobs (they call the model: minutes, not seconds)."""


@bench.command("stability")
@click.option("--jobs", "jobs_dir", required=True, type=click.Path(),
              help="Folder of job folders (or the import folder holding jobs/ and labels/).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1), help="How many jobs to sample.")
@click.option("--seed", default=0, show_default=True, help="Seed of the sample (jobs drawn evenly across systems).")
@click.option("--ablate", default="constrain,jsonregen,handlers", show_default=True,
              help="Stabilizers to turn off, one configuration each, beside the full one: "
                   "constrain, jsonregen, handlers, limits (handlers only as checks, not in the schema), "
                   "all (every one off), experts (with --experts: the same runs without the expert tools); "
                   "empty for the full one only.")
@model_options
@click.option("--out", type=click.Path(dir_okay=False), help="Write the results as JSON (one object per configuration).")
@output_format
def bench_stability(jobs_dir, limit, seed, ablate, config, backend, model, base_url, allow_remote, max_steps, experts,
                    store, script, out, fmt):
    """Pass Rate and Invalid Rate of the controller with each stabilizer on and off."""
    import datetime as dt

    from rcagent.config import cache_dir
    from rcagent.discovery import find_jobs
    from rcagent.eval.stability import configurations, run_benchmark, table, write
    from rcagent.store import Store

    if not Path(jobs_dir).expanduser().is_dir():
        raise BadInput(f"--jobs {jobs_dir}: not a folder")
    configurations(ablate)               # bad input is refused before anything runs
    find_jobs(Path(jobs_dir).expanduser())
    settings = model_settings(config, backend, model, base_url, allow_remote, max_steps, script, experts)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    store_path = Path(store).expanduser() if store else cache_dir() / "bench" / f"stability-{stamp}.db"
    db = Store(store_path)
    click.echo(f"model {settings.backend}/{settings.model}; runs stored in {store_path}", err=True)
    jobs, results = run_benchmark(Path(jobs_dir).expanduser(), settings, ablate, limit, seed, db,
                                  progress=lambda line: click.echo(line, err=True))
    if out:
        write(results, jobs, seed, Path(out))
    if fmt == "json":
        click.echo(json.dumps({"seed": seed, "sample": [j.name for j in jobs], "results": results}, indent=2))
    else:
        click.echo(f"{len(jobs)} jobs (seed {seed}): {', '.join(j.name for j in jobs)}\n")
        click.echo(table(results, fmt))


@bench.command("models")
@click.option("--jobs", "jobs_dir", required=True, type=click.Path(),
              help="Folder of job folders (or the import folder holding jobs/ and labels/).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder of the results (one JSONL per method and model; rerun to resume).")
@click.option("--models", default="smollm2", show_default=True,
              help="Models, comma-separated (as --model: smollm2, qwen2.5-coder-1.5b, a .gguf path, a served name).")
@click.option("--methods", default="react,oneshot,sql,span", show_default=True, help="Agent modes, comma-separated.")
@click.option("--sample", "sample_n", default=20, show_default=True, type=click.IntRange(1),
              help="Jobs drawn evenly across systems (seeded by --seed).")
@click.option("--seed", default=0, show_default=True, help="Seed of the sample.")
@click.option("--timeout", type=click.FloatRange(1), help="Seconds per job; a job past it counts as unanswered.")
@click.option("--labels", "labels_dir", type=click.Path(file_okay=False),
              help="The labels folder (default: beside the jobs folder).")
@click.option("--report-only", is_flag=True, help="Tabulate the results already in --out; run nothing.")
@model_options
@output_format
def bench_models(jobs_dir, out_dir, models, methods, sample_n, seed, timeout, labels_dir, report_only, config, backend,
                 model, base_url, allow_remote, max_steps, experts, store, script, fmt):
    """What the model adds: each method with each model on one sample, the model's own answers apart from
    the fused ones and from the evidence ranking alone, beside NSigma, BARO and random."""
    from rcagent.batch import job_ids
    from rcagent.eval import modelbench
    from rcagent.eval.labels import labels_dir as default_labels
    from rcagent.modes import MODES

    folder = Path(jobs_dir).expanduser()
    if not folder.is_dir():
        raise BadInput(f"--jobs {jobs_dir}: not a folder")
    names = [m.strip() for m in models.split(",") if m.strip()]
    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    bad = [m for m in chosen if m not in MODES and m not in modelbench.VARIANTS]
    if bad or not chosen or not names:
        raise BadInput(f"--methods: choose from {', '.join(MODES + tuple(modelbench.VARIANTS))}; --models: at least one"
                       + (f" (unknown: {', '.join(bad)})" if bad else ""))
    settings = model_settings(config, backend, model, base_url, allow_remote, max_steps, script, experts, store=store)
    out = Path(out_dir).expanduser()
    if report_only and not out.is_dir():
        raise BadInput(f"--out {out_dir}: no results folder to report on")
    jobs = modelbench.run(folder, out, settings, names, chosen, sample_n, seed, timeout,
                          progress=lambda line: click.echo(line, err=True), report_only=report_only)
    root = folder / "jobs" if (folder / "jobs").is_dir() else folder
    labels = Path(labels_dir).expanduser() if labels_dir else default_labels(root)
    rows = modelbench.table_rows(out, jobs, names, chosen, labels)
    baselines = modelbench.baseline_rows(out, jobs, labels)
    result = {"seed": seed, "sample": sorted(job_ids(jobs).values()), "rows": rows, "baselines": baselines}
    if not report_only:
        (out / "table.json").write_text(json.dumps(result, indent=2))
    click.echo(json.dumps(result, indent=2) if fmt == "json" else modelbench.table(rows, baselines, fmt))


@bench.command("ranking")
@click.option("--jobs", "jobs_dir", required=True, type=click.Path(),
              help="Folder of job folders (or the import folder holding jobs/ and labels/).")
@click.option("--labels", "labels_dir", type=click.Path(file_okay=False),
              help="The labels folder (default: beside the jobs folder).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the results as JSON.")
@click.option("--quiet", is_flag=True, help="No progress lines.")
@output_format
def bench_ranking(jobs_dir, labels_dir, out, quiet, fmt):
    """The evidence ranking leave-one-system-out (parameters chosen on the other systems), with no baseline,
    beside NSigma, BARO and random on the same cases; no model is called."""
    from rcagent.eval.rankbench import run, table

    folder = Path(jobs_dir).expanduser()
    if not folder.is_dir():
        raise BadInput(f"--jobs {jobs_dir}: not a folder")
    out_path = writable_file(out, "--out") if out else None
    results = run(folder, Path(labels_dir).expanduser() if labels_dir else None,
                  progress=None if quiet else lambda line: click.echo(line, err=True))
    if out_path:
        out_path.write_text(json.dumps(results, indent=2))
    click.echo(json.dumps(results, indent=2) if fmt == "json" else table(results))


@cli.command()
@click.option("--jobs", "jobs_dir", required=True, type=click.Path(),
              help="Folder of job folders (or the import folder holding jobs/ and labels/).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Results file (JSONL, one line per job).")
@click.option("--method", default="react", show_default=True,
              type=click.Choice(["react", "nsigma", "nsigma-abs", "baro", "baro-abs", "random", "overview",
                                 "recent-change"]),
              help="The agent (react), a baseline on the metrics table, random, the overview tool alone, or "
                   "the entity changed last before the window's end (recent-change).")
@click.option("--concurrency", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Jobs in flight at once (use >1 against an OpenAI-compatible server such as vLLM); with "
                   "--engine ray and no --address, the local Ray cluster's worker CPUs.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: a thread pool in this process; ray: each job a Ray task (the extra `ray`).")
@click.option("--address", help="With --engine ray: the running cluster to join (e.g. 10.0.0.5:6379); "
                                "default: start a local one for this batch.")
@click.option("--resume", is_flag=True, help="Continue an existing results file: skip the jobs it holds, retry errors.")
@click.option("--timeout", type=click.FloatRange(1), help="Seconds per job; a job past it is recorded as unanswered.")
@click.option("--sample", "sample_n", type=click.IntRange(1),
              help="Only this many jobs, drawn evenly across systems (seeded by --seed).")
@click.option("--seed", default=0, show_default=True, help="Seed of --sample and of the random baseline.")
@click.option("--system", help="Only the jobs of this system (after --sample, so a sample's jobs stay the same).")
@model_options
@run_options
@click.option("--quiet", is_flag=True, help="No progress bar.")
def batch(jobs_dir, out, method, concurrency, engine, address, resume, timeout, sample_n, seed, system, config,
          backend, model, base_url, allow_remote, max_steps, experts, store, script, mode, samples, aggregate,
          no_redact, quiet):
    """Diagnose every job of a folder with one method, one JSON line per job (resumable)."""
    from rcagent.batch import OutputLock, job_ids
    from rcagent.discovery import find_jobs, job_system, sample

    folder = Path(jobs_dir).expanduser()
    if not folder.is_dir():
        raise BadInput(f"--jobs {jobs_dir}: not a folder")
    # everything is checked before the first job runs: the settings, every job.yaml, the output file
    settings = model_settings(config, backend, model, base_url, allow_remote, max_steps, script, experts, store=store,
                              mode=mode, samples=samples, aggregate=aggregate,
                              redact=False if no_redact else None)
    jobs = find_jobs(folder)
    ids = job_ids(jobs)
    if sample_n:
        jobs = sample(jobs, sample_n, seed)
    if system:
        jobs = [j for j in jobs if job_system(j) == system]
        if not jobs:
            raise BadInput(f"--system {system}: no job of that system in {jobs_dir}")
    out_path = writable_file(out, "--out")
    if address and engine != "ray":
        raise BadInput("--address is for --engine ray")
    if method == "react" and settings.mode != "react":
        method = settings.mode
    with OutputLock(out_path):     # a second batch on this file is refused while this one runs
        _run_batch(out_path, jobs, ids, method, settings, concurrency, timeout, seed, resume, quiet, engine, address)


def _run_batch(out_path, jobs, ids, method, settings, concurrency, timeout, seed, resume, quiet, engine="local",
               address=None):
    from rcagent.batch import AGENT_METHODS, Batch, prepare_output
    from rcagent.progress import BatchProgress

    done = prepare_output(out_path, resume)
    todo = [j for j in jobs if ids[j] not in done]
    who = f"{settings.backend}/{settings.model}" if method in AGENT_METHODS else method
    where = (f"on the Ray cluster at {address}" if address else f"on a local Ray cluster of {concurrency} CPUs"
             ) if engine == "ray" else f"{concurrency} at a time"
    click.echo(f"{len(jobs)} jobs, {len(jobs) - len(todo)} already in {out_path}, {len(todo)} to run with {who}"
               f" ({where})", err=True)
    if method in AGENT_METHODS and settings.backend == "local" and concurrency > 1:
        click.echo("note: the local backend loads one model copy per worker and they share the CPU; "
                   "concurrency pays off against an OpenAI-compatible server", err=True)
    shared = None
    if method in AGENT_METHODS and settings.backend == "openai" and engine == "local":
        from rcagent.serving import make_backend

        shared = make_backend(settings)   # one HTTP client for every worker; the server batches their requests
    stop_on_sigterm()
    try:
        with BatchProgress(len(todo), quiet) as progress:
            if engine == "ray":
                from rcagent.raybatch import RayBatch

                runner = RayBatch(todo, out_path, method, settings, concurrency, timeout, seed,
                                  on_done=progress.advance, ids=ids, address=address, num_cpus=concurrency)
            else:
                runner = Batch(todo, out_path, method, settings, concurrency, timeout, seed,
                               on_done=progress.advance, backend=shared, ids=ids)
            outcomes = runner.run()
    except KeyboardInterrupt:
        click.echo(f"interrupted: {out_path} holds only complete lines; runs in flight are marked interrupted "
                   "in the store; rerun with --resume to finish", err=True)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(130)   # do not wait for a model call in flight: its run is already marked interrupted
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    click.echo(f"wrote {len(outcomes)} lines to {out_path}: "
               + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "nothing to do"), err=True)


@cli.command("eval")
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--labels", "labels_dir", required=True, type=click.Path(file_okay=False),
              help="The labels folder the importer wrote beside jobs/.")
@click.option("--jobs", "jobs_dir", type=click.Path(file_okay=False),
              help="Folder of the job folders (default: the job paths in the results, else LABELS/../jobs).")
@click.option("--by", default="", help="Breakdowns, comma-separated: source, system, fault, level.")
@click.option("--text", "text_scores", is_flag=True,
              help="Text scores of root cause and solution against the references: METEOR and MiniLM embedding.")
@click.option("--bleurt", "bleurt_dir", type=click.Path(file_okay=False),
              help="With --text: a local BLEURT checkpoint folder (bleurt-pytorch format) to score with too.")
@click.option("--judge-backend", type=click.Choice(["local", "openai", "transformers", "scripted"]),
              help="Score root cause and solution with an LLM judge on this backend (G-Correctness, G-Helpfulness).")
@click.option("--judge-model", help="The judge's model (as --model of analyze).")
@click.option("--judge-base-url", help="The judge's OpenAI-compatible server URL.")
@click.option("--judge-script", type=click.Path(dir_okay=False), help="Scripted judge: JSON file of responses.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), help="Write accuracy against time as a PNG.")
@click.option("--common", is_flag=True, help="Score only the jobs that every results file holds (side by side).")
@click.option("--cases", "cases_file", type=click.Path(dir_okay=False), help="Write the scored cases as JSONL.")
@click.option("--config", type=click.Path(dir_okay=False), help="Config file (TOML).")
@output_format
def eval_cmd(results, labels_dir, jobs_dir, by, text_scores, bleurt_dir, judge_backend, judge_model, judge_base_url,
             judge_script, plot_file, common, cases_file, config, fmt):
    """Score batch results against the labels: PR@1, RR, Recall@k, MRR, time, stability (one row per method)."""
    from rcagent.eval.evalreport import plot, render
    from rcagent.eval.evaluate import common_cases, load_cases, report

    labels = Path(labels_dir).expanduser()
    jobs = Path(jobs_dir).expanduser() if jobs_dir else labels.parent / "jobs"
    by_keys = [k.strip() for k in by.split(",") if k.strip()]
    report([], by_keys)                       # bad --by keys and output files are refused before any work
    cases_path = writable_file(cases_file, "--cases") if cases_file else None
    plot_path = writable_file(plot_file, "--plot") if plot_file else None
    if bleurt_dir and not text_scores:
        raise BadInput("--bleurt scores text: add --text")
    cases, unlabelled = load_cases([Path(r).expanduser() for r in results], labels, jobs)
    notes = []
    if common:
        kept = common_cases(cases)
        if len(kept) < len(cases):
            notes.append(f"--common: {len({c['job'] for c in kept})} jobs held by every results file are scored")
        cases = kept
    if unlabelled:
        notes.append(f"{len(unlabelled)} result lines have no label and are not scored: {', '.join(unlabelled[:5])}")
    if text_scores:
        from rcagent.eval.textmetrics import add_text_scores

        notes += add_text_scores(cases, Path(bleurt_dir).expanduser() if bleurt_dir else None)
    if judge_backend:
        from rcagent.eval.judge import add_judge_scores, separation_notes
        from rcagent.progress import counter
        from rcagent.serving import make_backend

        settings = model_settings(config, judge_backend, judge_model, judge_base_url, None, None, judge_script)
        notes += add_judge_scores(cases, make_backend(settings), progress=counter("cases judged"))
        notes += separation_notes(cases)
    result = report(cases, by_keys)
    result["notes"] = notes
    if cases_path:
        cases_path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    if plot_path:
        plot(result, plot_path)
        click.echo(f"plot written to {plot_file}", err=True)
    click.echo(render(result, fmt))


@cli.command()
@click.option("--model", required=True,
              help="llama.cpp: smollm2 | gemma3 | a .gguf path; vllm: a model folder or its Hugging Face name "
                   "(already in the local cache).")
@click.option("--engine", type=click.Choice(["vllm", "llama.cpp", "llama-server"]), default="llama.cpp",
              show_default=True,
              help="vllm on a GPU workstation (pip install 'rcagent[vllm]'); llama.cpp on a CPU (one request at "
                   "a time); llama-server: llama.cpp's own server, batching --parallel requests "
                   "(`make llama-server` builds it).")
@click.option("--parallel", default=1, show_default=True, type=click.IntRange(1, 64),
              help="llama-server: requests answered at once (slots of --n-ctx each), e.g. span mode's pool or "
                   "batch --concurrency.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535), help="Port on 127.0.0.1.")
@click.option("--name", help="The model name clients send (default: the model's file or folder name).")
@click.option("--threads", default=2, show_default=True, type=click.IntRange(1, 512), help="llama.cpp: CPU threads.")
@click.option("--n-ctx", default=8192, show_default=True, type=click.IntRange(256), help="Context window.")
@click.option("--wait", default=600, show_default=True, type=click.FloatRange(1),
              help="Seconds to wait for the server to answer.")
@click.option("--log", "log_file", type=click.Path(dir_okay=False),
              help="Server log (default: ~/.cache/rcagent/serve-PORT.log).")
@click.option("--allow-remote", is_flag=True,
              help="Allow engine flags after -- that listen beyond loopback (e.g. --host 0.0.0.0).")
@click.argument("engine_args", nargs=-1, type=click.UNPROCESSED)
def serve(model, engine, port, name, threads, n_ctx, wait, log_file, parallel, allow_remote, engine_args):
    """Start a local OpenAI-compatible server on loopback for `analyze` and `batch` (Ctrl-C stops it).

    Anything after `--` goes to the engine as it is, e.g. `-- --cache-ram 0` for llama-server."""
    from rcagent.config import cache_dir
    from rcagent.serving.server import check_extra, start

    check_extra(list(engine_args), allow_remote)
    log = Path(log_file).expanduser() if log_file else cache_dir() / f"serve-{port}.log"
    click.echo(f"starting {engine} with {model} on 127.0.0.1:{port} (log: {log}) ...", err=True)
    stop_on_sigterm()                        # a service manager's stop also stops the server
    proc, base_url = start(engine, model, port, log, threads=threads, n_ctx=n_ctx, name=name, timeout=wait,
                           parallel=parallel, extra=list(engine_args), allow_remote=allow_remote)
    served = name or Path(model).stem
    click.echo(f"ready: --backend openai --base-url {base_url} --model {served}", err=True)
    click.echo(base_url)
    sys.stdout.flush()
    try:
        proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait(timeout=30)
        click.echo("server stopped", err=True)
        return
    raise BackendError(f"the server exited with code {proc.returncode} (log: {log})")


def one_line(text: str, limit: int = 400) -> str:
    """A message on one line: newlines and control characters of hostile input are escaped, not printed."""
    text = " ".join(str(text).split("\n")).strip()
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def stop_on_sigterm() -> None:
    """SIGTERM (systemd, Kubernetes, `timeout`) stops like Ctrl-C: runs are marked interrupted, a batch
    stays resumable, a served engine is stopped."""
    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)


def main(argv: list[str] | None = None) -> None:
    """The console script: the group's own main (so click's CliRunner sees exactly what a user sees)."""
    cli.main(args=argv, prog_name="rcagent")


def _write_traceback() -> str:
    import datetime as dt
    import traceback

    from rcagent.config import cache_dir

    try:
        folder = cache_dir() / "errors"
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / f"{dt.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}.log"
        log.write_text(f"rcagent {' '.join(sys.argv[1:])}\n{traceback.format_exc()}")
        return str(log)
    except OSError:
        return "not written: the cache folder is not writable"
