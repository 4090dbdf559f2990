"""The readout of a fitted personalised learner: scores, weights, the benefit oracle, the estimate's record.

:class:`Readout` is what a personalised learner reads off its trained clients: each client's
tuning loss (:meth:`~Readout.val_losses`, what early stopping reads), its validation and test
metric (``utilities_``) and its outputs (:meth:`~Readout.client_outputs`), the weight matrix the
rule reads (:meth:`~Readout.rule_weights`), the benefit oracle, the threshold sensitivity, and the
estimate's ``config`` and ``extra``.  :class:`RefitOracle` answers ``BG(R)`` by training again.

From weights to an equilibrium (``docs/concepts.md``, "Learned benefit graphs")
    With a weight matrix (FedAMP's ``ξ``, FedeRiCo's posteriors) ``BG(R)``
    comes from :class:`~coalitions.oracles.WeightOracle` (rule and threshold
    configurable) on the matrix :meth:`Readout.rule_weights` names
    (FedAMP: its attention relative to an identical peer, so that the rule has
    a null reference): for ``R ⊊ all`` rows are **renormalised** over ``R`` by
    default; ``refit=True`` trains the method again on the clients of ``R``
    alone and reads ``BG(R)`` off the new weights (:class:`RefitOracle`).  The
    estimate's config says which (``"restricted": "renormalise" | "refit"``).
    Baselines without pairwise weights (Local, FedAvg, SuPerFed) write
    ``weights: null`` and the *structural* graph of what they train: Local no
    edges (everyone alone), FedAvg and SuPerFed every client on every other
    (one shared federated model) — config ``"graph": "structural"``
    (:class:`~coalitions.oracles.StructuralOracle`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from coalitions.bitmask import mask_of, members
from coalitions.errors import InputError
from coalitions.graph import BenefitGraph, BenefitOracle
from coalitions.learners.data.federation import Federation
from coalitions.learners.data.metrics import evaluate_batch
from coalitions.learners.training.engine import Engine, Padded
from coalitions.oracles import DEFAULT_THRESHOLDS, StructuralOracle, WeightOracle
from coalitions.params import check_param
from coalitions.peeling import Peeling
from coalitions.sensitivity import SensitivityRow, default_thresholds, threshold_sensitivity

__all__ = ["Readout", "RefitOracle"]


class RefitOracle:
    """``BG(R)`` by training the method again on the clients of ``R`` alone (``--refit``).

    ``BG(all)`` comes from the fitted weights; for ``R ⊊ all`` a fresh copy of
    the learner (same settings and seed, no checkpoint) is fitted on the
    sub-federation of ``R`` and its weight matrix is read with the same rule.
    Single clients have no collaborators.  Graphs are cached per ``R``.
    """

    def __init__(self, learner: Any, federation: Federation, weights: np.ndarray):
        self.clients = federation.names
        self._learner = learner
        self._fed = federation
        self._weights = weights
        self._cache: dict[int, BenefitGraph] = {}
        self.refits_ = 0

    def benefit_graph(self, within: int) -> BenefitGraph:
        within = int(within)
        if within in self._cache:
            return self._cache[within]
        idx = members(within)
        grand = (1 << len(self.clients)) - 1
        if within == grand:
            graph = self._learner.weight_oracle(self.clients, self._weights).benefit_graph(within)
        elif len(idx) == 1:
            graph = BenefitGraph(self.clients, within, ((idx[0], 0),))
        else:
            sub = Federation(self._fed.name, self._fed.task, self._fed.metric,
                             tuple(self._fed.clients[i] for i in idx), self._fed.n_classes, None,
                             self._fed.options, tuning=self._fed.tuning)   # the same data roles
            params = {**self._learner.get_params(deep=False), "checkpoint": None, "progress": None, "refit": False}
            clone = type(self._learner)(**params).fit(sub)
            self.refits_ += 1
            local = clone.oracle_.benefit_graph((1 << len(idx)) - 1)
            collab = tuple((idx[a], mask_of(idx[b] for b in members(c))) for a, c in local.collaborators)
            graph = BenefitGraph(self.clients, within, collab)
        self._cache[within] = graph
        return graph


class Readout:
    """What a personalised learner reads off its trained clients (module docstring).

    Reads the learner's parameters (``rule``, ``threshold``, ``refit``), its set-up
    (``federation_``, ``engine_``, ``per_sample_loss_``) and what the method's
    :meth:`~coalitions.learners.methods.base.PersonalizedLearner.finish` and
    :meth:`~coalitions.learners.methods.base.PersonalizedLearner.client_scores` give.
    """

    #: Does the method produce a pairwise weight matrix?
    has_weights: ClassVar[bool] = True
    #: Baselines: does the method train one shared model for everyone (FedAvg, SuPerFed)
    #: or a model per client alone (Local)?  Gives the structural graph.
    shares_model: ClassVar[bool] = True

    method: ClassVar[str]
    rule: str
    threshold: float | None
    refit: bool
    federation_: Federation
    engine_: Engine
    per_sample_loss_: Callable[..., torch.Tensor]
    weights_: np.ndarray | None
    weights_history_: list[np.ndarray]
    model_: str
    rounds_: int
    data_roles_: dict | None
    loss_history_: list[float]
    val_loss_history_: list[float]
    val_loss_clients_: list[list[float]]
    resumed_from_: int
    fit_seconds_: float

    if TYPE_CHECKING:   # the method's side, on PersonalizedLearner
        def finish(self, state: dict) -> None: ...
        def client_scores(self, data: Padded) -> torch.Tensor: ...
        def config(self) -> dict: ...
        def _lr_for(self) -> float: ...
        def patience_rounds(self) -> int | None: ...

    # -- scores
    def val_losses(self, state: dict, data: Padded) -> list[float]:
        """Each client's mean task loss on its tuning rows (``data``) under the models of ``state``.

        What the client would predict with after this round (:meth:`finish`, then
        :meth:`client_scores`); recorded every round as ``val_loss_history_`` so that
        convergence is visible, and what early stopping and the learning-rate grid
        read.  The tuning rows are the validation rows unless the protocol has a ``tune_split``
        (:mod:`coalitions.learners.data.roles`).  Nothing is trained on it.
        """
        self.finish(state)
        with torch.no_grad():
            scores = self.client_scores(data)
            per = self.per_sample_loss_(scores.to(torch.float32), data.y)
            mean = (per * data.m).sum(1) / data.m.sum(1).clamp(min=1.0)
        return [float(x) for x in mean.double().cpu().numpy()]

    def client_utilities(self, fed: Federation, device) -> dict:
        """``{"val": {name: metric}, "test": {name: metric}}``: each client's metric on its own splits."""
        out: dict[str, dict[str, float]] = {}
        for part in ("val", "test"):
            data = Padded(fed, part, device)
            scores = self.client_scores(data).detach().cpu().double().numpy()
            out[part] = {}
            for i, name in enumerate(fed.names):
                n = int(data.sizes[i])
                out[part][name] = float(evaluate_batch(fed.metric, data.raw_y[i], scores[i:i + 1, :n])[0])
        return out

    def client_outputs(self, part: str = "test") -> list[np.ndarray]:
        """Each client's personalised model's outputs on its own ``part`` split: what ``utilities_`` scores.

        ``out[i]`` has shape ``(n_i,)`` (regression, binary logits) or ``(n_i, C)``
        (class logits); :func:`coalitions.learners.data.metrics.evaluate` of it is
        ``utilities_[part][name_i]``.  The per-sample statistics of the reports
        (bootstrap intervals, :mod:`coalitions.learners.experiments.statistics`) start here.
        """
        check_param("part", part, "choice", choices=("val", "test"))
        fed = self.federation_
        data = Padded(fed, part, self.engine_.device_)
        scores = self.client_scores(data).detach().cpu().double().numpy()
        if scores.ndim == 3 and scores.shape[2] == 1:
            scores = scores[:, :, 0]
        return [scores[i, :int(data.sizes[i])] for i in range(fed.n)]

    # -- weights and the oracle
    def rule_weights(self) -> np.ndarray:
        """The row-stochastic matrix the weight rule reads (``weights_`` unless the method says otherwise).

        FedAMP and HeurFedAMP read their self-referenced affinity (``docs/concepts.md`` §5).
        """
        if self.weights_ is None:
            raise InputError(f"{self.method} has no pairwise weights")
        return self.weights_

    def weight_oracle(self, names, weights) -> WeightOracle:
        """The :class:`~coalitions.oracles.WeightOracle` of this learner's rule and threshold on ``weights``."""
        return WeightOracle(names, weights, self.rule, self.threshold)

    def _benefit_oracle(self, fed: Federation) -> BenefitOracle:
        """The fitted learner's oracle: structural without weights, else the rule on the weights (or refits)."""
        if not self.has_weights:
            return StructuralOracle(fed.names, self.shares_model)
        if self.refit:
            return RefitOracle(self, fed, self.rule_weights())
        return self.weight_oracle(fed.names, self.rule_weights())

    def sensitivity(self, thresholds=None) -> tuple[str, float, tuple[SensitivityRow, ...]]:
        """The learned equilibrium across the rule's threshold: ``(rule, threshold used, rows)``.

        A pure function of :meth:`rule_weights` (:func:`coalitions.sensitivity.threshold_sensitivity`,
        rows renormalised over ``R``, also under ``refit=True``); ``thresholds``
        defaults to the rule's grid, to which the threshold used is added.
        """
        if not self.has_weights:
            raise InputError(f"{self.method} has no pairwise weights: its graph is structural, with no threshold")
        used = float(self.threshold if self.threshold is not None else DEFAULT_THRESHOLDS[self.rule])
        grid = [*(default_thresholds(self.rule) if thresholds is None else thresholds), used]
        return self.rule, used, threshold_sensitivity(self.federation_.names, self.rule_weights(), self.rule, grid)

    # -- the estimate's record
    def estimate_config(self) -> dict:
        """The estimate's ``config``: the settings, the model, the data, the engine and how ``BG(R)`` is read."""
        fed = self.federation_
        config: dict[str, Any] = {
            "method": self.method, **self.config(), "model_": self.model_, "dataset": fed.name,
            "data_options": dict(fed.options), "device_used": str(self.engine_.device_),
            "engine_used": self.engine_.label,
            "threshold_used": self.threshold if self.threshold is not None else DEFAULT_THRESHOLDS[self.rule]}
        if getattr(self, "data_roles_", None) is not None:   # fitted here (a Flower server's twin holds no data)
            config["data_roles"] = self.data_roles_
        if self.has_weights:
            config["restricted"] = "refit" if self.refit else "renormalise"
            # renormalising over R is a no-op for the ratio-type rules: BG(R) = BG(all) restricted
            config["restriction_is_noop"] = not self.refit and self.rule in ("relative", "mass")
            config["graph"] = "affinity" if getattr(self, "graph", "weights") == "affinity" else "weights"
        else:
            config["restricted"] = "structural"
            config["graph"] = "structural"
        return config

    def _stopping_record(self) -> dict:
        """What ``extra`` records of the budget: rounds, the kept round, the stopping step, the rate.

        A learner that did not run :meth:`fit` (the Flower server's twin runs every
        round, without early stopping) records the rounds it ran.
        """
        run = int(getattr(self, "rounds_run_", self.rounds_))
        return {"max_rounds": int(self.rounds_), "best_round": int(getattr(self, "best_round_", run)),
                "stopped_at": getattr(self, "stopped_at_", None), "hit_max": bool(getattr(self, "hit_max_", True)),
                "lr": self._lr_for(), "patience": self.patience_rounds()}

    def estimate_extra(self, peeling: Peeling) -> dict:
        """The estimate's ``extra``: the training record (losses, rounds, stopping) and the weights' history."""
        names = self.federation_.names
        extra = {"loss_history": self.loss_history_, "fit_seconds": self.fit_seconds_,
                 "resumed_from": self.resumed_from_, "rounds_run": int(getattr(self, "rounds_run_", self.rounds_)),
                 **self._stopping_record(),
                 "val_loss_history": {
                     "mean": [float(v) for v in self.val_loss_history_],
                     "clients": {c: [float(v[i]) for v in self.val_loss_clients_] for i, c in enumerate(names)}}}
        if self.has_weights:
            extra["weights_history"] = [np.round(w, 8).tolist() for w in self.weights_history_]
            rule_w = self.rule_weights()
            if rule_w is not self.weights_:
                extra["rule_weights"] = np.round(rule_w, 12).tolist()
        return extra
