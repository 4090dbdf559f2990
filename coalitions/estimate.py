"""Collaboration estimates: the ``coalitions/estimate@1`` format and the weight oracle.

SPEC §5, §7.  Every learner (SPO, FedAMP, FedeRiCo, SuPerFed, Local, FedAvg)
ends in an :class:`Estimate`: per-client utilities, an optional ``N×N`` weight
matrix (row ``i``: how much client ``i`` draws on client ``j``, rows sum to 1),
the learned benefit graph ``BG(all)`` and the equilibrium that the core's
peeling reaches on the learner's benefit oracle.

This module is pure NumPy (no torch): reading an estimate, or comparing it with
an exact game, never loads a training framework.

:class:`WeightOracle` turns a weight matrix into a benefit oracle (SPEC §5
"From weights to a graph").  For ``R ⊊ all`` it **renormalises** each row over
``R`` (it never refits); learners that can answer ``BG(R)`` better, like SPO,
bring their own oracle.

Examples
--------
>>> import numpy as np
>>> w = np.array([[0.5, 0.4, 0.1], [0.45, 0.55, 0.0], [0.0, 0.0, 1.0]])
>>> WeightOracle(["a", "b", "c"], w, rule="relative", threshold=0.7).benefit_graph(0b111).edges
((0, 1), (1, 0))
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coalitions.bitmask import mask_of, members
from coalitions.errors import InputError
from coalitions.game import check_client_names
from coalitions.graph import BenefitGraph
from coalitions.io import benefit_graph_to_json, read_json, write_json

__all__ = ["ESTIMATE_FORMAT", "Estimate", "estimate_to_json", "estimate_from_json", "read_estimate",
           "write_estimate", "WeightOracle", "WEIGHT_RULES", "DEFAULT_THRESHOLDS", "check_weights"]

ESTIMATE_FORMAT = "coalitions/estimate@1"
#: Rules turning a weight row into collaborators (SPEC §5 "From weights to a graph").
WEIGHT_RULES = ("relative", "absolute", "mass")
#: Default threshold of each rule: ``w_ij/w_ii ≥ 0.7`` (the CE paper's ratio), ``w_ij ≥ 0.1``,
#: and the smallest set of others holding 90 % of the row's off-diagonal mass.
DEFAULT_THRESHOLDS = {"relative": 0.7, "absolute": 0.1, "mass": 0.9}
#: Rows of a weight matrix must sum to 1 within this (absolute).
ROW_SUM_TOL = 1e-6


# --------------------------------------------------------------------------- names
def _check_client_names(clients, where: str = "'clients'") -> tuple[str, ...]:
    return check_client_names(clients, where, prefix=f"{where}: ")


def check_weights(weights, clients: Sequence[str], where: str = "'weights'") -> np.ndarray:
    """Validate an ``N×N`` weight matrix: finite, non-negative, rows summing to 1.

    Returns a read-only float64 copy.  Raises :class:`InputError` naming the
    client whose row is at fault.
    """
    n = len(clients)
    try:
        w = np.array(weights, dtype=np.float64)
    except (TypeError, ValueError):
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


# --------------------------------------------------------------------------- estimate
@dataclass(frozen=True, eq=False)
class Estimate:
    """A learner's collaboration estimate (SPEC §5, §7 ``coalitions/estimate@1``).

    Attributes
    ----------
    clients : tuple of str
        Client names; indices in every other field refer to this order.
    method : str
        The learner, e.g. ``"spo"``.
    config : dict
        The learner's settings and the data options (JSON-ready).
    weights : ndarray of shape (N, N) or None
        Row ``i``: how much client ``i`` draws on client ``j``; rows sum to 1.
        ``None`` for learners without pairwise weights (SuPerFed, Local, FedAvg).
    utilities : dict
        ``{"val": {name: metric}, "test": {name: metric}}`` in raw metric units
        (an MSE is an MSE, not negated).  NaN where a metric is undefined.
    metric : str
        ``"mse"``, ``"accuracy"`` or ``"auc"`` (or another metric name).
    sense : {"max", "min"}
        Whether a higher or lower ``metric`` is better.
    benefit_graph : BenefitGraph
        ``BG(all)`` as learned.
    partition : tuple of int
        The equilibrium that peeling reached on the learner's oracle (bitmasks).
    rounds : tuple of tuple of int
        The coalitions peeled in each round.
    planted_groups : tuple of tuple of str or None
        Planted structure of the federation, when it has one.
    extra : dict
        Method-specific results (JSON-ready), e.g. a weight history.
    """

    clients: tuple[str, ...]
    method: str
    config: dict
    weights: np.ndarray | None
    utilities: dict
    metric: str
    sense: str
    benefit_graph: BenefitGraph
    partition: tuple[int, ...]
    rounds: tuple[tuple[int, ...], ...]
    planted_groups: tuple[tuple[str, ...], ...] | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        clients = _check_client_names(list(self.clients))
        object.__setattr__(self, "clients", clients)
        if self.weights is not None:
            object.__setattr__(self, "weights", check_weights(self.weights, clients))
        if self.sense not in ("max", "min"):
            raise InputError(f"'sense' must be 'max' or 'min', got {self.sense!r}")
        util = {}
        for part in ("val", "test"):
            table = (self.utilities or {}).get(part)
            if not isinstance(table, Mapping) or any(c not in table for c in clients):
                raise InputError(f"utilities[{part!r}] must give a number for every client")
            util[part] = {c: float(table[c]) for c in clients}
        object.__setattr__(self, "utilities", util)
        if self.benefit_graph.clients != clients:
            raise InputError("the benefit graph's clients differ from the estimate's")
        grand = (1 << len(clients)) - 1
        if self.benefit_graph.within != grand:
            raise InputError("the estimate's benefit graph must be BG(all clients)")
        _check_partition_masks(self.partition, self.rounds, clients)
        object.__setattr__(self, "partition", tuple(int(k) for k in self.partition))
        object.__setattr__(self, "rounds", tuple(tuple(int(k) for k in r) for r in self.rounds))
        if self.planted_groups is not None:
            object.__setattr__(self, "planted_groups", tuple(tuple(g) for g in self.planted_groups))

    @property
    def n(self) -> int:
        return len(self.clients)

    def names(self, mask: int) -> list[str]:
        """Member names of a coalition bitmask."""
        return [self.clients[i] for i in members(mask)]

    def blocks(self) -> list[list[str]]:
        """The learned equilibrium as lists of names."""
        return [self.names(k) for k in self.partition]


def _check_partition_masks(partition, rounds, clients) -> None:
    n = len(clients)
    grand = (1 << n) - 1
    seen = 0
    for k in partition:
        k = int(k)
        if k <= 0 or k > grand:
            raise InputError(f"partition block {k} is empty or names clients outside the estimate")
        if seen & k:
            raise InputError(f"client {clients[members(seen & k)[0]]!r} appears in two blocks of the partition")
        seen |= k
    if seen != grand:
        raise InputError(f"client {clients[members(grand & ~seen)[0]]!r} is in no block of the partition")
    flat = sorted(int(k) for r in rounds for k in r)
    if flat != sorted(int(k) for k in partition):
        raise InputError("the rounds do not list exactly the blocks of the partition")


# --------------------------------------------------------------------------- JSON
def estimate_to_json(e: Estimate) -> dict:
    """``coalitions/estimate@1`` as a JSON-ready dict (NaN utilities become null on writing)."""
    return {
        "format": ESTIMATE_FORMAT,
        "clients": list(e.clients),
        "method": e.method,
        "config": dict(e.config),
        "metric": e.metric,
        "sense": e.sense,
        "weights": None if e.weights is None else [[float(x) for x in row] for row in e.weights],
        "utilities": {part: {c: _num(e.utilities[part][c]) for c in e.clients} for part in ("val", "test")},
        "benefit_graph": benefit_graph_to_json(e.benefit_graph),
        "partition": e.blocks(),
        "rounds": [[e.names(k) for k in r] for r in e.rounds],
        "planted_groups": None if e.planted_groups is None else [list(g) for g in e.planted_groups],
        "extra": dict(e.extra),
    }


def _num(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def write_estimate(e: Estimate, path: str | os.PathLike) -> None:
    """Write ``coalitions/estimate@1`` JSON; an unwritable path raises :class:`InputError`."""
    try:
        write_json(estimate_to_json(e), path)
    except OSError as err:
        raise InputError(f"{path}: cannot write ({err.strerror})") from None


def _names_list(value, field_name: str, index: Mapping[str, int], *, allow_empty=False) -> list[int]:
    if not isinstance(value, list) or (not value and not allow_empty):
        raise InputError(f"field {field_name!r} must be a {'' if allow_empty else 'non-empty '}list of client names")
    out = []
    for name in value:
        if not isinstance(name, str) or name not in index:
            raise InputError(f"field {field_name!r} names unknown client {name!r}")
        if index[name] in out:
            raise InputError(f"field {field_name!r} names client {name!r} twice")
        out.append(index[name])
    return out


def _blocks(value, field_name: str, index) -> list[int]:
    if not isinstance(value, list) or not value:
        raise InputError(f"field {field_name!r} must be a non-empty list of lists of client names")
    return [mask_of(_names_list(b, f"{field_name}[{k}]", index)) for k, b in enumerate(value)]


def estimate_from_json(data: Mapping[str, Any]) -> Estimate:
    """Build and validate an :class:`Estimate` from a parsed ``coalitions/estimate@1`` object.

    Every check raises :class:`InputError` naming the field (the caller adds the file name).
    """
    if data.get("format") != ESTIMATE_FORMAT:
        raise InputError(f"unknown format {data.get('format')!r} (expected {ESTIMATE_FORMAT!r})")
    required = ("clients", "method", "config", "metric", "sense", "weights", "utilities", "benefit_graph",
                "partition", "rounds")
    for key in required:
        if key not in data:
            raise InputError(f"missing field {key!r}")
    clients = _check_client_names(data["clients"], "field 'clients'")
    index = {c: i for i, c in enumerate(clients)}
    method = data["method"]
    if not isinstance(method, str) or not method:
        raise InputError(f"field 'method' must be a non-empty string, got {method!r}")
    for key in ("config", "extra"):
        if key in data and not isinstance(data[key], dict):
            raise InputError(f"field {key!r} must be an object")
    metric = data["metric"]
    if not isinstance(metric, str) or not metric:
        raise InputError(f"field 'metric' must be a non-empty string, got {metric!r}")
    sense = data["sense"]
    if sense not in ("max", "min"):
        raise InputError(f"field 'sense' must be 'max' or 'min', got {sense!r}")

    weights = data["weights"]
    if weights is not None:
        if not isinstance(weights, list) or not all(isinstance(r, list) for r in weights):
            raise InputError("field 'weights' must be null or a list of rows")
        for i, row in enumerate(weights):
            for x in row:
                if isinstance(x, bool) or not isinstance(x, (int, float)):
                    who = clients[i] if i < len(clients) else f"#{i}"
                    raise InputError(f"field 'weights': row of client {who!r} holds a non-number {x!r}")
        weights = check_weights(weights, clients, "field 'weights'")

    util = data["utilities"]
    if not isinstance(util, dict):
        raise InputError("field 'utilities' must be an object with 'val' and 'test'")
    utilities = {}
    for part in ("val", "test"):
        table = util.get(part)
        if not isinstance(table, dict):
            raise InputError(f"field 'utilities.{part}' must be an object {{client: number}}")
        for name in table:
            if name not in index:
                raise InputError(f"field 'utilities.{part}' names unknown client {name!r}")
        row = {}
        for name in clients:
            if name not in table:
                raise InputError(f"field 'utilities.{part}' lacks client {name!r}")
            x = table[name]
            if x is None:
                x = float("nan")
            elif isinstance(x, bool) or not isinstance(x, (int, float)):
                raise InputError(f"field 'utilities.{part}' of client {name!r} is not a number: {x!r}")
            row[name] = float(x)
        utilities[part] = row

    bg = data["benefit_graph"]
    if not isinstance(bg, dict) or not isinstance(bg.get("ocs"), dict):
        raise InputError("field 'benefit_graph' must be an object with an 'ocs' mapping")
    ocs = bg["ocs"]
    for name in ocs:
        if name not in index:
            raise InputError(f"field 'benefit_graph.ocs' names unknown client {name!r}")
    collab = []
    for i, name in enumerate(clients):
        if name not in ocs:
            raise InputError(f"field 'benefit_graph.ocs' lacks client {name!r}")
        js = _names_list(ocs[name], f"benefit_graph.ocs.{name}", index, allow_empty=True)
        if i in js:
            raise InputError(f"field 'benefit_graph.ocs.{name}' lists the client itself")
        collab.append((i, mask_of(js)))
    graph = BenefitGraph(clients, (1 << len(clients)) - 1, tuple(collab))
    if "edges" in bg:
        edges = bg["edges"]
        ok = isinstance(edges, list) and all(isinstance(e, list) and len(e) == 2 for e in edges)
        if not ok or sorted(tuple(e) for e in edges) != sorted(
                (clients[j], clients[i]) for j, i in graph.edges):
            raise InputError("field 'benefit_graph.edges' disagrees with 'benefit_graph.ocs'")

    partition = _blocks(data["partition"], "partition", index)
    try:
        _check_partition_masks(partition, [partition], clients)
    except InputError as err:
        raise InputError(f"field 'partition': {err}") from None
    rounds_raw = data["rounds"]
    if not isinstance(rounds_raw, list):
        raise InputError("field 'rounds' must be a list of rounds, each a list of coalitions")
    rounds = [tuple(_blocks(r, f"rounds[{k}]", index)) for k, r in enumerate(rounds_raw)]
    if sorted(k for r in rounds for k in r) != sorted(partition):
        raise InputError("field 'rounds' does not list exactly the blocks of 'partition'")

    planted = data.get("planted_groups")
    if planted is not None:
        if not isinstance(planted, list):
            raise InputError("field 'planted_groups' must be null or a list of lists of client names")
        seen = set()
        for k, g in enumerate(planted):
            for i in _names_list(g, f"planted_groups[{k}]", index):
                if i in seen:
                    raise InputError(f"field 'planted_groups' puts client {clients[i]!r} in two groups")
                seen.add(i)
        planted = tuple(tuple(g) for g in planted)
    return Estimate(clients=clients, method=method, config=dict(data["config"]), weights=weights,
                    utilities=utilities, metric=metric, sense=sense, benefit_graph=graph,
                    partition=tuple(partition), rounds=tuple(rounds), planted_groups=planted,
                    extra=dict(data.get("extra", {})))


def read_estimate(path: str | os.PathLike) -> Estimate:
    """Read and validate a ``coalitions/estimate@1`` file; errors name the file and the field."""
    data = read_json(path, ESTIMATE_FORMAT)
    try:
        return estimate_from_json(data)
    except InputError as err:
        raise InputError(f"{path}: {err}") from None


# --------------------------------------------------------------------------- weight oracle
class WeightOracle:
    """Benefit oracle from a weight matrix (SPEC §5 "From weights to a graph").

    Within a remaining set ``R`` each row is restricted to ``R`` and
    renormalised, ``w̃_ij = w_ij / Σ_{k∈R} w_ik`` (no refit), and ``j ∈ R∖{i}`` is a
    collaborator of ``i`` when:

    * ``"relative"``: ``w̃_ij / w̃_ii ≥ threshold`` (the CE paper's ratio rule,
      default 0.7); when ``w_ii = 0`` every ``j`` with ``w_ij > 0`` qualifies;
    * ``"absolute"``: ``w̃_ij ≥ threshold`` (default 0.1);
    * ``"mass"``: ``j`` is in the smallest set of others whose weights hold at
      least ``threshold`` (default 0.9) of the row's off-diagonal mass
      ``Σ_{k∈R, k≠i} w̃_ik`` (largest weights first, ties to the lower index);
      a row with no off-diagonal mass within ``R`` has no collaborators.

    The relative and mass rules are invariant to the renormalisation (they
    compare weights of one row); only the absolute rule sees it.  A row with
    no mass at all inside ``R`` (possible only when ``w_ii = 0``) has no
    collaborators.

    Parameters
    ----------
    clients : sequence of str
    weights : array of shape (N, N)
        Rows sum to 1, non-negative.
    rule : {"relative", "absolute", "mass"}
    threshold : float, optional
        Defaults to :data:`DEFAULT_THRESHOLDS` of the rule.
    """

    def __init__(self, clients: Sequence[str], weights, rule: str = "relative", threshold: float | None = None):
        self.clients = _check_client_names(list(clients))
        if rule not in WEIGHT_RULES:
            raise InputError(f"weight rule must be one of {', '.join(WEIGHT_RULES)}, got {rule!r}")
        if threshold is None:
            threshold = DEFAULT_THRESHOLDS[rule]
        if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold >= 0):
            raise InputError(f"weight threshold must be a finite number >= 0, got {threshold!r}")
        if rule == "mass" and not 0 < threshold <= 1:
            raise InputError(f"the mass rule needs a threshold in (0, 1], got {threshold!r}")
        self.rule = rule
        self.threshold = float(threshold)
        self.weights = check_weights(weights, self.clients)
        self._cache: dict[int, BenefitGraph] = {}

    def renormalised(self, within: int) -> np.ndarray:
        """``w̃``: rows of the members of ``R`` restricted to ``R`` and renormalised (|R|×|R|)."""
        idx = np.array(members(within), dtype=np.int64)
        sub = self.weights[np.ix_(idx, idx)]
        tot = sub.sum(axis=1, keepdims=True)
        return np.divide(sub, tot, out=np.zeros_like(sub), where=tot > 0)

    def collaborator_matrix(self, within: int) -> np.ndarray:
        """Boolean |R|×|R| matrix: ``[a, b]`` is True when member ``b`` is a collaborator of member ``a``."""
        w = self.renormalised(within)
        k = w.shape[0]
        eye = np.eye(k, dtype=bool)
        if self.rule == "absolute":
            out = w >= self.threshold
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
