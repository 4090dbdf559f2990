"""Every partition that is stable under a chosen notion, by exhaustive enumeration.

The notions are those of docs/concepts.md §3 (and :mod:`coalitions.axioms`), for a
partition ``P`` with ``P(i)`` the block holding client ``i``:

* ``"ce"`` — a collaboration equilibrium: inner and outer agreement
  (:func:`coalitions.brute_force.equilibria`);
* ``"core"`` — outer agreement alone: no coalition ``T`` with
  ``payoff_i(T) > payoff_i(P(i)) + tol`` for every ``i ∈ T``;
* ``"nash_stability"`` — no client strictly gains by joining another block
  ``K`` or going alone (``K = ∅``): ``payoff_i(K ∪ {i}) > payoff_i(P(i)) + tol``
  for no ``K``;
* ``"individual_stability"`` — no such move that every member ``j`` of ``K``
  accepts, ``payoff_j(K ∪ {i}) ≥ payoff_j(K) − tol``.

Partitions are enumerated as restricted growth strings (as in
:mod:`coalitions.brute_force`) and checked in vectorised chunks.  The single-client
notions need only two tables over coalitions: ``payoff`` and, for individual
stability, ``consent[K, i]`` (every member of ``K`` accepts ``i``), computed once
in ``O(N²·2^N)``; each partition then costs ``O(N²)`` look-ups.  The core scans
all ``2^N`` coalitions per partition, ``O(N·2^N)``, but only for the partitions
that are individually rational (a client better off alone is a blocking
coalition of one), which are few in most games.

Examples
--------
>>> from coalitions.analytic import mean_estimation
>>> g = mean_estimation([1, 8, 15])
>>> [[g.names(k) for k in p] for p in stable_partitions(g, "individual_stability", "shared")]
[[['0', '2'], ['1']]]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .bitmask import all_masks, contains
from .brute_force import MAX_ENUMERATE, bell, equilibrium_masks, restricted_growth_strings
from .errors import InputError
from .game import Game
from .payoffs import check_semantics, payoff_table

__all__ = ["NOTIONS", "stable_partitions", "enumerate_partitions", "consent_table"]

#: Stability notions a partition can be required to satisfy.
NOTIONS = ("ce", "core", "individual_stability", "nash_stability")


def enumerate_partitions(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every partition of ``n`` clients, in restricted-growth-string order.

    Returns
    -------
    rgs : ndarray of shape (Bell(n), n)
        ``rgs[p, i]``: the label of client ``i``'s block in partition ``p``.
    label_mask : ndarray of shape (Bell(n), n), int64
        ``label_mask[p, l]``: the bitmask of block ``l`` (0 when ``p`` has fewer blocks).
    """
    rgs = restricted_growth_strings(n).astype(np.int64)
    bits = np.int64(1) << np.arange(n, dtype=np.int64)
    label_mask = np.zeros((rgs.shape[0], n), dtype=np.int64)
    for label in range(n):
        label_mask[:, label] = ((rgs == label) * bits).sum(axis=1)
    return rgs, label_mask


def consent_table(pay: np.ndarray, n: int, tol: float) -> np.ndarray:
    """``consent[K, i]``: every member ``j`` of ``K`` has ``payoff_j(K ∪ {i}) ≥ payoff_j(K) − tol``.

    True for ``K = ∅`` (going alone needs nobody's consent) and meaningless for ``i ∈ K``.
    """
    masks = all_masks(n)
    out = np.ones((masks.size, n), dtype=bool)
    for i in range(n):
        joined = masks | (1 << i)
        for j in range(n):
            if j == i:
                continue
            has = contains(masks, j)
            with np.errstate(invalid="ignore"):
                out[:, i] &= ~has | (pay[j, joined] >= pay[j, masks] - tol)
    return out


def _blocked_by_move(rgs, label_mask, now, pay, consent, tol) -> np.ndarray:
    """Some client strictly gains by moving to another block (with its consent, when given)."""
    n = rgs.shape[1]
    bad = np.zeros(rgs.shape[0], dtype=bool)
    for i in range(n):
        for label in range(n):
            target = label_mask[:, label]
            move = (rgs[:, i] != label) & (pay[i, target | (1 << i)] > now[:, i] + tol)
            if consent is not None:
                move &= consent[target, i]
            bad |= move
    return bad


def _blocked_by_coalition(now, pay, n, tol) -> np.ndarray:
    """Some coalition makes every one of its members strictly better off (outer agreement fails)."""
    masks = all_masks(n)[1:]
    ok = np.ones((now.shape[0], masks.size), dtype=bool)
    for i in range(n):
        has = contains(masks, i)
        ok &= ~has[None, :] | (pay[i, masks][None, :] > now[:, i:i + 1] + tol)
    return np.asarray(ok.any(axis=1))


def stable_partitions(game: Game, notion: str = "ce", semantics: str = "personalized", tol: float = 1e-9,
                      max_clients: int = MAX_ENUMERATE, chunk: int = 4096,
                      progress: Callable[[int, int], None] | None = None, *,
                      z: float | None = None) -> list[tuple[int, ...]]:
    """Every partition of ``game`` that is stable under ``notion``, by enumeration.

    Parameters
    ----------
    game : Game
    notion : {"ce", "core", "individual_stability", "nash_stability"}
    semantics : {"personalized", "shared"}
    tol : float
    max_clients : int
        Refuse games larger than this (Bell(N) partitions are enumerated).
    chunk : int
        Partitions checked together.
    progress : callable, optional
        ``progress(done, total)`` after each chunk.
    z : float, optional
        Significance level of the ``"ce"`` notion's comparisons (:mod:`coalitions.noise`;
        1.96 by default when the game carries its uncertainty, else 0).  The other
        notions compare point values.

    Returns
    -------
    list of tuple of int
        Each stable partition as bitmask blocks ordered by lowest member, in
        restricted-growth-string order.
    """
    check_semantics(semantics)
    if notion not in NOTIONS:
        raise InputError(f"stability notion must be one of {', '.join(NOTIONS)}, got {notion!r}")
    n = game.n
    if n > max_clients:
        raise InputError(f"enumerating the partitions of {n} clients ({bell(n):,}) exceeds the limit of "
                         f"{max_clients} clients")
    if notion == "ce":
        return equilibrium_masks(game, semantics, tol, max_clients=max_clients, progress=progress, z=z)
    pay = payoff_table(game, semantics)
    consent = consent_table(pay, n, tol) if notion == "individual_stability" else None
    rgs, label_mask = enumerate_partitions(n)
    keep = np.zeros(rgs.shape[0], dtype=bool)
    clients = np.arange(n)
    alone = pay[clients, 1 << clients]
    for start in range(0, rgs.shape[0], chunk):
        stop = min(start + chunk, rgs.shape[0])
        r, lm = rgs[start:stop], label_mask[start:stop]
        now = pay[clients[None, :], np.take_along_axis(lm, r, axis=1)]
        if notion == "core":  # a client better off alone blocks alone: scan the rest only if nobody is
            rational = ~(alone[None, :] > now + tol).any(axis=1)
            ok = np.zeros(stop - start, dtype=bool)
            ok[rational] = ~_blocked_by_coalition(now[rational], pay, n, tol)
            keep[start:stop] = ok
        else:
            keep[start:stop] = ~_blocked_by_move(r, lm, now, pay, consent, tol)
        if progress is not None:
            progress(stop, rgs.shape[0])
    return [tuple(sorted((int(k) for k in row if k), key=lambda k: k & -k)) for row in label_mask[keep]]
