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

__all__ = ["mean_estimation", "planted", "FEDERATIONS", "coalition_normals", "planted_weights", "masked_sums"]


def _subset_sums(weights: np.ndarray) -> np.ndarray:
    """``out[mask] = Σ_{j ∈ mask} weights[j]`` for every mask, by doubling (``O(2^N)``)."""
    out = np.zeros(1)
    for w in weights:
        out = np.concatenate([out, out + w])
    return out


#: The federations of docs/concepts.md §4 (Donahue & Kleinberg): how a member combines the coalition's data.
FEDERATIONS = ("uniform", "coarse", "fine")


def masked_sums(weights: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """``out[k] = Σ_{j ∈ masks[k]} weights[j]`` for any masks, summed in ascending ``j``.

    The additions run in the order of ``_subset_sums`` (``((0 + w_a) + w_b) + …`` over the
    members ``a < b < …``), so a lazy game and its exhaustive table agree bit for bit.
    """
    masks = np.asarray(masks, dtype=np.int64)
    out = np.zeros(masks.shape)
    for j, w in enumerate(weights):
        inside = ((masks >> j) & 1).astype(bool)
        out[inside] += w
    return out


def _table_sums(weights: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """:func:`masked_sums` read from the full table of subset sums (exhaustive games)."""
    return _subset_sums(weights)[masks]


def _uniform_errors(n, j, masks, sums, mu_e, sigma2):
    nc = sums(n, masks)
    s = sums(n ** 2, masks) - n[j] ** 2 + (nc - n[j]) ** 2
    return mu_e / nc + sigma2 * s / nc ** 2


def _coarse_errors(n, j, masks, sums, mu_e, sigma2):
    nc = sums(n, masks)
    rest = nc - n[j]  # N − n: the other members' samples (0 alone)
    s = sums(n ** 2, masks) - n[j] ** 2 + rest ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        err = (mu_e * rest + sigma2 * s) / (rest * nc + n[j] * sigma2 * s / mu_e)
    return np.where(masks == 1 << j, mu_e / n[j], err)


def _fine_errors(n, j, masks, sums, mu_e, sigma2):
    V = sigma2 + mu_e / n
    others = masks & ~(1 << j)  # C \ {j}
    s = sums(1.0 / V, others)
    a = sums(1.0 / (V ** 2 * n), others)  # Σ_{k≠j} 1/(V_k²·n_k)
    b = sums(1.0 / V ** 2, others)  # Σ_{k≠j} 1/V_k²
    vjj = (1 + sigma2 * s) / (1 + V[j] * s)
    c = (V[j] - sigma2) / (1 + V[j] * s)  # v_jk = c / V_k
    return mu_e * (vjj ** 2 / n[j] + c ** 2 * a) + sigma2 * (c ** 2 * b + (1 - vjj) ** 2)


_ERRORS = {"uniform": _uniform_errors, "coarse": _coarse_errors, "fine": _fine_errors}


def check_mean_estimation(sizes: Sequence[float], mu_e: float, sigma2: float, federation: str) -> np.ndarray:
    """The sample counts as a float array, every parameter checked (:class:`InputError` otherwise)."""
    n = np.asarray(sizes, dtype=float)
    if n.ndim != 1 or n.size == 0 or not np.all(np.isfinite(n)) or np.any(n <= 0):
        raise InputError(f"sizes must be positive numbers, got {list(sizes)}")
    if not (np.isfinite(mu_e) and mu_e > 0):
        raise InputError(f"mu_e must be positive, got {mu_e}")
    if not (np.isfinite(sigma2) and sigma2 >= 0):
        raise InputError(f"sigma2 must be non-negative, got {sigma2}")
    if federation not in FEDERATIONS:
        raise InputError(f"federation must be one of {', '.join(FEDERATIONS)}, got {federation!r}")
    return n


def mean_estimation_errors(n: np.ndarray, j: int, masks: np.ndarray, mu_e: float, sigma2: float, federation: str,
                           names: Sequence[str], sums=masked_sums) -> np.ndarray:
    """``err_j(C)`` for the coalitions ``masks`` (each holding ``j``), without any table of ``2^N``.

    ``sums(weights, masks)`` gives the members' sums (:func:`masked_sums`, or a read of the
    full table for an exhaustive game: the same numbers).  A value beyond a float raises
    :class:`~coalitions.numbers.NumberOverflow` naming the client and coalition.
    """
    masks = np.asarray(masks, dtype=np.int64)
    with np.errstate(all="ignore"):  # sizes near the largest float: refused below, never a numpy warning
        err = _ERRORS[federation](n, j, masks, sums, mu_e, sigma2)
    bad = ~np.isfinite(err)
    if bad.any():
        m = int(masks[np.argmax(bad)])
        key = ",".join(names[k] for k in range(len(names)) if m >> k & 1)
        raise NumberOverflow(f"the error of client {names[j]!r} in coalition {key!r} overflows a float "
                             f"(|x| > {LARGEST:.2g} on the way); rescale the sizes")
    return err


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
    n = check_mean_estimation(sizes, mu_e, sigma2, federation)
    N = check_size(n.size)  # before anything of size 2^N is allocated
    names = [str(i) for i in range(N)] if clients is None else list(clients)
    check_client_names(names, "clients")
    masks = all_masks(N)
    errors = np.full((N, 1 << N), np.nan)
    for j in range(N):
        inside = contains(masks, j)
        errors[j, inside] = mean_estimation_errors(n, j, masks[inside], mu_e, sigma2, federation, names, _table_sums)
    prov = {"generator": "mean-estimation", "federation": federation, "sizes": n.tolist(),
            "mu_e": mu_e, "sigma2": sigma2}
    return Game.from_array(errors, names, "min", prov)


def planted_weights(sizes: Sequence[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(W, b)`` of :func:`planted`: the pairwise gains (zero diagonal) and the clients' base values."""
    N = sum(sizes)
    label = np.repeat(np.arange(len(sizes)), sizes)
    rng = np.random.default_rng(seed)
    same = label[:, None] == label[None, :]
    W = np.where(same, rng.uniform(0.5, 1.0, (N, N)), rng.uniform(-1.0, -0.5, (N, N)))
    np.fill_diagonal(W, 0.0)
    return W, rng.uniform(0.0, 1.0, N)


def planted_finish(v: np.ndarray, noise: float, ties: float, seed: int, i: int, masks: np.ndarray) -> np.ndarray:
    """Client ``i``'s planted values from their noiseless part ``v`` over ``masks``: noise, then rounding."""
    if noise:
        v = v + noise * coalition_normals(seed, i, masks)
    if ties:
        with np.errstate(all="ignore"):
            v = np.round(v / ties) * ties
        if not np.isfinite(v).all():
            raise NumberOverflow(f"rounding to multiples of ties={ties!r} overflows a float (|value / ties| > "
                                 f"{LARGEST:.2g}); choose a larger step")
    return v


_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (Steele, Lea & Flood, OOPSLA 2014), a bijection of 64-bit words, vectorised."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _key(seed: int, i: int) -> np.uint64:
    """One 64-bit stream key per (seed, client), mixed in Python integers (no numpy overflow warning)."""
    k = np.array([(int(seed) * _GOLDEN + (int(i) + 1) * 0xD1B54A32D192ED03) & _MASK64], dtype=np.uint64)
    return _splitmix(_splitmix(k))[0]


def coalition_normals(seed: int, i: int, masks: np.ndarray) -> np.ndarray:
    """A standard normal draw ``Z(seed, i, S)`` per coalition ``S`` in ``masks``: a counter-based generator.

    The 64-bit word ``h = mix(S · γ + k_{seed,i})`` is SplitMix64's output for counter
    ``S`` in the stream keyed by ``(seed, i)`` (``mix`` its finaliser, ``γ`` the golden
    ratio word: Steele, Lea & Flood, OOPSLA 2014; a bijection of ``S`` for a fixed key,
    so distinct coalitions get distinct words).  Its two 32-bit halves give the uniforms
    ``u_1, u_2 ∈ (0, 1)`` (``(h_{32} + 1/2) / 2^{32}``) and the Box–Muller transform
    ``Z = sqrt(−2 ln u_1) · cos(2π u_2)`` (Box & Muller, *Ann. Math. Stat.* 29:610, 1958)
    makes them normal (``|Z| ≤ 6.7``: the 32-bit grid bounds the tail).  ``Z`` depends on
    nothing else: the same coalition gets the same draw whichever others are drawn, in
    whatever order or chunk.

    Examples
    --------
    >>> a = coalition_normals(5, 0, np.array([1, 3, 5]))
    >>> bool(np.array_equal(a[1:], coalition_normals(5, 0, np.array([3, 5]))))
    True
    """
    counter = np.asarray(masks, dtype=np.int64).astype(np.uint64)
    h = _splitmix(counter * np.uint64(_GOLDEN) + _key(seed, i))
    scale = 2.0 ** -32
    u1 = ((h >> np.uint64(32)).astype(np.float64) + 0.5) * scale
    u2 = ((h & np.uint64(0xFFFFFFFF)).astype(np.float64) + 0.5) * scale
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def planted(groups: Sequence[int], noise: float = 0.05, ties: float = 0.0, seed: int = 0,
            clients: Sequence[str] | None = None, dtype: str = "float64") -> Game:
    """A game with hidden groups whose members help each other.

    ``v_i(S) = b_i + Σ_{j ∈ S, j ≠ i} W_ij + ε_{i,S}``, with ``W_ij ~ U(0.5, 1)``
    for ``j`` in ``i``'s group, ``W_ij ~ U(−1, −0.5)`` outside it, ``b_i ~ U(0, 1)``
    and independent noise ``ε_{i,S} = noise · Z(seed, i, S)``, ``Z ~ N(0, 1)`` drawn per
    coalition by :func:`coalition_normals` (a function of ``(seed, i, S)`` alone, so
    that the lazy source :class:`coalitions.lazy_analytic.PlantedSource` gives the same value
    whichever coalitions it is asked for, in whatever order).  Without noise each group is the
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
    W, base = planted_weights(sizes, seed)
    values = np.full((N, 1 << N), np.nan, dtype=dtype)
    masks = all_masks(N)
    for i in range(N):
        # the coalitions holding i, ascending: the odd halves of the row split at bit i
        inside = values[i].reshape(-1, 2, 1 << i)[:, 1, :]
        held = masks.reshape(-1, 2, 1 << i)[:, 1, :]
        v = base[i] + _subset_sums(W[i]).reshape(-1, 2, 1 << i)[:, 1, :]
        inside[...] = planted_finish(v, noise, ties, seed, i, held)
    prov = {"generator": "planted", "groups": sizes, "noise": noise, "ties": ties, "seed": seed}
    if dtype == "float32":
        prov["dtype"] = "float32"
    return Game.from_array(values, names, "max", prov, dtype=dtype)
