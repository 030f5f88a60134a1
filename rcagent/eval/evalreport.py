"""Rendering of an evaluation: the per-method table, the breakdowns, and a plot of accuracy against time."""
from __future__ import annotations

import json
from pathlib import Path

from rcagent.tables import pct as _pct, render_table


def _num(v, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _secs(v) -> str:
    return "-" if v is None else (f"{v:.1f}" if v >= 1 else f"{v:.3f}")


MAIN = [("cases", "cases", str), ("PR@1", "pr1", _pct), ("RR", "rr", _pct), ("MRR", "mrr", _pct),
        ("R@1", "recall@1", _pct), ("R@3", "recall@3", _pct), ("R@5", "recall@5", _pct),
        ("R@10", "recall@10", _pct), ("random PR@1", "random_pr1", _pct), ("lift", "lift", _num),
        ("answered", "answered", _pct), ("s/case", "mean_wall_s", _secs), ("median s", "median_wall_s", _secs),
        ("calls/case", "llm_calls", _num), ("tokens/case", "tokens", lambda v: _num(v, 0)),
        ("pass rate", "pass_rate", _pct), ("invalid rate", "invalid_rate", _pct)]
TEXT = [("METEOR rc", "meteor_rc", lambda v: _num(v, 3)), ("METEOR sol", "meteor_sol", lambda v: _num(v, 3)),
        ("embed rc", "embed_rc", lambda v: _num(v, 3)), ("embed sol", "embed_sol", lambda v: _num(v, 3)),
        ("BLEURT rc", "bleurt_rc", lambda v: _num(v, 3)), ("BLEURT sol", "bleurt_sol", lambda v: _num(v, 3)),
        ("G-Correctness", "judge_correctness", _num), ("G-Helpfulness", "judge_helpfulness", _num)]
BREAKDOWN = [("cases", "cases", str), ("PR@1", "pr1", _pct), ("RR", "rr", _pct), ("MRR", "mrr", _pct),
             ("R@5", "recall@5", _pct), ("random PR@1", "random_pr1", _pct), ("s/case", "mean_wall_s", _secs)]


def _rows(per_method: dict, columns, first: list[str] | None = None) -> list[list[str]]:
    return [(first or []) + [m] + [fmt(s.get(key)) for _, key, fmt in columns] for m, s in per_method.items()]


def render(result: dict, fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps(result, indent=2)
    parts = []
    methods = result["methods"]
    parts.append(("## Localization, efficiency, stability\n\n" if fmt == "md" else "")
                 + render_table(["method"] + [h for h, _, _ in MAIN], _rows(methods, MAIN), fmt))
    text_cols = [c for c in TEXT if any(c[1] in s for s in methods.values())]
    if text_cols:
        parts.append(("## Text and judge scores\n\n" if fmt == "md" else "Text and judge scores\n")
                     + render_table(["method"] + [h for h, _, _ in text_cols], _rows(methods, text_cols), fmt))
    for key, groups in result.get("by", {}).items():
        rows = []
        for group, per_method in groups.items():
            rows += _rows(per_method, BREAKDOWN, [group])
        parts.append((f"## By {key}\n\n" if fmt == "md" else f"By {key}\n")
                     + render_table([key, "method"] + [h for h, _, _ in BREAKDOWN], rows, fmt))
    notes = result.get("notes") or []
    if notes:
        parts.append("\n".join(("- " if fmt == "md" else "note: ") + n for n in notes))
    return "\n\n".join(parts)


def plot(result: dict, path: Path) -> None:
    """Accuracy (PR@1 and RR) against mean time per case, one point per method, time on a log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, s in result["methods"].items():
        t = max(s.get("mean_wall_s") or 0.0, 1e-3)
        ax.scatter([t], [100 * s["pr1"]], marker="o", s=60)
        ax.scatter([t], [100 * (s.get("rr") or 0)], marker="x", s=40, color="grey")
        ax.annotate(name, (t, 100 * s["pr1"]), textcoords="offset points", xytext=(6, 4), fontsize=8)
    randoms = [s["random_pr1"] for s in result["methods"].values() if s.get("random_pr1")]
    if randoms:
        ax.axhline(100 * randoms[0], linestyle=":", color="grey", linewidth=1)
        ax.annotate("random-guess PR@1", (ax.get_xlim()[0], 100 * randoms[0]), fontsize=7, color="grey",
                    xytext=(2, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("mean time per case (s, log scale)")
    ax.set_ylabel("PR@1 (dot) and RR (x), %")
    ax.set_ylim(0, 100)
    ax.set_title(f"Accuracy against time ({next(iter(result['methods'].values()))['cases']} cases per method)",
                 fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
