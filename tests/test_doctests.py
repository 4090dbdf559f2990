"""Run the examples in the docstrings of every module of the game core and the CLI."""

import doctest
import importlib
import pkgutil

import pytest

import coalitions

MODULES = sorted(["coalitions"] + [f"coalitions.{m.name}" for m in pkgutil.iter_modules(coalitions.__path__)]
                 + ["cli"])


def test_every_core_module_is_listed():
    assert {"coalitions.game", "coalitions.scc", "coalitions.peeling", "coalitions.brute_force"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"


def test_core_has_examples():
    """Most core modules document themselves with runnable examples."""
    with_examples = [n for n in MODULES if doctest.DocTestFinder().find(importlib.import_module(n))
                     and any(t.examples for t in doctest.DocTestFinder().find(importlib.import_module(n)))]
    assert len(with_examples) >= 10
