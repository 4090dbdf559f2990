"""The benefit graph ``BG(R)`` and the oracles that answer it (docs/concepts.md §2, §5).

Edge ``j → i`` iff ``j ∈ OCS_i(R)``: ``j`` is a necessary collaborator of ``i``.
Peeling needs nothing but a *benefit oracle*: an object with ``clients`` and
``benefit_graph(within)``.  :class:`ExactOracle` answers from an exhaustive game;
learners answer from what they learned, and meet the same peeling.

Examples
--------
>>> from coalitions.game import Game
>>> g = Game.from_mapping(["a", "b"], {"a": {"a": 1, "a,b": 2}, "b": {"b": 1, "a,b": 0}})
>>> ExactOracle(g).benefit_graph(0b11).edges
((1, 0),)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .bitmask import members, popcount, submasks
from .certificate import shrink
from .game import Game
from .noise import resolve_z
from .ocs import OCS, optimal_collaborators
from .payoffs import check_semantics

__all__ = ["BenefitGraph", "BenefitOracle", "ExactOracle", "satisfies_stability", "shrink_to_minimal"]


@dataclass(frozen=True)
class BenefitGraph:
    """``BG(R)``: each member's collaborators within the remaining set ``R``.

    Attributes
    ----------
    clients : tuple of str
        Names of all clients of the game (indices refer to these).
    within : int
        The remaining set ``R`` (bitmask).
    collaborators : tuple of (int, int)
        ``(i, OCS_i(R))`` for each member ``i`` of ``R``, ascending in ``i``;
        the OCS is a bitmask without ``i``.
    alternatives : tuple of (int, tuple of int)
        ``(i, all smallest collaborator sets)`` for the members whose OCS is ambiguous.
    """

    clients: tuple[str, ...]
    within: int
    collaborators: tuple[tuple[int, int], ...]
    alternatives: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def collaborators_of(self, i: int) -> int:
        """``OCS_i(R)`` as a bitmask (without ``i``)."""
        return dict(self.collaborators)[i]

    def _names(self, mask: int) -> frozenset:
        return frozenset(self.clients[j] for j in members(mask))

    @property
    def ocs(self) -> dict[str, frozenset]:
        """Each member's optimal collaborator set by name: ``{client: frozenset of names}`` (empty: none)."""
        return {self.clients[i]: self._names(c) for i, c in self.collaborators}

    @property
    def named_edges(self) -> tuple[tuple[str, str], ...]:
        """:attr:`edges` by name: ``(j, i)``, meaning ``j → i`` (``j`` is in ``i``'s OCS)."""
        return tuple((self.clients[j], self.clients[i]) for j, i in self.edges)

    def __repr__(self) -> str:
        shown = ", ".join(f"{c}: {{{','.join(sorted(o, key=self.clients.index))}}}" for c, o in self.ocs.items())
        amb = f", ambiguous={[self.clients[i] for i, _ in self.alternatives]}" if self.alternatives else ""
        within = ",".join(self.clients[i] for i in members(self.within))
        return f"BenefitGraph(within={{{within}}}, ocs={{{shown}}}{amb})"

    @property
    def ambiguous(self) -> dict[int, tuple[int, ...]]:
        """Clients with an ambiguous OCS → every smallest qualifying set."""
        return dict(self.alternatives)

    @property
    def edges(self) -> tuple[tuple[int, int], ...]:
        """All edges ``(j, i)``, meaning ``j → i``, sorted."""
        return tuple(sorted((j, i) for i, c in self.collaborators for j in members(c)))

    def successors(self) -> dict[int, list[int]]:
        """Adjacency ``j → [i, ...]`` over the members of ``R``."""
        succ: dict[int, list[int]] = {i: [] for i, _ in self.collaborators}
        for j, i in self.edges:
            succ[j].append(i)
        return succ

    def to_networkx(self):
        """This graph as a :class:`networkx.DiGraph` (see :func:`coalitions.networks.benefit_graph_to_networkx`)."""
        from .networks import benefit_graph_to_networkx

        return benefit_graph_to_networkx(self)


class BenefitOracle(Protocol):
    """What peeling needs: the benefit graph of any remaining set.

    An oracle may also define ``stabilize(component, within) -> int | None``,
    which returns an inclusion-minimal stable sub-coalition of a candidate
    component, or ``None`` when the component is not stable at all.
    """

    @property
    def clients(self) -> Sequence[str]: ...

    def benefit_graph(self, within: int) -> BenefitGraph: ...


def satisfies_stability(payoff: np.ndarray, best: np.ndarray, coalition: int, within: int,
                        tol: float) -> bool:
    """Condition (a) of docs/concepts.md §3: every ``i ∈ K`` has ``payoff_i(K) ≥ MAU_i(R) − tol``."""
    return all(payoff[i, coalition] >= best[i, within] - tol for i in members(coalition))


def shrink_to_minimal(payoff: np.ndarray, best: np.ndarray, coalition: int, within: int,
                      tol: float) -> int | None:
    """An inclusion-minimal ``K* ⊆ K`` that satisfies condition (a) in ``R``.

    All sub-coalitions of ``K`` are tested at once; a smallest one that passes is
    inclusion-minimal (every proper subset of it is smaller still and fails).
    Ties between smallest ones go to the smaller bitmask.  Returns ``None`` when
    ``K`` itself fails (a): only a component satisfying (a) is a candidate
    (docs/concepts.md §3), even where one of its proper subsets would pass.

    This is the step the paper's Theorem 3 needs when values tie (docs/concepts.md §3).
    """
    subs = submasks(coalition)[1:]
    ok = np.ones(subs.size, dtype=bool)
    for i in members(coalition):
        has = ((subs >> i) & 1).astype(bool)
        ok &= ~has | (payoff[i, subs] >= best[i, within] - tol)
    if not ok[subs == coalition].all():
        return None
    cand = subs[ok]
    sizes = popcount(cand)
    return int(cand[sizes == sizes.min()].min())


class ExactOracle:
    """Benefit graphs and stability from an exhaustive game.

    Parameters
    ----------
    game : Game
    semantics : {"personalized", "shared"}
    tol : float
        Absolute tolerance for every comparison (docs/concepts.md §1).
    z : float, optional
        Significance level of every comparison (:mod:`coalitions.noise`): 1.96
        by default when the game carries its uncertainty, else 0 (point values).
    """

    def __init__(self, game: Game, semantics: str = "personalized", tol: float = 1e-9, *, z: float | None = None):
        self.game = game
        self.semantics = check_semantics(semantics)
        if not tol >= 0:
            raise ValueError(f"tol must be >= 0, got {tol}")
        self.tol = float(tol)
        self.z = resolve_z(game, z)
        self.clients = game.clients

    def ocs(self, i: int, within: int) -> OCS:
        """``OCS_i(R)`` with its tie information."""
        return optimal_collaborators(self.game, i, within, self.tol, z=self.z)

    def benefit_graph(self, within: int) -> BenefitGraph:
        sets = [self.ocs(i, within) for i in members(within)]
        return BenefitGraph(
            clients=self.game.clients,
            within=int(within),
            collaborators=tuple((o.client, o.collaborators) for o in sets),
            alternatives=tuple((o.client, o.alternatives) for o in sets if o.ambiguous),
        )

    def stabilize(self, component: int, within: int) -> int | None:
        """:func:`shrink_to_minimal`, streamed over the component's sub-coalitions (no payoff table)."""
        return shrink(self.game, component, within, self.semantics, self.tol, z=self.z)
