"""Two `rcagent bench stability --out` files side by side (before and after a change, on the same sample):
per configuration, pass rate, invalid rate, PR@1 and what the handlers refused, and how many jobs got the
same first answer in both.

    python benchmarks/stability_diff.py before.json after.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from rcagent.tables import pct, render_table


def _pr1(value):
    """PR@1 as a fraction: files written before the units were unified hold it as a percentage."""
    return None if value is None else value / 100 if value > 1 else value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    args = ap.parse_args()
    before = {r["config"]: r for r in json.loads(args.before.read_text())}
    after = {r["config"]: r for r in json.loads(args.after.read_text())}
    rows = []
    for name in [c for c in before if c in after]:
        b, a = before[name], after[name]
        if b["sample"] != a["sample"]:
            raise SystemExit(f"{name}: the two files hold different samples")
        first = {j["job"]: (j["answer"] or [None])[0] for j in b["per_job"]}
        same = sum(first.get(j["job"]) == (j["answer"] or [None])[0] for j in a["per_job"])
        rows.append([name, f"{b['runs']} / {a['runs']}", f"{pct(b['pass_rate'])} / {pct(a['pass_rate'])}",
                     f"{pct(b['invalid_rate'])} / {pct(a['invalid_rate'])}",
                     f"{pct(_pr1(b['pr1']))} / {pct(_pr1(a['pr1']))}",
                     f"{b['mean_steps']:.1f} / {a['mean_steps']:.1f}",
                     f"{same} of {len(a['per_job'])}",
                     "; ".join(f"{k} {v}" for k, v in b["handled"].items()) or "none",
                     "; ".join(f"{k} {v}" for k, v in a["handled"].items()) or "none"])
    print(render_table(["config", "runs", "pass rate %", "invalid rate %", "PR@1 %", "mean steps",
                        "same first answer", "refused before", "refused after"], rows, "md"))


if __name__ == "__main__":
    main()
