"""Many incidents at once: `rcagent batch` (one method over a folder of jobs, resumable) and `rcagent eval`
(batch results scored offline against the labels)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from rcagent.commands.options import (model_options, model_settings, output_format, run_options, stop_on_sigterm,
                                      writable_file)
from rcagent.errors import BadInput


@click.command()
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


@click.command("eval")
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
