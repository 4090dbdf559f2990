"""Measurement noise of a game: paired standard errors and comparisons at a significance level.

A game measured on data (the exhaustive oracle, the federated game) knows each value
``v_i(S)`` only up to the noise of client ``i``'s finite scoring rows.  What decides
every answer of the core is a *difference* of two values of one client,

.. math::  d_i(S, T) = v_i(S) - v_i(T),

so what a measured game must carry is the standard error of such differences.  An
:class:`Uncertainty` holds it in one of two forms:

* **bootstrap replicates** ``v_i^b(S)``, ``b = 1..B``, each re-scoring every subset
  model on one resample of client ``i``'s scoring rows (the same resample for every
  ``S``: :mod:`coalitions.replicates`).  The replicates are *paired* across
  coalitions, and the paired standard error is

  .. math::  \\mathrm{se}_i(S, T) = \\mathrm{sd}_b\\bigl(v_i^b(S) - v_i^b(T)\\bigr)

  (sample SD, ``ddof = 1``), computed on demand and never stored for all pairs;
* **one standard error per value** ``s_i(S)`` (a hand-written or published game).
  The values are then treated as independent:
  ``se_i(S, T) = sqrt(s_i(S)^2 + s_i(T)^2)`` — conservative where the real
  measurements are positively correlated (they share the client's rows).

**Comparisons at level z** (docs/concepts.md, "Measurement noise").  Client ``i``
*strictly prefers* ``S`` to ``T`` when

.. math::  d_i(S, T) > \\mathrm{tol} + z \\cdot \\mathrm{se}_i(S, T);

otherwise the two are tied.  With ``z = 0``, or standard errors of zero, this is the
point-value comparison with its tolerance, and every result of the core is
unchanged.  ``z`` is per comparison (1.96: a two-sided 5 % test of each
difference under a normal approximation); it is not a family-wise level.

Examples
--------
>>> import numpy as np
>>> from coalitions.game import Game
>>> g = Game.from_mapping(["a", "b"], {"a": {"a": 1, "a,b": 2}, "b": {"b": 1, "a,b": 0}})
>>> u = Uncertainty.from_se(g, np.array([[np.nan, 0.5, np.nan, 0.5], [np.nan, np.nan, 0.1, 0.1]]))
>>> float(u.diff_se(0, np.array([3]), 1)[0])        # sqrt(0.5^2 + 0.5^2)
0.7071067811865476
>>> Comparison(g.with_uncertainty(u), z=1.96).better(0, np.array([3]), 1).tolist()  # 1 < 1.96 x 0.71
[False]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .errors import InputError
from .replicates import Replicates

if TYPE_CHECKING:
    from .game import Game

__all__ = ["DEFAULT_Z", "Uncertainty", "Comparison", "check_z", "resolve_z"]

#: The significance level used whenever a game carries its uncertainty and none is given
#: (the two-sided 95 % normal quantile, per comparison).
DEFAULT_Z = 1.96
#: Largest ``z`` accepted: far beyond any meaningful level, small enough that ``z·se`` stays finite.
MAX_Z = 1e6
#: Columns of replicates differenced at once (bounds the working memory at ``8·B·2^16`` bytes).
_CHUNK = 1 << 16


def check_z(z: object, what: str = "z") -> float:
    """``z`` as a float, which must be a finite number in ``[0, MAX_Z]``; else :class:`InputError`."""
    if isinstance(z, bool) or not isinstance(z, (int, float, np.integer, np.floating)):
        raise InputError(f"{what} must be a number >= 0, got {z!r}")
    value = float(z)
    if not (np.isfinite(value) and 0 <= value <= MAX_Z):
        raise InputError(f"{what} must be a finite number between 0 and {MAX_Z:g}, got {z!r}")
    return value


def resolve_z(game: Game, z: float | None) -> float:
    """The level actually used: ``z`` if given, else :data:`DEFAULT_Z` for a game with uncertainty, else 0."""
    if z is None:
        return DEFAULT_Z if game.uncertainty is not None else 0.0
    return check_z(z)


@dataclass(frozen=True, eq=False)
class Uncertainty:
    """The measurement uncertainty of a game's values: replicates, or one standard error per value.

    Exactly one of ``replicates`` and ``se`` is set.  Build it with
    :meth:`from_replicates` or :meth:`from_se` and attach it with
    :meth:`coalitions.game.Game.with_uncertainty`.

    Attributes
    ----------
    replicates : Replicates or None
        ``B ≥ 2`` paired bootstrap replicates of the game.
    se : ndarray of shape (N, 2**N) or None
        ``se[i, S]``: the standard error of ``v_i(S)`` (finite, ``≥ 0``; NaN where ``i ∉ S``), read-only.
    """

    replicates: Replicates | None = None
    se: np.ndarray | None = None

    def __post_init__(self):
        if (self.replicates is None) == (self.se is None):
            raise InputError("an uncertainty is either bootstrap replicates or one standard error per value")
        if self.replicates is not None and self.replicates.b < 2:
            raise InputError(f"standard errors need at least 2 bootstrap replicates, got {self.replicates.b}")

    @classmethod
    def from_replicates(cls, replicates: Replicates) -> Uncertainty:
        """Paired standard errors from ``B ≥ 2`` bootstrap replicates."""
        return cls(replicates=replicates)

    @classmethod
    def from_se(cls, game: Game, se) -> Uncertainty:
        """One standard error per value of ``game``: an ``(N, 2**N)`` array, NaN (or anything) where ``i ∉ S``."""
        from .bitmask import all_masks, contains
        from .numbers import float_array

        arr = np.array(float_array(np.asarray(se, dtype=np.float64), "standard errors"), dtype=np.float64)
        n = game.n
        if arr.shape != (n, 1 << n):
            raise InputError(f"standard errors must have shape ({n}, {1 << n}) for {n} clients, got {arr.shape}")
        masks = all_masks(n)
        for i in range(n):
            inside = contains(masks, i)
            row = arr[i]
            bad = inside & ~(np.isfinite(row) & (row >= 0))
            if bad.any():
                m = int(masks[bad][0])
                raise InputError(f"standard error of client {game.clients[i]!r} for coalition {game.key(m)!r} "
                                 f"must be a finite number >= 0, got {row[m]!r}")
            row[~inside] = np.nan
        arr.setflags(write=False)
        return cls(se=arr)

    @property
    def kind(self) -> str:
        """``"replicates"`` or ``"se"``."""
        return "replicates" if self.replicates is not None else "se"

    def check_matches(self, game: Game) -> Uncertainty:
        """``self`` if it describes ``game`` (same clients and sense; the same shape), else :class:`InputError`."""
        if self.replicates is not None:
            self.replicates.check_matches(game)
        elif self.se is not None and self.se.shape != game.values.shape:
            raise InputError(f"standard errors of shape {self.se.shape} do not fit a game of {game.n} clients")
        return self

    def diff_se(self, i: int, s: np.ndarray, t: int | np.ndarray) -> np.ndarray:
        """``se_i(S, T)`` for every ``S`` in ``s`` (bitmasks holding ``i``), ``T`` one mask or one per ``S``.

        Replicates: the sample SD over replicates of the paired difference,
        computed in chunks of columns.  Per-value errors: ``sqrt(s_S² + s_T²)``.
        ``se_i(S, S) = 0``.
        """
        s = np.asarray(s, dtype=np.int64)
        t_arr = np.broadcast_to(np.asarray(t, dtype=np.int64), s.shape)
        if self.se is not None:
            return np.where(s == t_arr, 0.0, np.hypot(self.se[i, s], self.se[i, t_arr]))
        assert self.replicates is not None
        reps = self.replicates.values
        out = np.empty(s.shape, dtype=np.float64)
        flat_s, flat_t, flat_out = s.ravel(), t_arr.ravel(), out.reshape(-1)
        for start in range(0, flat_s.size, _CHUNK):
            part = slice(start, start + _CHUNK)
            d = reps[:, i, flat_s[part]] - reps[:, i, flat_t[part]]
            flat_out[part] = np.std(d, axis=0, ddof=1)
        return out

    def __repr__(self) -> str:
        if self.replicates is not None:
            return f"Uncertainty(replicates={self.replicates.b})"
        return "Uncertainty(se=...)"


@dataclass(frozen=True)
class Comparison:
    """The comparisons of one client's values at a tolerance and a significance level.

    Parameters
    ----------
    game : Game
        Its :attr:`~coalitions.game.Game.uncertainty` gives the standard errors; a game
        without one compares point values.
    tol : float
        Absolute tolerance (docs/concepts.md §1).
    z : float, optional
        Significance level; default :func:`resolve_z` (1.96 with uncertainty, else 0).

    Notes
    -----
    :attr:`noisy` is False when ``z = 0`` or the game carries no uncertainty; callers
    then take the point-value paths of the core, bit for bit as without this module.
    """

    game: Game
    tol: float = 1e-9
    z: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "z", resolve_z(self.game, self.z))

    @property
    def level(self) -> float:
        """The resolved ``z``."""
        assert self.z is not None
        return self.z

    @property
    def noisy(self) -> bool:
        """Does any comparison depend on standard errors?"""
        return self.level > 0 and self.game.uncertainty is not None

    def se(self, i: int, s: np.ndarray, ref: int | np.ndarray) -> np.ndarray:
        """``se_i(S, ref)`` (zeros for a game without uncertainty)."""
        u = self.game.uncertainty
        if u is None:
            return np.zeros(np.shape(s))
        return u.diff_se(i, s, ref)

    def values(self, i: int, s: np.ndarray) -> np.ndarray:
        """``v_i(S)`` in float64 (exact for a float32 game)."""
        return np.asarray(self.game.values[i, s], dtype=np.float64)

    def raised(self, i: int, s: np.ndarray, ref: int) -> np.ndarray:
        """``v_i(S) + z·se_i(S, ref)``: ``S`` is not significantly worse than ``ref`` iff this is ``≥ v_i(ref) − tol``."""
        return self.values(i, s) + self.level * self.se(i, s, ref)

    def lowered(self, i: int, s: np.ndarray, ref: int) -> np.ndarray:
        """``v_i(S) − z·se_i(S, ref)``: ``S`` is significantly better than ``ref`` iff this is ``> v_i(ref) + tol``."""
        return self.values(i, s) - self.level * self.se(i, s, ref)

    def better(self, i: int, s: np.ndarray, ref: int) -> np.ndarray:
        """Client ``i`` strictly prefers each ``S`` to ``ref``: ``d_i(S, ref) > tol + z·se_i(S, ref)``."""
        return self.lowered(i, s, ref) > float(self.game.values[i, ref]) + self.tol

    def not_worse(self, i: int, s: np.ndarray, ref: int) -> np.ndarray:
        """``ref`` is not strictly preferred to ``S``: ``d_i(ref, S) ≤ tol + z·se_i(S, ref)``."""
        return self.raised(i, s, ref) >= float(self.game.values[i, ref]) - self.tol

    def better_and_not_worse(self, i: int, s: np.ndarray, ref: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`better` and :meth:`not_worse` of the same sets, their standard errors computed once."""
        v, se = self.values(i, s), self.se(i, s, ref)
        at = float(self.game.values[i, ref])
        return v - self.level * se > at + self.tol, v + self.level * se >= at - self.tol

    def gain_score(self, i: int, s: np.ndarray, ref: int) -> np.ndarray:
        """``(d_i(S, ref) − tol) / se_i(S, ref)``: how many standard errors ``S`` is better by.

        A difference with a standard error of 0 scores ``+inf`` when positive,
        ``-inf`` when negative and 0 when nil.
        """
        d = self.values(i, s) - float(self.game.values[i, ref]) - self.tol
        return _ratio(d, self.se(i, s, ref))

    def loss_score(self, i: int, s: np.ndarray, ref: int) -> np.ndarray:
        """``(d_i(ref, S) − tol) / se_i(S, ref)``: how many standard errors ``S`` is worse by."""
        d = float(self.game.values[i, ref]) - self.values(i, s) - self.tol
        return _ratio(d, self.se(i, s, ref))


def _ratio(d: np.ndarray, se: np.ndarray) -> np.ndarray:
    """``d / se`` with ``±inf`` for a non-zero ``d`` over a zero ``se`` and 0 for ``0/0``; NaN stays NaN."""
    out = np.where(d > 0, np.inf, np.where(d < 0, -np.inf, np.where(d == 0, 0.0, np.nan)))
    positive = se > 0
    np.divide(d, se, out=out, where=positive)
    return out
