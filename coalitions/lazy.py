"""Lazy games: values measured on demand, for the coalitions asked (docs/scale.md).

An exhaustive :class:`~coalitions.game.Game` knows ``v_i(S)`` for all ``2^N``
coalitions; beyond ``N ≈ 24`` nobody can train them all.  A *value source* measures
the coalitions it is asked for, and nothing else:

* :class:`Measurement` — what one call returns: the values of ``k`` coalitions for
  their members, and optionally their uncertainty (paired bootstrap replicates or one
  standard error per value, as in :mod:`coalitions.noise`);
* :class:`ValueSource` — the protocol a source implements (``clients``, ``sense``,
  ``provenance``, ``measure(masks)``).  The analytic sources are in
  :mod:`coalitions.lazy_analytic`; :class:`GameSource` reads an exhaustive game lazily
  (to calibrate against it, counting what would have been trained); a data source
  (a federation that trains one model per coalition asked) implements the same four
  members in ``coalitions.learners``;
* :func:`check_measurement` — the one validation of a source's answer.

The values are given in the source's own sense (a loss for ``sense = "min"``), as a
game file holds them; :class:`coalitions.measured.MeasuredGame` stores them so and
compares them higher-is-better.

Examples
--------
>>> import numpy as np
>>> from coalitions.analytic import mean_estimation
>>> src = GameSource(mean_estimation([5, 5, 25]))
>>> m = src.measure(np.array([0b011]))
>>> m.values[:, 0].tolist()          # the errors of clients 0 and 1 in {0, 1}; client 2 is not in it
[1.5, 1.5, nan]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .errors import InputError
from .game import SENSES, Game, check_client_names

__all__ = ["Measurement", "ValueSource", "GameSource", "check_masks", "check_measurement", "member_table"]

#: Most clients a lazy game holds: a coalition is an int64 bitmask.
MAX_LAZY_CLIENTS = 62


def member_table(masks: np.ndarray, n: int) -> np.ndarray:
    """``out[i, k]``: is client ``i`` in ``masks[k]``?  Boolean, shape ``(n, k)``."""
    masks = np.asarray(masks, dtype=np.int64)
    return ((masks[None, :] >> np.arange(n, dtype=np.int64)[:, None]) & 1).astype(bool)


def check_masks(masks: object, n: int) -> np.ndarray:
    """``masks`` as a 1-d int64 array of distinct non-empty coalitions of ``n`` clients; else :class:`InputError`."""
    arr = np.asarray(masks)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InputError(f"coalitions must be a 1-d array of integer bitmasks, got shape {arr.shape}, dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size:
        if arr.min() <= 0 or arr.max() >= (1 << n):
            bad = int(arr[(arr <= 0) | (arr >= (1 << n))][0])
            raise InputError(f"coalition bitmask {bad} is not a non-empty coalition of {n} clients")
        if np.unique(arr).size != arr.size:
            raise InputError("coalitions asked twice in one measurement")
    return arr


@dataclass(frozen=True, eq=False)
class Measurement:
    """The values of ``k`` coalitions, as one call of :meth:`ValueSource.measure` returns them.

    Attributes
    ----------
    masks : ndarray of int64, shape (k,)
        The coalitions, distinct bitmasks.
    values : ndarray of float64, shape (N, k)
        ``values[i, j] = v_i(masks[j])`` in the source's sense; NaN where client ``i``
        is not in ``masks[j]``.
    replicates : ndarray of float64, shape (B, N, k), or None
        Bootstrap replicates *paired across calls*: replicate ``b`` of client ``i``
        always re-scores the same resample of ``i``'s rows, so the difference of any
        two measured coalitions has the paired standard error of :mod:`coalitions.noise`.
    se : ndarray of float64, shape (N, k), or None
        One standard error per value (treated as independent).
    Neither ``replicates`` nor ``se``: the values are exact (standard error 0).
    """

    masks: np.ndarray
    values: np.ndarray
    replicates: np.ndarray | None = None
    se: np.ndarray | None = None

    @property
    def kind(self) -> str:
        """``"replicates"``, ``"se"`` or ``"exact"``."""
        return "replicates" if self.replicates is not None else "se" if self.se is not None else "exact"


@runtime_checkable
class ValueSource(Protocol):
    """What measures coalitions on demand (a lazy game).

    Attributes
    ----------
    clients : tuple of str
        Client names, in bit order.
    sense : {"max", "min"}
        Whether higher or lower values are better (as in :class:`~coalitions.game.Game`).
    provenance : dict
        JSON-ready description of the source (generator and parameters, data and
        training protocol); a cache of a source's measurements is refused by any other
        source (:class:`coalitions.measured.MeasuredGame`).
    """

    clients: tuple[str, ...]
    sense: str
    provenance: dict

    def measure(self, masks: np.ndarray) -> Measurement:
        """Measure the coalitions ``masks`` (distinct, non-empty int64 bitmasks): one training each."""
        ...


def check_source(source: object) -> ValueSource:
    """``source`` if it has the members of :class:`ValueSource`, with valid names and sense; else :class:`InputError`."""
    if not isinstance(source, ValueSource):
        raise InputError(f"{type(source).__name__} is not a value source (clients, sense, provenance, measure)")
    names = check_client_names(list(source.clients))
    if len(names) > MAX_LAZY_CLIENTS:
        raise InputError(f"a lazy game holds at most {MAX_LAZY_CLIENTS} clients (int64 bitmasks), got {len(names)}")
    if source.sense not in SENSES:
        raise InputError(f"sense must be 'max' or 'min', got {source.sense!r}")
    if not isinstance(source.provenance, Mapping):
        raise InputError("a value source's provenance must be a dict")
    return source


def check_measurement(m: Measurement, masks: np.ndarray, n: int, what: str = "the source") -> Measurement:
    """``m`` if it answers exactly ``masks`` for ``n`` clients with valid arrays; else :class:`InputError`.

    Values (and replicates, standard errors) must be finite where the client is a
    member and NaN where it is not; standard errors ``≥ 0``.
    """
    if not isinstance(m, Measurement):
        raise InputError(f"{what} returned {type(m).__name__}, not a Measurement")
    if not np.array_equal(np.asarray(m.masks, dtype=np.int64), masks):
        raise InputError(f"{what} answered other coalitions than those asked")
    k = masks.size
    inside = member_table(masks, n)
    arrays: list[tuple[str, Any, tuple[int, ...]]] = [("values", m.values, (n, k))]
    if m.replicates is not None:
        arrays.append(("replicates", m.replicates, (-1, n, k)))
    if m.se is not None:
        arrays.append(("se", m.se, (n, k)))
    if m.replicates is not None and m.se is not None:
        raise InputError(f"{what} gave both replicates and standard errors; a measurement carries one or neither")
    for name, arr, shape in arrays:
        a = np.asarray(arr)
        if a.ndim != len(shape) or any(s not in (-1, t) for s, t in zip(shape, a.shape, strict=False)):
            raise InputError(f"{what}: {name} must have shape {shape} for {k} coalitions of {n} clients, got {a.shape}")
        a = a.astype(np.float64)
        good = np.isfinite(a) if name != "se" else np.isfinite(a) & (a >= 0)
        ok = np.where(inside, good, np.isnan(a))
        if not ok.all():
            where = np.argwhere(~ok)[0]
            i, j = int(where[-2]), int(where[-1])
            rule = "a finite number" + (" >= 0" if name == "se" else "") if inside[i, j] else "NaN (not a member)"
            raise InputError(f"{what}: {name} of client {i} for coalition {int(masks[j])} must be {rule}")
    if m.replicates is not None and np.asarray(m.replicates).shape[0] < 2:
        raise InputError(f"{what}: standard errors need at least 2 bootstrap replicates")
    return m


@dataclass(frozen=True, eq=False)
class GameSource:
    """An exhaustive :class:`~coalitions.game.Game` read lazily (calibration: what would have been trained).

    Values come back in the game's sense; a game with an uncertainty
    (:mod:`coalitions.noise`) gives its replicates or standard errors with them.
    """

    game: Game

    @property
    def clients(self) -> tuple[str, ...]:
        return tuple(self.game.clients)

    @property
    def sense(self) -> str:
        return self.game.sense

    @property
    def provenance(self) -> dict:
        return {"source": "game", **dict(self.game.provenance)}

    def measure(self, masks: np.ndarray) -> Measurement:
        """The game's values for ``masks`` (and its uncertainty's), in the game's sense."""
        masks = check_masks(masks, self.game.n)
        sign = -1.0 if self.game.sense == "min" else 1.0
        values = sign * np.asarray(self.game.values[:, masks], dtype=np.float64)
        u = self.game.uncertainty
        reps = se = None
        if u is not None and u.replicates is not None:
            reps = sign * np.asarray(u.replicates.values[:, :, masks], dtype=np.float64)
        elif u is not None and u.se is not None:
            se = np.array(u.se[:, masks], dtype=np.float64)
        return Measurement(masks, values, reps, se)
