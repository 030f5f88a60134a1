"""Getting incidents in: `rcagent import` (public datasets) and `rcagent job create` (your own exports)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from rcagent.commands.options import output_format
from rcagent.errors import one_line

SKIPS_SHOWN = 10   # cases `import` names that it skipped (the JSON output names all)


@click.command("import")
@click.argument("kind", type=click.Choice(["nezha", "rcd", "petshop", "changerca"]))
@click.argument("src", type=click.Path())
@click.argument("dest", type=click.Path(file_okay=False))
@output_format
def import_cmd(kind, src, dest, fmt):
    """Import a public RCA dataset (archive or extracted folder) into DEST/jobs and DEST/labels."""
    from rcagent.importers import run_import

    from rcagent.progress import counter

    step = counter("cases read")
    report = run_import(kind, src, dest, progress=lambda job_id, i, n: step(i, n))
    if fmt == "json":
        click.echo(json.dumps({"source": report.source, "jobs": len(report.jobs), "systems": report.systems,
                               "lacking": report.lacking, "skipped": report.skipped}, indent=2))
        return
    click.echo(f"Imported {len(report.jobs)} jobs from {kind} into {Path(dest) / 'jobs'}: "
               + ", ".join(f"{s} {n}" for s, n in report.systems.items()))
    by_missing: dict[str, int] = {}
    for tables in report.lacking.values():
        key = ", ".join(tables)
        by_missing[key] = by_missing.get(key, 0) + 1
    for tables, n in sorted(by_missing.items()):
        click.echo(f"  {n} jobs lack: {tables}")
    if report.skipped:
        click.echo(f"  skipped {len(report.skipped)} cases not laid out as the others:")
    for case, why in list(report.skipped.items())[:SKIPS_SHOWN]:
        click.echo("    " + one_line(f"{case}: {why}"))   # a folder's name is the dataset's text
    if len(report.skipped) > SKIPS_SHOWN:
        click.echo(f"    and {len(report.skipped) - SKIPS_SHOWN} more (--format json lists them all)")


@click.group("job")
def job_group():
    """Make a job (one incident folder) from your own telemetry exports."""


@job_group.command("create")
@click.argument("dest", type=click.Path(file_okay=False))
@click.option("--from", "sources", required=True, multiple=True, type=click.Path(),
              help="An export file or folder (OTLP JSON, Prometheus or Loki query_range JSON, logcli JSON lines, "
                   "Elasticsearch or OpenSearch _search hits, Jaeger JSON, kubectl JSON, a change log as CSV or "
                   "YAML, container .log files of /var/log/pods or kubectl logs --timestamps); repeat for more.")
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
    from rcagent.exports import COUNTERS, EXCEPTIONS, JOINED
    from rcagent.exports.assemble import create_job

    made = create_job(Path(dest), [Path(s) for s in sources], window, list(baseline), alert, system, job_id, force)
    skipped = [{"file": f, "reason": r, "records": n} for (f, r), n in sorted(made.skipped.items())]
    if fmt == "json":
        click.echo(json.dumps({"job": str(made.folder), "rows": made.rows, "entities": made.kinds,
                               "files": dict(made.formats), "records": dict(made.records), "skipped": skipped,
                               "renamed": made.renamed, "warnings": made.warnings}, indent=2))
        return
    click.echo(f"Created the job {made.folder} from {sum(made.formats.values())} files ("
               + ", ".join(f"{k} {n}" for k, n in sorted(made.formats.items())) + ")")
    click.echo("  rows: " + ", ".join(f"{t} {n}" for t, n in made.rows.items()))
    click.echo("  entities: " + (", ".join(f"{k} {n}" for k, n in sorted(made.kinds.items())) or "none"))
    if made.records.get(COUNTERS):
        click.echo(f"  read as per-second rates: {made.records[COUNTERS]} counter series (NAME_total -> NAME:rate)")
    if made.records.get(JOINED):
        click.echo(f"  joined to the log line they continue: {made.records[JOINED]} lines (stack-trace frames)")
    if made.records.get(EXCEPTIONS):
        click.echo(f"  given the exception recorded beside them: {made.records[EXCEPTIONS]} log lines")
    for name, new in sorted(made.renamed.items()):
        click.echo(f"  named as one entity: {name} -> {new}")
    for row in skipped:
        click.echo(f"  skipped {row['records']} {row['reason']} in {row['file']}")
    for note in made.warnings:
        click.echo(f"  warning: {note}")
