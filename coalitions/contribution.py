"""Benefit and contribution: what each client gains from its coalition, and what it brings to it.

The conclusion of Cui et al. (KDD 2022) asks to "quantify both the benefit to and
the contribution from each client", to give incentives or impose charges.  For a
partition ``P`` with ``P(i)`` the block holding ``i``, under the game's payoff
semantics (docs/concepts.md §1):

* the **benefit** of ``i`` is its gain over being alone,
  ``b_i = payoff_i(P(i)) − payoff_i({i})``;
* the **contribution** of ``i`` to another member ``j`` of its block is what
  ``j`` would lose if ``i`` left,
  ``c_ij = payoff_j(P(j)) − payoff_j(P(j) ∖ {i})``, and ``i``'s contribution is
  ``c_i = Σ_{j ∈ P(i), j ≠ i} c_ij`` ("who carries whom").

Under ``personalized`` semantics payoffs are monotone, so every ``c_ij ≥ 0`` and
``b_i ≥ 0`` whenever ``P(i)`` is individually rational; under ``shared``
semantics a member can hurt the others (``c_ij < 0``).  Values are in the
game's internal higher-is-better units, so for a loss a positive number is an
error removed.

Examples
--------
>>> from coalitions.analytic import mean_estimation
>>> g = mean_estimation([1, 8, 15])
>>> benefits(g, [0b101, 0b010], "shared").round(4).tolist()
[7.6172, 0.0, 0.0339]
>>> c = contributions(g, [0b101, 0b010], "shared")
>>> c.round(4)[[2, 0], [0, 2]].tolist()       # 2 carries 0; 0 helps 2 a little
[7.6172, 0.0339]
"""

from __future__ import annotations

import numpy as np

from .game import Game
from .numbers import finite
from .partition import block_of, check_partition
from .payoffs import payoff_table

__all__ = ["benefits", "contributions", "total_contributions"]


def benefits(game: Game, partition, semantics: str = "personalized") -> np.ndarray:
    """``b_i = payoff_i(P(i)) − payoff_i({i})`` for every client."""
    partition = check_partition(game, partition)
    pay = payoff_table(game, semantics)
    clients = np.arange(game.n)
    return finite(lambda: pay[clients, block_of(game, partition)] - pay[clients, 1 << clients],
                  lambda at: f"the gain of client {game.clients[at[0]]!r} (payoff minus payoff alone)")


def contributions(game: Game, partition, semantics: str = "personalized") -> np.ndarray:
    """``c[i, j]``: what ``j`` loses if ``i`` leaves their block; NaN unless ``i ≠ j`` share a block."""
    partition = check_partition(game, partition)
    pay = payoff_table(game, semantics)
    where = block_of(game, partition)

    def table() -> np.ndarray:
        out = np.full((game.n, game.n), np.nan)
        for i in range(game.n):
            k = int(where[i])
            rest = k & ~(1 << i)
            for j in range(game.n):
                if j != i and rest >> j & 1:
                    out[i, j] = pay[j, k] - pay[j, rest]
        return out

    return finite(table, lambda at: f"what client {game.clients[at[1]]!r} loses without "
                                    f"{game.clients[at[0]]!r} (its contribution)")


def total_contributions(game: Game, partition, semantics: str = "personalized") -> np.ndarray:
    """``c_i = Σ_j c[i, j]``: everything the others in ``i``'s block would lose without it (0 alone)."""
    c = contributions(game, partition, semantics)
    return finite(lambda: np.nansum(c, axis=1), lambda at: f"the contribution of client {game.clients[at[0]]!r}")
