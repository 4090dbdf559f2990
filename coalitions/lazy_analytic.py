"""The analytic games as lazy value sources: any coalition's values, never a table of ``2^N``.

:class:`PlantedSource` and :class:`MeanEstimationSource` compute ``v_i(S)`` for the
coalitions asked, vectorised over them, with the very arithmetic of
:func:`coalitions.analytic.planted` and :func:`coalitions.analytic.mean_estimation`:
the same seed gives the same numbers, bit for bit, as the exhaustive game (the tests
check it), at any ``N`` up to 62 clients.  The planted noise ``ε_{i,S}`` is the
counter-based draw :func:`coalitions.analytic.coalition_normals`, a function of
``(seed, i, S)`` alone.

Examples
--------
>>> import numpy as np
>>> from coalitions.analytic import planted
>>> src = PlantedSource((3, 3), seed=5)
>>> bool(src.measure(np.array([0b000011])).values[0, 0] == planted([3, 3], seed=5).value(0, [0, 1]))
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .analytic import (
    check_mean_estimation,
    masked_sums,
    mean_estimation_errors,
    planted_finish,
    planted_weights,
)
from .errors import InputError
from .game import check_client_names
from .lazy import MAX_LAZY_CLIENTS, Measurement, check_masks, member_table

__all__ = ["PlantedSource", "MeanEstimationSource"]


def _names(clients: Sequence[str] | None, n: int, default: str) -> tuple[str, ...]:
    if n > MAX_LAZY_CLIENTS:
        raise InputError(f"a lazy game holds at most {MAX_LAZY_CLIENTS} clients (int64 bitmasks), got {n}")
    names = [f"{default}{i}" for i in range(n)] if clients is None else list(clients)
    if len(names) != n:
        raise InputError(f"{len(names)} names for {n} clients")
    return check_client_names(names, "clients")


@dataclass(frozen=True, eq=False)
class PlantedSource:
    """:func:`coalitions.analytic.planted` measured coalition by coalition (float64).

    Parameters
    ----------
    groups : sequence of int
        Group sizes; clients are numbered group by group.
    noise, ties, seed
        As for :func:`~coalitions.analytic.planted`.
    clients : sequence of str, optional
        Names; default ``c0, c1, …``.
    """

    groups: tuple[int, ...]
    noise: float = 0.05
    ties: float = 0.0
    seed: int = 0
    names: Sequence[str] | None = None
    clients: tuple[str, ...] = field(init=False)
    sense: str = field(init=False, default="max")
    provenance: dict = field(init=False)

    def __post_init__(self):
        sizes = tuple(int(g) for g in self.groups)
        if not sizes or any(g <= 0 for g in sizes):
            raise InputError(f"group sizes must be positive integers, got {list(self.groups)}")
        if not (math.isfinite(self.noise) and self.noise >= 0 and math.isfinite(self.ties) and self.ties >= 0):
            raise InputError(f"noise and ties must be finite and non-negative, got {self.noise} and {self.ties}")
        object.__setattr__(self, "groups", sizes)
        object.__setattr__(self, "clients", _names(self.names, sum(sizes), "c"))
        W, base = planted_weights(sizes, self.seed)
        object.__setattr__(self, "_w", W)
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "provenance", {"generator": "planted", "groups": list(sizes), "noise": self.noise,
                                                "ties": self.ties, "seed": self.seed})

    def measure(self, masks: np.ndarray) -> Measurement:
        """``v_i(S)`` for every member ``i`` of every ``S`` in ``masks`` (exact values)."""
        n = len(self.clients)
        masks = check_masks(masks, n)
        inside = member_table(masks, n)
        out = np.full((n, masks.size), np.nan)
        for i in range(n):
            held = masks[inside[i]]
            v = self._base[i] + masked_sums(self._w[i], held)  # type: ignore[attr-defined]
            out[i, inside[i]] = planted_finish(v, self.noise, self.ties, self.seed, i, held)
        return Measurement(masks, out)


@dataclass(frozen=True, eq=False)
class MeanEstimationSource:
    """:func:`coalitions.analytic.mean_estimation` measured coalition by coalition (a loss, ``sense = "min"``)."""

    sizes: tuple[float, ...]
    mu_e: float = 10.0
    sigma2: float = 1.0
    names: Sequence[str] | None = None
    federation: str = "uniform"
    clients: tuple[str, ...] = field(init=False)
    sense: str = field(init=False, default="min")
    provenance: dict = field(init=False)

    def __post_init__(self):
        n = check_mean_estimation(self.sizes, self.mu_e, self.sigma2, self.federation)
        object.__setattr__(self, "sizes", tuple(float(x) for x in n))
        object.__setattr__(self, "clients", _names(self.names, n.size, ""))
        object.__setattr__(self, "provenance", {"generator": "mean-estimation", "federation": self.federation,
                                                "sizes": n.tolist(), "mu_e": self.mu_e, "sigma2": self.sigma2})

    def measure(self, masks: np.ndarray) -> Measurement:
        """``err_i(S)`` for every member ``i`` of every ``S`` in ``masks``."""
        n_cl = len(self.clients)
        masks = check_masks(masks, n_cl)
        inside = member_table(masks, n_cl)
        n = np.asarray(self.sizes)
        out = np.full((n_cl, masks.size), np.nan)
        for j in range(n_cl):
            out[j, inside[j]] = mean_estimation_errors(n, j, masks[inside[j]], self.mu_e, self.sigma2,
                                                       self.federation, self.clients)
        return Measurement(masks, out)
