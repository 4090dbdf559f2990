"""Learners: from client data to a benefit oracle (docs/concepts.md §5).

Every learner is a scikit-learn-style estimator whose fitted result feeds the
game core's peeling through the benefit-oracle interface
(:class:`coalitions.graph.BenefitOracle`).  PyTorch is imported only by the
modules that train.

The names below are the curated public API; each is imported from its module
on first use (:pep:`562`), so ``import coalitions.learners`` loads neither
PyTorch nor the data sets.

* Estimators: :class:`ExhaustiveOracle` (the exact game, Cui et al.,
  KDD 2022 §3), :class:`SPO` (Pareto hypernetwork, Navon et al. 2021), the personalised
  federated learners (:class:`Local`, :class:`FedAvg`, :class:`FedProx`, :class:`Ditto`,
  :class:`FedAMP`, :class:`FedeRiCo`, :class:`SuPerFed`, :class:`PFedMe`, ...) and
  :func:`create`, which builds any of them by its command-line name; all take scikit-learn's
  ``get_params``/``set_params``/``clone`` conventions from :class:`EstimatorMixin`.
* The protocol every column trains under: :class:`TrainingProtocol`,
  :func:`default_protocol`.
* Federations: :class:`Federation`, :class:`Client`, :class:`Split` and :func:`load`.
* Experiments: :func:`reproduce` and the catalogue :data:`EXPERIMENTS`.

Examples
--------
The paper's synthetic federation (six clients in two planted groups, generated, nothing to
install), its exact game (every subset of clients trains a model: here a linear regression in
closed form), and the collaboration equilibrium of that game, which recovers the planted groups:

>>> import coalitions as co
>>> import coalitions.learners as L
>>> fed = L.load("synthetic", seed=0)
>>> fed.names, fed.planted_groups
(('0', '1', '2', '3', '4', '5'), (('0', '1', '2'), ('3', '4', '5')))
>>> oracle = L.ExhaustiveOracle().fit(fed)        # 63 subset models and 200 bootstrap replicates
>>> eq = co.solve(oracle.game_)
>>> eq.blocks(), eq.certificate.holds
([['0', '1', '2'], ['3', '4', '5']], True)
"""

from __future__ import annotations

import importlib

from coalitions.learners.methods import registry as _registry

#: Public name → the module (relative to this package) that defines it.  The registered methods'
#: estimators join from the methods registry (:func:`~coalitions.learners.methods.registry.exports`,
#: which imports no estimator and no PyTorch), so registering a method exports it.
_EXPORTS = {
    # estimators
    "EstimatorMixin": ".estimator", "DeclaredEstimator": ".estimator",
    "Learner": ".methods.base", "PersonalizedLearner": ".methods.base", "RefitOracle": ".methods.base",
    "ExhaustiveOracle": ".exact",
    "SPOOracle": ".methods.spo.oracle", "SuPerFed": ".methods.superfed",
    "METHODS": ".methods.registry", "create": ".methods.registry",
    # the training protocol
    "TrainingProtocol": ".training.protocol", "default_protocol": ".training.protocol",
    # federations
    "Federation": ".data.federation", "Client": ".data.federation", "Split": ".data.federation",
    "load": ".data.datasets", "LOADERS": ".data.datasets",
    # experiments
    "reproduce": ".experiments.runner", "EXPERIMENTS": ".experiments.catalogue",
}
_EXPORTS.update({name: module.removeprefix(__name__) for name, module in _registry.exports().items()})

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
