"""The `rcagent` command line: the command group (every error one line, never a traceback) and `rcagent
analyze`; the other subcommands live in rcagent.commands, one module per area."""
from __future__ import annotations

import json
import os
import sys

import click

from rcagent.commands import batch as batch_commands
from rcagent.commands import bench as bench_commands
from rcagent.commands import data, runs, serve
from rcagent.commands.options import (model_options, model_settings, output_format, run_options, stop_on_sigterm,
                                      writable_file)
from rcagent.errors import BackendError, BadInput, one_line


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
    for note in job.warnings():
        click.echo(f"warning: {note}", err=True)

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


for command in (data.import_cmd, data.job_group, runs.show, runs.report_cmd, runs.runs, bench_commands.bench,
                batch_commands.batch, batch_commands.eval_cmd, serve.serve):
    cli.add_command(command)


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
