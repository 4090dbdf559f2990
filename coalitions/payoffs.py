"""Maximal achievable utility and the two payoff semantics.

docs/concepts.md §1–2.  Under ``personalized`` semantics (Cui et al.) a member of ``K`` may
use any model on the Pareto front of ``K``, so its payoff is its *maximal
achievable utility*

.. math::  \\mathrm{MAU}_i(R) = \\max_{S \\subseteq R,\\; i \\in S} v_i(S),

monotone in ``R``.  Under ``shared`` semantics (model-sharing games, Donahue &
Kleinberg) a member gets ``v_i(K)`` itself.

``MAU`` for every client and every coalition is one subset-max ("zeta")
transform per client: for each bit ``b``, every coalition holding ``b`` takes
the max of itself and the same coalition without ``b``.  That is ``N`` vectorised
passes over ``2^N`` entries per client, ``O(N·2^N)``, with no per-coalition search.

The full table (:func:`mau`, :func:`payoff_table`) is what the table-based checks
and brute force read.  Solving never needs it: :func:`mau_at` evaluates one entry
and :mod:`coalitions.certificate` streams the certificate client by client, so a
game near the memory limit (``N = 24``, docs/performance.md) needs no second ``N × 2^N`` array.
Tables are always float64: a game stored in float32 (exact float32 numbers, see
:mod:`coalitions.precision`) is upcast exactly, so every comparison is taken in
float64 whatever the storage.

Examples
--------
>>> import numpy as np
>>> v = np.array([[np.nan, 3.0, np.nan, 2.0]])  # client 0: v({0}) = 3, v({0,1}) = 2
>>> subset_max(v)[0, [1, 3]].tolist()              # MAU({0}), MAU({0,1})
[3.0, 3.0]
"""

from __future__ import annotations

import numpy as np

from .bitmask import submasks
from .game import Game

__all__ = ["SEMANTICS", "subset_max", "mau", "mau_at", "payoff_at", "payoff_table", "check_semantics", "models_in",
           "model_at"]

SEMANTICS = ("personalized", "shared")


def check_semantics(semantics: str) -> str:
    from .errors import InputError

    if semantics not in SEMANTICS:
        raise InputError(f"semantics must be 'personalized' or 'shared', got {semantics!r}")
    return semantics


def subset_max(values: np.ndarray) -> np.ndarray:
    """Subset-max transform of each row: ``out[i, R] = max_{S ⊆ R} values[i, S]``, float64.

    NaN entries (coalitions without the client) count as ``-inf``; coalitions
    with no finite subset get ``-inf``.  The input is not modified; the output is
    its one float64 copy, transformed in place (no other array of that size).
    """
    f = np.array(values, dtype=np.float64)
    rows, size = f.shape
    n = size.bit_length() - 1
    for r in range(rows):  # row by row: a temporary of 2^N booleans, not N·2^N
        row = f[r]
        row[np.isnan(row)] = -np.inf
    for b in range(n):
        view = f.reshape(rows, -1, 2, 1 << b)  # axis 2 is bit b of the mask
        np.maximum(view[:, :, 1, :], view[:, :, 0, :], out=view[:, :, 1, :])
    return f


def mau(game: Game) -> np.ndarray:
    """``MAU[i, R]`` for every client and coalition (NaN where ``i ∉ R``), float64. Cached per game.

    This is an ``N × 2^N`` float64 table (3 GiB at ``N = 24``); solving and
    certifying do not build it (see :func:`mau_at`).
    """
    cached = game.__dict__.get("_mau")
    if cached is None:
        out = subset_max(game.values)
        for i in range(game.n):  # NaN exactly where bit i is clear, as in the game's values
            out[i].reshape(-1, 2, 1 << i)[:, 0, :] = np.nan
        out.setflags(write=False)
        game.__dict__["_mau"] = cached = out
    return cached


def mau_at(game: Game, i: int, coalition: int) -> float:
    """``MAU_i(K)`` for one client and coalition, without the full table.

    .. math::  \\mathrm{MAU}_i(K) = \\max_{S \\subseteq K,\\; i \\in S} v_i(S)

    is the largest of the ``2^(|K|-1)`` values of client ``i`` on sub-coalitions of
    ``K`` holding it (read from the cached table when :func:`mau` has built it).

    Examples
    --------
    >>> v = np.array([[np.nan, 3.0, np.nan, 2.0], [np.nan, np.nan, 1.0, 4.0]])
    >>> mau_at(Game(("a", "b"), v), 0, 0b11), mau_at(Game(("a", "b"), v), 1, 0b11)
    (3.0, 4.0)
    """
    cached = game.__dict__.get("_mau")
    if cached is not None:
        return float(cached[i, coalition])
    if not (coalition >> i) & 1:
        raise ValueError(f"client {i} is not in coalition {coalition}")
    if coalition == game.grand:
        return float(np.fmax.reduce(game.values[i]))  # NaN (i ∉ mask) ignored
    me = 1 << i
    return float(game.values[i, submasks(coalition & ~me) | me].max())


def payoff_at(game: Game, i: int, coalition: int, semantics: str = "personalized") -> float:
    """``payoff_i(K)`` under the given semantics (docs/concepts.md §1), for one client and coalition."""
    if semantics == "personalized":
        return mau_at(game, i, coalition)
    return float(game.values[i, coalition])


def model_at(game: Game, i: int, coalition: int, semantics: str = "personalized") -> int:
    """The coalition whose model gives ``payoff_i(K)``: ``argmax_{S ⊆ K, i ∈ S} v_i(S)`` (smallest bitmask on ties).

    Under ``shared`` semantics it is ``K`` itself.  This is the reference every
    noise-aware comparison of ``i``'s payoff in ``K`` is paired with
    (:mod:`coalitions.noise`); :func:`models_in` gives it for a whole partition.
    """
    if not (coalition >> i) & 1:
        raise ValueError(f"client {i} is not in coalition {coalition}")
    if semantics == "shared":
        return int(coalition)
    me = 1 << i
    subs = submasks(coalition & ~me) | me  # ascending: argmax keeps the smallest mask on ties
    return int(subs[int(np.argmax(game.values[i, subs]))])


def payoff_table(game: Game, semantics: str = "personalized") -> np.ndarray:
    """``payoff[i, K]`` for every client and coalition under the given semantics (docs/concepts.md §1)."""
    check_semantics(semantics)
    if semantics == "personalized":
        return mau(game)
    if game.values.dtype == np.float64:
        return game.values
    cached = game.__dict__.get("_values64")
    if cached is None:  # a float32 game: its values upcast (exactly) once
        cached = game.values.astype(np.float64)
        cached.setflags(write=False)
        game.__dict__["_values64"] = cached
    return cached


def models_in(game: Game, partition, semantics: str = "personalized") -> list[int]:
    """The coalition whose model each client uses in ``partition``.

    Under ``personalized`` semantics a member ``i`` of block ``K`` uses the
    best model on ``K``'s Pareto front for its own objective,

    .. math::  S_i^* = \\arg\\max_{S \\subseteq K,\\; i \\in S} v_i(S),

    so that ``v_i(S_i^*) = MAU_i(K)`` (docs/concepts.md §1); ties go to the smallest
    bitmask.  Under ``shared`` semantics it is ``K`` itself.  Reporting uses
    this to score, on held-out data, the very model that earned the payoff.

    Parameters
    ----------
    game : Game
    partition : sequence of int
        Disjoint bitmasks covering every client.
    semantics : {"personalized", "shared"}

    Returns
    -------
    list of int
        ``S_i^*`` (a bitmask) for each client ``i``.

    Examples
    --------
    >>> import numpy as np
    >>> v = np.array([[np.nan, 3.0, np.nan, 2.0], [np.nan, np.nan, 1.0, 4.0]])
    >>> models_in(Game(("a", "b"), v), [0b11])   # a prefers its own model, b the pair's
    [1, 3]
    """
    check_semantics(semantics)
    out = [0] * game.n
    for block in partition:
        block = int(block)
        subs, s = [], block
        while s:  # every non-empty sub-mask of the block, in decreasing order
            subs.append(s)
            s = (s - 1) & block
        subs.reverse()
        for i in range(game.n):
            if not block >> i & 1:
                continue
            if semantics == "shared":
                out[i] = block
                continue
            mine = [s for s in subs if s >> i & 1]
            vals = game.values[i, mine]
            out[i] = mine[int(np.argmax(vals))]
    return out
