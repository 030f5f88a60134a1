"""The batch evaluation as one self-contained HTML page (`rcagent report --batch R.jsonl --labels DIR`): the
evaluation table, the accuracy-time plot (SVG), a row per case linking to the page of each run the store
holds (rcagent.htmlreport writes those)."""
from __future__ import annotations

from pathlib import Path

from rcagent.htmlreport import Raw, esc, page, run_page, table


def batch_page(result: dict, cases: list[dict], links: dict[tuple[str, str], str], plot_svg: str) -> str:
    from rcagent.eval.evalreport import MAIN

    rows = [[m] + [fmt(s.get(key)) for _, key, fmt in MAIN] for m, s in result["methods"].items()]
    parts = ["<h1>Evaluation</h1>", '<h2 id="methods">Localization, efficiency, stability</h2>',
             table(["method"] + [h for h, _, _ in MAIN], rows, "methods")]
    if plot_svg:
        parts.append(f'<h2 id="plot">Accuracy against time</h2><div class="plot">{plot_svg}</div>')
    for note in result.get("notes") or []:
        parts.append(f'<p class="muted">{esc(note)}</p>')
    parts.append('<h2 id="cases">Cases</h2>')
    case_rows = []
    for c in sorted(cases, key=lambda c: (c["job"], c["method"])):
        link = links.get((c["method"], c["job"]))
        job = Raw(f'<a href="{esc(link)}">{esc(c["job"])}</a>') if link else c["job"]
        case_rows.append([job, c["method"], c["system"], "yes" if c["pr1"] else "no", f"{c['rr']:.2f}",
                          ", ".join(c["answer"][:3]), ", ".join(c["truth"]), f"{c['wall_s']:.1f}"])
    parts.append(table(["job", "method", "system", "right at 1", "RR", "answer (top 3)", "truth", "s"],
                       case_rows, "cases"))
    return page("rcagent: evaluation", "".join(parts))


def write_batch(results: list[Path], labels: Path, out: Path, store=None) -> int:
    """The evaluation page at `out` and, for every case whose run is in `store`, that run's page in
    `<out stem>_runs/` linked from the case's row; returns how many run pages were written."""
    import tempfile

    from rcagent.eval.evalreport import plot
    from rcagent.eval.evaluate import load_cases, report

    cases, unlabelled = load_cases(results, labels, labels.parent / "jobs")
    result = report(cases, [])
    result["notes"] = ([f"{len(unlabelled)} result lines have no label and are not scored"] if unlabelled else [])
    plot_svg = ""
    if cases:
        with tempfile.TemporaryDirectory() as tmp:
            plot(result, Path(tmp) / "plot.svg")
            text = (Path(tmp) / "plot.svg").read_text()
            plot_svg = text[text.index("<svg"):]
    links, written = {}, 0
    folder = out.with_name(out.stem + "_runs")
    for c in cases:
        run = store.get_run(c["run_id"]) if store is not None and c.get("run_id") else None
        if run is None:
            continue
        folder.mkdir(exist_ok=True)     # the file is named by the store's id, never by the results' text
        (folder / f"{run['id']}.html").write_text(run_page(store, run["id"]), encoding="utf-8")
        links[(c["method"], c["job"])] = f"{folder.name}/{run['id']}.html"
        written += 1
    out.write_text(batch_page(result, cases, links, plot_svg), encoding="utf-8")
    return written
