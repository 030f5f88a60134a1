"""Tables for tool observations, reports and benchmarks: aligned plain text or Markdown, from one header
and rows; and the one way a rate (a fraction 0..1, as every JSON output holds it) is shown: a percentage."""
from __future__ import annotations


def render_table(head: list[str], rows: list[list[str]], fmt: str = "text") -> str:
    rows = [[str(c) for c in row] for row in rows]
    if fmt == "md":
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                         + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(row, widths)).rstrip() for row in [head, *rows])


def pct(rate: float | None) -> str:
    """A fraction (0..1) as a percentage with one decimal; '-' when there is none."""
    return "-" if rate is None else f"{100 * rate:.1f}"
