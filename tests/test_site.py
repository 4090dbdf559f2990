"""The reference site (docs/conf.py, docs/api/) documents every public name; .ci/run builds it strictly."""

from __future__ import annotations

import re
from pathlib import Path

import coalitions
import coalitions.learners as L

API = Path(__file__).resolve().parent.parent / "docs" / "api"


def _directives(page: str) -> set[str]:
    return set(re.findall(r"^\.\. auto(?:module|class|function|data):: (\S+)", (API / page).read_text(), re.M))


def test_every_name_of_the_core_is_in_a_documented_module():
    modules = _directives("core.rst")
    missing = [n for n in coalitions.__all__ if n != "__version__"
               and getattr(coalitions, n).__module__ not in modules]
    assert missing == []


def test_every_curated_name_of_the_learners_is_on_its_page():
    documented = {d.rpartition(".")[2] for d in _directives("learners.rst")}
    assert set(L.__all__) - documented == set()


def test_ci_builds_the_site_with_warnings_as_errors():
    run = (API.parent.parent / ".ci" / "run").read_text()
    assert re.search(r"-m sphinx -W .*docs", run)
