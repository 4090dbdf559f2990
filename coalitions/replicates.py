"""Bootstrap replicates of an exhaustive game (docs/concepts.md §6, docs/formats.md).

A game measured on validation data (docs/concepts.md §5) is one draw of a noisy
measurement: ``v_i(S)`` is the metric of the model of ``S`` on client ``i``'s
finite validation set.  Resampling each client's validation rows with
replacement and re-scoring the *same* trained models gives ``B`` replicates
``v^b_i(S)``, ``b = 1..B`` — the nonparametric bootstrap (Efron & Tibshirani,
*An Introduction to the Bootstrap*, 1993, ch. 6) applied per client, paired
across coalitions because every model of a replicate is scored on the same
resampled rows.

:class:`Replicates` holds them as one read-only float64 array of shape
``(B, N, 2^N)`` in the game's internal units (higher is better, NaN where
``i ∉ S``), validated like :class:`~coalitions.game.Game`: every message names
the replicate, the client and the coalition at fault.

Examples
--------
>>> import numpy as np
>>> from coalitions.game import Game
>>> g = Game.from_mapping(["a", "b"], {"a": {"a": 1, "a,b": 2}, "b": {"b": 1, "a,b": 0}})
>>> r = Replicates.from_array(np.stack([g.raw_values(), g.raw_values() + 1]), g.clients)
>>> r.b, r.game(1).value("a", "a,b")
(2, 3.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .errors import InputError
from .game import SENSES, Game, check_client_names
from .numbers import float_array

__all__ = ["Replicates", "MAX_REPLICATE_VALUES", "MAX_REPLICATES", "check_count"]

#: Most replicates a game may carry.
MAX_REPLICATES = 100_000
#: Most numbers ``B·N·2^N`` all replicates together may hold (2 GiB of float64).
MAX_REPLICATE_VALUES = 1 << 28


def check_count(b: int, n: int, what: str = "") -> int:
    """``b`` if ``b`` replicates of an ``n``-client game may be held, else :class:`InputError`."""
    if b < 1:
        raise InputError(f"{what}at least one replicate is needed, got {b}")
    if b > MAX_REPLICATES or b * n * (1 << n) > MAX_REPLICATE_VALUES:
        raise InputError(f"{what}{b:,} replicates of a {n}-client game hold {b * n * (1 << n):,} values; "
                         f"at most {min(MAX_REPLICATES, MAX_REPLICATE_VALUES // (n << n)):,} replicates "
                         f"fit the limit of {MAX_REPLICATE_VALUES:,} values")
    return b


@dataclass(frozen=True, eq=False)
class Replicates:
    """``B`` bootstrap replicates of a game, validated and read-only.

    Parameters
    ----------
    clients : tuple of str
        Client names (those of the game they belong to).
    values : ndarray of shape (B, N, 2**N)
        ``values[b, i, mask] = v^b_i(mask)``, higher is better, NaN where ``i ∉ mask``.
    sense : {"max", "min"}
        The sense of the game; ``"min"`` values were negated on input.

    Use :meth:`from_array` or :meth:`from_mappings` (they take values in
    ``sense``); every replicate is checked like a :class:`Game`, and an error
    starts with ``replicate b:`` (0-based).
    """

    clients: tuple[str, ...]
    values: np.ndarray
    sense: str = "max"

    def __post_init__(self):
        clients = check_client_names(self.clients)
        if self.sense not in SENSES:
            raise InputError(f"'sense' must be 'max' or 'min', got {self.sense!r}")
        n = len(clients)
        v = np.asarray(self.values)
        if v.ndim != 3 or v.shape[1:] != (n, 1 << n):
            raise InputError(f"replicates must have shape (B, {n}, {1 << n}) for {n} clients, got {v.shape}")
        check_count(v.shape[0], n)
        out = np.empty(v.shape)
        for b in range(v.shape[0]):
            try:
                out[b] = Game(clients, v[b], self.sense).values
            except InputError as e:
                raise InputError(f"replicate {b}: {e}") from None
        out.setflags(write=False)
        object.__setattr__(self, "clients", clients)
        object.__setattr__(self, "values", out)

    @classmethod
    def from_array(cls, values, clients: Sequence[str], sense: str = "max") -> Replicates:
        """Build from a dense ``(B, N, 2**N)`` array given in ``sense``."""
        arr = float_array(values, "replicates")
        if sense not in SENSES:
            raise InputError(f"'sense' must be 'max' or 'min', got {sense!r}")
        return cls(tuple(clients), arr if sense == "max" else -arr, sense)

    @classmethod
    def from_mappings(cls, clients: Sequence[str], tables: Sequence[Mapping], sense: str = "max") -> Replicates:
        """Build from ``[{client: {"A,B": value}}, ...]``, each table as the ``values`` of ``coalitions/game@1``."""
        if isinstance(tables, (str, bytes, Mapping)) or not isinstance(tables, Sequence):
            raise InputError("'replicates' must be a list of {client: {coalition: value}} objects")
        n = len(check_client_names(clients))
        check_count(len(tables), n)
        arr = np.empty((len(tables), n, 1 << n))
        for b, table in enumerate(tables):
            try:
                arr[b] = Game.from_mapping(clients, table, sense).raw_values()
            except InputError as e:
                raise InputError(f"replicate {b}: {e}") from None
        return cls.from_array(arr, clients, sense)

    @property
    def b(self) -> int:
        """Number of replicates ``B``."""
        return int(self.values.shape[0])

    @property
    def n(self) -> int:
        return len(self.clients)

    def game(self, b: int) -> Game:
        """Replicate ``b`` as a :class:`Game` (same clients and sense)."""
        return Game(self.clients, self.values[b], self.sense)

    def raw_values(self) -> np.ndarray:
        """Values in the sense they were given (``-values`` for a ``min`` game)."""
        return np.array(self.values if self.sense == "max" else -self.values)

    def check_matches(self, game: Game) -> Replicates:
        """``self`` if it belongs to ``game`` (same clients, same sense), else :class:`InputError`."""
        if self.clients != game.clients:
            raise InputError(f"the replicates' clients {list(self.clients)!r} are not the game's "
                             f"{list(game.clients)!r}")
        if self.sense != game.sense:
            raise InputError(f"the replicates' sense {self.sense!r} is not the game's {game.sense!r}")
        return self

    def __repr__(self) -> str:
        return f"Replicates(b={self.b}, clients={list(self.clients)!r}, sense={self.sense!r})"
