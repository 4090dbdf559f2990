"""How well the validation data support a collaboration equilibrium (docs/concepts.md §6).

Given a CE ``P`` of a game and ``B`` bootstrap replicates of the game
(:class:`~coalitions.replicates.Replicates`), each replicate is solved with the
same semantics, tolerance and options as the game itself (:func:`~coalitions.equilibrium.solve`),
giving partitions ``P^1 .. P^B``.  The **support** of ``P`` is

* ``partition = #{b : P^b = P} / B``, the share of replicates with the same CE;
* ``coalitions[K] = #{b : K ∈ P^b} / B`` for each coalition ``K ∈ P``, the share of
  replicates whose CE holds ``K`` as a block.

A replicate with no CE (possible under ``shared`` semantics) counts against every
share.  Since ``P^b = P`` implies ``K ∈ P^b`` for every ``K ∈ P``, the partition's
support is at most every coalition's.  These are bootstrap proportions in the sense
of Efron, Halloran & Holmes (1996), "Bootstrap confidence levels for phylogenetic
trees", PNAS 93:13429 — a measure of how stable the answer is under resampling of
the validation data, not a probability that it is right.

:func:`auto_tol` turns the replicates into a tolerance (``--tol auto``): ``2 ×`` the
median bootstrap standard deviation of the marginal contributions ``v_i(S) − v_i(S ∖ {j})``
(docs/concepts.md §6 gives the reasoning).

Examples
--------
>>> import numpy as np
>>> from coalitions.analytic import mean_estimation
>>> from coalitions.equilibrium import solve
>>> from coalitions.replicates import Replicates
>>> g = mean_estimation([5, 5, 5])
>>> r = Replicates.from_array(np.stack([g.raw_values()] * 4), g.clients, g.sense)
>>> s = support(solve(g).partition, r)
>>> s.partition_share, s.coalition_shares, s.b
(1.0, {7: 1.0}, 4)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .brute_force import MAX_ENUMERATE
from .errors import InputError, NoEquilibrium
from .game import Game
from .noise import Uncertainty
from .partition import canonical
from .replicates import Replicates

__all__ = ["Support", "support", "support_over", "self_agreement", "edge_f1", "auto_tol", "AUTO_TOL_FACTOR"]

#: ``--tol auto`` is this many bootstrap standard deviations of the gains (≈ the two-sided 95% normal quantile).
AUTO_TOL_FACTOR = 2.0


@dataclass(frozen=True)
class Support:
    """The support of a partition over bootstrap replicates.

    Attributes
    ----------
    partition : tuple of int
        The partition whose support this is (canonical bitmasks).
    found : tuple of (tuple of int or None)
        Each replicate's CE (canonical), ``None`` where it has none.
    same : ndarray of shape (B,), bool
        Replicate ``b``'s CE is ``partition``.
    holds : ndarray of shape (B, K), bool
        Replicate ``b``'s CE has block ``partition[k]``.
    """

    partition: tuple[int, ...]
    found: tuple[tuple[int, ...] | None, ...]
    same: np.ndarray
    holds: np.ndarray

    @property
    def b(self) -> int:
        """Number of replicates."""
        return len(self.found)

    @property
    def partition_share(self) -> float:
        """Share of replicates whose CE is the partition."""
        return float(self.same.mean())

    @property
    def coalition_shares(self) -> dict[int, float]:
        """Coalition bitmask → share of replicates whose CE holds it."""
        shares = self.holds.mean(axis=0)
        return {k: float(s) for k, s in zip(self.partition, shares, strict=True)}

    @property
    def without_ce(self) -> int:
        """Replicates with no CE."""
        return sum(p is None for p in self.found)


def support(partition, replicates: Replicates, semantics: str = "personalized", tol: float = 1e-9, *,
            exhaustive_up_to: int | None = None, max_enumerate: int = MAX_ENUMERATE, seed: int = 0,
            progress=None, z: float = 0.0, uncertainty: Uncertainty | None = None) -> Support:
    """Solve every replicate as the game was solved and compare its CE with ``partition``.

    Parameters
    ----------
    partition : iterable of int
        The CE of the game (bitmasks).
    replicates : Replicates
    semantics, tol, exhaustive_up_to, max_enumerate, seed
        As given to :func:`~coalitions.equilibrium.solve` for the game; the
        same for every replicate, so that a difference comes from the data.
    progress : callable, optional
        ``progress(done, B)`` after each replicate.
    z : float
        The significance level the game was solved at (:mod:`coalitions.noise`).
    uncertainty : Uncertainty, optional
        The standard errors every replicate is solved with when ``z > 0``: the
        game's own (the decision rule is resampled with its standard errors
        fixed); default the replicates themselves.

    Returns
    -------
    Support

    Raises
    ------
    InputError
        A replicate cannot be solved within ``max_enumerate`` (the message
        starts with ``replicate b:``).
    """
    if z > 0 and uncertainty is None:
        uncertainty = Uncertainty.from_replicates(replicates)
    games = (replicates.game(b).with_uncertainty(uncertainty if z > 0 else None) for b in range(replicates.b))
    return support_over(partition, games, replicates.b, semantics, tol, exhaustive_up_to=exhaustive_up_to,
                        max_enumerate=max_enumerate, seed=seed, progress=progress, z=z, what="replicate")


def support_over(partition, games: Iterable[Game], count: int, semantics: str = "personalized", tol: float = 1e-9,
                 *, exhaustive_up_to: int | None = None, max_enumerate: int = MAX_ENUMERATE, seed: int = 0,
                 progress=None, z: float = 0.0, what: str = "game") -> Support:
    """The support of ``partition`` over any ``count`` games of the same clients (e.g. retrained ones).

    Each game is solved at the same semantics, tolerance and level ``z`` (a game
    without uncertainty is solved on its point values); the shares are those of
    :class:`Support`.  ``what`` names a game in error messages (``"replicate"``,
    ``"retrained game"``).
    """
    from .equilibrium import solve

    part = canonical(partition)
    found: list[tuple[int, ...] | None] = []
    for b, game in enumerate(games):
        try:
            eq = solve(game, semantics, tol, certify_result=True, exhaustive_up_to=exhaustive_up_to,
                       max_enumerate=max_enumerate, seed=seed, z=z, detail=False)
        except NoEquilibrium:
            found.append(None)
            if progress is not None:
                progress(b + 1, count)
            continue
        except InputError as e:
            raise InputError(f"{what} {b}: {e}") from None
        found.append(canonical(eq.masks))
        if progress is not None:
            progress(b + 1, count)
    # each replicate's blocks as one row of a padded matrix: membership of the K blocks is one np.isin
    width = max((len(p) for p in found if p is not None), default=1)
    blocks = np.zeros((len(found), width), dtype=np.int64)  # 0 is never a block
    for b, p in enumerate(found):
        if p is not None:
            blocks[b, :len(p)] = p
    wanted = np.asarray(part, dtype=np.int64)
    holds = (blocks[:, :, None] == wanted[None, None, :]).any(axis=1)
    sizes = np.array([-1 if p is None else len(p) for p in found])
    same = holds.all(axis=1) & (sizes == len(part))
    return Support(part, tuple(found), same, holds)


def edge_f1(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> float:
    """F1 of two edge sets (harmonic mean of precision and recall); 1.0 when both are empty."""
    x, y = set(a), set(b)
    if not x and not y:
        return 1.0
    return 2 * len(x & y) / (len(x) + len(y))


def self_agreement(game: Game, replicates: Replicates, semantics: str = "personalized", tol: float = 1e-9,
                   z: float = 0.0) -> np.ndarray:
    """Edge F1 of each replicate's benefit graph ``BG(all)`` against the game's own, at level ``z``.

    How well the measured benefit graph reproduces itself under resampling of the
    scoring rows: the graph of every replicate (solved with the game's standard
    errors when ``z > 0``) against the graph of the point values.  Its median is
    the graph's *self-agreement*, the ceiling for any learned graph compared with it.
    """
    from .graph import ExactOracle

    u = game.uncertainty or (Uncertainty.from_replicates(replicates) if z > 0 else None)
    ref = ExactOracle(game.with_uncertainty(u), semantics, tol, z=z).benefit_graph(game.grand).edges
    out = np.empty(replicates.b)
    for b in range(replicates.b):
        g = replicates.game(b).with_uncertainty(u)
        out[b] = edge_f1(ExactOracle(g, semantics, tol, z=z).benefit_graph(game.grand).edges, ref)
    return out


def auto_tol(replicates: Replicates, factor: float = AUTO_TOL_FACTOR) -> float:
    """A tolerance from the validation noise: ``factor ×`` the median bootstrap SD of the marginal contributions.

    The marginal contribution of ``j`` to ``i`` in ``S ∋ i, j`` (``i ≠ j``) is
    ``v_i(S) − v_i(S ∖ {j})``: the comparison that decides whether ``j`` is a
    necessary collaborator of ``i``.  ``σ_i(S, j)`` is its standard deviation
    over the ``B`` replicates (paired: both values of a replicate are measured
    on the same resampled rows of ``i``), and the tolerance is
    ``factor · median σ_i(S, j)`` over all such ``(i, j, S)``.  A game of one
    client makes no such comparison; its tolerance is 0.

    Raises
    ------
    InputError
        Fewer than two replicates (no spread to measure).
    """
    if replicates.b < 2:
        raise InputError(f"--tol auto needs at least 2 replicates, the game has {replicates.b}")
    if not (np.isfinite(factor) and factor >= 0):
        raise InputError(f"the tolerance factor must be a finite number >= 0, got {factor!r}")
    v = replicates.values
    n = replicates.n
    masks = np.arange(1 << n)
    spread = []
    for j in range(n):  # one client at a time keeps the memory at B·N·2^(N-1)
        with_j = masks[(masks >> j) & 1 == 1]
        diff = v[:, :, with_j] - v[:, :, with_j ^ (1 << j)]   # NaN unless i ∈ S ∖ {j}
        sd = np.std(diff, axis=0, ddof=1)
        spread.append(sd[~np.isnan(sd)])
    spread_all = np.concatenate(spread)
    if spread_all.size == 0:
        return 0.0
    return float(factor * np.median(spread_all))
