"""Rewrite agent results with the model's own picks as the ranking (before fusion with the evidence).

    python benchmarks/model_only.py react.jsonl react-model-only.jsonl
    rcagent eval react.jsonl react-model-only.jsonl --labels DIR --common

Shows what the model's ranking gives on its own, from the same runs (no second run needed): every
diagnosis keeps `model_root_causes`, the entities the model named in finalize, best first.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from rcagent.batch import read_results


def main(src: Path, dest: Path) -> None:
    rows = read_results(src)
    with dest.open("w") as out:
        for row in rows:
            picks = row.get("model_root_causes") or []
            row["root_causes"] = [{"entity": e, "kind": "", "score": round(1 / (i + 1), 3)} for i, e in enumerate(picks)]
            row["method"] = "react-model-only"
            row["status"] = "answered" if picks else "unanswered"
            out.write(json.dumps(row) + "\n")
    print(f"{len(rows)} lines written to {dest}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
