"""How many sampled coalitions a stability statement needs, and what a sample proves (docs/scale.md).

A partition ``P`` is *ε-stable under a distribution* ``D`` over coalitions when the
``D``-probability that a coalition drawn from ``D`` blocks ``P`` is at most ``ε``
(PAC stability: Sliwinski & Zick, IJCAI 2017; Balcan, Procaccia & Zick, IJCAI 2015;
ε-fractional core stability: Fioravanti, Flammini, Kodric & Varricchio, NeurIPS 2023).
With ``m`` coalitions drawn from ``D`` independently of how ``P`` was found, of which
``k`` block, the exact one-sided binomial (Clopper–Pearson) bound

.. math::  \\varepsilon(m, k, \\delta) = \\sup\\{p : \\Pr[\\mathrm{Bin}(m, p) \\le k] \\ge \\delta\\}
           = F^{-1}_{\\mathrm{Beta}(k+1,\\, m-k)}(1 - \\delta)

holds with confidence ``1 − δ``: the blocking share is at most ``ε`` (Clopper & Pearson,
*Biometrika* 26:404, 1934).  With no blocker it is ``1 − δ^{1/m}``, so
``m = ⌈ln δ / ln(1 − ε)⌉`` draws certify ``ε`` when none blocks.

The distributions ``D`` (``DISTRIBUTIONS``):

* ``"uniform-size"`` (default): a size ``s`` uniform in ``2..N``, then a uniform subset of
  that size: ``D(C) = 1 / ((N − 1)·C(N, |C|))`` for ``|C| ≥ 2`` (singletons are checked
  one by one, exactly, by the certificate);
* ``"mixed"``: with probability ½ a draw of ``"uniform-size"``, else a uniform draw from the
  partition's neighbourhood (each block with one client added or removed, the unions of two
  blocks; sets of fewer than two clients left out).

Examples
--------
>>> draws_for(0.01, 0.05)
299
>>> round(epsilon_bound(299, 0, 0.05), 5)
0.00997
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .bitmask import popcount
from .errors import InputError

__all__ = ["DISTRIBUTIONS", "DEFAULT_DISTRIBUTION", "check_probability", "draws_for", "epsilon_bound",
           "binomial_cdf", "draw_coalitions", "neighbourhood", "d_weights"]

DISTRIBUTIONS = ("uniform-size", "mixed")
DEFAULT_DISTRIBUTION = "uniform-size"


def check_probability(x: object, what: str) -> float:
    """``x`` as a float strictly between 0 and 1; else :class:`InputError`."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) or not 0 < float(x) < 1:
        raise InputError(f"{what} must be a number strictly between 0 and 1, got {x!r}")
    return float(x)


def draws_for(epsilon: float, delta: float) -> int:
    """``m = ⌈ln δ / ln(1 − ε)⌉``: the draws that certify ``ε`` at confidence ``1 − δ`` when none blocks."""
    epsilon, delta = check_probability(epsilon, "epsilon"), check_probability(delta, "delta")
    m = math.log(delta) / math.log1p(-epsilon)
    up = math.ceil(m)
    # ⌈·⌉ of a float quotient: step back when m−1 draws already reach ε (rounding of the logarithms)
    if up > 1 and -math.expm1(math.log(delta) / (up - 1)) <= epsilon:
        up -= 1
    return max(1, up)


def binomial_cdf(k: int, m: int, p: float) -> float:
    """``Pr[Bin(m, p) ≤ k]``, summed in log space (exact to rounding for any ``m``)."""
    if p <= 0:
        return 1.0
    if p >= 1:
        return 1.0 if k >= m else 0.0
    j = np.arange(k + 1, dtype=np.float64)
    lg = np.vectorize(math.lgamma)
    logs = lg(m + 1.0) - lg(j + 1.0) - lg(m - j + 1.0) + j * math.log(p) + (m - j) * math.log1p(-p)
    top = float(logs.max())
    return float(min(1.0, math.exp(top) * float(np.exp(logs - top).sum())))


def epsilon_bound(m: int, k: int, delta: float) -> float:
    """The Clopper–Pearson upper bound on a share from ``k`` of ``m`` draws, at confidence ``1 − δ``.

    Equals ``scipy.stats.beta.ppf(1 − δ, k + 1, m − k)`` (tested); ``1 − δ^{1/m}`` for
    ``k = 0`` and 1 for ``k = m``.  Found by bisection on :func:`binomial_cdf`, which
    decreases in ``p``, to 1e-15.
    """
    delta = check_probability(delta, "delta")
    if not (isinstance(m, (int, np.integer)) and isinstance(k, (int, np.integer)) and 0 <= k <= m and m >= 1):
        raise InputError(f"need 0 <= k <= m and m >= 1, got k={k!r}, m={m!r}")
    if k == m:
        return 1.0
    if k == 0:
        return float(-math.expm1(math.log(delta) / m))
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-15:
        mid = (lo + hi) / 2
        if binomial_cdf(int(k), int(m), mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def neighbourhood(partition: Sequence[int], n: int) -> np.ndarray:
    """The partition's neighbours, ascending: each block ± one client, unions of two blocks (≥ 2 clients, not blocks)."""
    blocks = [int(b) for b in partition]
    out = set()
    for a, ka in enumerate(blocks):
        for j in range(n):
            out.add(ka ^ (1 << j))
        for kb in blocks[a + 1:]:
            out.add(ka | kb)
    arr = np.array(sorted(out - set(blocks)), dtype=np.int64)
    return arr[popcount(arr) >= 2] if arr.size else arr


def draw_coalitions(rng: np.random.Generator, n: int, m: int, distribution: str = DEFAULT_DISTRIBUTION,
                    partition: Sequence[int] = ()) -> np.ndarray:
    """``m`` coalitions of ``n ≥ 2`` clients drawn independently from ``D`` (module docstring), as int64 masks."""
    if distribution not in DISTRIBUTIONS:
        raise InputError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}, got {distribution!r}")
    if n < 2:
        raise InputError("coalitions of at least two clients need at least two clients")
    sizes = rng.integers(2, n + 1, size=m)
    order = np.argsort(rng.random((m, n)), axis=1)            # a uniform permutation per draw
    chosen = np.arange(n)[None, :] < sizes[:, None]            # its first `size` clients
    bits = np.zeros((m, n), dtype=np.int64)
    np.put_along_axis(bits, order, chosen.astype(np.int64), axis=1)
    masks = (bits << np.arange(n, dtype=np.int64)[None, :]).sum(axis=1)
    if distribution == "mixed":
        near = neighbourhood(partition, n)
        pick = rng.random(m) < 0.5
        if near.size:
            masks = np.where(pick, near[rng.integers(0, near.size, size=m)], masks)
    return masks.astype(np.int64)


def d_weights(masks: np.ndarray, n: int, distribution: str = DEFAULT_DISTRIBUTION,
              partition: Sequence[int] = ()) -> np.ndarray:
    """``D(C)`` for each coalition in ``masks`` (the probability of drawing it), vectorised."""
    masks = np.asarray(masks, dtype=np.int64)
    sizes = popcount(masks)
    comb = np.array([math.comb(n, s) for s in range(n + 1)], dtype=np.float64)
    w = np.where(sizes >= 2, 1.0 / ((n - 1) * comb[sizes]), 0.0)
    if distribution == "mixed":
        near = neighbourhood(partition, n)
        w = 0.5 * w
        if near.size:
            w = w + np.where(np.isin(masks, near), 0.5 / near.size, 0.0)
        else:
            w = 2 * w
    return w
