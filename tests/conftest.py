"""Shared fixtures: real jobs imported once per session from ../shared/data (never committed)."""
from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from rcagent.config import Settings
from rcagent.importers import run_import
from rcagent.store import Store

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("RCAGENT_DATA", ROOT.parent / "shared" / "data"))
ARCHIVES = {
    "TrainTicket": ("nezha", "nezha-trainticket-2023-01-29.tar.xz"),
    "OnlineBoutique": ("nezha", "nezha-onlineboutique-2022-08-22.tar.xz"),
    "SockShop": ("rcd", "rcd-sockshop.tar.xz"),
    "PetSite": ("petshop", "petshop.tar.xz"),
    "ChangeRCA": ("changerca", "changerca-2023-09-22.tar.xz"),
}
# The TrainTicket case used across tests: a 'return' fault in ts-contacts-service (2023-01-29 08:43).
CONTACTS_CASE = "2023-01-29_08_43"


def pytest_collection_modifyitems(config, items):
    if not DATA.is_dir():
        skip = pytest.mark.skip(reason=f"shared data not found at {DATA}")
        for item in items:
            if "real_data" in item.fixturenames or "imported" in item.fixturenames:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def index() -> list[dict]:
    with (DATA / "INDEX.csv").open() as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="session")
def imported(tmp_path_factory) -> dict:
    """All four archives imported into one session folder: {system: report}, plus the folder."""
    dest = tmp_path_factory.mktemp("imported")
    reports = {system: run_import(kind, DATA / archive, dest) for system, (kind, archive) in ARCHIVES.items()}
    return {"dest": dest, "reports": reports}


@pytest.fixture(scope="session")
def labels(imported) -> dict[str, dict]:
    import yaml
    return {p.stem: yaml.safe_load(p.read_text()) for p in (imported["dest"] / "labels").glob("*.yaml")}


@pytest.fixture(scope="session")
def job_of(imported, labels):
    """job_of(case_id) -> path of that case's job folder."""
    by_case = {lab["case_id"]: imported["dest"] / "jobs" / job for job, lab in labels.items()}
    return lambda case_id: by_case[case_id]


@pytest.fixture()
def contacts_job(job_of):
    from rcagent.job import Job
    return Job.load(job_of(CONTACTS_CASE))


@pytest.fixture()
def store(tmp_path) -> Store:
    return Store(tmp_path / "store.db")


@pytest.fixture()
def settings(tmp_path) -> Settings:
    return Settings(backend="scripted", store=str(tmp_path / "store.db"))
