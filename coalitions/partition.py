"""Partitions of the clients: parsing, validation, canonical form.

A partition is a tuple of disjoint non-empty coalition bitmasks covering every
client.  On the command line it is written ``"A,B|C"``: blocks separated by
``|``, members by ``,``.

Examples
--------
>>> from coalitions.analytic import mean_estimation
>>> g = mean_estimation([5, 5, 25], clients=["a", "b", "c"])
>>> parse_partition(g, "c|a,b")
(3, 4)
>>> format_partition(g, (3, 4))
'a,b|c'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .errors import InputError
from .game import Game, parse_coalition

__all__ = ["parse_partition", "check_partition", "canonical", "format_partition", "block_of"]


def canonical(partition: Iterable[int]) -> tuple[int, ...]:
    """Blocks ordered by their lowest member (the order used in every output)."""
    return tuple(sorted((int(k) for k in partition), key=lambda k: k & -k))


def check_partition(game: Game, partition: Iterable[int]) -> tuple[int, ...]:
    """Validate bitmask blocks: non-empty, disjoint, covering every client."""
    seen = 0
    blocks = []
    for k in partition:
        k = int(k)
        if k <= 0 or k > game.grand:
            raise InputError(f"partition block {k} is empty or names clients outside the game")
        if seen & k:
            clash = game.names(seen & k)[0]
            raise InputError(f"client {clash!r} appears in two blocks of the partition")
        seen |= k
        blocks.append(k)
    if seen != game.grand:
        missing = game.names(game.grand & ~seen)[0]
        raise InputError(f"client {missing!r} is in no block of the partition")
    return canonical(blocks)


def parse_partition(game: Game, text: str | Sequence[Sequence[str]]) -> tuple[int, ...]:
    """Parse ``"A,B|C"`` (or a list of name lists) into validated bitmask blocks."""
    if isinstance(text, str):
        if not text.strip():
            raise InputError("partition is empty")
        parts = text.split("|")
        for p in parts:
            if not p.strip():
                raise InputError(f"partition {text!r} has an empty block")
    else:
        parts = list(text)  # type: ignore[arg-type]  # a list of name lists, checked below
        if any(len(p) == 0 for p in parts):
            raise InputError("partition has an empty block")
    return check_partition(game, [parse_coalition(p, game.index) for p in parts])


def format_partition(game: Game, partition: Iterable[int]) -> str:
    """``"A,B|C"`` in canonical order."""
    return "|".join(game.key(k) for k in canonical(partition))


def block_of(game: Game, partition: Iterable[int]):
    """Array ``P(i)``: the block holding each client."""
    import numpy as np

    out = np.zeros(game.n, dtype=np.int64)
    for k in partition:
        for i in range(game.n):
            if (k >> i) & 1:
                out[i] = k
    return out
