"""Partitions of the clients: parsing, validation, canonical form.

At the API surface a partition is a :class:`Partition`: its blocks are frozensets
of client names, in one canonical order (blocks by their first client in the
game's order, members in the game's order when printed).  Inside the core it is a
tuple of disjoint non-empty coalition bitmasks covering every client
(:attr:`Partition.masks`).  On the command line it is written ``"A,B|C"``: blocks
separated by ``|``, members by ``,``.

Examples
--------
>>> from coalitions.analytic import mean_estimation
>>> g = mean_estimation([5, 5, 25], clients=["a", "b", "c"])
>>> p = Partition.parse(g.clients, "c|a,b")
>>> p
Partition('a,b | c')
>>> p[0] == {"a", "b"}, p.masks
(True, (3, 4))
>>> parse_partition(g, "c|a,b")
(3, 4)
>>> format_partition(g, p)
'a,b|c'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .errors import InputError
from .game import Game, parse_coalition

__all__ = ["Partition", "validate_blocks", "parse_partition", "check_partition", "canonical", "format_partition", "block_of"]


class Partition(Sequence[frozenset]):
    """A partition of named clients into coalitions: what every result of the library holds.

    A read-only sequence of blocks, each a ``frozenset`` of client names, ordered by
    each block's first client in ``clients``' order (the one order of every output).
    Two partitions are equal when they have the same blocks, whatever order their
    clients were listed in; a partition is hashable.  The bitmasks the core computes
    with are behind one accessor, :attr:`masks` (bit ``i`` is ``clients[i]``).

    Parameters
    ----------
    clients : sequence of str
        The names, in the game's order.
    masks : iterable of int
        The blocks as bitmasks over ``clients``: non-empty, disjoint, covering every client.

    Examples
    --------
    >>> p = Partition(["a", "b", "c"], (4, 3))
    >>> p, len(p), p.masks
    (Partition('a,b | c'), 2, (3, 4))
    >>> [sorted(b) for b in p], p.block_of("c")
    ([['a', 'b'], ['c']], frozenset({'c'}))
    >>> p.lists(), str(p)
    ([['a', 'b'], ['c']], 'a,b | c')
    >>> p == Partition(["c", "b", "a"], (1, 6))
    True
    """

    __slots__ = ("_clients", "_masks")

    def __init__(self, clients: Sequence[str], masks: Iterable[int]):
        names = tuple(str(c) for c in clients)
        if len(set(names)) != len(names):
            raise InputError("a partition's clients must be distinct names")
        self._clients = names
        self._masks = validate_blocks(names, masks, f"the {len(names)} given")

    @classmethod
    def parse(cls, clients: Sequence[str], text: str | Sequence[Sequence[str]]) -> Partition:
        """``"A,B|C"`` (or a list of name lists) over ``clients``."""
        index = {c: i for i, c in enumerate(clients)}
        return cls(clients, _parse_masks(index, text))

    @property
    def clients(self) -> tuple[str, ...]:
        """The client names, in the order the bits of :attr:`masks` follow."""
        return self._clients

    @property
    def masks(self) -> tuple[int, ...]:
        """The blocks as bitmasks over :attr:`clients` (bit ``i`` is ``clients[i]``), in canonical order."""
        return self._masks

    def _names(self, k: int) -> list[str]:
        return [c for i, c in enumerate(self._clients) if (k >> i) & 1]

    def lists(self) -> list[list[str]]:
        """The blocks as lists of names, members in the clients' order."""
        return [self._names(k) for k in self._masks]

    def block_of(self, client: str) -> frozenset:
        """The block holding ``client``."""
        for b in self:
            if client in b:
                return b
        raise InputError(f"client {client!r} is not in the partition")

    def __len__(self) -> int:
        return len(self._masks)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return tuple(frozenset(self._names(k)) for k in self._masks[i])
        return frozenset(self._names(self._masks[i]))

    def __iter__(self):
        return (frozenset(self._names(k)) for k in self._masks)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Partition):
            return NotImplemented
        return set(self) == set(other)

    def __hash__(self) -> int:
        return hash(frozenset(self))

    def __str__(self) -> str:
        return " | ".join(",".join(b) for b in self.lists())

    def __repr__(self) -> str:
        return f"Partition({str(self)!r})"


def canonical(partition: Iterable[int] | Partition) -> tuple[int, ...]:
    """Blocks ordered by their lowest member (the order used in every output).

    A :class:`Partition` gives its own :attr:`Partition.masks`, whose bits follow *its*
    clients; over a game whose clients are in another order, map it by name
    (:func:`check_partition`).
    """
    if isinstance(partition, Partition):
        return partition.masks
    return tuple(sorted((int(k) for k in partition), key=lambda k: k & -k))


def _masks_of(game: Game, partition) -> Iterable[int]:
    """The bitmask blocks of ``partition`` over ``game``'s clients (a :class:`Partition` by its names)."""
    if isinstance(partition, Partition):
        if set(partition.clients) != set(game.clients):
            raise InputError("the partition's clients are not the game's")
        return [parse_coalition(sorted(b, key=game.index.__getitem__), game.index) for b in partition]
    return partition


def validate_blocks(names: Sequence[str], masks: Iterable[int], outside: str = "the game") -> tuple[int, ...]:
    """Bitmask blocks over ``names`` that partition them (non-empty, disjoint, covering everyone), in canonical order.

    Raises :class:`~coalitions.errors.InputError` naming the first client in two blocks or in none,
    or the block that is empty or reaches beyond ``names`` (``outside`` says what they are).
    """
    grand = (1 << len(names)) - 1
    seen = 0
    blocks = []
    for k in masks:
        k = int(k)
        if k <= 0 or k > grand:
            raise InputError(f"partition block {k} is empty or names clients outside {outside}")
        if seen & k:
            raise InputError(f"client {names[((seen & k) & -(seen & k)).bit_length() - 1]!r} appears in two blocks "
                             "of the partition")
        seen |= k
        blocks.append(k)
    if seen != grand:
        missing = grand & ~seen
        raise InputError(f"client {names[(missing & -missing).bit_length() - 1]!r} is in no block of the partition")
    return canonical(blocks)


def check_partition(game: Game, partition: Iterable[int] | Partition) -> tuple[int, ...]:
    """Validate bitmask blocks (or a :class:`Partition` of the game's names): non-empty, disjoint, covering every client."""
    return validate_blocks(game.clients, _masks_of(game, partition))


def parse_partition(game: Game, text: str | Sequence[Sequence[str]]) -> tuple[int, ...]:
    """Parse ``"A,B|C"`` (or a list of name lists) into validated bitmask blocks."""
    return check_partition(game, _parse_masks(game.index, text))


def _parse_masks(index: dict, text: str | Sequence[Sequence[str]]) -> list[int]:
    """The blocks of ``"A,B|C"`` (or of a list of name lists) as bitmasks, not yet checked to partition."""
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
    return [parse_coalition(p, index) for p in parts]


def format_partition(game: Game, partition: Iterable[int] | Partition) -> str:
    """``"A,B|C"`` in canonical order."""
    return "|".join(game.key(k) for k in canonical(_masks_of(game, partition)))


def block_of(game: Game, partition: Iterable[int] | Partition):
    """Array ``P(i)``: the block holding each client."""
    import numpy as np

    out = np.zeros(game.n, dtype=np.int64)
    for k in _masks_of(game, partition):
        for i in range(game.n):
            if (k >> i) & 1:
                out[i] = k
    return out
