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


def pytest_addoption(parser):
    parser.addoption("--import-cache", action="store_true",
                     help="reuse the shared archives' imports of an earlier session (make check's edit loop; the "
                          "key holds the importers' source, so a change to them imports again)")


_IMPORT_CACHE = {"on": False}


def pytest_configure(config):
    _IMPORT_CACHE["on"] = config.getoption("--import-cache")


def imported_into(kind: str, archive: Path, dest: Path, only: set[str] | None = None):
    """run_import(kind, archive, dest, only=only); with --import-cache, a copy of the same import made by an
    earlier session, kept under ~/.cache/rcagent/test-imports by the archive, the importers' code and DuckDB's
    version."""
    import hashlib
    import pickle
    import shutil

    import duckdb

    from rcagent.config import cache_dir

    if not _IMPORT_CACHE["on"]:
        return run_import(kind, archive, dest, only=only)
    code = hashlib.sha1()
    for f in sorted([*(ROOT / "rcagent" / "importers").glob("*.py"), ROOT / "rcagent" / "job.py"]):
        code.update(f.read_bytes())
    stat = archive.stat()
    key = hashlib.sha1(f"{kind}:{archive.name}:{stat.st_size}:{stat.st_mtime_ns}:{sorted(only or [])}:"
                       f"{code.hexdigest()}:{duckdb.__version__}".encode()).hexdigest()[:16]
    cached = cache_dir() / "test-imports" / key
    if not (cached / "report.pickle").is_file():
        staging = cached.with_name(f"{key}.partial-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        report = run_import(kind, archive, staging / "import", only=only)
        (staging / "report.pickle").write_bytes(pickle.dumps(report))
        try:
            staging.rename(cached)
        except OSError:     # another worker (pytest -n) finished the same import first: theirs is as good
            shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(cached / "import", dest, dirs_exist_ok=True)
    return pickle.loads((cached / "report.pickle").read_bytes())


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
                reports[system] = imported_into(kind, DATA / archive, dest)
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


# The cases of the large archives that tests ask job_of() for: imported together, in one pass per archive
# (each import of a case reads its whole day of metrics).
NEZHA_TEST_CASES = {"2023-01-29_08_43", "2023-01-29_08_52", "2023-01-29_09_25", "2023-01-29_09_30",
                    "2023-01-29_09_42", "2023-01-29_09_49", "2023-01-29_10_20", "2023-01-29_10_45",
                    "2023-01-29_10_50", "2023-01-29_11_04", "2023-01-29_11_36", "2023-01-29_14_23",
                    "2022-08-22_03_53", "2022-08-22_04_10", "2022-08-22_04_27", "2022-08-22_04_36",
                    "2022-08-22_05_01", "2022-08-22_05_18"}


@pytest.fixture(scope="session")
def job_of(importer, index, tmp_path_factory):
    """job_of(case_id) -> path of that case's job folder (its system imported on first use). A case of the
    large archives gets a folder of its own (a test may run every job of that folder)."""
    import yaml

    system_of = {row["case_id"]: archive_of(row) for row in index}
    single_cases = tmp_path_factory.mktemp("cases")

    def split(staging: Path) -> None:
        """One folder per imported case: DEST/<case>/jobs/<id> and DEST/<case>/labels/<id>.yaml."""
        for label in sorted((staging / "labels").glob("*.yaml")):
            case = yaml.safe_load(label.read_text())["case_id"]
            (single_cases / case / "jobs").mkdir(parents=True)
            (single_cases / case / "labels").mkdir()
            (staging / "jobs" / label.stem).rename(single_cases / case / "jobs" / label.stem)
            label.rename(single_cases / case / "labels" / label.name)

    def find(case_id: str) -> Path:
        system = system_of[case_id]
        if ARCHIVES[system][0] == "nezha":      # the large archives: these cases only, each in its own folder
            dest = single_cases / case_id
            if not dest.is_dir():
                wanted = {case_id} | {c for c in NEZHA_TEST_CASES if system_of.get(c) == system
                                      and not (single_cases / c).is_dir()}
                staging = single_cases / f"staging-{case_id}"
                imported_into("nezha", DATA / ARCHIVES[system][1], staging, only=wanted)
                split(staging)
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
