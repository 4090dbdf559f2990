"""Benefit oracles read off what a learner learned: weights, or the structure it trained.

A *benefit oracle* answers ``BG(R)`` for any remaining set ``R``
(:class:`coalitions.graph.BenefitOracle`); peeling (:func:`coalitions.peeling.peel_oracle`)
runs on any of them.  The exact game has :class:`coalitions.graph.ExactOracle`; a learner
offers one of these (or its own, like SPO's search over its Pareto hypernetwork):

* :class:`WeightOracle`: from a row-stochastic weight matrix ``w`` (row ``i``: how much
  client ``i`` draws on client ``j``) by one of the rules of :data:`WEIGHT_RULES`;
* :class:`StructuralOracle`: the graph that a baseline's training implies (nobody, or
  everybody, is a collaborator).

The rules and the renormalisation are stated in ``docs/concepts.md`` ("Learned benefit
graphs").  Pure NumPy.

Examples
--------
>>> import numpy as np
>>> w = np.array([[0.5, 0.4, 0.1], [0.45, 0.55, 0.0], [0.0, 0.0, 1.0]])
>>> WeightOracle(["a", "b", "c"], w, rule="relative", threshold=0.7).benefit_graph(0b111).edges
((0, 1), (1, 0))
>>> StructuralOracle(["a", "b", "c"], shared=True).benefit_graph(0b101).collaborators
((0, 4), (2, 1))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coalitions.bitmask import mask_of, members
from coalitions.errors import InputError
from coalitions.game import check_client_names
from coalitions.graph import BenefitGraph
from coalitions.params import check_param

__all__ = ["WeightOracle", "StructuralOracle", "WEIGHT_RULES", "DEFAULT_THRESHOLDS", "ROW_SUM_TOL",
           "check_weights"]

#: Rules turning a weight row into collaborators (``docs/concepts.md``, "Learned benefit graphs").
WEIGHT_RULES = ("relative", "absolute", "mass", "uniform")
#: Default threshold of each rule: ``w_ij/w_ii ≥ 0.7`` (the CE paper's ratio), ``w_ij ≥ 0.1``,
#: the smallest set of others holding 90 % of the row's off-diagonal mass, and
#: ``w_ij ≥ 1.5/|R|`` (half again the share of an uninformative, uniform learner).
DEFAULT_THRESHOLDS = {"relative": 0.7, "absolute": 0.1, "mass": 0.9, "uniform": 1.5}
#: Rows of a weight matrix must sum to 1 within this (absolute).
ROW_SUM_TOL = 1e-6


def check_weights(weights, clients: Sequence[str], where: str = "'weights'") -> np.ndarray:
    """Validate an ``N×N`` weight matrix: finite, non-negative, rows summing to 1.

    Returns a read-only float64 copy.  Raises :class:`InputError` naming the
    client whose row is at fault.
    """
    n = len(clients)
    try:
        w = np.array(weights, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{where} must be an {n}x{n} matrix of numbers") from None
    if w.shape != (n, n):
        raise InputError(f"{where} must be an {n}x{n} matrix (one row per client), got shape {w.shape}")
    for i, name in enumerate(clients):
        row = w[i]
        if not np.isfinite(row).all():
            raise InputError(f"{where}: row of client {name!r} holds a non-finite number")
        if (row < 0).any():
            j = int(np.flatnonzero(row < 0)[0])
            raise InputError(f"{where}: weight of client {name!r} on {clients[j]!r} is negative ({row[j]})")
        if abs(row.sum() - 1.0) > ROW_SUM_TOL:
            raise InputError(f"{where}: row of client {name!r} sums to {row.sum():.9g}, not 1")
    w.setflags(write=False)
    return w


class WeightOracle:
    """Benefit oracle from a weight matrix (``docs/concepts.md``, "Learned benefit graphs").

    Within a remaining set ``R`` each row is restricted to ``R`` and
    renormalised, ``w̃_ij = w_ij / Σ_{k∈R} w_ik`` (no refit), and ``j ∈ R∖{i}`` is a
    collaborator of ``i`` when:

    * ``"relative"``: ``w̃_ij / w̃_ii ≥ threshold`` (the CE paper's ratio rule,
      default 0.7); when ``w_ii = 0`` every ``j`` with ``w_ij > 0`` qualifies;
    * ``"absolute"``: ``w̃_ij ≥ threshold`` (default 0.1);
    * ``"mass"``: ``j`` is in the smallest set of others whose weights hold at
      least ``threshold`` (default 0.9) of the row's off-diagonal mass
      ``Σ_{k∈R, k≠i} w̃_ik`` (largest weights first, ties to the lower index);
      a row with no off-diagonal mass within ``R`` has no collaborators;
    * ``"uniform"``: ``w̃_ij ≥ threshold / |R|`` (default 1.5): ``j`` gets more
      than an uninformative learner's uniform share ``1/|R|`` by the factor
      ``threshold`` (the null reference of ``docs/concepts.md`` §5).

    The relative and mass rules are invariant to the renormalisation (they
    compare weights of one row), so ``BG(R)`` is ``BG(all)`` restricted to
    ``R``; the absolute and uniform rules see it (the uniform share ``1/|R|``
    grows as ``R`` shrinks).  A row with no mass at all inside ``R`` (possible
    only when ``w_ii = 0``) has no collaborators.

    Parameters
    ----------
    clients : sequence of str
    weights : array of shape (N, N)
        Rows sum to 1, non-negative.
    rule : {"relative", "absolute", "mass", "uniform"}
    threshold : float, optional
        Defaults to :data:`DEFAULT_THRESHOLDS` of the rule.
    """

    def __init__(self, clients: Sequence[str], weights, rule: str = "relative", threshold: float | None = None):
        self.clients = check_client_names(list(clients), prefix="'clients': ")
        check_param("rule", rule, "choice", choices=WEIGHT_RULES)
        if threshold is None:
            threshold = DEFAULT_THRESHOLDS[rule]
        if rule == "mass":
            check_param("threshold", threshold, "number", low=0, high=1, low_open=True)
        else:
            check_param("threshold", threshold, "number", low=0)
        self.rule = rule
        self.threshold = float(threshold)
        self.weights = check_weights(weights, self.clients)
        self._cache: dict[int, BenefitGraph] = {}

    def renormalised(self, within: int) -> np.ndarray:
        """``w̃``: rows of the members of ``R`` restricted to ``R`` and renormalised (``|R|×|R|``)."""
        idx = np.array(members(within), dtype=np.int64)
        sub = self.weights[np.ix_(idx, idx)]
        tot = sub.sum(axis=1, keepdims=True)
        return np.divide(sub, tot, out=np.zeros_like(sub), where=tot > 0)

    def collaborator_matrix(self, within: int) -> np.ndarray:
        """Boolean ``|R|×|R|`` matrix: ``[a, b]`` is True when member ``b`` is a collaborator of member ``a``."""
        w = self.renormalised(within)
        k = w.shape[0]
        eye = np.eye(k, dtype=bool)
        if self.rule == "absolute":
            out = w >= self.threshold
        elif self.rule == "uniform":
            out = (w >= self.threshold / k) & (w > 0)
        elif self.rule == "relative":
            diag = np.diag(w)[:, None]
            ratio = np.divide(w, diag, out=np.where(w > 0, np.inf, 0.0), where=diag > 0)
            out = ratio >= self.threshold
        else:  # mass
            off = np.where(eye, 0.0, w)
            total = off.sum(axis=1, keepdims=True)
            order = np.lexsort((np.broadcast_to(np.arange(k), (k, k)), -off), axis=1)
            sorted_w = np.take_along_axis(off, order, axis=1)
            before = np.cumsum(sorted_w, axis=1) - sorted_w  # mass held by the larger ones
            need = self.threshold * total * (1 - 1e-12)
            take_sorted = (before < need) & (sorted_w > 0)
            out = np.zeros_like(take_sorted)
            np.put_along_axis(out, order, take_sorted, axis=1)
        return out & ~eye

    def benefit_graph(self, within: int) -> BenefitGraph:
        """``BG(R)`` from the renormalised weights (cached per ``R``)."""
        within = int(within)
        graph = self._cache.get(within)
        if graph is None:
            idx = members(within)
            take = self.collaborator_matrix(within)
            collab = tuple((i, mask_of(idx[b] for b in np.flatnonzero(take[a]))) for a, i in enumerate(idx))
            graph = self._cache[within] = BenefitGraph(self.clients, within, collab)
        return graph


class StructuralOracle:
    """The graph a baseline's training implies, whatever ``R``.

    ``shared=False`` (Local: every client trains alone): nobody is a collaborator, so
    peeling leaves every client alone.  ``shared=True`` (FedAvg, SuPerFed: one federated
    model trained by everybody): every other member of ``R`` is a collaborator of each
    client, so peeling keeps ``R`` together.

    Parameters
    ----------
    clients : sequence of str
    shared : bool
    """

    def __init__(self, clients: Sequence[str], shared: bool):
        self.clients = tuple(clients)
        self.shared = bool(shared)

    def benefit_graph(self, within: int) -> BenefitGraph:
        """``BG(R)``: no edges, or every member on every other."""
        within = int(within)
        return BenefitGraph(self.clients, within,
                            tuple((i, (within & ~(1 << i)) if self.shared else 0) for i in members(within)))
