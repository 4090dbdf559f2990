"""Collaboration estimates: the ``coalitions/estimate@1`` format, and how a learner makes one.

Every learner (SPO, FedAMP, FedeRiCo, SuPerFed, Local, FedAvg) ends in an
:class:`Estimate`: per-client utilities, an optional ``N×N`` weight matrix (row
``i``: how much client ``i`` draws on client ``j``, rows sum to 1), the learned
benefit graph ``BG(all)`` and the equilibrium that peeling reaches on the
learner's benefit oracle (``docs/concepts.md``, "Learned benefit graphs";
the file format in ``docs/formats.md``).

A learner's ``fit`` only fits and exposes what it learned: a benefit oracle
(``oracle_``), utilities (``utilities_``) and, where it has them, weights
(``weights_``).  :func:`build_estimate` is the one place that turns those into
an estimate: ``BG(all)`` from the oracle, peeling on it, and the record.

This module is pure NumPy (no torch): reading an estimate, or comparing it with
an exact game, never loads a training framework.

Examples
--------
>>> import numpy as np
>>> from coalitions.oracles import WeightOracle
>>> w = np.array([[0.5, 0.4, 0.1], [0.45, 0.55, 0.0], [0.0, 0.0, 1.0]])
>>> util = {"val": {"a": 1.0, "b": 2.0, "c": 3.0}, "test": {"a": 1.0, "b": 2.0, "c": 3.0}}
>>> e = build_estimate(WeightOracle(["a", "b", "c"], w), method="demo", config={}, utilities=util,
...                    metric="accuracy", sense="max", weights=w)
>>> e.blocks()
[['a', 'b'], ['c']]
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coalitions import io as cio
from coalitions.bitmask import mask_of, members
from coalitions.errors import InputError
from coalitions.game import check_client_names
from coalitions.graph import BenefitGraph, BenefitOracle
from coalitions.io import benefit_graph_to_json, read_json, write_json
from coalitions.numbers import to_float
from coalitions.oracles import check_weights
from coalitions.partition import Partition, validate_blocks
from coalitions.peeling import Peeling, peel_oracle

__all__ = ["ESTIMATE_FORMAT", "LEARNED_EQUILIBRIUM_FORMAT", "NOT_CERTIFIED", "MAX_ESTIMATE_CLIENTS", "Estimate",
           "estimate_to_json", "estimate_from_json", "read_estimate", "write_estimate", "build_estimate",
           "learned_equilibrium_to_json", "read_game_or_estimate"]

ESTIMATE_FORMAT = "coalitions/estimate@1"
#: ``coalitions solve ESTIMATE --format json``: the learned partition and graph, never certified.
LEARNED_EQUILIBRIUM_FORMAT = "coalitions/learned-equilibrium@1"
#: Why an estimate's partition carries no certificate (``coalitions solve ESTIMATE``).
NOT_CERTIFIED = ("not certified: an estimate holds no coalition values, only the learner's benefit graph; "
                 "certify on the exact game (coalitions oracle), or score the estimate against it (coalitions compare)")
#: Most clients an estimate may have (docs/formats.md): its benefit graph and weight matrix hold N^2
#: entries, 16.8 million at this limit, which the reader checks in about 10 s on one core.
MAX_ESTIMATE_CLIENTS = 4096


# --------------------------------------------------------------------------- names
def _check_client_names(clients, where: str = "'clients'") -> tuple[str, ...]:
    return check_client_names(clients, where, prefix=f"{where}: ")


# --------------------------------------------------------------------------- estimate
@dataclass(frozen=True, eq=False)
class Estimate:
    """A learner's collaboration estimate (``coalitions/estimate@1``, ``docs/formats.md``).

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
    partition : Partition
        The equilibrium that peeling reached on the learner's oracle, by client name
        (bitmask blocks given to the constructor are read over ``clients``; :attr:`masks`
        gives them back).
    rounds : tuple of tuple of int
        The coalitions peeled in each round, as bitmasks.
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
    partition: Partition
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
            util[part] = {c: to_float(table[c], f"utilities[{part!r}] of client {c!r}", allow_none=True)
                          for c in clients}
        object.__setattr__(self, "utilities", util)
        if self.benefit_graph.clients != clients:
            raise InputError("the benefit graph's clients differ from the estimate's")
        grand = (1 << len(clients)) - 1
        if self.benefit_graph.within != grand:
            raise InputError("the estimate's benefit graph must be BG(all clients)")
        masks = _partition_masks(self.partition, clients)
        _check_partition_masks(masks, self.rounds, clients)
        object.__setattr__(self, "partition", Partition(clients, masks))
        object.__setattr__(self, "rounds", tuple(tuple(int(k) for k in r) for r in self.rounds))
        if self.planted_groups is not None:
            object.__setattr__(self, "planted_groups", tuple(tuple(g) for g in self.planted_groups))

    @property
    def n(self) -> int:
        return len(self.clients)

    def names(self, mask: int) -> list[str]:
        """Member names of a coalition bitmask."""
        return [self.clients[i] for i in members(mask)]

    @property
    def masks(self) -> tuple[int, ...]:
        """The learned equilibrium as bitmask blocks over :attr:`clients`, ordered by lowest member."""
        return self.partition.masks

    def blocks(self) -> list[list[str]]:
        """The learned equilibrium as lists of names."""
        return self.partition.lists()

    def __repr__(self) -> str:
        return (f"Estimate(method={self.method!r}, clients={self.n}, metric={self.metric!r}, "
                f"partition={str(self.partition)!r}, edges={len(self.benefit_graph.edges)})")

    def round_of(self) -> list[int]:
        """The peeling round (1-based) that placed each client in its coalition."""
        out = [0] * self.n
        for r, ks in enumerate(self.rounds, start=1):
            for k in ks:
                for i in members(k):
                    out[i] = r
        return out

    def to_networkx(self):
        """The clients with their coalition and round, and ``BG(all)``'s edges, as a :class:`networkx.DiGraph`
        (see :func:`coalitions.networks.estimate_to_networkx`)."""
        from coalitions.networks import estimate_to_networkx

        return estimate_to_networkx(self)


def _partition_masks(partition, clients: tuple[str, ...]) -> tuple[int, ...]:
    """Bitmask blocks over ``clients`` of a :class:`Partition` (by its names) or of bitmask blocks."""
    if not isinstance(partition, Partition):
        return tuple(int(k) for k in partition)
    if set(partition.clients) != set(clients):
        raise InputError("the partition's clients are not the estimate's")
    index = {c: i for i, c in enumerate(clients)}
    return tuple(mask_of(index[c] for c in b) for b in partition)


def _check_partition_masks(partition, rounds, clients) -> None:
    validate_blocks(clients, partition, "the estimate")
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


def learned_equilibrium_to_json(e: Estimate) -> dict:
    """``coalitions/learned-equilibrium@1``: the estimate's partition, its peeling rounds and ``BG(all)``.

    The keys that ``coalitions/equilibrium@1`` shares with it mean the same; there are no payoffs
    and ``certificate`` is null (:data:`NOT_CERTIFIED` says why).  ``utilities`` are the learner's
    own validation and test metric per client, in raw metric units.
    """
    first = e.masks  # coalitions ordered by their first client
    return {
        "format": LEARNED_EQUILIBRIUM_FORMAT,
        "learned": True,
        "method": e.method,
        "clients": list(e.clients),
        "partition": [e.names(k) for k in first],
        "rounds": [[e.names(k) for k in sorted(r, key=lambda k: k & -k)] for r in e.rounds],
        "found_by": "peeling the learned benefit graph",
        "benefit_graphs": [benefit_graph_to_json(e.benefit_graph)],
        "metric": e.metric,
        "sense": e.sense,
        "utilities": {part: {c: _num(e.utilities[part][c]) for c in e.clients} for part in ("val", "test")},
        "certificate": None,
        "not_certified": NOT_CERTIFIED,
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
    seen: set[int] = set()  # linear in the list's length (a list's `in` made the reader cubic)
    for name in value:
        if not isinstance(name, str) or name not in index:
            raise InputError(f"field {field_name!r} names unknown client {name!r}")
        i = index[name]
        if i in seen:
            raise InputError(f"field {field_name!r} names client {name!r} twice")
        seen.add(i)
        out.append(i)
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
    if isinstance(data["clients"], list) and len(data["clients"]) > MAX_ESTIMATE_CLIENTS:
        raise InputError(f"field 'clients' lists {len(data['clients']):,} clients; an estimate holds at most "
                         f"{MAX_ESTIMATE_CLIENTS:,} (its benefit graph and weights grow as N^2)")
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
            who = clients[i] if i < len(clients) else f"#{i}"
            weights[i] = [to_float(x, f"field 'weights': an entry in the row of client {who!r}") for x in row]
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
            row[name] = to_float(table[name], f"field 'utilities.{part}' of client {name!r}", allow_none=True)
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
                    partition=Partition(clients, partition), rounds=tuple(rounds), planted_groups=planted,
                    extra=dict(data.get("extra", {})))


def read_estimate(path: str | os.PathLike) -> Estimate:
    """Read and validate a ``coalitions/estimate@1`` file; errors name the file and the field."""
    data = read_json(path, ESTIMATE_FORMAT)
    try:
        return estimate_from_json(data)
    except InputError as err:
        raise InputError(f"{path}: {err}") from None


def read_game_or_estimate(path: str | os.PathLike):
    """A game file's ``(game, replicates)``, or the :class:`~coalitions.estimate.Estimate` a file holds.

    What the game commands read: a ``coalitions/game@1`` or ``@2`` game (JSON or ``.npz``) or a
    learned ``coalitions/estimate@1`` (an :class:`Estimate`: its benefit graph and partition, no
    values), told apart by the ``"format"`` field; the JSON is parsed once.  Errors are
    :class:`InputError` naming the file.
    """
    if str(path).endswith(".npz"):
        return cio.read_game_replicates(path)
    try:
        data = read_json(path)
        fmt = data.get("format")
        if fmt == ESTIMATE_FORMAT:
            return estimate_from_json(data)
        if fmt not in cio.GAME_FORMATS:
            expected = " or ".join(map(repr, (*cio.GAME_FORMATS, ESTIMATE_FORMAT)))
            raise InputError(f"unknown format {fmt!r} (expected {expected})")
        return cio._game_of(data)
    except MemoryError:
        raise InputError(f"{path}: out of memory building the game") from None
    except InputError as e:
        cio._named(path, e)


# --------------------------------------------------------------------------- from a fitted learner
def build_estimate(oracle: BenefitOracle, *, method: str, config: Mapping[str, Any], utilities: Mapping,
                   metric: str, sense: str, weights=None, planted_groups=None, extra: Mapping | None = None,
                   peeling: Peeling | None = None) -> Estimate:
    """A fitted learner's :class:`Estimate`: ``BG(all)`` and peeling on its benefit oracle.

    ``BG(all)`` is ``oracle.benefit_graph(all)``; the partition and its rounds are
    those of :func:`coalitions.peeling.peel_oracle` on ``oracle`` (``docs/concepts.md``
    §3) — learned oracles have no values, so every source component is kept as it is.

    Parameters
    ----------
    oracle : BenefitOracle
        What the learner learned: answers ``BG(R)`` for any ``R``.
    method : str
    config : mapping
        JSON-ready settings of the learner and the data.
    utilities : mapping
        ``{"val": {name: metric}, "test": {name: metric}}``.
    metric : str
    sense : {"max", "min"}
    weights : array of shape (N, N), optional
        The learned weights, when the learner has pairwise weights.
    planted_groups : sequence of sequence of str, optional
    extra : mapping, optional
        Method-specific JSON-ready results.
    peeling : Peeling, optional
        The peeling of ``oracle`` when the caller already ran it (it must be of this oracle).
    """
    peeling = peel_oracle(oracle) if peeling is None else peeling
    grand = (1 << len(oracle.clients)) - 1
    return Estimate(clients=tuple(oracle.clients), method=method, config=dict(config), weights=weights,
                    utilities=dict(utilities), metric=metric, sense=sense, benefit_graph=oracle.benefit_graph(grand),
                    partition=Partition(tuple(oracle.clients), peeling.partition),
                    rounds=tuple(r.stable for r in peeling.rounds if r.stable),
                    planted_groups=planted_groups, extra=dict(extra or {}))
