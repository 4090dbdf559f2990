"""Peeling: the paper's Algorithm 1, with the shrink step (docs/concepts.md §3).

Starting from ``R = all``, each round builds ``BG(R)``, takes its strongly
connected components, keeps those with no edge entering from outside (they need
nobody else), shrinks each to an inclusion-minimal sub-coalition that satisfies
stability condition (a), records them as this round's stable coalitions and
removes them from ``R``.  Under ``personalized`` semantics a source component
always satisfies (a) — every member's OCS lies inside it — so every round
removes at least one coalition and peeling ends after at most ``N`` rounds.
Under ``shared`` semantics a round may find no candidate; peeling then stops
with the remaining clients unassigned (``complete`` is False).

Examples
--------
>>> from coalitions.analytic import mean_estimation
>>> g = mean_estimation([5, 5, 25])
>>> [g.names(k) for k in peel(g).partition]
[['0', '1'], ['2']]
"""

from __future__ import annotations

from dataclasses import dataclass

from .bitmask import mask_of, members
from .game import Game
from .graph import BenefitGraph, BenefitOracle, ExactOracle
from .scc import source_components

__all__ = ["Round", "Peeling", "peel", "peel_oracle"]


@dataclass(frozen=True)
class Round:
    """One peeling round.

    Attributes
    ----------
    within : int
        The remaining set ``R`` at the start of the round.
    graph : BenefitGraph
        ``BG(R)``.
    sources : tuple of int
        Strongly connected components of ``BG(R)`` with no entering edge.
    stable : tuple of int
        The stable coalitions recorded this round (sources after the shrink step).
    """

    within: int
    graph: BenefitGraph
    sources: tuple[int, ...]
    stable: tuple[int, ...]


@dataclass(frozen=True)
class Peeling:
    """Result of peeling: the stable coalitions in the order found, and each round.

    The algorithm's trace, in the core's bitmasks (``partition``: blocks in the order peeling
    found them; :func:`coalitions.solve` turns it into a named, canonical
    :class:`~coalitions.partition.Partition`); :meth:`blocks` and the repr give names.
    """

    partition: tuple[int, ...]
    rounds: tuple[Round, ...]
    remaining: int = 0

    @property
    def complete(self) -> bool:
        """True when every client was placed in a stable coalition."""
        return self.remaining == 0

    def blocks(self) -> list[list[str]]:
        """The stable coalitions by client name, in the order found (empty when no round ran)."""
        if not self.rounds:
            return []
        names = self.rounds[0].graph.clients
        return [[names[i] for i in members(k)] for k in self.partition]

    def __repr__(self) -> str:
        found = " | ".join(",".join(b) for b in self.blocks())
        left = "" if self.complete else f", remaining={self.remaining}"
        return f"Peeling(found={found!r}, rounds={len(self.rounds)}{left})"


def peel_oracle(oracle: BenefitOracle, within: int | None = None) -> Peeling:
    """Run peeling on any benefit oracle (exact or learned).

    Parameters
    ----------
    oracle : BenefitOracle
        Answers ``benefit_graph(R)``; if it also has ``stabilize``, candidates are
        checked against condition (a) and shrunk, otherwise every source
        component is taken as it is (learned oracles have no values to check).
    within : int, optional
        Start from this set instead of all clients.
    """
    remaining = (1 << len(oracle.clients)) - 1 if within is None else int(within)
    stabilize = getattr(oracle, "stabilize", None)
    partition: list[int] = []
    rounds: list[Round] = []
    while remaining:
        graph = oracle.benefit_graph(remaining)
        sources = sorted(mask_of(c) for c in source_components(graph.successors()))
        stable = []
        for comp in sources:
            k = comp if stabilize is None else stabilize(comp, remaining)
            if k is not None:
                stable.append(k)
        rounds.append(Round(remaining, graph, tuple(sources), tuple(stable)))
        if not stable:
            break
        for k in stable:
            remaining &= ~k
        partition.extend(stable)
    return Peeling(tuple(partition), tuple(rounds), remaining)


def peel(game: Game, semantics: str = "personalized", tol: float = 1e-9, *, z: float | None = None) -> Peeling:
    """Peel an exhaustive game (docs/concepts.md §3).

    ``z`` is the significance level of every comparison (:mod:`coalitions.noise`;
    1.96 by default for a game that carries its uncertainty, else 0).  A source
    component holds each member's OCS, which is not significantly worse than the
    member's best, so under ``personalized`` semantics peeling still always ends.
    """
    return peel_oracle(ExactOracle(game, semantics, tol, z=z))
