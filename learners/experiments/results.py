"""The ``coalitions/reproduction@1`` format (``results.json``) as typed objects.

A reproduction (:class:`Reproduction`) holds the settings and, per regime
(:class:`RegimeResult`), one :class:`Run` per seed: the exact game's summary
(:class:`ExactSummary`, where the exhaustive oracle was affordable) and each
learner's (:class:`MethodSummary`, with its :class:`Comparison` against the exact
game), plus the regime's summary table over seeds.  Every object writes itself
as JSON with ``to_json()`` (keys in the order ``docs/formats.md`` lists) and is
read back with ``from_json()``; :func:`read_results` and :func:`write_results`
do the file.  The runner (:mod:`.runner`) builds these objects, the report
(:mod:`.report`) and the figures (:mod:`.figures`) read them; neither imports the
other.  Nothing here imports PyTorch.

Examples
--------
>>> run = Run(seed=0, methods={})
>>> Run.from_json(run.to_json()) == run
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from coalitions.errors import InputError
from coalitions.io import read_json, write_json

__all__ = ["partition_key", "RESULTS_FORMAT", "ExactSummary", "Comparison", "MethodSummary", "Run", "RegimeResult", "Reproduction",
           "read_results", "write_results"]


def _name_key(name: str) -> tuple:
    """Clients in natural order: ``2`` before ``10``, numbers before names."""
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def partition_key(blocks, sep: str = " | ") -> str:
    """A partition as the reports write it, in one order whatever the order found: ``0,1,2 | 3 | 4,5``.

    Members sorted within each block, blocks by their first member (natural order: ``0 | 1 | 2 | 3 | 4 | 5``,
    not the peeling's ``0 | 1 | 2 | 4 | 5 | 3``).

    Examples
    --------
    >>> partition_key([["4"], ["5", "10"], ["3"]])
    '3 | 4 | 5,10'
    """
    ordered = sorted((sorted((str(c) for c in b), key=_name_key) for b in blocks), key=lambda b: _name_key(b[0]))
    return sep.join(",".join(b) for b in ordered)

RESULTS_FORMAT = "coalitions/reproduction@1"

Blocks = list[list[str]]


def _need(data: Any, keys: tuple[str, ...], what: str) -> None:
    if not isinstance(data, dict):
        raise InputError(f"{what} must be an object")
    for k in keys:
        if k not in data:
            raise InputError(f"{what} lacks field {k!r}")


@dataclass
class ExactSummary:
    """The exact game of one run: its CE and each client's metric alone, in the CE and with everyone.

    ``val`` and ``test`` map ``"local"``, ``"ce"`` and ``"all"`` to ``{client: metric}``.
    ``support`` is the CE's support over bootstrap replicates of the validation sets
    (``"support"`` of ``coalitions/equilibrium@1``, docs/concepts.md §6), or None.
    ``equilibrium`` is the solved :class:`coalitions.Equilibrium` while in memory (never written).
    ``loss`` is the validation-loss game of the same models (``ExhaustiveOracle(loss_game=True)``):
    its CE ``partition``, ``certificate``, ``model_in_ce``, ``support``, ``val`` (losses alone /
    in its CE / with everyone) and ``test`` (the *test metric* of those models), or None.
    """

    metric: str | None
    partition: Blocks
    certificate: bool
    found_by: str
    rounds: list[Blocks]
    ocs: dict[str, list[str]]
    ambiguous: list[str]
    edges: list[list[str]]
    model_in_ce: dict[str, list[str]]
    val: dict[str, dict[str, float]]
    test: dict[str, dict[str, float]]
    support: dict | None = None
    equilibrium: Any = field(default=None, repr=False, compare=False)
    loss: dict | None = None

    KEYS = ("metric", "partition", "certificate", "found_by", "rounds", "ocs", "ambiguous", "edges", "model_in_ce",
            "val", "test")

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.KEYS}
        if self.support is not None:
            out["support"] = self.support
        if self.loss is not None:
            out["loss"] = self.loss
        return out

    @classmethod
    def from_json(cls, data) -> ExactSummary:
        _need(data, cls.KEYS, "an exact summary")
        support = data.get("support")
        if support is not None:
            _need(support, ("partition", "coalitions", "replicates"), "an exact summary's support")
        loss = data.get("loss")
        if loss is not None:
            _need(loss, ("partition", "val", "test"), "an exact summary's loss game")
        return cls(**{k: data[k] for k in cls.KEYS}, support=support, loss=loss)


@dataclass
class Comparison:
    """A learner's estimate against the exact game (:func:`coalitions.compare.compare`), and
    whether its partition is a CE of the exact game (``is_exact_ce``, certified exhaustively)."""

    edge_precision: float
    edge_recall: float
    edge_f1: float
    ocs_exact: float
    same_partition: bool
    ari: float
    regret: dict[str, float]
    is_exact_ce: bool

    KEYS = ("edge_precision", "edge_recall", "edge_f1", "ocs_exact", "same_partition", "ari", "regret", "is_exact_ce")

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.KEYS}

    @classmethod
    def from_json(cls, data) -> Comparison:
        _need(data, cls.KEYS, "a comparison")
        return cls(**{k: data[k] for k in cls.KEYS})


@dataclass
class MethodSummary:
    """One learner on one run: its equilibrium, utilities, weights, learned edges and comparison.

    ``sensitivity`` (learners with a weight rule, and SPO's ratio rule): the learned
    CE across the rule's threshold, each row with its agreement with the exact
    CE (``edge_f1``, ``same_partition``) where the exact game exists.  ``rules``
    (SPO): the rule used and the paper's ratio rule side by side, labelled, each
    against the exact CE.  Both are None where they do not apply.
    ``estimate`` is the :class:`coalitions.estimate.Estimate` while in memory (never written).
    """

    partition: Blocks
    test: dict[str, float]
    val: dict[str, float]
    weights: list[list[float]] | None
    edges: list[list[str]]
    compare: Comparison | None = None
    estimate: Any = field(default=None, repr=False, compare=False)
    sensitivity: dict | None = None
    rules: dict | None = None
    #: SPO only: its utilities inside its own CE (the paper's "CE (ours)" row, spo_column.ce_ours).
    ce_ours: dict | None = None
    #: SPO only: the paper's CE by its definition, SPO's partition scored by the exact game's models of its
    #: coalitions (spo_column.ce_paper); None without the exact game.
    ce_paper: dict | None = None
    #: The learning rate chosen on validation from the protocol's grid: ``{"grid": [...],
    #: "val_loss": [...], "chosen": lr}`` (learners/training/tuning.py); None without a grid.
    lr_tuning: dict | None = None
    #: Where the column stopped: ``{"lr": rate trained at, "stopped_at": local step, "hit_max": bool}``
    #: (columns.stopping_record); None when its learner does not stop early.
    stopping: dict | None = None

    def to_json(self) -> dict:
        out = {"partition": self.partition, "test": self.test, "val": self.val, "weights": self.weights,
               "edges": self.edges}
        if self.compare is not None:
            out["compare"] = self.compare.to_json()
        if self.sensitivity is not None:
            out["sensitivity"] = self.sensitivity
        if self.rules is not None:
            out["rules"] = self.rules
        if self.ce_ours is not None:
            out["ce_ours"] = self.ce_ours
        if self.ce_paper is not None:
            out["ce_paper"] = self.ce_paper
        if self.lr_tuning is not None:
            out["lr_tuning"] = self.lr_tuning
        if self.stopping is not None:
            out["stopping"] = self.stopping
        return out

    @classmethod
    def from_json(cls, data) -> MethodSummary:
        _need(data, ("partition", "test", "val", "weights", "edges"), "a learner's summary")
        cmp = data.get("compare")
        return cls(data["partition"], data["test"], data["val"], data["weights"], data["edges"],
                   None if cmp is None else Comparison.from_json(cmp), sensitivity=data.get("sensitivity"),
                   rules=data.get("rules"), ce_ours=data.get("ce_ours"), ce_paper=data.get("ce_paper"),
                   lr_tuning=data.get("lr_tuning"), stopping=data.get("stopping"))


@dataclass
class Run:
    """One seed of one regime.

    ``seed`` is the user's seed; ``data_seed`` (the data split) and ``init_seed``
    (initialisation and batch order of every model) are derived from it by
    :func:`coalitions.learners.experiments.statistics.separate_seeds` (None in
    results written before they were separated).
    """

    seed: int
    methods: dict[str, MethodSummary]
    exact: ExactSummary | None = None
    data_seed: int | None = None
    init_seed: int | None = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {"seed": self.seed}
        if self.data_seed is not None:
            out["data_seed"] = self.data_seed
        if self.init_seed is not None:
            out["init_seed"] = self.init_seed
        out["methods"] = {m: s.to_json() for m, s in self.methods.items()}
        if self.exact is not None:
            out["exact"] = self.exact.to_json()
        return out

    @classmethod
    def from_json(cls, data) -> Run:
        _need(data, ("seed", "methods"), "a run")
        exact = data.get("exact")
        return cls(data["seed"], {m: MethodSummary.from_json(s) for m, s in data["methods"].items()},
                   None if exact is None else ExactSummary.from_json(exact), data.get("data_seed"),
                   data.get("init_seed"))


@dataclass
class RegimeResult:
    """Every run of one regime and the summary table over them (``runner.summarize``)."""

    name: str
    title: str
    options: dict
    runs: list[Run]
    clients: list[str]
    metric: str | None
    summary: dict
    #: The report's sentence on the learners' convergence (``report.convergence_note``), or None.
    convergence: str | None = None
    #: The first run's validation-loss curves, ``{label: {"x": [...], "y": [...]}}``
    #: (``figures.convergence_series``), kept so that the figures can be redrawn from the file.
    curves: dict | None = None
    #: The exact game the regime's verdicts rest on, ``"metric"`` or ``"loss"``; None where it was not
    #: chosen on held-out splits (catalogue.Regime.primary).
    primary: str | None = None
    #: Which comparisons the level covers at once when the exact games are solved (catalogue.Regime.family).
    family: str = "comparison"

    def to_json(self) -> dict:
        out = {"name": self.name, "title": self.title, "options": self.options,
               "runs": [r.to_json() for r in self.runs], "clients": self.clients, "metric": self.metric,
               "summary": self.summary}
        if self.convergence is not None:
            out["convergence"] = self.convergence
        if self.curves is not None:
            out["convergence_curves"] = self.curves
        if self.primary is not None:
            out["primary_game"] = self.primary
        out["family"] = self.family
        return out

    @classmethod
    def from_json(cls, data) -> RegimeResult:
        _need(data, ("name", "title", "options", "runs", "clients", "metric", "summary"), "a regime")
        return cls(data["name"], data["title"], data["options"], [Run.from_json(r) for r in data["runs"]],
                   data["clients"], data["metric"], data["summary"], data.get("convergence"),
                   data.get("convergence_curves"), data.get("primary_game"), data.get("family", "comparison"))


@dataclass
class Reproduction:
    """A whole ``results.json``."""

    experiment: str
    title: str
    dataset: str
    quick: bool
    device: str
    seeds: list[int]
    methods: list[str]
    method_options: dict[str, dict]
    oracle: dict | None
    published: dict | None
    notes: str
    regimes: list[RegimeResult]
    elapsed_s: float = 0.0
    compute_s: float = 0.0
    compute_complete: bool = True
    figures: list[str] = field(default_factory=list)
    plot_hint: str | None = None
    #: Per regime: the training protocol and each method's matched budget (catalogue.budget_record).
    budget: dict | None = None
    #: What ran the pieces trained in this call (not the backend asked for): ``{"name": "local",
    #: "workers": 1}`` or Ray's ``{"name": "ray", "address", "nodes", "workers", "tasks"}``
    #: (:func:`coalitions.learners.distributed.run_tasks`); ``None`` in files written before it was recorded.
    backend: dict | None = None

    def to_json(self) -> dict:
        out = {"format": RESULTS_FORMAT, "experiment": self.experiment, "title": self.title,
               "dataset": self.dataset, "quick": self.quick, "device": self.device, "seeds": self.seeds,
               "methods": self.methods, "method_options": self.method_options, "oracle": self.oracle,
               "published": self.published, "notes": self.notes, "regimes": [r.to_json() for r in self.regimes],
               "elapsed_s": self.elapsed_s, "compute_s": self.compute_s, "compute_complete": self.compute_complete,
               "figures": self.figures}
        if self.plot_hint:
            out["plot_hint"] = self.plot_hint
        if self.budget is not None:
            out["budget"] = self.budget
        if self.backend is not None:
            out["backend"] = self.backend
        return out

    @classmethod
    def from_json(cls, data) -> Reproduction:
        keys = ("experiment", "title", "dataset", "quick", "device", "seeds", "methods", "method_options", "oracle",
                "published", "notes", "regimes")
        _need(data, keys, "a reproduction")
        if data.get("format") != RESULTS_FORMAT:
            raise InputError(f"unknown format {data.get('format')!r} (expected {RESULTS_FORMAT!r})")
        return cls(**{k: data[k] for k in keys if k != "regimes"},
                   regimes=[RegimeResult.from_json(r) for r in data["regimes"]],
                   elapsed_s=data.get("elapsed_s", 0.0), compute_s=data.get("compute_s", 0.0),
                   compute_complete=data.get("compute_complete", True), figures=list(data.get("figures", [])),
                   plot_hint=data.get("plot_hint"), budget=data.get("budget"), backend=data.get("backend"))


def read_results(path: str | os.PathLike) -> Reproduction:
    """Read a ``results.json``; a malformed one raises :class:`~coalitions.errors.InputError` naming the file."""
    data = read_json(path, RESULTS_FORMAT)
    try:
        return Reproduction.from_json(data)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None


def write_results(results: Reproduction, path: str | os.PathLike) -> None:
    """Write ``results`` as ``results.json``."""
    write_json(results.to_json(), path)
