"""Tiny federations for the personalised-learner tests (CPU, seconds), and a protocol that runs a given number of rounds.

Not a test module: helpers imported by ``test_engine.py``, ``test_fedamp.py``,
``test_federico.py``, ``test_superfed.py``, ``test_baselines.py``,
``test_personalized.py`` and the other learner tests.
"""

from __future__ import annotations

import math

import numpy as np

from coalitions.learners.data.federation import Client, Federation, Split
from coalitions.learners.training.protocol import TrainingProtocol


def sgd_protocol(rounds: int, sizes=(), *, batch_size: int | None = 32, local_epochs: int = 1, model=None, lr=0.1,
                 momentum=0.9, optimizer="sgd", weight_decay=0.0, schedule="constant", **fields) -> TrainingProtocol:
    """A training protocol that gives a federation of training-set ``sizes`` exactly ``rounds`` rounds.

    Small, quick settings for tests: SGD at a constant rate 0.1 with momentum 0.9, no
    weight decay, batch 32 unless changed.  A learner's rounds follow from the protocol
    (:class:`~coalitions.learners.methods.base.PersonalizedLearner`): a round is the fewest
    whole epochs giving the smallest client ``local_steps`` steps, and the rounds the fewest
    giving the largest ``steps``; so ``local_steps = local_epochs·⌈n_min/b⌉`` and
    ``steps = rounds·local_epochs·⌈n_max/b⌉`` give ``local_epochs`` epochs a round and
    ``rounds`` rounds (in full batch a step is an epoch, and ``sizes`` is not needed).

    >>> p = sgd_protocol(5, (9, 12, 7), batch_size=4)
    >>> p.steps, p.local_steps
    (15, 2)
    """
    if batch_size is None:
        small = large = 1
    else:
        small, large = (math.ceil(int(n) / batch_size) for n in (min(sizes), max(sizes)))
    return TrainingProtocol(model=model, optimizer=optimizer, lr=lr, momentum=momentum, weight_decay=weight_decay,
                            schedule=schedule, batch_size=batch_size, local_steps=local_epochs * small,
                            steps=rounds * local_epochs * large, **fields)


def blobs(sizes=(12, 20, 7, 16), groups=None, dim=5, classes=3, image=False, seed=0,
          separation=3.0) -> Federation:
    """Clients of unequal sizes; each group shares class means (planted groups).

    Group ``g`` draws class ``c`` around mean ``μ_{g,c}``; features are ``dim``
    numbers, or ``(1, 4, 4)`` images when ``image`` (dim is then 16).
    """
    rng = np.random.default_rng(seed)
    if groups is None:  # first half, second half
        half = (len(sizes) + 1) // 2
        groups = tuple(g for g in (tuple(range(half)), tuple(range(half, len(sizes)))) if g)
    d = 16 if image else dim
    means = rng.normal(0, separation, size=(len(groups), classes, d))
    group_of = {i: g for g, members in enumerate(groups) for i in members}
    clients = []
    for i, n in enumerate(sizes):
        def split(m, i=i):
            y = rng.integers(0, classes, size=m)
            X = means[group_of[i], y] + rng.normal(size=(m, d))
            X = X.astype(np.float32).reshape((m, 1, 4, 4) if image else (m, d))
            return Split(X, y.astype(np.int64))
        clients.append(Client(str(i), split(n), split(max(4, n // 2)), split(max(4, n // 2))))
    planted = tuple(tuple(str(i) for i in g) for g in groups)
    return Federation("blobs", "multiclass", "accuracy", tuple(clients), classes, planted, {"seed": seed})


def regression(sizes=(10, 14, 9), dim=3, seed=0) -> Federation:
    """Linear regression clients with their own true weights."""
    rng = np.random.default_rng(seed)
    clients = []
    for i, n in enumerate(sizes):
        w = rng.normal(size=dim)
        def split(m, w=w):
            X = rng.uniform(-1, 1, size=(m, dim)).astype(np.float32)
            return Split(X, (X @ w + 0.01 * rng.normal(size=m)).astype(np.float32))
        clients.append(Client(f"r{i}", split(n), split(8), split(8)))
    return Federation("reg", "regression", "mse", tuple(clients), None, None, {})


def binary(sizes=(15, 11, 13), dim=4, seed=0) -> Federation:
    """Binary classification clients (one logit)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=dim)
    clients = []
    for i, n in enumerate(sizes):
        def split(m):
            X = rng.normal(size=(m, dim)).astype(np.float32)
            y = (X @ w + 0.3 * rng.normal(size=m) > 0).astype(np.int64)
            y[:2] = [0, 1]
            return Split(X, y)
        clients.append(Client(f"b{i}", split(n), split(10), split(10)))
    return Federation("bin", "binary", "auc", tuple(clients), 2, None, {})
