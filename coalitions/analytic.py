"""Games with exact values, no training (SPEC §4), and planted test games.

Mean estimation under uniform federation (Donahue & Kleinberg, AAAI 2021):
client ``j`` with ``n_j`` samples estimates a mean; the coalition ``C`` pools
its samples.  With ``N_C = Σ_{i∈C} n_i`` and
``S_j = Σ_{i∈C, i≠j} n_i² + (N_C − n_j)²`` the expected error is

.. math::  \\mathrm{err}_j(C) = \\frac{\\mu_e}{N_C} + \\sigma^2 \\frac{S_j}{N_C^2},

and ``v_j(C) = −err_j(C)``; alone, ``err_j = μ_e / n_j``.

Examples
--------
>>> g = mean_estimation([5, 5, 25])
>>> round(g.value(0, [0]), 6), round(g.value(0, [0, 1]), 6)
(-2.0, -1.5)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .bitmask import all_masks, contains
from .errors import InputError
from .game import Game

__all__ = ["mean_estimation", "planted"]


def _subset_sums(weights: np.ndarray) -> np.ndarray:
    """``out[mask] = Σ_{j ∈ mask} weights[j]`` for every mask, by doubling (``O(2^N)``)."""
    out = np.zeros(1)
    for w in weights:
        out = np.concatenate([out, out + w])
    return out


def mean_estimation(sizes: Sequence[float], mu_e: float = 10.0, sigma2: float = 1.0,
                    clients: Sequence[str] | None = None) -> Game:
    """The mean-estimation game of SPEC §4.

    Parameters
    ----------
    sizes : sequence of positive numbers
        Sample count ``n_i`` of each client.
    mu_e : float
        Mean noise variance ``μ_e`` (> 0).
    sigma2 : float
        Spread ``σ²`` of the clients' true means (≥ 0).
    clients : sequence of str, optional
        Names; default ``"0", "1", ...``.
    """
    n = np.asarray(sizes, dtype=float)
    if n.ndim != 1 or n.size == 0 or not np.all(np.isfinite(n)) or np.any(n <= 0):
        raise InputError(f"sizes must be positive numbers, got {list(sizes)}")
    if not (np.isfinite(mu_e) and mu_e > 0):
        raise InputError(f"mu_e must be positive, got {mu_e}")
    if not (np.isfinite(sigma2) and sigma2 >= 0):
        raise InputError(f"sigma2 must be non-negative, got {sigma2}")
    N = n.size
    masks = all_masks(N)
    total = _subset_sums(n)
    squares = _subset_sums(n ** 2)
    values = np.full((N, 1 << N), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        for j in range(N):
            inside = contains(masks, j)
            nc = total[inside]
            s = squares[inside] - n[j] ** 2 + (nc - n[j]) ** 2
            values[j, inside] = -(mu_e / nc + sigma2 * s / nc ** 2)
    names = [str(i) for i in range(N)] if clients is None else list(clients)
    prov = {"generator": "mean-estimation", "sizes": n.tolist(), "mu_e": mu_e, "sigma2": sigma2}
    return Game.from_array(values, names, "max", prov)


def planted(groups: Sequence[int], noise: float = 0.05, ties: float = 0.0, seed: int = 0,
            clients: Sequence[str] | None = None, dtype: str = "float64") -> Game:
    """A game with hidden groups whose members help each other.

    ``v_i(S) = b_i + Σ_{j ∈ S, j ≠ i} W_ij + ε_{i,S}``, with ``W_ij ~ U(0.5, 1)``
    for ``j`` in ``i``'s group, ``W_ij ~ U(−1, −0.5)`` outside it, ``b_i ~ U(0, 1)``
    and independent noise ``ε ~ N(0, noise²)``.  Without noise each group is the
    unique collaboration equilibrium.  ``ties > 0`` rounds every value to a
    multiple of ``ties``, creating ties on purpose.

    Parameters
    ----------
    groups : sequence of int
        Group sizes, e.g. ``(3, 3, 2)``; clients are numbered group by group.
    noise : float
        Standard deviation of the per-(client, coalition) noise.
    ties : float
        Rounding step (0 = no rounding).
    seed : int
        Seed of the generator; the same seed gives the same game.
    dtype : {"float64", "float32"}
        Storage of the values.  ``"float32"`` rounds each float64 value of the same
        seed to float32 and stores the game in float32 (half the memory; the game
        *is* those float32 numbers, see :mod:`coalitions.precision`).
    """
    sizes = [int(g) for g in groups]
    if not sizes or any(g <= 0 for g in sizes):
        raise InputError(f"group sizes must be positive integers, got {list(groups)}")
    if noise < 0 or ties < 0:
        raise InputError("noise and ties must be non-negative")
    if dtype not in ("float64", "float32"):
        raise InputError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    label = np.repeat(np.arange(len(sizes)), sizes)
    N = label.size
    if clients is not None and len(clients) != N:
        raise InputError(f"{len(clients)} names for {N} clients")
    rng = np.random.default_rng(seed)
    same = label[:, None] == label[None, :]
    W = np.where(same, rng.uniform(0.5, 1.0, (N, N)), rng.uniform(-1.0, -0.5, (N, N)))
    np.fill_diagonal(W, 0.0)
    base = rng.uniform(0.0, 1.0, N)
    values = np.full((N, 1 << N), np.nan, dtype=dtype)
    for i in range(N):
        # the coalitions holding i, ascending: the odd halves of the row split at bit i
        inside = values[i].reshape(-1, 2, 1 << i)[:, 1, :]
        v = base[i] + _subset_sums(W[i]).reshape(-1, 2, 1 << i)[:, 1, :]
        if noise:
            v += rng.normal(0.0, noise, v.size).reshape(v.shape)
        if ties:
            v = np.round(v / ties) * ties
        inside[...] = v
    names = [f"c{i}" for i in range(N)] if clients is None else list(clients)
    prov = {"generator": "planted", "groups": sizes, "noise": noise, "ties": ties, "seed": seed}
    if dtype == "float32":
        prov["dtype"] = "float32"
    return Game.from_array(values, names, "max", prov, dtype=dtype)
