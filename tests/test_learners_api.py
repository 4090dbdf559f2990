"""The curated public API of coalitions.learners: complete, importable, and loaded lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

import coalitions.learners as L


def test_importing_the_learners_loads_no_torch_and_no_data():
    """The package reads its estimators' names off the methods registry, which imports no estimator."""
    code = ("import sys, coalitions.learners as L; L.__all__; dir(L); "
            "heavy = {'torch', 'scipy', 'coalitions.learners.data'} & set(sys.modules); "
            "heavy |= {m for m in sys.modules if m.startswith('coalitions.learners.methods.')} - "
            "{'coalitions.learners.methods.registry'}; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", L.__all__)
def test_every_public_name_resolves_to_its_own_documented_object(name):
    obj = getattr(L, name)
    if callable(obj):
        assert obj.__module__.startswith("coalitions.learners."), (name, obj.__module__)
        assert (obj.__doc__ or "").strip(), f"{name} has no docstring"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        L.no_such_name  # noqa: B018


def test_the_estimators_are_what_the_registry_builds():
    est = L.create("fedavg", {}, seed=0)
    assert isinstance(est, L.FedAvg) and isinstance(est, L.PersonalizedLearner)
