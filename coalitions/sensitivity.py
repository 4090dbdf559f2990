"""How the learned equilibrium depends on a weight rule's threshold.

A learner with pairwise weights reads its benefit graphs off them by a rule and
a threshold ``t`` (:class:`coalitions.oracles.WeightOracle`, ``docs/concepts.md``
§5).  The threshold is a choice, not a fact of the data, so a report should show
the equilibrium across it: :func:`threshold_sensitivity` maps thresholds to the
edges of ``BG(all)`` and the partition that peeling reaches, a pure function of
the weights.  For the ``relative``, ``absolute`` and ``uniform`` rules a larger
``t`` never adds an edge (each is ``w̃_ij ≥ t·c_i`` for a ``c_i`` that does not
depend on ``t``); for ``mass`` a larger share never removes one.

Pure NumPy.

Examples
--------
>>> import numpy as np
>>> w = np.array([[0.5, 0.4, 0.1], [0.45, 0.55, 0.0], [0.0, 0.0, 1.0]])
>>> for row in threshold_sensitivity(["a", "b", "c"], w, "relative", [0.5, 0.9]):
...     print(row.threshold, row.n_edges, row.blocks(["a", "b", "c"]))
0.5 2 [['a', 'b'], ['c']]
0.9 0 [['a'], ['b'], ['c']]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coalitions.bitmask import members
from coalitions.errors import InputError
from coalitions.oracles import DEFAULT_THRESHOLDS, WeightOracle
from coalitions.params import check_param
from coalitions.partition import canonical
from coalitions.peeling import peel_oracle

__all__ = ["SensitivityRow", "threshold_sensitivity", "default_thresholds", "sensitivity_table",
           "sensitivity_to_json"]

#: Thresholds tried when none are given: around each rule's default.
_GRIDS = {
    "relative": (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99),
    "absolute": (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5),
    "mass": (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0),
    "uniform": (1.0, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0),
}


@dataclass(frozen=True)
class SensitivityRow:
    """The learned equilibrium at one threshold.

    Attributes
    ----------
    threshold : float
    edges : tuple of (int, int)
        Edges ``(j, i)`` of ``BG(all)`` (``j`` benefits ``i``), as in :class:`coalitions.graph.BenefitGraph`.
    partition : tuple of int
        The partition peeling reaches (bitmasks).
    """

    threshold: float
    edges: tuple[tuple[int, int], ...]
    partition: tuple[int, ...]

    @property
    def n_edges(self) -> int:
        return len(self.edges)

    def blocks(self, clients: Sequence[str]) -> list[list[str]]:
        """The partition as lists of names, in canonical order (by each block's first client)."""
        return [[clients[i] for i in members(k)] for k in canonical(self.partition)]


def default_thresholds(rule: str) -> tuple[float, ...]:
    """The grid tried for ``rule`` when no thresholds are given (it holds the rule's default)."""
    check_param("rule", rule, "choice", choices=tuple(_GRIDS))
    return _GRIDS[rule]


def threshold_sensitivity(clients: Sequence[str], weights, rule: str = "relative",
                          thresholds: Sequence[float] | None = None) -> tuple[SensitivityRow, ...]:
    """``BG(all)`` and the learned equilibrium for each threshold of ``rule``.

    Parameters
    ----------
    clients : sequence of str
    weights : array of shape (N, N)
        Row-stochastic, non-negative (what the rule reads).
    rule : {"relative", "absolute", "mass", "uniform"}
    thresholds : sequence of float, optional
        Sorted ascending on return; ``None``: :func:`default_thresholds`.

    Returns
    -------
    tuple of SensitivityRow
        One per distinct threshold, ascending.  Each row is exactly what
        :class:`~coalitions.oracles.WeightOracle` with that threshold and
        :func:`~coalitions.peeling.peel_oracle` give (renormalised rows for
        ``R ⊊ all``).
    """
    grid = default_thresholds(rule) if thresholds is None else thresholds
    try:
        values = sorted({float(t) for t in grid})
    except (TypeError, ValueError):
        raise InputError("thresholds must be numbers") from None
    if not values:
        raise InputError("thresholds must hold at least one number")
    grand = (1 << len(clients)) - 1
    out = []
    for t in values:
        oracle = WeightOracle(clients, np.asarray(weights), rule, t)
        out.append(SensitivityRow(t, oracle.benefit_graph(grand).edges, peel_oracle(oracle).partition))
    return tuple(out)


def sensitivity_table(clients: Sequence[str], rows: Sequence[SensitivityRow], rule: str,
                      used: float | None = None) -> str:
    """Plain-text table: threshold, edges of ``BG(all)``, the equilibrium (``*`` marks ``used``)."""
    if used is None:
        used = DEFAULT_THRESHOLDS.get(rule)
    lines = [f"{'threshold':>10}  {'edges':>5}  equilibrium ({rule} rule)"]
    for r in rows:
        mark = "*" if used is not None and abs(r.threshold - used) <= 1e-12 else " "
        blocks = " | ".join(",".join(b) for b in r.blocks(clients))
        lines.append(f"{r.threshold:>9g}{mark}  {r.n_edges:>5}  {blocks}")
    return "\n".join(lines)


def sensitivity_to_json(clients: Sequence[str], rows: Sequence[SensitivityRow], rule: str, used: float) -> dict:
    """JSON-ready record (an estimate's ``extra.sensitivity``, ``docs/formats.md``)."""
    return {"rule": rule, "threshold_used": float(used),
            "rows": [{"threshold": r.threshold, "edges": [[clients[j], clients[i]] for j, i in r.edges],
                      "partition": r.blocks(clients)} for r in rows]}
