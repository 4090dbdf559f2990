"""Score a learned collaboration estimate against the exact game (docs/concepts.md §5).

Pure NumPy: the estimate is read as plain data (client names, ``BG(all)``
as each client's optimal collaborator set, and the learned partition), so this
module never imports a training framework.

Metrics (clients matched by name):

* **edge precision / recall / F1** of the learned ``BG(all)`` against the
  exact one: with ``L`` the learned and ``E`` the exact edge sets,
  ``precision = |L∩E|/|L|``, ``recall = |L∩E|/|E|``, ``F1 = 2PR/(P+R)``.
  *Empty sets*: a precision over no learned edges is 1 (no false edge was
  claimed) and a recall over no exact edges is 1 (nothing was missed); F1 is 0
  when ``P + R = 0``.  So two empty graphs score 1/1/1, an empty learned graph
  against a non-empty exact one scores precision 1, recall 0, F1 0, and the
  converse precision 0, recall 1, F1 0.
* **ocs_exact**: the share of clients whose learned ``OCS_i(all)`` equals the
  exact one; where the exact OCS is ambiguous (docs/concepts.md §2) any of its tied
  smallest sets counts as exact.
* **same_partition**: whether the learned equilibrium is the exact game's CE
  (the one :func:`coalitions.solve` reaches by peeling) as a set of coalitions.
* **ari**: the adjusted Rand index of the two partitions (Hubert & Arabie,
  1985), see :func:`adjusted_rand_index`.
* **regret**: for each client ``i``, ``payoff_i(P*(i)) − payoff_i(P̂(i))``:
  its exact payoff in the exact CE ``P*`` minus its exact payoff in the learned
  CE ``P̂``, both under the game's payoff semantics and in the game's internal
  higher-is-better units (an MSE game's regret is an MSE difference).
  Positive: the learned equilibrium costs the client; negative: it gains (only
  possible when another client pays for it).

Examples
--------
>>> adjusted_rand_index([0, 0, 1, 1], [0, 0, 1, 1])
1.0
>>> round(adjusted_rand_index([0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2]), 6)
0.242424
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .bitmask import members
from .equilibrium import Equilibrium, solve
from .errors import InputError
from .game import Game
from .graph import ExactOracle
from .noise import resolve_z
from .numbers import finite
from .payoffs import check_semantics, payoff_table

__all__ = ["compare", "adjusted_rand_index", "edge_scores", "compare_text", "KEYS"]

#: The keys ``compare --format json`` always has.
KEYS = ("edge_precision", "edge_recall", "edge_f1", "ocs_exact", "same_partition", "ari", "regret")


def _pairs(x: np.ndarray | int) -> np.ndarray:
    """``C(x, 2)`` elementwise, as float."""
    x = np.asarray(x, dtype=np.float64)
    return x * (x - 1) / 2


def adjusted_rand_index(labels_a: Sequence[int] | np.ndarray, labels_b: Sequence[int] | np.ndarray) -> float:
    """Adjusted Rand index of two labelings of the same items (Hubert & Arabie, 1985).

    With the contingency table ``n_uv`` (items in block ``u`` of A and ``v`` of B),
    row sums ``a_u``, column sums ``b_v`` and ``n`` items::

        index    = Σ C(n_uv, 2)
        expected = Σ C(a_u, 2) · Σ C(b_v, 2) / C(n, 2)
        maximum  = (Σ C(a_u, 2) + Σ C(b_v, 2)) / 2
        ARI      = (index − expected) / (maximum − expected)

    1 for identical partitions, about 0 for independent ones, negative below
    chance.  The denominator vanishes only when both partitions are all
    singletons or both one block (hence identical): the ARI is then 1, as in
    scikit-learn.
    """
    a = np.asarray(labels_a)
    b = np.asarray(labels_b)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("labelings must be 1-d and of the same length")
    n = a.size
    if n < 2:
        return 1.0
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    table = np.zeros((ia.max() + 1, ib.max() + 1), dtype=np.int64)
    np.add.at(table, (ia, ib), 1)
    index = _pairs(table).sum()
    sum_a = _pairs(table.sum(axis=1)).sum()
    sum_b = _pairs(table.sum(axis=0)).sum()
    expected = sum_a * sum_b / _pairs(n)
    maximum = (sum_a + sum_b) / 2
    if maximum == expected:
        return 1.0
    return float((index - expected) / (maximum - expected))


def edge_scores(learned: set, exact: set) -> tuple[float, float, float]:
    """Precision, recall, F1 of a learned edge set against the exact one (empty-set rules above)."""
    hit = len(learned & exact)
    precision = hit / len(learned) if learned else 1.0
    recall = hit / len(exact) if exact else 1.0
    f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return float(precision), float(recall), float(f1)


def _labels(partition: Sequence[int], n: int) -> np.ndarray:
    out = np.full(n, -1, dtype=np.int64)
    for b, k in enumerate(partition):
        out[list(members(k))] = b
    return out


def compare(estimate, game: Game, semantics: str = "personalized", tol: float = 1e-9, *,
            exact: Equilibrium | None = None, z: float | None = None) -> dict:
    """Compare a learned estimate with the exact game (metrics in the module docstring).

    Parameters
    ----------
    estimate : Estimate
        Anything with ``clients`` (names), ``benefit_graph`` (``BG(all)``, with
        ``collaborators`` as ``(i, mask)`` in the estimate's client order) and
        ``partition`` (bitmasks in that order), e.g. :class:`coalitions.estimate.Estimate`.
    game : Game
        The exact game over the same client names (any order).
    semantics : {"personalized", "shared"}
        Payoff semantics for the exact CE and the regrets.
    tol : float
        Tolerance of the exact analysis (``docs/concepts.md`` §1).
    exact : Equilibrium, optional
        The game's equilibrium under ``semantics`` when the caller already solved it
        (:func:`coalitions.solve`); otherwise it is solved here.
    z : float, optional
        Significance level of the exact analysis (:mod:`coalitions.noise`): 1.96 by
        default when the game carries its measurement uncertainty, else 0.  The
        learned graph is then scored against the edges that are significant.

    Returns
    -------
    dict
        The keys of :data:`KEYS` (``regret`` maps client names to floats in the
        game's higher-is-better units), plus ``edges_learned``, ``edges_exact``
        (lists of ``[j, i]`` names), ``partition_learned``, ``partition_exact``
        (lists of name lists), ``ocs_learned``, ``ocs_exact_sets`` and ``semantics``.

    Raises
    ------
    InputError
        A client of one side is missing from the other, or ``exact`` was solved for
        another game, semantics, tolerance or level ``z``.
    NoEquilibrium
        ``shared`` semantics and the game has no CE.
    """
    check_semantics(semantics)
    names = tuple(estimate.clients)
    for c in names:
        if c not in game.index:
            raise InputError(f"client {c!r} of the estimate is not in the game")
    for c in game.clients:
        if c not in names:
            raise InputError(f"client {c!r} of the game is not in the estimate")
    # estimate index -> game index, as a bitmask map
    to_game = np.array([game.index[c] for c in names], dtype=np.int64)

    def remap(mask: int) -> int:
        out = 0
        for j in members(mask):
            out |= 1 << int(to_game[j])
        return out

    n = game.n
    grand = game.grand
    level = resolve_z(game, z)
    exact_bg = ExactOracle(game, semantics, tol, z=level).benefit_graph(grand)
    learned_ocs = {int(to_game[i]): remap(c) for i, c in estimate.benefit_graph.collaborators}
    if sorted(learned_ocs) != list(range(n)):
        raise InputError("the estimate's benefit graph does not cover every client")
    learned_edges = {(j, i) for i, c in learned_ocs.items() for j in members(c)}
    exact_edges = set(exact_bg.edges)
    precision, recall, f1 = edge_scores(learned_edges, exact_edges)

    exact_ocs = dict(exact_bg.collaborators)
    alternatives = exact_bg.ambiguous
    hits = [learned_ocs[i] in alternatives.get(i, (exact_ocs[i],)) for i in range(n)]

    if exact is None:
        eq = solve(game, semantics, tol, certify_result=False, z=level)
    elif exact.game is not game or exact.semantics != semantics or exact.tol != tol or exact.z != level:
        raise InputError("the exact equilibrium given was solved for another game, semantics, tolerance or level z")
    else:
        eq = exact
    exact_partition = tuple(eq.partition)
    learned_partition = tuple(remap(k) for k in estimate.partition)
    if sorted(learned_partition) and (np.bitwise_or.reduce(learned_partition) != grand
                                      or sum(bin(k).count("1") for k in learned_partition) != n):
        raise InputError("the estimate's partition does not cover every client exactly once")
    same = set(exact_partition) == set(learned_partition)
    ari = adjusted_rand_index(_labels(exact_partition, n), _labels(learned_partition, n))

    pay = payoff_table(game, semantics)
    block_exact = np.zeros(n, dtype=np.int64)
    block_learned = np.zeros(n, dtype=np.int64)
    for k in exact_partition:
        block_exact[list(members(k))] = k
    for k in learned_partition:
        block_learned[list(members(k))] = k
    idx = np.arange(n)
    regret = finite(lambda: pay[idx, block_exact] - pay[idx, block_learned],
                    lambda at: f"the regret of client {game.clients[at[0]]!r} (exact CE payoff minus learned)")

    return {
        "edge_precision": precision,
        "edge_recall": recall,
        "edge_f1": f1,
        "ocs_exact": float(np.mean(hits)),
        "same_partition": bool(same),
        "ari": ari,
        "regret": {game.clients[i]: float(regret[i]) for i in range(n)},
        "semantics": semantics,
        "edges_learned": [[game.clients[j], game.clients[i]] for j, i in sorted(learned_edges)],
        "edges_exact": [[game.clients[j], game.clients[i]] for j, i in sorted(exact_edges)],
        "ocs_learned": {game.clients[i]: game.names(learned_ocs[i]) for i in range(n)},
        "ocs_exact_sets": {game.clients[i]: game.names(exact_ocs[i]) for i in range(n)},
        "partition_learned": [game.names(k) for k in sorted(learned_partition, key=lambda k: k & -k)],
        "partition_exact": [game.names(k) for k in sorted(exact_partition, key=lambda k: k & -k)],
    }


def compare_text(result: dict) -> str:
    """A short human-readable report of :func:`compare`'s result."""
    def part(p):
        return " | ".join(",".join(b) for b in p)

    lines = [
        f"edges    precision {result['edge_precision']:.3f}  recall {result['edge_recall']:.3f}  "
        f"F1 {result['edge_f1']:.3f}  ({len(result['edges_learned'])} learned, "
        f"{len(result['edges_exact'])} exact)",
        f"OCS      {result['ocs_exact']:.3f} of clients exact",
        f"CE       learned {part(result['partition_learned'])}",
        f"         exact   {part(result['partition_exact'])}",
        f"         same partition: {'yes' if result['same_partition'] else 'no'}   "
        f"adjusted Rand index {result['ari']:.3f}",
        f"regret   (exact payoff in the exact CE minus in the learned CE, {result['semantics']} semantics)",
    ]
    width = max(len(c) for c in result["regret"])
    for c, r in result["regret"].items():
        ocs_l = ",".join(result["ocs_learned"][c]) or "-"
        ocs_e = ",".join(result["ocs_exact_sets"][c]) or "-"
        lines.append(f"  {c:<{width}}  {r:+.6f}   OCS learned {{{ocs_l}}}  exact {{{ocs_e}}}")
    return "\n".join(lines)
