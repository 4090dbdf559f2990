"""Brute force: every partition, kept when it satisfies both CE axioms (docs/concepts.md §3).

The reference that every other method is tested against.  Partitions are
enumerated as *restricted growth strings* ``a_0 … a_{N-1}`` with ``a_0 = 0`` and
``a_k ≤ 1 + max(a_0 … a_{k-1})`` (``a_k`` is the block of client ``k``); there are
Bell(N) of them (Bell(10) = 115,975).  The enumeration and both checks are
vectorised:

1. *Inner agreement* depends on each block alone, so it is decided once for all
   ``2^N`` coalitions (``inner_ok[K]``) and looked up per partition.
2. *Outer agreement* compares, for a chunk of partitions at once, every
   coalition's payoffs with each client's current payoff.

Examples
--------
>>> restricted_growth_strings(3).tolist()
[[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1], [0, 1, 2]]
>>> from coalitions.analytic import mean_estimation
>>> len(equilibria(mean_estimation([2, 8, 2, 40])))
2
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .bitmask import all_masks, contains, members, submasks
from .errors import InputError
from .game import Game
from .partition import Partition
from .payoffs import payoff_table

__all__ = ["restricted_growth_strings", "bell", "inner_ok_table", "equilibria", "equilibrium_masks", "MAX_ENUMERATE"]

#: Default largest game for exhaustive enumeration (Bell(12) = 4,213,597 partitions).
MAX_ENUMERATE = 12


def bell(n: int) -> int:
    """The Bell number: how many partitions ``n`` clients have."""
    row = [1]
    for _ in range(n):
        nxt = [row[-1]]
        for x in row:
            nxt.append(nxt[-1] + x)
        row = nxt
    return row[0]


def restricted_growth_strings(n: int) -> np.ndarray:
    """All restricted growth strings of length ``n`` as an ``(Bell(n), n)`` int8 array, lexicographic."""
    if n < 1:
        raise ValueError("n must be positive")
    rgs = np.zeros((1, 1), dtype=np.int8)
    top = np.zeros(1, dtype=np.int8)
    for _ in range(1, n):
        counts = top.astype(np.int64) + 2
        parent = np.repeat(np.arange(rgs.shape[0]), counts)
        start = np.repeat(np.cumsum(counts) - counts, counts)
        label = (np.arange(parent.size) - start).astype(np.int8)
        rgs = np.concatenate([rgs[parent], label[:, None]], axis=1)
        top = np.maximum(top[parent], label)
    return rgs


def inner_ok_table(payoff: np.ndarray, n: int, tol: float) -> np.ndarray:
    """``ok[K]``: no non-empty ``K' ⊊ K`` can split off with none of its members losing."""
    ok = np.ones(1 << n, dtype=bool)
    ok[0] = False
    for k in range(1, 1 << n):
        subs = submasks(k)[1:-1]
        if subs.size == 0:
            continue
        nobody_loses = np.ones(subs.size, dtype=bool)
        for i in members(k):
            nobody_loses &= ~contains(subs, i) | (payoff[i, subs] >= payoff[i, k] - tol)
        ok[k] = not nobody_loses.any()
    return ok


def argmax_table(game: Game, i: int, semantics: str = "personalized") -> np.ndarray:
    """``A[K]``: the coalition whose model gives ``payoff_i(K)``, for every ``K`` (0 where ``i ∉ K``).

    Under ``personalized`` semantics ``argmax_{S ⊆ K, i ∈ S} v_i(S)`` with the
    smallest bitmask on ties (:func:`coalitions.payoffs.model_at`), by one
    arg-max subset transform; under ``shared`` semantics ``K`` itself.
    """
    masks = all_masks(game.n)
    has = contains(masks, i)
    if semantics == "shared":
        return np.where(has, masks, 0)
    val = np.where(has, np.asarray(game.values[i], dtype=np.float64), -np.inf)
    arg = np.where(has, masks, np.int64(1) << 62)
    for b in range(game.n):
        v, a = val.reshape(-1, 2, 1 << b), arg.reshape(-1, 2, 1 << b)
        take = (v[:, 0, :] > v[:, 1, :]) | ((v[:, 0, :] == v[:, 1, :]) & (a[:, 0, :] < a[:, 1, :]))
        v[:, 1, :] = np.where(take, v[:, 0, :], v[:, 1, :])
        a[:, 1, :] = np.where(take, a[:, 0, :], a[:, 1, :])
    return np.where(has, arg, 0)


def _noisy_inner_ok(game: Game, tables) -> np.ndarray:
    """``ok[K]`` at level ``z``: whatever sub-coalition ``K' ⊊ K`` splits off, one of its members loses significantly.

    Member ``i`` of ``K'`` does not lose when some model of ``K'`` is not significantly worse than
    the model it holds in ``K``: ``tied[t, K']`` of its tables (:func:`_noisy_tables`), read at the
    index of that model.  One vectorised pass per coalition over its sub-coalitions.
    """
    ok = np.ones(1 << game.n, dtype=bool)
    ok[0] = False
    for k in range(1, 1 << game.n):
        if not k & (k - 1):
            continue  # one client cannot split
        subs = submasks(k)[1:-1]
        nobody_loses = np.ones(subs.size, dtype=bool)
        for i in members(k):
            index, _, tied = tables[i]
            nobody_loses &= ~contains(subs, i) | tied[index[k]][subs]
        ok[k] = not nobody_loses.any()
    return ok


def _noisy_tables(game: Game, semantics: str, tol: float, z: float):
    """Per client: the index of the model it holds in each coalition, and two tables over its distinct models ``t``.

    ``better[t, C]``: some model of ``C`` is significantly better than ``t`` (``C`` tempts the client away
    from a block where it holds ``t``); ``tied[t, C]``: some model of ``C`` is not significantly worse than
    ``t`` (the client does not lose by moving from ``t`` to ``C``).  Under ``personalized`` semantics the
    models of ``C`` are those of its sub-coalitions holding the client (a subset-OR transform), under
    ``shared`` semantics ``C``'s own.
    """
    from .certificate import _zeta_or
    from .noise import Comparison

    cmp = Comparison(game, tol, z)
    masks = all_masks(game.n)
    tables = []
    for i in range(game.n):
        arg = argmax_table(game, i, semantics)
        refs, index = np.unique(arg, return_inverse=True)  # refs[0] = 0 stands for "i not in K"
        has = contains(masks, i)
        better = np.zeros((refs.size, masks.size), dtype=bool)
        tied = np.zeros((refs.size, masks.size), dtype=bool)
        inside = masks[has]
        for t, ref in enumerate(refs):
            if ref == 0:
                continue
            better[t, has], tied[t, has] = cmp.better_and_not_worse(i, inside, int(ref))
            if semantics == "personalized":
                _zeta_or(better[t], 0, game.n)
                _zeta_or(tied[t], 0, game.n)
        tables.append((index.reshape(arg.shape), better, tied))
    return tables


def equilibria(game: Game, semantics: str = "personalized", tol: float = 1e-9,
               max_clients: int = MAX_ENUMERATE, chunk: int = 2048,
               progress: Callable[[int, int], None] | None = None, *, z: float | None = None) -> list[Partition]:
    """Every collaboration equilibrium of ``game``, by exhaustive enumeration.

    Parameters
    ----------
    game : Game
    semantics : {"personalized", "shared"}
    tol : float
    max_clients : int
        Refuse games larger than this (Bell numbers grow fast).
    chunk : int
        Partitions checked together for outer agreement.
    progress : callable, optional
        ``progress(done, total)`` after each chunk.
    z : float, optional
        Significance level of every comparison (:mod:`coalitions.noise`; 1.96 by
        default when the game carries its uncertainty, else 0).  At ``z > 0`` a
        member of ``C`` prefers it to its block when some model of ``C`` is
        significantly better than the model it holds, and a sub-coalition splits off
        when none of its members loses significantly.

    Returns
    -------
    list of Partition
        Each equilibrium by client name (:class:`~coalitions.partition.Partition`; its
        bitmask blocks are ``.masks``), in restricted-growth-string order.
    """
    return [Partition(game.clients, p) for p in equilibrium_masks(game, semantics, tol, max_clients, chunk,
                                                                  progress, z=z)]


def equilibrium_masks(game: Game, semantics: str = "personalized", tol: float = 1e-9,
                      max_clients: int = MAX_ENUMERATE, chunk: int = 2048,
                      progress: Callable[[int, int], None] | None = None, *,
                      z: float | None = None) -> list[tuple[int, ...]]:
    """:func:`equilibria` as the core computes with them: bitmask blocks ordered by lowest member."""
    n = game.n
    if n > max_clients:
        raise InputError(f"exhaustive enumeration of {n} clients ({bell(n):,} partitions) exceeds "
                         f"the limit of {max_clients} clients")
    from .noise import Comparison

    cmp = Comparison(game, tol, z)
    rgs = restricted_growth_strings(n).astype(np.int64)
    bits = np.int64(1) << np.arange(n, dtype=np.int64)
    label_mask = np.zeros((rgs.shape[0], n), dtype=np.int64)
    for label in range(n):
        label_mask[:, label] = ((rgs == label) * bits).sum(axis=1)
    block = np.take_along_axis(label_mask, rgs, axis=1)  # block[p, i] = P(i)
    if cmp.noisy:
        pay = None
        tables = _noisy_tables(game, semantics, tol, cmp.level)
        inner = _noisy_inner_ok(game, tables)
    else:
        pay = payoff_table(game, semantics)
        inner = inner_ok_table(pay, n, tol)
    keep = inner[block].all(axis=1)
    block, label_mask = block[keep], label_mask[keep]
    masks = all_masks(n)[1:]
    has = [contains(masks, i) for i in range(n)]
    blocked = np.zeros(block.shape[0], dtype=bool)
    for start in range(0, block.shape[0], chunk):
        stop = min(start + chunk, block.shape[0])
        ok = np.ones((stop - start, masks.size), dtype=bool)
        for i in range(n):
            if pay is None:
                index, better, _ = tables[i]
                ok &= ~has[i][None, :] | better[index[block[start:stop, i]]][:, 1:]
            else:
                cur = pay[i, block[start:stop, i]]
                ok &= ~has[i][None, :] | (pay[i, masks][None, :] > cur[:, None] + tol)
        blocked[start:stop] = ok.any(axis=1)
        if progress is not None:
            progress(stop, block.shape[0])
    out = []
    for row in label_mask[~blocked]:
        blocks = [int(k) for k in row if k]
        out.append(tuple(sorted(blocks, key=lambda k: k & -k)))
    return out
