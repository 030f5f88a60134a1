"""The evidence ranking's code names no dataset, system or service (the signals' tests are in
test_evidence_*.py, by family: metrics, calls, logs, changes, jobs without a baseline)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent


# every module of the tools (the overview's signals among them: a new one is covered without being listed)
RANKING_CODE = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tools").glob("*.py")) + [
    "rcagent/onset.py", "rcagent/eval/baselines.py", "rcagent/fusion.py", "rcagent/explain.py"]


NAMES = r"(?i)(trainticket|train-ticket|onlineboutique|online boutique|hipster|sockshop|sock-shop|petsite|" \
        r"petshop|changerca|nezha|\brcd\b|ts-[a-z]+-service|frontend|checkoutservice|adservice|cartservice|" \
        r"currencyservice|\bcarts\b|\bcatalogue\b|queue-master|user-db)"


@pytest.mark.parametrize("path", RANKING_CODE)
def test_no_dataset_system_or_service_name_in_the_ranking_code(path):
    text = (ROOT / path).read_text()
    assert not re.findall(NAMES, text), re.findall(NAMES, text)[:5]
