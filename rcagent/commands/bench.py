"""`rcagent bench`: the controller's stability, what each model adds, the evidence ranking held out."""
from __future__ import annotations

import json
from pathlib import Path

import click

from rcagent.commands.options import model_options, model_settings, output_format, writable_file
from rcagent.errors import BadInput


@click.group()
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
