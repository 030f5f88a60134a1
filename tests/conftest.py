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
    for item in items:   # `make check` leaves these out: importing every archive takes over a minute
        if {"imported", "labels"} & set(item.fixturenames):
            item.add_marker(pytest.mark.all_archives)
    if not DATA.is_dir():
        skip = pytest.mark.skip(reason=f"shared data not found at {DATA}")
        for item in items:
            if {"real_data", "imported", "importer", "job_of", "index"} & set(item.fixturenames):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def index() -> list[dict]:
    with (DATA / "INDEX.csv").open() as fh:
        return list(csv.DictReader(fh))


def archive_of(row: dict) -> str:
    """The ARCHIVES key of an INDEX.csv row."""
    by_source = {"rcd-sockshop": "SockShop", "petshop": "PetSite", "changerca": "ChangeRCA"}
    return by_source.get(row["source"]) or row["system"]


@pytest.fixture(scope="session")
def importer(tmp_path_factory):
    """importer(*systems) imports those archives (once per session) into one folder: (folder, reports).
    A test that needs one real case pays for its own system's import only."""
    dest = tmp_path_factory.mktemp("imported")
    reports: dict = {}

    def ensure(*systems: str):
        for system in systems:
            if system not in reports:
                kind, archive = ARCHIVES[system]
                reports[system] = run_import(kind, DATA / archive, dest)
        return dest, reports
    return ensure


@pytest.fixture(scope="session")
def imported(importer) -> dict:
    """All the archives imported into one session folder: {system: report}, plus the folder."""
    dest, reports = importer(*ARCHIVES)
    return {"dest": dest, "reports": reports}


@pytest.fixture(scope="session")
def labels(imported) -> dict[str, dict]:
    import yaml
    return {p.stem: yaml.safe_load(p.read_text()) for p in (imported["dest"] / "labels").glob("*.yaml")}


@pytest.fixture(scope="session")
def job_of(importer, index, tmp_path_factory):
    """job_of(case_id) -> path of that case's job folder (its system imported on first use)."""
    import yaml

    system_of = {row["case_id"]: archive_of(row) for row in index}
    single_cases = tmp_path_factory.mktemp("cases")

    def find(case_id: str) -> Path:
        system = system_of[case_id]
        if ARCHIVES[system][0] == "nezha":      # the large archives: this one case, into its own folder
            dest = single_cases / case_id
            if not dest.is_dir():
                run_import("nezha", DATA / ARCHIVES[system][1], dest, only={case_id})
        else:
            dest, _ = importer(system)
        for label in sorted((dest / "labels").glob("*.yaml")):
            if yaml.safe_load(label.read_text()).get("case_id") == case_id:
                return dest / "jobs" / label.stem
        raise KeyError(case_id)
    return find


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
