"""Bootstrap replicates of the validation rows, and re-scoring stored predictions on them
(docs/concepts.md §6; :mod:`coalitions.learners.exact`, "Bootstrap replicates").
"""

from __future__ import annotations

import numpy as np

from coalitions.learners.data.federation import Federation
from coalitions.learners.data.metrics import evaluate_batch

#: Bootstrap replicates a measured game carries by default (the exhaustive oracle, the federated game):
#: the paired standard errors to about 3 % (docs/cli.md, ``oracle --replicates``).
DEFAULT_REPLICATES = 200


def _resample(rng: np.random.Generator, y: np.ndarray, b: int, stratified: bool) -> np.ndarray:
    """``(b, len(y))`` row indices drawn with replacement: from all rows, or within each class of ``y``."""
    if not stratified:
        return rng.integers(0, len(y), size=(b, len(y)))
    parts = [rng.choice(np.flatnonzero(y == k), size=(b, int(np.sum(y == k))), replace=True) for k in np.unique(y)]
    return np.concatenate(parts, axis=1) if parts else np.zeros((b, 0), dtype=np.int64)


def site_draws(y, metric: str, b: int, seed: int, site: int) -> np.ndarray:
    """``B`` resamples of one site's validation rows (the federated game, where each site draws its own).

    As :func:`bootstrap_draws` draws for one client, from
    ``numpy.random.default_rng([seed, 0xB007, site])``: the site's index in the federation
    keeps the draws of a site the same in process and over Flower.
    """
    rng = np.random.default_rng([int(seed), 0xB007, int(site)])
    return _resample(rng, np.asarray(y), int(b), metric == "auc")


def bootstrap_draws(fed: Federation, b: int, seed: int = 0) -> list[np.ndarray]:
    """``B`` resamples of each client's validation rows: a ``(B, n_i)`` index array per client.

    Drawn with replacement from ``numpy.random.default_rng([seed, 0xB007])``,
    client by client in order: from all of a client's rows (Efron's nonparametric
    bootstrap) for accuracy, MSE and the validation loss; within each class for AUC
    (stratified), so that every resample keeps each class's count and AUC stays defined.

    Accuracy is not stratified because a stratified resample keeps the only row of a
    class in every replicate: a difference between two models that lies in such rows
    then has a bootstrap standard error of 0 and reads as infinitely significant (under
    label skew a client often holds one or two rows of a rare class).  Unstratified, a
    difference of ``k`` rows has a standard error of about ``√k / n``.
    """
    rng = np.random.default_rng([int(seed), 0xB007])
    return [_resample(rng, np.asarray(c.val.y), b, fed.metric == "auc") for c in fed.clients]


def rescore(metric: str, y, scores, draws) -> np.ndarray:
    """``(B, M)``: the metric of ``M`` models (``scores`` ``(M, n, ...)``) on each resample ``draws[b]`` of the rows."""
    y = np.asarray(y)
    return np.stack([evaluate_batch(metric, y[d], scores[:, d]) for d in draws]) if len(draws) else \
        np.zeros((0, len(scores)))
