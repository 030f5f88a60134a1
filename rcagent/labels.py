"""Labels written by the importers beside the jobs (`<root>/labels/<job>.yaml`), read for evaluation only."""
from __future__ import annotations

from pathlib import Path

import yaml


def labels_dir(jobs_dir: Path) -> Path:
    """The labels folder that belongs to a jobs folder (`<root>/jobs` → `<root>/labels`)."""
    return jobs_dir.parent / "labels"


def load_label(labels: Path, job_id: str) -> dict | None:
    path = labels / f"{job_id}.yaml"
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def lenient_truth(label: dict) -> set[str]:
    """The labelled root-cause entities and their services: a quick hit test (the full scorer maps answers
    up to the labelled level)."""
    return {rc["entity"] for rc in label["root_causes"]} | {rc["service"] for rc in label["root_causes"]
                                                             if rc.get("service")}
