"""Games with exact values, no training (docs/concepts.md §4), and planted test games.

Mean estimation (Donahue & Kleinberg, AAAI 2021): client ``j`` with ``n_j``
samples estimates its own mean; the true means spread with variance ``σ²`` and
each client's noise variance has mean ``μ_e``.  In coalition ``C`` with
``N_C = Σ_{i∈C} n_i`` and ``S_j = Σ_{i∈C, i≠j} n_i² + (N_C − n_j)²`` the
expected squared error of client ``j`` is, under the three federations of
docs/concepts.md §4 (``N = N_C``, ``n = n_j``),

* *uniform* (everyone uses the pooled mean):
  ``err_j = μ_e/N + σ²·S_j/N²``;
* *coarse-grained* (``j`` mixes its own mean with the pooled one, optimally):
  ``err_j = (μ_e·(N − n) + σ²·S_j) / ((N − n)·N + n·σ²·S_j/μ_e)``;
* *fine-grained* (``j`` weighs every member's mean, optimally): with
  ``V_k = σ² + μ_e/n_k`` and ``s = Σ_{k∈C, k≠j} 1/V_k``,
  ``v_jj = (1 + σ²·s)/(1 + V_j·s)``, ``v_jk = (V_j − σ²)/(V_k·(1 + V_j·s))``,
  ``err_j = μ_e·Σ_k v_jk²/n_k + σ²·(Σ_{k≠j} v_jk² + (1 − v_jj)²)``.

Alone, every federation gives ``μ_e/n_j``.  The game holds the errors with
``sense = "min"`` (a loss), so ``v_j(C) = −err_j(C)`` internally.

Examples
--------
>>> g = mean_estimation([5, 5, 25])
>>> g.sense, round(g.value(0, [0]), 6), round(g.value(0, [0, 1]), 6)
('min', -2.0, -1.5)
>>> round(-mean_estimation([5, 5, 25], federation="fine").value(0, [0, 1]), 6)
1.333333
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .bitmask import all_masks, contains
from .errors import InputError
from .game import Game, check_client_names, check_size
from .numbers import LARGEST, NumberOverflow

__all__ = ["mean_estimation", "planted", "FEDERATIONS"]


def _subset_sums(weights: np.ndarray) -> np.ndarray:
    """``out[mask] = Σ_{j ∈ mask} weights[j]`` for every mask, by doubling (``O(2^N)``)."""
    out = np.zeros(1)
    for w in weights:
        out = np.concatenate([out, out + w])
    return out


#: The federations of docs/concepts.md §4 (Donahue & Kleinberg): how a member combines the coalition's data.
FEDERATIONS = ("uniform", "coarse", "fine")


def _uniform_errors(n, j, inside, total, squares, masks, mu_e, sigma2):
    nc = total[inside]
    s = squares[inside] - n[j] ** 2 + (nc - n[j]) ** 2
    return mu_e / nc + sigma2 * s / nc ** 2


def _coarse_errors(n, j, inside, total, squares, masks, mu_e, sigma2):
    nc = total[inside]
    rest = nc - n[j]  # N − n: the other members' samples (0 alone)
    s = squares[inside] - n[j] ** 2 + rest ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        err = (mu_e * rest + sigma2 * s) / (rest * nc + n[j] * sigma2 * s / mu_e)
    return np.where(masks[inside] == 1 << j, mu_e / n[j], err)


def _fine_errors(n, j, inside, total, squares, masks, mu_e, sigma2):
    V = sigma2 + mu_e / n
    others = masks[inside] & ~(1 << j)  # C \ {j}
    s = _subset_sums(1.0 / V)[others]
    a = _subset_sums(1.0 / (V ** 2 * n))[others]  # Σ_{k≠j} 1/(V_k²·n_k)
    b = _subset_sums(1.0 / V ** 2)[others]  # Σ_{k≠j} 1/V_k²
    vjj = (1 + sigma2 * s) / (1 + V[j] * s)
    c = (V[j] - sigma2) / (1 + V[j] * s)  # v_jk = c / V_k
    return mu_e * (vjj ** 2 / n[j] + c ** 2 * a) + sigma2 * (c ** 2 * b + (1 - vjj) ** 2)


_ERRORS = {"uniform": _uniform_errors, "coarse": _coarse_errors, "fine": _fine_errors}


def mean_estimation(sizes: Sequence[float], mu_e: float = 10.0, sigma2: float = 1.0,
                    clients: Sequence[str] | None = None, federation: str = "uniform") -> Game:
    """The mean-estimation game of docs/concepts.md §4, its errors held as a loss (``sense = "min"``).

    Parameters
    ----------
    sizes : sequence of positive numbers
        Sample count ``n_i`` of each client (recorded in the provenance as ``sizes``,
        which ``coalitions welfare --weights sizes`` reads).
    mu_e : float
        Mean noise variance ``μ_e`` (> 0).
    sigma2 : float
        Spread ``σ²`` of the clients' true means (≥ 0).
    clients : sequence of str, optional
        Names; default ``"0", "1", ...``.
    federation : {"uniform", "coarse", "fine"}
        How a member uses its coalition's data (module docstring; Donahue &
        Kleinberg, AAAI 2021): the pooled mean, the optimal mix of its own mean
        and the pooled one, or the optimal weight on every member's mean.

    Returns
    -------
    Game
        ``err_j(C)`` given with ``sense = "min"`` (internally ``v_j(C) = −err_j(C)``).
    """
    n = np.asarray(sizes, dtype=float)
    if n.ndim != 1 or n.size == 0 or not np.all(np.isfinite(n)) or np.any(n <= 0):
        raise InputError(f"sizes must be positive numbers, got {list(sizes)}")
    if not (np.isfinite(mu_e) and mu_e > 0):
        raise InputError(f"mu_e must be positive, got {mu_e}")
    if not (np.isfinite(sigma2) and sigma2 >= 0):
        raise InputError(f"sigma2 must be non-negative, got {sigma2}")
    if federation not in FEDERATIONS:
        raise InputError(f"federation must be one of {', '.join(FEDERATIONS)}, got {federation!r}")
    N = check_size(n.size)  # before anything of size 2^N is allocated
    names = [str(i) for i in range(N)] if clients is None else list(clients)
    check_client_names(names, "clients")
    masks = all_masks(N)
    errors = np.full((N, 1 << N), np.nan)
    with np.errstate(all="ignore"):  # sizes near the largest float: refused below, never a numpy warning
        total = _subset_sums(n)
        squares = _subset_sums(n ** 2)
        for j in range(N):
            inside = contains(masks, j)
            errors[j, inside] = _ERRORS[federation](n, j, inside, total, squares, masks, mu_e, sigma2)
            bad = ~np.isfinite(errors[j, inside])
            if bad.any():
                m = int(masks[inside][np.argmax(bad)])
                key = ",".join(names[k] for k in range(N) if m >> k & 1)
                raise NumberOverflow(f"the error of client {names[j]!r} in coalition {key!r} overflows a float "
                                     f"(|x| > {LARGEST:.2g} on the way); rescale the sizes")
    prov = {"generator": "mean-estimation", "federation": federation, "sizes": n.tolist(),
            "mu_e": mu_e, "sigma2": sigma2}
    return Game.from_array(errors, names, "min", prov)


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
    if not (math.isfinite(noise) and noise >= 0 and math.isfinite(ties) and ties >= 0):
        raise InputError(f"noise and ties must be finite and non-negative, got {noise} and {ties}")
    if dtype not in ("float64", "float32"):
        raise InputError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    N = check_size(sum(sizes), itemsize=np.dtype(dtype).itemsize)  # before anything of size 2^N is allocated
    if clients is not None and len(clients) != N:
        raise InputError(f"{len(clients)} names for {N} clients")
    names = [f"c{i}" for i in range(N)] if clients is None else list(clients)
    check_client_names(names, "clients")
    label = np.repeat(np.arange(len(sizes)), sizes)
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
            with np.errstate(all="ignore"):
                v = np.round(v / ties) * ties
            if not np.isfinite(v).all():
                raise NumberOverflow(f"rounding to multiples of ties={ties!r} overflows a float (|value / ties| > "
                                     f"{LARGEST:.2g}); choose a larger step")
        inside[...] = v
    prov = {"generator": "planted", "groups": sizes, "noise": noise, "ties": ties, "seed": seed}
    if dtype == "float32":
        prov["dtype"] = "float32"
    return Game.from_array(values, names, "max", prov, dtype=dtype)
