"""A method registers once (coalitions.learners.methods.registry); every table of methods is derived from it."""

import ast
import inspect

import pytest

from coalitions import cli
from coalitions.learners.methods.registry import ALIASES, METHODS, OPTIMISER_KEYS, create, exports, federated, labels


def test_every_table_of_methods_is_the_registrys():
    import coalitions.learners as L
    from coalitions.learners.experiments.catalogue import METHOD_LABELS, VARIANTS
    from coalitions.learners.federated.personal import PERSONAL
    from coalitions.learners.federated.personal.learners import OPTIMISER_KEYS as SITE_KEYS

    # the reports' labels: the registry's, and the variant columns' (a registered method with an option fixed)
    assert METHOD_LABELS == {**labels(), **{name: v.label for name, v in VARIANTS.items()}}
    assert set(METHOD_LABELS) == set(METHODS) | set(VARIANTS) and {v.method for v in VARIANTS.values()} <= set(METHODS)
    assert all(getattr(L, name) is METHODS[m].estimator_class() for m in METHODS
               for name in [METHODS[m].target.partition(":")[2]])
    assert set(exports()) <= set(L.__all__)
    assert PERSONAL == federated() and set(PERSONAL.values()) == {m for m in METHODS if METHODS[m].federated}
    assert SITE_KEYS == OPTIMISER_KEYS
    choices = {p.name: p for p in cli.federate.params}["method"].type.choices
    assert tuple(choices) == ("exact", "spo", *PERSONAL)


def test_one_name_per_method_and_the_alias_is_accepted():
    assert ALIASES == {"superfed": "superfed-mm"}
    assert type(create("superfed", {}, device="cpu")) is type(create("superfed-mm", {}, device="cpu"))
    method = {p.name: p for p in cli.learn.params}["method"].type
    assert method.convert("superfed", None, None) == "superfed-mm" and list(method.choices) == list(METHODS)


@pytest.mark.parametrize("name", sorted(m for m in METHODS if METHODS[m].federated))
def test_every_optimiser_state_a_method_keeps_is_registered(name):
    """The keys a method's site steps keep optimiser state under (``key=`` of ``_site_steps``, or a ``site_opt...``
    key its state holds) are its registered ``optimiser_keys``: a key missing there would be dropped by a Flower site."""
    cls = METHODS[name].estimator_class()
    used = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("coalitions.learners.methods") or klass.__name__ == "PersonalizedLearner":
            continue
        for node in ast.walk(ast.parse(inspect.getsource(klass))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("site_opt"):
                used.add(node.value)
    assert used <= set(METHODS[name].optimiser_keys) | ({"site_opt"} if not used - {"site_opt"} else set())
    assert used <= set(OPTIMISER_KEYS)
