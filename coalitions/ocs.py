"""Optimal collaborator sets (docs/concepts.md §2).

``OCS_i(R)`` is a *smallest* coalition ``S ⊆ R`` with ``i ∈ S`` and
``v_i(S) ≥ MAU_i(R) − tol``, returned without ``i``.  Among smallest sets the
one with the higher ``v_i(S)`` wins, then the smaller bitmask.  When another
smallest set also qualifies the OCS is *ambiguous*, and that is reported.

The search for one client is vectorised over the ``2^(|R|-1)`` sub-coalitions
of ``R`` that contain it; ``MAU_i(R)`` is the largest of those same values, so no
table of MAU is needed.  Comparisons are taken in float64 whatever the storage
of the game's values (docs/concepts.md §1, :func:`coalitions.precision.exact_threshold`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .bitmask import members, popcount, submasks
from .game import Game
from .noise import Comparison
from .precision import exact_threshold

__all__ = ["OCS", "optimal_collaborators"]


@dataclass(frozen=True)
class OCS:
    """The optimal collaborator set of one client within a remaining set.

    Attributes
    ----------
    client : int
        The client ``i``.
    within : int
        The remaining set ``R`` (bitmask).
    collaborators : int
        ``OCS_i(R)`` as a bitmask, without ``i``.
    value : float
        ``v_i(OCS_i(R) ∪ {i})``.
    mau : float
        ``MAU_i(R)``.
    alternatives : tuple of int
        Every smallest qualifying collaborator set (without ``i``), the chosen one first.
    clients : tuple of str
        The game's client names (bit ``j`` of every mask above is ``clients[j]``); :attr:`names`
        and the repr read them.
    """

    client: int
    within: int
    collaborators: int
    value: float
    mau: float
    alternatives: tuple[int, ...]
    clients: tuple[str, ...] = ()

    @property
    def names(self) -> frozenset:
        """``OCS_i(R)`` by client name (empty: the client needs nobody)."""
        return frozenset(self.clients[j] for j in members(self.collaborators))

    def __repr__(self) -> str:
        if not self.clients:
            return (f"OCS(client={self.client}, within={self.within}, collaborators={self.collaborators}, "
                    f"value={self.value!r}, mau={self.mau!r}, alternatives={self.alternatives})")
        ordered = ",".join(c for c in self.clients if c in self.names)
        return (f"OCS(client={self.clients[self.client]!r}, collaborators={{{ordered}}}, value={self.value:g}, "
                f"mau={self.mau:g}{', ambiguous' if self.ambiguous else ''})")

    @property
    def ambiguous(self) -> bool:
        """True when more than one smallest set qualifies."""
        return len(self.alternatives) > 1


def optimal_collaborators(game: Game, i: int, within: int, tol: float = 1e-9, *, z: float | None = None) -> OCS:
    """``OCS_i(R)`` with the tie rule of docs/concepts.md §2 and every tied alternative.

    Parameters
    ----------
    game : Game
    i : int
        Client index; must be in ``within``.
    within : int
        The remaining set ``R`` as a bitmask.
    tol : float
        Absolute tolerance: values within ``tol`` of ``MAU_i(R)`` qualify.
    z : float, optional
        Significance level (:mod:`coalitions.noise`; default 1.96 when the game
        carries its uncertainty, else 0).  A set qualifies when it is not
        significantly worse than ``S* = argmax_{S ⊆ R} v_i(S)``:
        ``v_i(S*) − v_i(S) ≤ tol + z·se_i(S*, S)``.  A collaborator is then
        necessary only when leaving it out costs significantly; with ``z = 0`` or
        no uncertainty this is the point-value rule above.

    Notes
    -----
    As ``z`` grows the qualifying sets only grow, so ``|OCS_i(R)|`` never grows.
    """
    if not (within >> i) & 1:
        raise ValueError(f"client {i} is not in coalition {members(within)}")
    me = 1 << i
    cmp = Comparison(game, tol, z)
    if cmp.noisy:
        subs = submasks(within & ~me) | me
        vals = np.asarray(game.values[i, subs], dtype=np.float64)
        top = int(np.argmax(vals))  # the point-value argmax, the smallest mask on ties
        ok = cmp.not_worse(i, subs, int(subs[top]))
        cand, cvals, best = subs[ok], vals[ok], float(vals[top])
    elif within == game.grand:
        # every coalition holding i: the odd halves of the row split at bit i, in ascending order;
        # index j stands for the mask j with a 1 inserted at bit i (no list of masks is built)
        vals = game.values[i].reshape(-1, 2, me)[:, 1, :].ravel()
        best = float(vals.max())
        idx = np.flatnonzero(vals >= exact_threshold(best - tol, vals.dtype, strict=False))
        cand = ((idx >> i) << (i + 1)) | me | (idx & (me - 1))
        cvals = vals[idx]
    else:
        subs = submasks(within & ~me) | me
        vals = game.values[i, subs]
        best = float(vals.max())  # MAU_i(R): every sub-coalition of R holding i is in subs
        ok = vals >= exact_threshold(best - tol, vals.dtype, strict=False)  # as in float64, for float32 too
        cand = subs[ok]
        cvals = vals[ok]
    sizes = popcount(cand)
    smallest = sizes == sizes.min()
    cand, cvals = cand[smallest], cvals[smallest]
    order = np.lexsort((cand, -cvals))  # higher value first, then smaller mask
    cand, cvals = cand[order], cvals[order]
    return OCS(client=i, within=int(within), collaborators=int(cand[0]) & ~me, value=float(cvals[0]),
               mau=float(best), alternatives=tuple(int(c) & ~me for c in cand), clients=tuple(game.clients))
