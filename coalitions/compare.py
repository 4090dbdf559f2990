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

Before scoring, :func:`data_check` says whether the two sides were measured on the same data:
the data set and its loader options (samples, rho, the split seed, ...) that each records, the
estimate in ``config.dataset`` / ``config.data_options``, the game in ``provenance.dataset`` /
``provenance.options``.

Examples
--------
>>> adjusted_rand_index([0, 0, 1, 1], [0, 0, 1, 1])
1.0
>>> round(adjusted_rand_index([0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2]), 6)
0.242424
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .bitmask import members
from .equilibrium import Equilibrium, solve
from .errors import InputError
from .game import Game
from .graph import ExactOracle
from .noise import resolve_z
from .numbers import finite
from .partition import canonical
from .payoffs import check_semantics, payoff_table

__all__ = ["compare", "adjusted_rand_index", "edge_scores", "compare_text", "KEYS", "DataCheck", "data_check",
           "data_record"]

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
        ``partition`` (a :class:`~coalitions.partition.Partition`, or bitmasks in that order),
        e.g. :class:`coalitions.estimate.Estimate`.
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
    exact_partition = tuple(eq.masks)
    learned_partition = tuple(remap(k) for k in canonical(estimate.partition))
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


def data_record(obj) -> dict | None:
    """The data an estimate or a game records having been measured on: ``{"dataset", "options"}``, or None.

    An :class:`~coalitions.estimate.Estimate` records it in ``config`` (``dataset``,
    ``data_options``), a :class:`~coalitions.game.Game` in its provenance (``dataset``,
    ``options``), as ``coalitions learn``, ``oracle`` and ``federate`` write them.  A
    hand-written or generated file records none.
    """
    if isinstance(obj, Game):
        record, key = obj.provenance or {}, "options"
    else:
        record, key = getattr(obj, "config", None) or {}, "data_options"
    dataset, options = record.get("dataset"), record.get(key)
    if dataset is None and options is None:
        return None
    return {"dataset": dataset, "options": dict(options) if isinstance(options, Mapping) else {}}


def _shown(x: Any) -> str:
    if x is None:
        return "none"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, float):
        return f"{x:g}"
    if isinstance(x, (list, tuple)):
        return ",".join(map(_shown, x)) or "[]"
    return str(x)


_MISSING = object()


@dataclass(frozen=True)
class DataCheck:
    """Whether an estimate and a game were measured on the same data (:func:`data_check`).

    Attributes
    ----------
    unrecorded : tuple of str
        ``"estimate"`` and/or ``"game"``: the sides that record no data (nothing to check).
    differences : tuple of (str, object, object)
        ``(field, estimate's value, game's value)`` for the data set and every loader option that
        differs; a value one side does not record is ``None`` there.
    """

    unrecorded: tuple[str, ...]
    differences: tuple[tuple[str, Any, Any], ...]

    @property
    def checked(self) -> bool:
        """Both sides record their data, so they were compared."""
        return not self.unrecorded

    @property
    def same(self) -> bool:
        """Both record their data, and it is the same."""
        return self.checked and not self.differences

    def describe(self) -> str:
        """``samples 1000 vs 10, rho 1 vs 0.1, seed 7 vs 0`` (estimate's value first)."""
        return ", ".join(f"{k} {_shown(a)} vs {_shown(b)}" for k, a, b in self.differences)

    def to_json(self) -> dict:
        return {"checked": self.checked, "same": self.same, "unrecorded": list(self.unrecorded),
                "differences": [{"field": k, "estimate": a, "game": b} for k, a, b in self.differences]}


def data_check(estimate, game: Game) -> DataCheck:
    """Compare the data an estimate and a game record (:func:`data_record`): data set and loader options.

    Pure: reads the two records, trains and loads nothing.  A side without a record is listed in
    :attr:`DataCheck.unrecorded` and nothing is compared.  The options are compared key by key
    (the split seed is the option ``seed``); an option one side does not record differs.

    Examples
    --------
    >>> g = Game.from_mapping(["a"], {"a": {"a": 1.0}}, "max",
    ...                       {"dataset": "synthetic", "options": {"samples": 10, "seed": 0}})
    >>> class E: config = {"dataset": "synthetic", "data_options": {"samples": 1000, "seed": 7}}
    >>> data_check(E(), g).describe()
    'samples 1000 vs 10, seed 7 vs 0'
    """
    mine, theirs = data_record(estimate), data_record(game)
    unrecorded = tuple(side for side, r in (("estimate", mine), ("game", theirs)) if r is None)
    if mine is None or theirs is None:
        return DataCheck(unrecorded, ())
    diff = []
    if mine["dataset"] != theirs["dataset"]:
        diff.append(("dataset", mine["dataset"], theirs["dataset"]))
    a, b = mine["options"], theirs["options"]
    for key in list(a) + [k for k in b if k not in a]:
        x, y = a.get(key, _MISSING), b.get(key, _MISSING)
        if _normal(x) != _normal(y):
            diff.append((str(key), None if x is _MISSING else x, None if y is _MISSING else y))
    return DataCheck((), tuple(diff))


def _normal(x: Any) -> Any:
    """Equal data options compare equal whatever JSON made of them (a tuple read back as a list, 1 as 1.0)."""
    if isinstance(x, (list, tuple)):
        return tuple(_normal(v) for v in x)
    if x is _MISSING:
        return None  # not recorded reads as not set
    if isinstance(x, bool):
        return x
    if isinstance(x, (int, float)):
        return float(x)
    return x


def data_text(data: Mapping[str, Any]) -> str:
    """The ``data`` line of :func:`compare_text` for a :meth:`DataCheck.to_json` record."""
    if data.get("unrecorded"):
        sides = " and ".join(f"the {s}" for s in data["unrecorded"])
        return (f"data     not checked: {sides} record{'s' if len(data['unrecorded']) == 1 else ''} no data set "
                "(a hand-written or generated file); compared as given")
    if data.get("differences"):
        shown = ", ".join(f"{d['field']} {_shown(d['estimate'])} vs {_shown(d['game'])}" for d in data["differences"])
        return f"data     DIFFERENT (compared anyway, --allow-different-data): {shown}"
    return "data     the same data set and options (checked)"


def compare_text(result: dict) -> str:
    """A short human-readable report of :func:`compare`'s result."""
    def part(p):
        return " | ".join(",".join(b) for b in p)

    lines = [data_text(result["data"])] if "data" in result else []
    lines += [
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
        ocs_l = ",".join(result["ocs_learned"][c])  # an empty OCS prints {}, as in every other output
        ocs_e = ",".join(result["ocs_exact_sets"][c])
        lines.append(f"  {c:<{width}}  {r:+.6f}   OCS learned {{{ocs_l}}}  exact {{{ocs_e}}}")
    return "\n".join(lines)
