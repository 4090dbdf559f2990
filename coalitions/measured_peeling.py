"""Peeling on the part of a lazy game that is measured: a starting partition for the sampled search.

Cui et al.'s peeling (docs/concepts.md §3, :func:`coalitions.peeling.peel_oracle`) needs each
client's optimal collaborator set within every remaining set ``R``.  On a
:class:`~coalitions.measured.MeasuredGame` only some coalitions are known, so
:class:`MeasuredOracle` answers with the measured ones: within ``R``, client ``i`` chooses among
the measured coalitions ``C ⊆ R`` that contain it, its own singleton included, by the
comparison rule of the search (:mod:`coalitions.sampled`, docs/scale.md): ``C`` is as good as
the best ``B`` when it is not significantly worse, ``v_i(C) + z·se_i(C, B) ≥ v_i(B) − tol``,
and of those ``i`` takes the smallest (fewest members, then the lowest bitmask).  A
collaboration the measurements cannot show to pay is not formed.  Every other coalition is
taken as unavailable: a source component of the benefit graph is peeled only when it was
measured itself (:meth:`MeasuredOracle.stabilize`; the members' choices may chain into a union
nobody measured), and :func:`measured_start` leaves the clients peeling could not place alone.
The partition is an equilibrium of the measured part only; the search
(:func:`coalitions.sampled_ce.sample_ce`, ``start=``) then repairs it on the whole game, and its
certificate judges the result.

Examples
--------
>>> import numpy as np
>>> from coalitions.lazy_analytic import PlantedSource
>>> cache = MeasuredGame(PlantedSource((2, 2), noise=0.0, seed=1))
>>> _ = cache.measure(np.arange(1, 16))                  # all 15 coalitions of 4 clients
>>> [sorted(b) for b in peel_measured(cache).blocks()]   # the planted groups
[['c0', 'c1'], ['c2', 'c3']]
>>> _ = (only := MeasuredGame(cache.source)).measure(np.array([1, 2, 4, 8]))
>>> len(peel_measured(only).blocks())                   # nothing but singletons measured: everyone alone
4
"""

from __future__ import annotations

import numpy as np

from .bitmask import popcount
from .errors import InputError
from .graph import BenefitGraph
from .measured import MeasuredGame
from .peeling import Peeling, peel_oracle

__all__ = ["MeasuredOracle", "peel_measured", "measured_start"]


class MeasuredOracle:
    """The benefit graph of a measured game within any remaining set (module docstring).

    Parameters
    ----------
    cache : MeasuredGame
        Every client's singleton must be measured.
    z : float
        Significance level of each comparison (0: point values).
    tol : float
        Absolute tolerance.
    """

    def __init__(self, cache: MeasuredGame, z: float = 0.0, tol: float = 1e-9):
        self.cache, self.z, self.tol = cache, float(z), float(tol)
        n = cache.n
        self._masks = np.asarray(cache.masks, dtype=np.int64)
        missing = [cache.source.clients[i] for i in range(n) if not np.isin(1 << i, self._masks)]
        if missing:
            raise InputError(f"peeling the measured game needs every client's singleton measured; "
                             f"not measured: {', '.join(missing)}")
        self._values = cache.values(self._masks)

    @property
    def clients(self):
        return tuple(self.cache.source.clients)

    def ocs(self, i: int, within: int) -> int:
        """Client ``i``'s collaborators within ``within``: the smallest measured coalition not significantly
        worse than its best measured one (a bitmask without ``i``)."""
        inside = ((self._masks >> i) & 1).astype(bool) & ((self._masks & ~int(within)) == 0)
        cands = self._masks[inside]
        v = self._values[i, inside]
        best = cands[int(np.argmax(v))]
        se = self.cache.diff_se(i, cands, np.full(cands.shape, best)) if self.z else np.zeros(cands.shape)
        good = cands[v + self.z * se >= float(np.max(v)) - self.tol]
        order = np.lexsort((good, popcount(good)))
        return int(good[order[0]]) & ~(1 << i)

    def benefit_graph(self, within: int) -> BenefitGraph:
        members = [i for i in range(self.cache.n) if within >> i & 1]
        return BenefitGraph(self.clients, int(within), tuple((i, self.ocs(i, within)) for i in members))

    def stabilize(self, component: int, within: int) -> int | None:
        """``component`` when it was measured (its members' values in it are known), else None (not peeled)."""
        return int(component) if np.isin(int(component), self._masks) else None


def peel_measured(cache: MeasuredGame, z: float = 0.0, tol: float = 1e-9) -> Peeling:
    """Peeling (:func:`~coalitions.peeling.peel_oracle`) on the measured coalitions of ``cache``.

    Its ``remaining`` clients are those left when no source component was measured.
    """
    return peel_oracle(MeasuredOracle(cache, z, tol))


def measured_start(cache: MeasuredGame, z: float = 0.0, tol: float = 1e-9) -> tuple[int, ...]:
    """A starting partition (bitmasks): :func:`peel_measured`'s blocks, then each client it left, alone."""
    p = peel_measured(cache, z, tol)
    return tuple(p.partition) + tuple(1 << i for i in range(cache.n) if p.remaining >> i & 1)
