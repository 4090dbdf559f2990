"""Hypothesis strategies for games, planted games, partitions and estimates (docs/testing.md).

Import this module only in tests: it imports hypothesis (the ``testing`` extra), which the rest
of :mod:`coalitions.testing` never does.  Every strategy draws a *valid* object (a
:class:`~coalitions.game.Game` always builds) and shrinks toward a small, simple one: fewer
clients first, then values toward 0 (tied games) or toward one seed (continuous games).

What each draws, with the seeds of the kinds of games:

* :func:`games` — ``N`` clients (``min_n..max_n``, uniform, shrinking to ``min_n``) with every
  value ``v_i(S)`` either from ``{0, …, levels-1}`` (``ties=True``: ties everywhere, so tie
  rules and the shrink step of peeling are exercised) or ``N(0, 1)`` from a drawn seed
  (``ties=False``: almost surely no two values tie);
* :func:`planted_games` — :func:`coalitions.analytic.planted` games with hidden groups,
  noise-free by default, whose unique CE is the groups themselves;
* :func:`partitions` — every partition of the clients (a restricted-growth string), shrinking
  toward the grand coalition;
* :func:`estimates` — a game with each value moved by at most ``noise``: what a learner that
  estimates the values within ``noise`` might report.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from ..analytic import planted
from ..bitmask import all_masks, contains
from ..brute_force import equilibria
from ..game import Game

__all__ = ["games", "planted_games", "partitions", "estimates"]


def _game(n: int, flat: np.ndarray, clients: Sequence[str] | None, sense: str) -> Game:
    """The game whose values ``v_i(S)`` for ``S ∋ i`` are ``flat`` in (client, mask) order."""
    arr = np.full((n, 1 << n), np.nan)
    masks = all_masks(n)
    k = 0
    for i in range(n):
        inside = masks[contains(masks, i)]
        arr[i, inside] = flat[k:k + inside.size]
        k += inside.size
    return Game.from_array(arr, None if clients is None else list(clients)[:n], sense)


@st.composite
def games(draw, n: int | None = None, *, min_n: int = 1, max_n: int = 5, ties: bool | None = None,
          levels: int = 3, sense: str | None = "max", semantics: str | None = None,
          clients: Sequence[str] | None = None) -> Game:
    """Games of ``n`` clients (or ``min_n..max_n``), tied, continuous, or either (``ties=None``).

    ``sense=None`` draws ``"max"`` or ``"min"``; the values drawn are the raw values in that
    sense.  ``semantics`` keeps only games that have a collaboration equilibrium under it
    (brute force, :func:`coalitions.brute_force.equilibria`): every game has one under
    ``"personalized"``, some have none under ``"shared"``.  ``clients`` names the clients
    (its first ``N`` names); default ``"0", "1", …``.
    Games of 7 clients hold 448 values: keep ``max_n`` at 7 or below for fast runs.
    """
    size = n if n is not None else draw(st.sampled_from(range(min_n, max_n + 1)))  # uniform, shrinks to min_n
    count = size << (size - 1)
    tied = not draw(st.booleans()) if ties is None else ties  # shrinks to tied (all-zero) games
    how = draw(st.sampled_from(("max", "min"))) if sense is None else sense
    if tied:
        flat = np.array(draw(st.lists(st.integers(0, levels - 1), min_size=count, max_size=count)), dtype=float)
    else:
        flat = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).normal(size=count)
    game = _game(size, flat, clients, how)
    if semantics is not None:
        assume(len(equilibria(game, semantics)) > 0)
    return game


@st.composite
def planted_games(draw, groups: Sequence[int] | None = None, *, max_groups: int = 3, max_size: int = 3,
                  noise: float = 0.0, ties: float = 0.0) -> Game:
    """:func:`~coalitions.analytic.planted` games; ``groups`` fixed, or drawn (sizes 1..max_size).

    The game's ``provenance["groups"]`` holds the group sizes, so a test can rebuild the planted
    partition; without noise that partition is the game's unique collaboration equilibrium.
    """
    sizes = list(groups) if groups is not None else draw(
        st.lists(st.integers(1, max_size), min_size=1, max_size=max_groups))
    seed = draw(st.integers(0, 10_000))
    g = planted(sizes, noise=noise, ties=ties, seed=seed)
    return Game(g.clients, g.values, g.sense, {**g.provenance, "groups": sizes, "seed": seed})


@st.composite
def partitions(draw, clients: int | Sequence[str] | Game) -> tuple[int, ...]:
    """A partition of the clients as bitmask blocks (a :class:`Game`, a count, or names).

    Drawn as a restricted-growth string (client ``i`` joins one of the blocks so far or opens
    the next), which reaches every partition and shrinks to the grand coalition.
    """
    n = clients.n if isinstance(clients, Game) else clients if isinstance(clients, int) else len(clients)
    label: list[int] = []
    for _ in range(n):
        label.append(draw(st.integers(0, max(label, default=-1) + 1)))
    blocks: dict[int, int] = {}
    for i, b in enumerate(label):
        blocks[b] = blocks.get(b, 0) | (1 << i)
    return tuple(blocks[b] for b in sorted(blocks))


@st.composite
def estimates(draw, game: Game, noise: float = 0.05) -> Game:
    """``game`` with each value ``v_i(S)`` moved by at most ``noise`` (uniform), in the game's sense.

    Shrinks toward ``game`` itself (seed 0 still moves values; ``noise=0`` returns the same values).
    """
    seed = draw(st.integers(0, 2**32 - 1))
    shift = np.random.default_rng(seed).uniform(-noise, noise, size=game.values.shape)
    raw = game.raw_values() + shift
    return Game.from_array(raw, list(game.clients), game.sense, {"estimate_of": game.provenance, "noise": noise})
