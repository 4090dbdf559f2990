"""Float32 storage of a game, and when it gives the same answers as float64 (docs/performance.md).

A game of ``N`` clients holds ``N · 2^N`` values: 3 GiB in float64 at ``N = 24``,
1.5 GiB in float32.  The core never *computes* in float32: every comparison
upcasts the stored values to float64 (exactly) and compares them with float64
thresholds.  So a game stored in float32 gives exactly the answers of the float64
game with the same numbers; the only question is whether rounding a float64 game
to float32 changes its numbers in a way that matters.

**The rule.**  Every decision of the core (OCS, benefit graph, peeling, shrink,
inner and outer agreement, the stability notions, brute force) compares two values
of the *same* client, ``x`` and ``y``, in one of three ways: ``x ≥ y − tol``,
``x > y + tol``, or by their order (the OCS tie rule, the arg-max of a model).
Rounding to float32 moves each value by at most half a float32 step,
``|fl(x) − x| ≤ 2^-24·|x|``, and is monotone, so it can change a decision only
where two of a client's values differ by almost exactly ``tol`` (within the
rounding of their magnitude) or differ by less than the rounding and merge.
Float32 is therefore exact enough for a tolerance ``tol`` when, for every client,

1. distinct values stay distinct after rounding, and
2. for every value ``x``, the values ``y`` with ``x ≥ y − tol`` and those with
   ``x > y + tol`` are the same sets before and after rounding.

When the values are float32 numbers already both hold trivially (nothing moves).
Otherwise :func:`float32_safe` checks 1–2 exactly, client by client: it sorts the
client's distinct values and compares, for every value, how many values lie below
``x + tol`` and below ``x − tol`` (``O(2^N · N)`` per client: 1.5 s per client at
``N = 24`` on the development machine, under load).  A tolerance that "exceeds
the rounding" is not enough by itself: two values ``tol − 10^-8`` apart, near 1,
with ``tol = 10^-6``, end up ``tol + 1.3·10^-8`` apart when rounded, which flips
``x ≥ y − tol`` (the tests hold such a game, whose CE changes).

Examples
--------
>>> import numpy as np
>>> from coalitions.game import Game
>>> g = Game.from_array(np.array([[np.nan, 1.0 - 0.99e-6, np.nan, 1.0], [np.nan, np.nan, 0.0, 0.0]]))
>>> float32_safe(g.values, tol=1e-6), float32_safe(g.values, tol=1e-3)
(False, True)
>>> to_float32(g, tol=1e-3).values.dtype
dtype('float32')
"""

from __future__ import annotations

import numpy as np

from .errors import InputError
from .game import Game

__all__ = ["is_float32_exact", "float32_safe", "to_float32", "exact_threshold"]


def exact_threshold(t: float, dtype: np.dtype, strict: bool) -> np.floating:
    """A threshold in the values' own dtype that decides exactly as the float64 threshold ``t``.

    Comparing float32 values with a float64 scalar makes NumPy cast every value
    (about ten times slower than a float32 comparison).  For float32 values ``x``
    the float64 decisions are kept exactly by rounding ``t`` the right way:
    ``x > t ⟺ x > d`` with ``d`` the largest float32 ``≤ t`` (every float32 above
    ``d`` is above ``t``), and ``x ≥ t ⟺ x ≥ u`` with ``u`` the smallest float32
    ``≥ t``.  Other dtypes get ``t`` as a float64 scalar.

    Examples
    --------
    >>> t = 1.0 - 1e-9                       # between float32 1 - 2^-24 and 1
    >>> float(exact_threshold(t, np.float32, strict=False)), float(exact_threshold(t, np.float32, strict=True))
    (1.0, 0.9999999403953552)
    """
    t = np.float64(t)
    if np.dtype(dtype) != np.float32:
        return t
    with np.errstate(over="ignore"):
        r = np.float32(t)  # nearest; ±inf beyond the float32 range
    if strict and np.float64(r) > t:
        r = np.nextafter(r, np.float32(-np.inf))
    elif not strict and np.float64(r) < t:
        r = np.nextafter(r, np.float32(np.inf))
    return r


def is_float32_exact(values: np.ndarray) -> bool:
    """Are all values float32 numbers already (NaN allowed), so that float32 storage is lossless?"""
    values = np.asarray(values)
    if values.dtype == np.float32:
        return True
    return all(np.array_equal(row.astype(np.float32), row, equal_nan=True) for row in values)


def _row_safe(row: np.ndarray, tol: float) -> bool:
    """Conditions 1–2 of the module docstring for one client's values (NaN ignored)."""
    s = np.unique(row[~np.isnan(row)])  # sorted, distinct, float64
    t = s.astype(np.float32).astype(np.float64)
    if s.size > 1 and not np.all(t[1:] > t[:-1]):
        return False  # two distinct values round to one
    below_up = np.searchsorted(s - tol, s, side="right")  # #{y : y − tol ≤ x}, as x ≥ y − tol is computed
    if not np.array_equal(below_up, np.searchsorted(t - tol, t, side="right")):
        return False
    below_down = np.searchsorted(s + tol, s, side="left")  # #{y : y + tol < x}
    return bool(np.array_equal(below_down, np.searchsorted(t + tol, t, side="left")))


def float32_safe(values: np.ndarray, tol: float) -> bool:
    """Does rounding ``values`` to float32 leave every decision at tolerance ``tol`` unchanged?

    ``values`` is a game's ``(N, 2**N)`` array (higher is better, NaN outside).
    True at once when the values are float32 numbers; otherwise checked exactly,
    client by client (see the module docstring).
    """
    if not (np.isfinite(tol) and tol >= 0):
        raise InputError(f"tolerance must be a finite number >= 0, got {tol!r}")
    values = np.asarray(values)
    return all(is_float32_exact(row[None, :]) or _row_safe(row.astype(np.float64), float(tol)) for row in values)


def to_float32(game: Game, tol: float = 1e-9) -> Game:
    """The game stored in float32, when that changes no answer at tolerance ``tol``.

    Returns ``game`` itself when it is float32 already.  The float32 game gives the
    same CE, certificate and witnesses as ``game`` at this ``tol`` (not at another
    one); the payoffs it reports are the rounded values.

    Raises
    ------
    InputError
        When rounding could change an answer (:func:`float32_safe` is False).
    """
    if game.values.dtype == np.float32:
        return game
    if not float32_safe(game.values, tol):
        raise InputError(f"float32 would change answers at tolerance {tol:g}: two values of a client "
                         "differ by about the tolerance or merge when rounded; keep float64")
    prov = dict(game.provenance, dtype="float32", float32_tol=float(tol))
    return Game(game.clients, game.values.astype(np.float32), game.sense, prov)
