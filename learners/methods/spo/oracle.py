"""SPO's benefit oracle: the collaborator rules on top of the direction searches (package docstring)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from coalitions.bitmask import mask_of, members
from coalitions.graph import BenefitGraph
from coalitions.learners.methods.spo.search import DirectionSearch

__all__ = ["SPOOracle", "RULES"]

#: How collaborators are read off the searches.
RULES = ("ratio", "elimination")


class SPOOracle:
    """Benefit oracle answering ``BG(R)`` from one trained Pareto hypernetwork.

    Implements the core's benefit-oracle protocol (``clients``,
    ``benefit_graph(within)``); every ``BG(R)`` and every best direction is
    cached per ``R``.  :meth:`SPO.fit <coalitions.learners.methods.spo.SPO.fit>`
    builds one.

    Parameters
    ----------
    clients : sequence of str
    search : DirectionSearch
        Searches the hypernetwork's faces (:mod:`.search`).
    rule : {"ratio", "elimination"}
    threshold : float
        Ratio rule: ``j`` with ``d_j / d_i ≥ threshold``.
    tol : float
        Elimination rule: relative loss tolerance for dropping a client.
    min_weight : float
        Elimination rule: weights at or below this count as zero.
    """

    def __init__(self, clients: Sequence[str], search: DirectionSearch, rule: str = "elimination",
                 threshold: float = 0.7, tol: float = 0.02, min_weight: float = 0.01):
        self.clients = tuple(clients)
        self.search = search
        self.rule = rule
        self.threshold, self.tol, self.min_weight = threshold, tol, min_weight
        self._graphs: dict[int, BenefitGraph] = {}
        self._best: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def with_rule(self, rule: str) -> SPOOracle:
        """The same searches read by another rule: a new oracle sharing this one's best directions.

        The ratio rule then costs no search beyond those this oracle already ran
        for the sets it was asked about; elimination runs its own extra searches.
        """
        other = SPOOracle(self.clients, self.search, rule, self.threshold, self.tol, self.min_weight)
        other._best = self._best
        return other

    def rule_label(self) -> str:
        """What the rule is, in words (reports print it beside the result)."""
        if self.rule == "ratio":
            return f"the paper's ratio rule: j collaborates with i when d_j/d_i >= {self.threshold:g}"
        return (f"backward elimination: drop j while the best loss without j is within {self.tol:g} "
                f"(relative) of the best on the face")

    # -- searches
    def best_directions(self, within: int) -> tuple[np.ndarray, np.ndarray]:
        """Best direction on the face of ``R`` for each member: ``(D, loss)``.

        ``D`` is (N, N) with row ``i`` the direction found for client ``i``
        (zero rows for clients outside ``R``); ``loss`` (N,) its validation loss
        (NaN outside ``R``).
        """
        within = int(within)
        if within not in self._best:
            n = len(self.clients)
            idx = list(members(within))
            face = torch.zeros((len(idx), n), dtype=torch.bool)
            face[:, idx] = True
            d, loss = self.search(torch.tensor(idx), face, seed_key=("face", within))
            D = np.zeros((n, n))
            L = np.full(n, np.nan)
            D[idx] = d
            L[idx] = loss
            self._best[within] = (D, L)
        return self._best[within]

    def benefit_graph(self, within: int) -> BenefitGraph:
        """``BG(R)``: each member's collaborators by the configured rule."""
        within = int(within)
        graph = self._graphs.get(within)
        if graph is None:
            D, L = self.best_directions(within)
            idx = members(within)
            if self.rule == "ratio":
                collab = tuple((i, self._ratio(D[i], i, within)) for i in idx)
            else:
                collab = self._eliminate(within, D, L)
            graph = self._graphs[within] = BenefitGraph(tuple(self.clients), within, collab)
        return graph

    def _ratio(self, d: np.ndarray, i: int, within: int) -> int:
        thr = self.threshold
        others = [j for j in members(within) if j != i]
        if d[i] > 0:
            return mask_of(j for j in others if d[j] >= thr * d[i])
        return mask_of(j for j in others if d[j] > 0)

    def _eliminate(self, within: int, D: np.ndarray, L: np.ndarray):
        """Backward elimination for every member of ``R`` at once (see the module docstring)."""
        n = len(self.clients)
        tol = self.tol
        idx = list(members(within))
        floor = self.min_weight
        keep = {i: {j for j in idx if j == i or D[i, j] > floor} for i in idx}
        best = {i: float(L[i]) for i in idx}
        point = {i: D[i].copy() for i in idx}
        active = set(idx)
        rnd = 0
        while active:
            rows = [(i, j) for i in sorted(active) for j in sorted(keep[i]) if j != i]
            if not rows:
                break
            rnd += 1
            targets = torch.tensor([i for i, _ in rows])
            face = torch.zeros((len(rows), n), dtype=torch.bool)
            warm = np.zeros((len(rows), n))
            for r, (i, j) in enumerate(rows):
                S = sorted(keep[i] - {j})
                face[r, S] = True
                w = point[i].copy()
                w[[k for k in range(n) if k not in S]] = 0.0
                warm[r] = w / w.sum() if w.sum() > 0 else face[r].numpy() / len(S)
            d, loss = self.search(targets, face, seed_key=("elim", within, rnd), warm=warm)
            done = set(active)
            for i in sorted(active):
                cand = [(loss[r], j, r) for r, (ii, j) in enumerate(rows) if ii == i]
                if not cand:
                    continue
                lj, j, r = min(cand)
                if lj <= best[i] * (1 + tol) + 1e-12:
                    keep[i].discard(j)
                    point[i] = d[r]
                    best[i] = min(best[i], float(lj))
                    # anything now at exactly zero weight also goes, at no cost
                    keep[i] = {k for k in keep[i] if k == i or d[r][k] > floor}
                    done.discard(i)
            active -= done
        return tuple((i, mask_of(keep[i] - {i})) for i in idx)
