"""Testing the collaboration-equilibrium axioms in your own test suite (docs/testing.md).

Assertions with readable witnesses, in the manner of :mod:`numpy.testing`:

>>> import coalitions as co
>>> from coalitions.testing import assert_equilibrium, assert_outer_agreement
>>> game = co.mean_estimation([5, 5, 25], clients=["a", "b", "c"])
>>> assert_equilibrium(game, "a,b|c")
>>> assert_outer_agreement(game, "a,c|b")
Traceback (most recent call last):
...
coalitions.testing.assertions.CertificateFailure: outer agreement fails for a,c|b (exhaustive: 1 of 7 coalitions violate)
  coalition {a,b} blocks: a: 1.5 in {a,b} < 1.72222 in {a,c}; b: 1.5 in {a,b} < 2 alone

The hypothesis strategies live in :mod:`coalitions.testing.strategies` (import it from tests;
it needs hypothesis) and the pytest plugin in :mod:`coalitions.testing.plugin`.  This package
itself imports NumPy and the game core only.
"""

from .assertions import (
    CertificateFailure,
    assert_core_stable,
    assert_equilibrium,
    assert_individually_rational,
    assert_individually_stable,
    assert_inner_agreement,
    assert_nash_stable,
    assert_outer_agreement,
    assert_same_benefit_graph,
    assert_same_partition,
    assert_sampled_stable,
    explain,
)

__all__ = ["CertificateFailure", "assert_equilibrium", "assert_inner_agreement", "assert_outer_agreement",
           "assert_individually_rational", "assert_nash_stable", "assert_individually_stable",
           "assert_core_stable", "assert_same_benefit_graph", "assert_same_partition", "assert_sampled_stable", "explain"]
