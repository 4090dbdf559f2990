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
unchanged.

**Which comparisons one level controls** (the uncertainty's ``family``).  A client's
decisions are not single comparisons: its optimal collaborators come from the best of
its ``2^(N−1)`` coalitions, which is the best partly because its noise happened to be
high (the winner's curse), and a blocking coalition is looked for among all of them.
At ``z = 1.96`` per comparison, a client whose coalitions all have the same true value
is told that some coalition beats being alone about half the time at ``N = 10``.  So
``z`` sets a *coverage* ``2Φ(z) − 1`` (0.95 at 1.96) and the family says what it covers:

* ``"comparison"`` (the default): each difference on its own; the threshold is ``z`` itself;
* ``"client"``: all of one client's differences ``d_i(S, {i})`` at once; the threshold
  ``c_i(z) ≥ z`` is the coverage quantile of ``max_S |t_i^b(S)|`` over the replicates,
  ``t_i^b(S) = (d_i^b(S, {i}) − d̄_i(S, {i})) / se_i(S, {i})`` (the bootstrap max-t of
  Westfall & Young, *Resampling-Based Multiple Testing*, Wiley 1993);
* ``"game"``: all clients' differences at once, one threshold ``c(z)`` from
  ``max_{i,S} |t_i^b(S)|``.

The default is per comparison: on planted games (``benchmarks/noise.py``) it finds the true
equilibrium most often and says "stable" of a partition the true game blocks least often,
because a wider family costs power where gains are real.  A wider family pays where a
game is *flat* — many clients to whom every coalition is worth about the same, as on
fashion — and the question is how often the answer reproduces under resampling
(docs/concepts.md §7 gives both measurements).

With one standard error per value there are no replicates to take a maximum over; the
threshold is then Šidák's for the family's ``m`` comparisons,
``Φ^{-1}(1 − (1 − (1 − α)^{1/m}) / 2)`` with ``α = 2(1 − Φ(z))`` (valid for positively
correlated normal differences: Šidák, *JASA* 62:626, 1967).  Every comparison of
client ``i`` then reads ``d > tol + c_i·se``, i.e. its standard error is scaled by
``c_i / z`` (:meth:`Comparison.se` returns the scaled one, and z-scores are on the
scale of ``z``: a score above ``z`` is significant for the family).  The family of a
client's differences against being alone stands for all of its comparisons, within
every remaining set: within a smaller set the family is smaller, so the threshold
errs on the side of a tie.  ``c ≥ z`` always, so a wider family only turns
preferences into ties.

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

__all__ = ["DEFAULT_Z", "FAMILIES", "DEFAULT_FAMILY", "Uncertainty", "Comparison", "check_z", "check_family",
           "resolve_z"]

#: The significance level used whenever a game carries its uncertainty and none is given
#: (the two-sided 95 % normal quantile, per comparison).
DEFAULT_Z = 1.96
#: What one level ``z`` covers: one comparison, all of a client's, all of the game's (module docstring).
FAMILIES = ("comparison", "client", "game")
#: The family used unless one is chosen.
DEFAULT_FAMILY = "comparison"
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


def check_family(family: object) -> str:
    """``family`` if it is one of :data:`FAMILIES`; else :class:`InputError`."""
    if family not in FAMILIES:
        raise InputError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    return str(family)


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
    family : {"game", "client", "comparison"}
        Which comparisons one level ``z`` covers (module docstring); default :data:`DEFAULT_FAMILY`.
    """

    replicates: Replicates | None = None
    se: np.ndarray | None = None
    family: str = DEFAULT_FAMILY

    def __post_init__(self):
        if (self.replicates is None) == (self.se is None):
            raise InputError("an uncertainty is either bootstrap replicates or one standard error per value")
        if self.replicates is not None and self.replicates.b < 2:
            raise InputError(f"standard errors need at least 2 bootstrap replicates, got {self.replicates.b}")
        check_family(self.family)
        object.__setattr__(self, "_critical", {})  # z -> thresholds, computed once per level

    @classmethod
    def from_replicates(cls, replicates: Replicates, family: str = DEFAULT_FAMILY) -> Uncertainty:
        """Paired standard errors from ``B ≥ 2`` bootstrap replicates."""
        return cls(replicates=replicates, family=family)

    def with_family(self, family: str) -> Uncertainty:
        """The same standard errors read for another ``family`` of comparisons."""
        return Uncertainty(replicates=self.replicates, se=self.se, family=check_family(family))

    @property
    def n(self) -> int:
        """Number of clients."""
        if self.replicates is not None:
            return int(self.replicates.values.shape[1])
        assert self.se is not None
        return int(self.se.shape[0])

    def critical(self, z: float) -> np.ndarray:
        """``c_i(z)`` for each client: the threshold on ``d / se`` that level ``z`` sets for the family.

        ``z`` itself for the ``"comparison"`` family; for a wider one the coverage
        quantile of the bootstrap max-t (replicates) or Šidák's threshold (one standard
        error per value), never below ``z`` (module docstring).  Computed once per ``z``.

        Examples
        --------
        >>> import numpy as np
        >>> from coalitions.game import Game
        >>> g = Game.from_array(np.array([[np.nan, 1.0, np.nan, 1.0], [np.nan, np.nan, 1.0, 1.0]]))
        >>> u = Uncertainty.from_se(g, np.full((2, 4), 0.1), family="game")
        >>> [round(float(c), 3) for c in u.critical(1.96)]      # 2 comparisons, one per client (Šidák)
        [2.237, 2.237]
        >>> u.with_family("comparison").critical(1.96).tolist()
        [1.96, 1.96]
        """
        key = float(z)
        cache = self._critical  # type: ignore[attr-defined]
        if key not in cache:
            out = np.full(self.n, key)
            if key > 0 and self.family != "comparison":
                out = np.maximum(self._family_threshold(key), key)
            out.setflags(write=False)
            cache[key] = out
        return cache[key]

    def _family_threshold(self, z: float) -> np.ndarray:
        from statistics import NormalDist

        n = self.n
        alpha = 2 * NormalDist().cdf(-z)                   # two-sided, per comparison
        if self.replicates is None:
            per_client = (1 << (n - 1)) - 1
            m = per_client * (n if self.family == "game" else 1)
            if m <= 1 or alpha <= 0:
                return np.full(n, z)
            tail = -np.expm1(np.log1p(-alpha) / m) / 2      # Šidák: 1 − (1 − α)^(1/m), halved
            return np.full(n, -NormalDist().inv_cdf(tail) if tail > 0 else z)
        maxt = self._max_t()                                # (N, B)
        coverage = 1 - alpha
        if self.family == "client":
            return np.quantile(maxt, coverage, axis=1)
        return np.full(n, np.quantile(maxt.max(axis=0), coverage))

    def _max_t(self) -> np.ndarray:
        """``max_S |t_i^b(S)|`` for each client and replicate: the centred bootstrap t of ``d_i(S, {i})``."""
        from .bitmask import submasks

        assert self.replicates is not None
        reps = self.replicates.values
        b, n = reps.shape[0], reps.shape[1]
        out = np.zeros((n, b))
        grand = (1 << n) - 1
        for i in range(n):
            me = 1 << i
            others = submasks(grand & ~me)[1:] | me         # every coalition of i but {i}
            alone = np.asarray(reps[:, i, me], dtype=np.float64)[:, None]
            for start in range(0, others.size, max(1, _CHUNK // max(b, 1))):
                d = np.asarray(reps[:, i, others[start:start + _CHUNK // max(b, 1)]], dtype=np.float64) - alone
                sd = np.std(d, axis=0, ddof=1)
                dev = np.abs(d - d.mean(axis=0))
                t = np.divide(dev, sd, out=np.zeros_like(dev), where=sd > 0)
                out[i] = np.maximum(out[i], np.nan_to_num(t, nan=0.0).max(axis=1))
        return out

    @classmethod
    def from_se(cls, game: Game, se, family: str = DEFAULT_FAMILY) -> Uncertainty:
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
        return cls(se=arr, family=family)

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
            return f"Uncertainty(replicates={self.replicates.b}, family={self.family!r})"
        return f"Uncertainty(se=..., family={self.family!r})"


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
        """``se_i(S, ref)`` scaled for the uncertainty's family: ``× c_i(z) / z`` (zeros without uncertainty).

        With the ``"comparison"`` family (or ``z = 0``) this is the paired standard
        error itself; with a wider one, ``z`` times it is the family's threshold
        ``c_i(z)·se_i(S, ref)`` (:meth:`Uncertainty.critical`).
        """
        u = self.game.uncertainty
        if u is None:
            return np.zeros(np.shape(s))
        se = u.diff_se(i, s, ref)
        if self.level > 0 and u.family != "comparison":
            se = se * (float(u.critical(self.level)[i]) / self.level)
        return se

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
    with np.errstate(over="ignore"):   # a ratio beyond the largest float is ±inf, which is the answer
        np.divide(d, se, out=out, where=positive)
    return out
