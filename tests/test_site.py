"""The reference site (docs/conf.py, docs/api/) documents every public name; .ci/run builds it strictly."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import tomllib

import coalitions
import coalitions.learners as L

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "docs" / "api"


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
    assert re.search(r"-m sphinx -W -n .*docs", run)        # nitpicky: an unresolved cross-reference fails


def _conf():
    spec = importlib.util.spec_from_file_location("docs_conf", API.parent / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    return conf


def test_the_math_is_typeset_without_a_network():
    """MathJax comes from the `docs` extra's sphinx-mathjax-offline, copied into the site, not from a CDN."""
    conf = _conf()
    assert "sphinx-mathjax-offline" in conf.extensions and "sphinx.ext.mathjax" in conf.extensions
    assert conf.intersphinx_mapping == {}                      # and no inventory is fetched either
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["docs"]
    assert any(d.startswith("sphinx-mathjax-offline") for d in extra)
    ext = pytest.importorskip("sphinx-mathjax-offline", reason="the docs extra is not installed")

    class App:
        class config:
            mathjax_path = "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"

        def connect(self, *args):
            pass

    app = App()
    ext.setup(app)
    assert "://" not in app.config.mathjax_path
    assert (Path(ext.__file__).parent / "static" / app.config.mathjax_path).is_file()     # mathjax/tex-chtml.js


def test_nitpicky_exceptions_are_other_projects_names():
    """nitpick_ignore holds only names of other projects (their inventories are not fetched offline)."""
    own = [target for _, target in _conf().nitpick_ignore if target.split(".")[0] in ("coalitions",)]
    assert own == []
    assert {t.split(".")[0] for _, t in _conf().nitpick_ignore} <= {"networkx", "scipy", "numpy", "importlib"}
