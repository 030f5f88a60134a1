"""The stored runs: `rcagent show`, `rcagent report` (a run, or a batch evaluation, as HTML) and `rcagent runs`."""
from __future__ import annotations

import json
from pathlib import Path

import click

from rcagent.commands.options import output_format, writable_file
from rcagent.config import load_settings
from rcagent.errors import BadInput


@click.command()
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


@click.command("report")
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


@click.command()
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
