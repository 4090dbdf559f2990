"""Run the examples in the docstrings of every module: the game core, the CLI and the learners."""

import doctest
import importlib
import pkgutil

import pytest

import coalitions


def _modules(package) -> list[str]:
    return [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]


CORE = sorted(["coalitions"] + [n for n in _modules(coalitions) if not n.startswith("coalitions.learners")])
# The learner layer lives in learners/ of the repository and is mapped to coalitions.learners at
# install time, so it is walked from its own path (importing it does not import torch).
LEARNERS = sorted(["coalitions.learners"] + _modules(importlib.import_module("coalitions.learners")))
# The command line likewise lives in cli/, mapped to coalitions.cli.
CLI = sorted(["coalitions.cli"] + _modules(importlib.import_module("coalitions.cli")))


def test_every_module_is_listed():
    assert {"coalitions.game", "coalitions.scc", "coalitions.peeling", "coalitions.brute_force",
            "coalitions.estimate"} <= set(CORE)
    assert {"coalitions.cli", "coalitions.cli.main", "coalitions.cli.learn_command"} <= set(CLI)
    assert {"coalitions.learners.exact", "coalitions.learners.data.datasets",
            "coalitions.learners.training.engine"} <= set(LEARNERS)


@pytest.mark.parametrize("name", CORE + CLI + LEARNERS)
def test_doctests(name):
    if name.startswith("coalitions.learners"):
        pytest.importorskip("torch")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"


def test_core_has_examples():
    """Most core modules document themselves with runnable examples."""
    finder = doctest.DocTestFinder()
    with_examples = [n for n in CORE if any(t.examples for t in finder.find(importlib.import_module(n)))]
    assert len(with_examples) >= 10
