"""The statistical certificate of a partition of a lazy game (docs/scale.md).

Drawn *after* the search that found the partition, from its own random stream, so
that the sample is independent of the search (a sample the search had looked at
would bias the bound: the search discards the partitions its own draws blocked).

* **Individual rationality**, exactly: the ``N`` singletons.
* **Outer agreement**: ``m`` coalitions drawn from ``D`` (:mod:`coalitions.pac`); with
  ``k`` of them blocking, the blocking share under ``D`` is at most
  ``ε = epsilon_bound(m, k, δ)`` with confidence ``1 − δ``.  When every coalition of
  two or more clients fits in ``m`` they are all checked and ``ε`` is the exact
  ``D``-share of the blocking ones (method ``"exhaustive"``).
* **Inner agreement**, block by block, smallest first: every proper sub-coalition of a
  block when they fit in what is left of the budget (``"exhaustive"``), else a uniform
  sample of them (``"sampled"``, as many as fit; ``checked = 0`` says none did).

The rules (tolerance, level ``z``, measured payoffs) are those of :mod:`coalitions.sampled`.

Where the whole game is known (calibration), :func:`blocking_share` gives the true ``D``-share
that ``ε`` bounds, under the same rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .bitmask import members, popcount
from .errors import InputError
from .game import Game
from .lazy import GameSource
from .measured import MeasuredGame
from .noise import check_z
from .pac import DISTRIBUTIONS, d_weights, draw_coalitions, epsilon_bound
from .partition import Partition, check_partition
from .sampled import Ledger, Rules, blocking, inner_violations, proper_subsets, sampled_subsets

__all__ = ["Blocker", "InnerCheck", "SampledCertificate", "blocking_share", "certify_sampled", "outer_draws_needed"]

_SHARE_CHUNK = 1 << 14


@dataclass(frozen=True)
class Blocker:
    """A blocking coalition and each member's two values ``(i, in the coalition, in its block)``, in the source's sense."""

    coalition: int
    payoffs: tuple[tuple[int, float, float], ...]


@dataclass(frozen=True)
class InnerCheck:
    """One block's inner-agreement check: ``method``, sub-coalitions ``checked`` of ``total``, violations found."""

    block: int
    method: str
    checked: int
    total: int
    found: int
    violations: tuple[int, ...]


@dataclass(frozen=True)
class SampledCertificate:
    """What the sample after the search says of a partition.

    Attributes
    ----------
    epsilon : float
        Upper bound on the ``D``-share of blocking coalitions, at confidence ``1 − δ``
        (the exact share when ``outer_method == "exhaustive"``).
    delta : float
    requested_epsilon : float or None
        The ``ε`` asked for, which decided ``m``.
    m : int
        Coalitions drawn (with repetition) or, exhaustively, checked.
    blocking_draws : int
        Draws that block (``k``).
    distinct : int
        Distinct coalitions among the draws.
    outer_method : {"sampled", "exhaustive"}
    blockers : tuple of Blocker
        The distinct blocking coalitions found (witnesses, at most ``max_witnesses``).
    individual : tuple of Blocker
        Singletons that block (individual rationality fails for them).
    inner : tuple of InnerCheck
        One per block of two or more clients.
    distribution, z, family, tol, semantics
        The ``D`` drawn from and the rules of every comparison.
    trainings : int
        Distinct coalitions the certificate used beyond the search's.
    """

    epsilon: float
    delta: float
    requested_epsilon: float | None
    m: int
    blocking_draws: int
    distinct: int
    outer_method: str
    blockers: tuple[Blocker, ...]
    individual: tuple[Blocker, ...]
    inner: tuple[InnerCheck, ...]
    distribution: str
    z: float
    tol: float
    trainings: int
    family: str = "comparison"
    semantics: str = "shared"

    @property
    def outer_agreement(self) -> bool:
        """No blocking coalition in the sample, and every singleton content."""
        return self.blocking_draws == 0 and not self.individual

    @property
    def inner_agreement(self) -> bool:
        """No violation in any block's check (exhaustive or sampled)."""
        return all(c.found == 0 for c in self.inner)

    @property
    def inner_exhaustive(self) -> bool:
        """Was every block's inner agreement checked exhaustively?"""
        return all(c.method == "exhaustive" for c in self.inner)

    @property
    def holds(self) -> bool:
        """Both agreements hold where checked and ``ε`` reaches the requested one."""
        reached = self.requested_epsilon is None or self.epsilon <= self.requested_epsilon
        return self.outer_agreement and self.inner_agreement and reached


def outer_draws_needed(n: int, m: int) -> int:
    """Coalitions the outer check uses at most: ``m`` draws, or every coalition of two or more when fewer."""
    return min(m, (1 << n) - 1 - n) if n < 62 else m


def _witness(ledger: Ledger, partition, c: int) -> Blocker:
    where = {i: k for k in partition for i in members(k)}
    mem = members(c)
    new = ledger.cache.raw_values(np.array([c]))[:, 0]
    old = ledger.cache.raw_values(np.array([where[i] for i in mem]))
    return Blocker(c, tuple((i, float(new[i]), float(old[i, x])) for x, i in enumerate(mem)))


def certify_sampled(ledger: Ledger, partition: tuple[int, ...], rules: Rules, rng: np.random.Generator, *, m: int,
                    delta: float, requested_epsilon: float | None = None, distribution: str = "uniform-size",
                    inner_draws: int = 64, max_witnesses: int = 10) -> SampledCertificate:
    """Certify ``partition`` from coalitions drawn now (module docstring); ``ledger.limit`` is raised to the budget.

    The caller leaves room for the blocks, the ``N`` singletons and
    :func:`outer_draws_needed` coalitions (:func:`coalitions.sampled_ce.required_budget`).
    """
    n = ledger.cache.n
    before = ledger.count
    ledger.limit = ledger.budget
    blocks = np.asarray(partition, dtype=np.int64)
    if ledger.take(blocks).size < blocks.size:
        raise RuntimeError("no room left for the partition's blocks")  # the budget check prevents it
    singles = np.array([1 << i for i in range(n)], dtype=np.int64)
    if ledger.take(singles).size < n:
        raise RuntimeError("no room left for the singletons")
    ok, _, _ = blocking(ledger.cache, partition, singles, rules)
    individual = tuple(_witness(ledger, partition, int(c)) for c in singles[ok][:max_witnesses])

    total = (1 << n) - 1 - n if n < 62 else None
    if total is not None and total <= m:
        drawn = np.arange(1, 1 << n, dtype=np.int64)
        drawn = drawn[popcount(drawn) >= 2]
        method = "exhaustive"
    else:
        drawn = draw_coalitions(rng, n, m, distribution, partition)
        method = "sampled"
    distinct = np.unique(drawn)
    if ledger.take(distinct).size < distinct.size:
        raise RuntimeError("no room left for the certificate's draws")
    ok, _, _ = blocking(ledger.cache, partition, distinct, rules)
    blocking_set = distinct[ok]
    k = int(np.isin(drawn, blocking_set).sum())
    if method == "exhaustive":
        eps = float(d_weights(blocking_set, n, distribution, partition).sum())
        count = int(drawn.size)
    else:
        eps = epsilon_bound(int(drawn.size), k, delta)
        count = int(drawn.size)
    blockers = tuple(_witness(ledger, partition, int(c)) for c in blocking_set[:max_witnesses])

    inner = []
    for blk in sorted((b for b in partition if popcount(np.array([b]))[0] >= 2),
                      key=lambda b: (int(popcount(np.array([b]))[0]), b)):
        size = int(popcount(np.array([blk]))[0])
        # 2^|K| − 2 sub-coalitions, of which at most ``ledger.count`` were used: counted before any is listed,
        # so a block too large to check exhaustively (a 50-client one: 10^15) is never enumerated
        if (1 << size) - 2 <= ledger.room() + ledger.count and \
                len(ledger.unused((subs := proper_subsets(blk)).tolist())) <= ledger.room():
            how = "exhaustive"
        else:
            how = "sampled"
            subs = np.unique(sampled_subsets(rng, blk, inner_draws))
        got = ledger.take(subs.tolist())
        bad = got[inner_violations(ledger.cache, blk, got, rules)] if got.size else got
        if how == "exhaustive" and got.size < subs.size:
            how = "sampled"
        inner.append(InnerCheck(blk, how, int(got.size), (1 << size) - 2,
                                int(bad.size), tuple(int(b) for b in bad[:max_witnesses])))
    return SampledCertificate(epsilon=eps, delta=delta, requested_epsilon=requested_epsilon, m=count,
                              blocking_draws=k, distinct=int(distinct.size), outer_method=method, blockers=blockers,
                              individual=individual, inner=tuple(inner), distribution=distribution, z=rules.z,
                              tol=rules.tol, trainings=ledger.count - before)


def blocking_share(game: Game, partition: Sequence[int] | Partition, *, z: float = 0.0, tol: float = 1e-9,
                   distribution: str = "uniform-size") -> float:
    r"""The exact ``D``-share of the coalitions that block ``partition`` in a whole game.

    What a sampled certificate's ``ε`` bounds, computed over every coalition of two or more
    clients of ``game`` (its values and uncertainty read as :class:`~coalitions.lazy.GameSource`
    serves them to :func:`coalitions.sample_ce`), under the sampled search's rules
    (:func:`coalitions.sampled.blocking`): a coalition :math:`C \notin \pi` blocks when every
    member gains significantly over its own block's model,

    .. math::

        v_i(C) - v_i(\pi(i)) - \mathrm{tol} > z \, \widehat{\mathrm{se}}\bigl(v_i(C) - v_i(\pi(i))\bigr)
        \quad \forall i \in C,

    and the share is :math:`\sum_{C \text{ blocks}} D(C)`, with :math:`D` of
    :func:`coalitions.pac.d_weights`. A certificate is *covering* when this share is at most its
    ``ε``; over repeated runs that should happen with probability at least ``1 − δ``.

    Parameters
    ----------
    game : Game
        The whole game (an exhaustive oracle's, or an analytic one).
    partition : sequence of int or Partition
        The partition's blocks, as bitmasks (or a :class:`~coalitions.partition.Partition`).
    z : float, default 0
        The level of every comparison (use the certificate's ``z``).
    tol : float, default 1e-9
        The tolerance of every comparison (the certificate's ``tol``).
    distribution : {"uniform-size", "mixed"}, default "uniform-size"
        The certificate's ``D``.

    Returns
    -------
    float
        The share, in ``[0, 1]``.

    Examples
    --------
    >>> import coalitions as co
    >>> from coalitions.sampled_certificate import blocking_share
    >>> g = co.planted([3, 3], noise=0.0, seed=0)
    >>> blocking_share(g, (0b000111, 0b111000))
    0.0
    >>> blocking_share(g, tuple(1 << i for i in range(6))) > 0
    True

    References
    ----------
    .. [1] J. Sliwinski and Y. Zick, "Learning hedonic games", IJCAI 2017.
    """
    n = game.n
    blocks = np.asarray(check_partition(game, partition), dtype=np.int64)
    z = check_z(z)
    if distribution not in DISTRIBUTIONS:
        raise InputError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}, got {distribution!r}")
    rules = Rules(tol=float(tol), z=z)
    share = 0.0
    for start in range(1, 1 << n, _SHARE_CHUNK):
        masks = np.arange(start, min(start + _SHARE_CHUNK, 1 << n), dtype=np.int64)
        masks = masks[popcount(masks) >= 2]
        if not masks.size:
            continue
        cache = MeasuredGame(GameSource(game))        # one chunk's columns in memory at a time
        cache.measure(np.union1d(masks, blocks))
        ok, _, _ = blocking(cache, blocks.tolist(), masks, rules)
        share += float(d_weights(masks[ok], n, distribution, blocks.tolist()).sum())
    return share

