"""Labels written by the importers beside the jobs (`<root>/labels/<job>.yaml`), read for evaluation only."""
from __future__ import annotations

from pathlib import Path

from rcagent.errors import BadInput
from rcagent.validate import Label, check, load_yaml


def labels_dir(jobs_dir: Path) -> Path:
    """The labels folder that belongs to a jobs folder (`<root>/jobs` → `<root>/labels`)."""
    return jobs_dir.parent / "labels"


def load_label(labels: Path, job_id: str) -> dict | None:
    """The label of a job, validated; None when it has none. A job id is a file name inside `labels`,
    never a path: an id that would lead outside the folder is refused (a label file that is a symlink
    is the user's own arrangement and is followed)."""
    if not job_id or any(c in job_id for c in "/\\\x00") or job_id in (".", ".."):
        raise BadInput(f"job id {job_id[:60]!r} is not a plain name: no label is looked up for it")
    path = labels / f"{job_id}.yaml"
    if not path.is_file():
        return None
    data = load_yaml(path, "label")
    if not isinstance(data, dict):
        raise BadInput(f"{path}: a label is a mapping with root_causes")
    return check(Label, data, str(path)).model_dump(exclude_none=True)


def lenient_truth(label: dict) -> set[str]:
    """The labelled root-cause entities and their services: a quick hit test (the full scorer maps answers
    up to the labelled level)."""
    return {rc["entity"] for rc in label["root_causes"]} | {rc["service"] for rc in label["root_causes"]
                                                             if rc.get("service")}
