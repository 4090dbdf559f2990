"""The estimator contract, and what every personalised federated learner shares.

:class:`Learner` is the abstract base of every method (scikit-learn's conventions, from
:class:`~coalitions.learners.estimator.EstimatorMixin`): ``__init__`` only stores its explicitly
named parameters, which ``get_params(deep=True)`` reads off the signature, ``set_params``
changes (``protocol__lr`` included) and ``sklearn.base.clone`` copies; ``fit(federation)``
validates them (:meth:`Learner.check_params`, errors naming the parameter), fits, and exposes
what was learned — ``oracle_`` (a benefit oracle), ``utilities_`` and, where the method has
them, ``weights_``.  The estimate (``estimate_``) is built from those by the core's one function,
:func:`coalitions.estimate.build_estimate` (``BG(all)``, peeling, the record); a method adds
its own settings and results through the public hooks :meth:`Learner.estimate_config` and
:meth:`Learner.estimate_extra`.

:class:`PersonalizedLearner` is the base of ``fedamp``, ``fedamp-heuristic``, ``federico``,
``superfed-mm``, ``superfed-lm``, ``local`` and ``fedavg``.  A subclass says how to start
(:meth:`~PersonalizedLearner.init_state`), what one communication round does
(:meth:`~PersonalizedLearner.train_round`), what the final state means
(:meth:`~PersonalizedLearner.finish`) and, if it is not one model per client, how a client
predicts (:meth:`~PersonalizedLearner.client_scores`); the base runs the rounds on the
batched :class:`~coalitions.learners.training.engine.Engine`, saves a checkpoint after every
round, reports progress and scores every client on its validation and test data.

Randomness
    Everything random in round ``r`` comes from ``numpy.random.default_rng([seed, r, stream])``
    (stream 0: minibatch order; 1: the method's own draws) and the initial
    parameters from ``torch.Generator().manual_seed(seed)``.  Hence the same
    seed gives the same result, and a run resumed from the checkpoint of round
    ``r`` continues exactly as the uninterrupted run would.  Every client
    starts from the same initial model (as a server's broadcast would give).
Optimiser
    A site's optimiser state (Adam's moments and step count, SGD's momentum)
    is the site's own and persists across rounds, as it would on a real site
    that keeps its process between rounds: each round a client continues from
    the state it ended the previous round with, applied to the parameters the
    server sent (:meth:`PersonalizedLearner._site_steps`; the state is saved in
    every round's checkpoint).  Restarting Adam every round would make its
    first step ``lr·sign(g)`` and turn a one-step-per-round method into sign
    descent at a constant rate (issue 18).
From weights to an equilibrium (``docs/concepts.md``, "Learned benefit graphs")
    With a weight matrix (FedAMP's ``ξ``, FedeRiCo's posteriors) ``BG(R)``
    comes from :class:`~coalitions.oracles.WeightOracle` (rule and threshold
    configurable) on the matrix :meth:`PersonalizedLearner.rule_weights` names
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

import copy
import inspect
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from coalitions.bitmask import mask_of, members
from coalitions.errors import InputError
from coalitions.estimate import Estimate, build_estimate
from coalitions.graph import BenefitGraph, BenefitOracle
from coalitions.learners.data.federation import Federation
from coalitions.learners.data.metrics import evaluate_batch, loss_function
from coalitions.learners.data.roles import data_roles, with_roles
from coalitions.learners.estimator import EstimatorMixin
from coalitions.learners.training.checkpoint import federation_arrays, fingerprint, load_state, save_state
from coalitions.learners.training.engine import PATHS, Engine, Padded, resolve_device, train_epochs
from coalitions.learners.training.models import make_model
from coalitions.learners.training.protocol import Scheduled, TrainingProtocol, decayed, default_kind, protocol_with
from coalitions.learners.training.threads import applied, step_macs
from coalitions.oracles import DEFAULT_THRESHOLDS, WEIGHT_RULES, StructuralOracle, WeightOracle
from coalitions.params import ParameterError, check_param
from coalitions.peeling import Peeling, peel_oracle
from coalitions.sensitivity import SensitivityRow, default_thresholds, threshold_sensitivity

__all__ = ["Learner", "PersonalizedLearner", "RefitOracle", "COMMON_PARAMS", "unflatten", "default_model",
           "default_kind", "EarlyStop", "ClientsEarlyStop"]

#: The parameters every personalised learner takes, after its own (each class names them in its
#: ``__init__``).  No training setting is among them: the model, optimiser, rate, schedule, batch,
#: weight decay, budget and patience are the ``protocol``'s alone (issue 18: one place for each setting).
COMMON_PARAMS = ("protocol", "rule", "threshold", "refit", "device", "engine", "chunk", "seed", "checkpoint",
                 "progress")
#: Settings that never change the result (left out of the checkpoint fingerprint).
_NOT_RESULT = ("device", "checkpoint", "progress", "engine", "chunk", "rule", "threshold", "refit")


def default_model(federation: Federation, images: str = "cnn") -> str:
    """:func:`default_kind` of ``federation``'s task and input shape."""
    return default_kind(federation.task, tuple(federation.input_shape), images)


def unflatten(flat: torch.Tensor, like: dict) -> dict:
    """Inverse of :func:`coalitions.learners.training.engine.flatten`: ``(M, P)`` back to a stacked dict shaped like ``like``."""
    out, at = {}, 0
    m = flat.shape[0]
    for k, v in like.items():
        size = math.prod(v.shape[1:])
        out[k] = flat[:, at:at + size].reshape(m, *v.shape[1:])
        at += size
    return out


def _takes_info(callback) -> bool:
    """Does ``callback`` accept a third positional argument (the round's ``info``)?"""
    try:
        params = list(inspect.signature(callback).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 3


# --------------------------------------------------------------------------- the contract
class EarlyStop:
    """Patience on a validation loss evaluated once per round (docs/learners-personalized.md#early-stopping-patience).

    ``update(loss)`` returns whether ``loss`` is the best so far (strictly lower);
    ``stopped`` turns true once ``patience`` consecutive evaluations have not
    improved on the best.  ``patience=None`` never stops.  ``history`` replays
    the evaluations of a resumed run.

    Examples
    --------
    >>> s = EarlyStop(2)
    >>> [s.update(v) for v in (3.0, 2.0, 2.5, 2.1)], s.stopped, s.best_round
    ([True, True, False, False], True, 2)
    """

    def __init__(self, patience: int | None, history=()):
        self.patience, self.best, self.best_round, self.bad, self.stopped = patience, math.inf, 0, 0, False
        self.round = 0
        for v in history:
            self.update(v)

    def update(self, loss: float) -> bool:
        self.round += 1
        if loss < self.best:
            self.best, self.best_round, self.bad = float(loss), self.round, 0
            return True
        self.bad += 1
        if self.patience is not None and self.bad >= self.patience:
            self.stopped = True
        return False

    def update_clients(self, per_client) -> np.ndarray:
        """One evaluation of the clients' losses, read as their mean: which clients' models are now the best (all or none)."""
        return np.full(len(per_client), self.update(float(np.mean(per_client))))

    def best_rounds(self, n: int) -> list[int]:
        """The round each of ``n`` clients keeps: the one best round of the mean."""
        return [self.best_round] * n

    def stop_rounds(self, n: int) -> list[int]:
        """The round each of ``n`` clients stopped at: the last round run."""
        return [self.round] * n


class ClientsEarlyStop:
    """Patience per client, for clients whose models are independent (Local): each stops on its own loss.

    Client ``i``'s models are scored after every round by its own tuning loss; it stops when that
    loss has not improved for ``patience`` evaluations and keeps its best round, as the exhaustive
    game's model of ``{i}`` does (:mod:`coalitions.learners.game.stopping`).  ``update_clients``
    returns which clients improved (a stopped client never does); ``stopped`` is true once every
    client has stopped.  ``history`` (rounds × clients) replays a resumed run.

    Examples
    --------
    >>> s = ClientsEarlyStop(1, 2)
    >>> [s.update_clients(v).tolist() for v in ([3.0, 3.0], [2.0, 4.0], [2.5, 1.0])]
    [[True, True], [True, False], [False, False]]
    >>> s.stopped, s.best_rounds(2), s.stop_rounds(2)
    (True, [2, 1], [3, 2])
    """

    def __init__(self, patience: int | None, n: int, history=()):
        self.clients = [EarlyStop(patience) for _ in range(n)]
        for row in history:
            self.update_clients(row)

    def update_clients(self, per_client) -> np.ndarray:
        """Record one evaluation of every client's loss; which clients' models are now their best."""
        return np.array([False if s.stopped else s.update(float(v)) for s, v in zip(self.clients, per_client,
                                                                                     strict=True)])

    @property
    def stopped(self) -> bool:
        return all(s.stopped for s in self.clients)

    def best_rounds(self, n: int) -> list[int]:
        """The round each client keeps."""
        return [s.best_round for s in self.clients]

    def stop_rounds(self, n: int) -> list[int]:
        """The round each client stopped at (its last evaluation)."""
        return [s.round for s in self.clients]


class Learner(EstimatorMixin, ABC):
    """Abstract base of every learner: parameters, ``fit``, and the estimate from what was learned.

    Subclasses name every parameter in ``__init__`` (no ``*args`` / ``**kwargs``) and
    store each under its own name, without validating it; :meth:`fit` calls
    :meth:`check_params` first.  After ``fit`` a learner exposes ``federation_``,
    ``oracle_`` (answers ``BG(R)``), ``utilities_`` and ``weights_`` (``None`` without
    pairwise weights).
    """

    #: The method's name in estimates and on the command line.
    method: ClassVar[str] = ""

    # What fit() sets (the class docstring), declared for the type checker.
    federation_: Federation
    oracle_: BenefitOracle
    utilities_: dict
    weights_: np.ndarray | None
    peeling_seconds_: float

    @abstractmethod
    def check_params(self) -> None:
        """Validate the parameters; raises :class:`~coalitions.params.ParameterError` naming the first bad one."""

    @abstractmethod
    def fit(self, federation: Federation) -> Learner:
        """Fit on ``federation`` and set the learned attributes; returns ``self``."""

    @abstractmethod
    def estimate_config(self) -> dict:
        """The JSON-ready settings written to the estimate's ``config``."""

    def estimate_extra(self, peeling: Peeling) -> dict:
        """Method-specific JSON-ready results for the estimate's ``extra`` (``peeling``: of ``oracle_``)."""
        return {}

    @property
    def estimate_(self) -> Estimate:
        """The ``coalitions/estimate@1`` of the fitted learner (built once, on first use)."""
        cached = self.__dict__.get("_estimate")
        if cached is None:
            if not hasattr(self, "oracle_"):
                raise AttributeError(f"{type(self).__name__} is not fitted: call fit() first")
            fed = self.federation_
            t0 = time.perf_counter()
            peeling = peel_oracle(self.oracle_)
            self.peeling_seconds_ = time.perf_counter() - t0
            cached = self._estimate = build_estimate(
                self.oracle_, method=self.method, config=self.estimate_config(), utilities=self.utilities_,
                metric=fed.metric, sense=fed.sense, weights=self.weights_, planted_groups=fed.planted_groups,
                extra=self.estimate_extra(peeling), peeling=peeling)
        return cached

    def _forget_estimate(self) -> None:
        self.__dict__.pop("_estimate", None)


# --------------------------------------------------------------------------- refit oracle
class RefitOracle:
    """``BG(R)`` by training the method again on the clients of ``R`` alone (``--refit``).

    ``BG(all)`` comes from the fitted weights; for ``R ⊊ all`` a fresh copy of
    the learner (same settings and seed, no checkpoint) is fitted on the
    sub-federation of ``R`` and its weight matrix is read with the same rule.
    Single clients have no collaborators.  Graphs are cached per ``R``.
    """

    def __init__(self, learner: PersonalizedLearner, federation: Federation, weights: np.ndarray):
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


# --------------------------------------------------------------------------- the personalised learners
class PersonalizedLearner(Learner):
    """Base of the personalised learners (see the module docstring).

    Parameters
    ----------
    protocol : TrainingProtocol or None
        The training protocol (:class:`~coalitions.learners.training.protocol.TrainingProtocol`,
        docs/concepts.md §5) shared with the exact game and every other column of a
        comparison, and the only source of the training settings: the model, hidden
        units, optimiser, learning rate and its schedule, momentum, weight decay (on
        the weights, in the loss), batch, early-stopping patience and budget.  The
        rounds are the fewest that give the largest client ``protocol.steps`` local
        steps, a round being the fewest whole epochs that give every client at least
        ``protocol.local_steps`` steps (a method with its own floor, FedAMP's
        ``local_steps``, takes the larger); each optimised part of a site keeps one
        optimiser state and one schedule over the whole budget.  Early stopping
        (docs/learners-personalized.md#early-stopping-patience): with ``protocol.patience``,
        after every round the mean over clients
        of each client's validation loss is evaluated once; training stops when it has
        not improved for ``patience`` consecutive rounds, and the models kept are those
        of the round with the lowest validation loss.  With ``protocol.tune_split`` that
        loss is read on the tuning rows held out of each client's training rows, and the
        validation rows only score (:mod:`coalitions.learners.data.roles`; ``federation_``
        is then the federation trained on, ``data_roles_`` and the estimate's
        ``config["data_roles"]`` say which rows tuned and scored).  ``None`` (default): the default
        protocol of the federation's task and input shape,
        :func:`~coalitions.learners.training.protocol.protocol_with` ``(task, shape)``
        (what ``coalitions learn`` trains with when no training flag is given).
    rule : {"relative", "absolute", "mass"}
        How a weight row becomes collaborators (:class:`~coalitions.oracles.WeightOracle`).
    threshold : float or None
        The rule's threshold (``None``: the rule's default).
    refit : bool
        ``BG(R)`` for ``R ⊊ all`` by training again on ``R`` instead of
        renormalising rows (much slower: one fit per set peeling asks about).
    device : {"auto", "cpu", "cuda"}
    engine : {"auto", "batched", "sequential"}
        Path of the training engine (:mod:`coalitions.learners.training.engine`).
    chunk : int or None
        Models per ``vmap`` call on the batched path.
    seed : int
    checkpoint : str or Path or None
        File saved after every round; a later fit with the same data and
        settings resumes from it (and gives the same result as an
        uninterrupted run).
    progress : callable or None
        ``progress(done_rounds, total_rounds)`` after every round, or
        ``progress(done_rounds, total_rounds, info)`` when it takes a third
        argument: ``info`` is a dict of round statistics (e.g. ``{"loss": ...}``).

    Attributes
    ----------
    protocol_ : TrainingProtocol
        The protocol trained with: ``protocol``, or the task's default when it is ``None``.
    params_ : dict
        Each client's personalised model, stacked ``{name: (N, ...)}`` on the CPU.
    weights_ : ndarray (N, N) or None
    weights_history_ : list of ndarray
        The weight matrix used in each round (methods with weights).
    oracle_ : benefit oracle
        :class:`~coalitions.oracles.WeightOracle` on ``weights_`` (or :class:`RefitOracle`
        with ``refit=True``); :class:`~coalitions.oracles.StructuralOracle` without weights.
    utilities_ : dict
        ``{"val": {name: metric}, "test": {name: metric}}``.
    loss_history_ : list of float
        Mean training loss of each round.
    val_loss_history_ : list of float
        Mean over clients of each client's validation loss after each round (the
        models it would predict with then); ``val_loss_clients_`` holds the
        per-client lists (round by client).  Both go to the estimate's
        ``extra.val_loss_history`` (``{"mean": [...], "clients": {name: [...]}}``).
    rounds_ : int
        The rounds the protocol's budget gives (the most a fit runs).
    estimate_ : coalitions.estimate.Estimate
    engine_ : coalitions.learners.training.engine.Engine
    fit_seconds_ : float
    resumed_from_ : int
        Rounds loaded from the checkpoint (0 when none).
    best_round_ : int
        The round whose models were kept (the last one without a patience); a learner that stops
        per client (:attr:`stops_per_client`, Local) keeps each client's own round,
        ``best_round_clients_``, and ``best_round_`` is the latest of them.
    best_val_loss_ : float
        The kept models' tuning loss, the mean over clients of ``best_val_loss_clients_`` (each
        client's mean loss on its tuning rows under the model it keeps): what the learning-rate
        grid compares (:func:`~coalitions.learners.training.tuning.kept_val_loss`).  Under a
        patience the loss of the best round, not of the last round run.
    stopped_at_ : int
        Local gradient steps per client when training stopped:
        ``rounds run × steps per round`` (``steps_per_round_``); the budget's
        maximum when it never stopped early.  ``stopped_at_clients_``: where each client
        stopped (all at ``stopped_at_`` unless the learner stops per client).
    hit_max_ : bool
        Whether training ran the whole budget without early stopping.
    lr_ : float
        The (peak) learning rate trained with, the protocol's.
    """

    #: Does the method produce a pairwise weight matrix?
    has_weights: ClassVar[bool] = True
    #: Baselines: does the method train one shared model for everyone (FedAvg, SuPerFed)
    #: or a model per client alone (Local)?  Gives the structural graph.
    shares_model: ClassVar[bool] = True

    # The parameters (COMMON_PARAMS, kept by __init__ under their own names) and what fit() sets,
    # declared for the type checker.
    protocol: TrainingProtocol | None
    rule: str
    threshold: float | None
    refit: bool
    device: str
    engine: str
    chunk: int | None
    seed: int
    checkpoint: str | os.PathLike | None
    progress: Callable[..., Any] | None
    protocol_: TrainingProtocol
    params_: dict
    weights_history_: list[np.ndarray]
    lr_: float | None   # None: Local whose clients chose their rates (lr_clients_)

    def __init__(self, *, protocol=None, rule="relative", threshold=None, refit=False, device="auto", engine="auto",
                 chunk=None, seed=0, checkpoint=None, progress=None):
        self._store(locals())

    # -- configuration
    def config(self) -> dict:
        """The JSON-ready settings (every parameter but ``checkpoint`` and ``progress``).

        ``protocol`` is the protocol's fields (:meth:`TrainingProtocol.to_json
        <coalitions.learners.training.protocol.TrainingProtocol.to_json>`): once the
        learner is set up on a federation, the protocol it trains with (the task's
        default when ``protocol`` is ``None``); before, ``None`` when none was given.
        """
        out = {k: v for k, v in self.get_params(deep=False).items() if k not in ("checkpoint", "progress")}
        protocol = getattr(self, "protocol_", self.protocol)
        out["protocol"] = None if protocol is None else protocol.to_json()
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()}

    def check_params(self) -> None:
        """Validate the common settings (each raises :class:`~coalitions.params.ParameterError`)."""
        check_param("seed", self.seed, "int", low=0)
        check_param("rule", self.rule, "choice", choices=WEIGHT_RULES)
        check_param("threshold", self.threshold, "number", low=0, allow_none=True)
        check_param("refit", self.refit, "bool")
        check_param("device", self.device, "choice", choices=("auto", "cpu", "cuda"))
        check_param("engine", self.engine, "choice", choices=PATHS)
        check_param("chunk", self.chunk, "int", low=1, allow_none=True)
        check_param("progress", self.progress, "callable", allow_none=True)
        if self.protocol is not None and not isinstance(self.protocol, TrainingProtocol):
            raise ParameterError("protocol", "{name} must be a TrainingProtocol or None, got "
                                 f"{type(self.protocol).__name__}")

    # -- fitting
    def protocol_for(self, fed: Federation) -> TrainingProtocol:
        """The protocol a fit on ``fed`` trains with: ``protocol``, or the default of ``fed``'s task and input shape."""
        if self.protocol is not None:
            return self.protocol
        return protocol_with(fed.task, tuple(fed.input_shape))

    def _step_macs(self, fed: Federation) -> float:
        """Work of one local step of every client (the thread policy's input)."""
        protocol = self.protocol_for(fed)
        spec = make_model(self._model_for(fed), fed.input_shape, fed.n_outputs, hidden=int(protocol.hidden))
        b = protocol.batch_size
        batch = int(fed.sizes("train").max()) if b is None else int(b)
        return step_macs(spec, batch, fed.n)

    def prepare(self, fed: Federation, device, train_sizes=None) -> None:
        """Set up what training needs, without training: the model, the loss, the data, the engine, the budget.

        :meth:`fit` calls it on the whole federation; a Flower site calls it on a
        one-client federation holding its own data, with every site's training-set
        size (``train_sizes``, from the server), so that its rounds and schedule are
        those of the in-process learner; the Flower server on a stand-in federation
        without data.
        """
        self.federation_ = fed
        self.protocol_ = self.protocol_for(fed)
        self.train_sizes_ = np.asarray(fed.sizes("train") if train_sizes is None else train_sizes, dtype=np.int64)
        self.model_ = self._model_for(fed)
        self.spec_ = make_model(self.model_, fed.input_shape, fed.n_outputs, hidden=int(self.protocol_.hidden))
        self.per_sample_loss_ = loss_function(fed.task)
        self.engine_ = Engine(device, self.engine, self.chunk)
        self.rounds_ = self._rounds_for(fed)

    @applied
    def fit(self, federation: Federation) -> PersonalizedLearner:
        """Train every client for the protocol's rounds (or until it stops), score them, and expose the oracle."""
        if not isinstance(federation, Federation):
            raise InputError(f"{self.method}: fit() takes a Federation, got {type(federation).__name__}")
        self.check_params()
        self._forget_estimate()
        t0 = time.perf_counter()
        # tune_split: the rows that tune held out of training, the same rows for every column (data roles)
        fed = with_roles(federation, self.protocol_for(federation))
        self.data_roles_ = data_roles(fed)
        dev = resolve_device(self.device)
        self.prepare(fed, dev)
        self.train_data_ = Padded(fed, "train", dev)
        key = fingerprint({k: v for k, v in self.config().items() if k not in _NOT_RESULT}
                          | {"method": self.method, "model_": self.model_, "clients": list(fed.names)},
                          federation_arrays(fed))
        state = None
        self.resumed_from_ = 0
        self.loss_history_ = []
        self.val_loss_history_: list[float] = []
        self.val_loss_clients_: list[list[float]] = []
        patience = self._patience_for()
        best: dict | None = None
        if self.checkpoint is not None:
            loaded = load_state(self.checkpoint, key, dev)
            if loaded is not None:
                self.resumed_from_, state, meta = loaded
                if patience is not None:  # the kept (best) models travel with the running state
                    state, best = state["running"], state["best"]
                self.loss_history_ = list(meta.get("loss_history", []))
                self.val_loss_clients_ = [list(v) for v in meta.get("val_loss_clients", [])]
                self.val_loss_history_ = [float(np.mean(v)) for v in self.val_loss_clients_]
                if meta.get("engine") and self.engine == "auto":
                    path, chunk = meta["engine"]
                    self.engine_ = Engine(dev, path, chunk)
        if state is None:
            gen = torch.Generator().manual_seed(int(self.seed))
            state = self.init_state(fed, gen, dev)
        stopper = self._stopper(patience, fed.n)
        val_data = Padded(fed, "tuning", dev)   # the rows that stop it (and choose its rate): never the scoring rows
        for r in range(self.resumed_from_, self.rounds_):
            if stopper.stopped:
                break
            state, info = self.train_round(state, r,
                                           lambda stream, r=r: np.random.default_rng([int(self.seed), r, stream]))
            self.loss_history_.append(float(info.get("loss", float("nan"))))
            per_client = self._val_losses(state, val_data)
            self.val_loss_clients_.append(per_client)
            self.val_loss_history_.append(float(np.mean(per_client)))
            improved = stopper.update_clients(per_client)
            if patience is not None and improved.any():
                best = self._keep_best(best, state, improved)
            if self.checkpoint is not None:
                meta = {"loss_history": self.loss_history_, "val_loss_clients": self.val_loss_clients_,
                        "engine": list(self.engine_.choice_ or ("auto", None))}
                saved = state if patience is None else {"running": state, "best": state if best is None else best}
                save_state(self.checkpoint, key, r + 1, saved, meta)
            if self.progress is not None:
                if _takes_info(self.progress):
                    self.progress(r + 1, self.rounds_, info)
                else:
                    self.progress(r + 1, self.rounds_)
        if self.rounds_ == 0 and self.progress is not None:
            # no rounds (Local solved in closed form): one unit of work, as the oracle's closed form reports
            if _takes_info(self.progress):
                self.progress(1, 1, {})
            else:
                self.progress(1, 1)
        run = self.rounds_run_ = len(self.val_loss_history_)
        self.hit_max_ = run == self.rounds_   # ran the whole budget (a stop due on the last round saves nothing)
        self.best_round_clients_ = stopper.best_rounds(fed.n) if patience is not None else [run] * fed.n
        self.best_round_ = max(self.best_round_clients_)
        self.steps_per_round_ = self._steps_per_round(fed)
        self.stopped_at_ = run * self.steps_per_round_
        self.stopped_at_clients_ = [r * self.steps_per_round_ for r in stopper.stop_rounds(fed.n)]
        self.lr_ = self._lr_for()
        if patience is not None and best is not None:
            state = best
        self.state_ = state
        self.best_val_loss_clients_ = (self._val_losses(state, val_data) if not run else
                                       [self.val_loss_clients_[r - 1][i] for i, r in enumerate(self.best_round_clients_)])
        self.best_val_loss_ = float(np.mean(self.best_val_loss_clients_))
        self.finish(state)
        self.utilities_ = self._utilities(fed, dev)
        self.fit_seconds_ = time.perf_counter() - t0
        if not self.has_weights:
            self.oracle_ = StructuralOracle(fed.names, self.shares_model)
        elif self.refit:
            self.oracle_ = RefitOracle(self, fed, self.rule_weights())
        else:
            self.oracle_ = self.weight_oracle(fed.names, self.rule_weights())
        return self

    # -- the settings in force: the protocol's (protocol_for)
    def _model_for(self, fed: Federation) -> str:
        """The model kind trained on ``fed``: the protocol's, or :func:`default_model` when it names none."""
        return self.protocol_for(fed).model or default_model(fed)

    def _batch(self) -> int | None:
        """Minibatch size per client (``None``: full batch)."""
        return self.protocol_.batch_size

    def _steps_per_epoch(self) -> int:
        """Steps of one epoch of the largest client: ``⌈n_max / batch⌉`` (1 in full batch)."""
        b = self._batch()
        n = int(self.train_sizes_.max())
        return 1 if b is None else max(1, math.ceil(n / int(b)))

    def _rounds_for(self, fed: Federation) -> int:
        """Communication rounds: the fewest that give the largest client ``protocol.steps`` local steps."""
        return max(1, -(-int(self.protocol_.steps) // max(1, self._steps_per_round(fed))))

    def _patience_for(self) -> int | None:
        """Early-stopping patience in rounds, the protocol's."""
        patience = self.protocol_.patience
        return None if patience is None else int(patience)

    #: Are the clients' models independent, so that each stops on its own tuning loss (Local)?  Otherwise the
    #: mean over clients stops them all at one round (:class:`EarlyStop`).
    stops_per_client: ClassVar[bool] = False
    #: Does the learner choose its rate on the protocol's ``lr_grid`` itself (Local, per client)?  Otherwise a
    #: column fits it once per rate (:func:`~coalitions.learners.training.tuning.fit_on_grid`).
    tunes_own_rate: ClassVar[bool] = False

    def _stopper(self, patience: int | None, n: int):
        """The early stop of a fit (replaying a resumed run's evaluations): per client or on the mean over clients."""
        if self.stops_per_client:
            return ClientsEarlyStop(patience, n, self.val_loss_clients_)
        return EarlyStop(patience, self.val_loss_history_)

    def _keep_best(self, best: dict | None, state: dict, improved: np.ndarray) -> dict:
        """The kept state after an evaluation where the clients ``improved`` (all of them here) reached their best."""
        return copy.deepcopy(state)

    def _lr_for(self) -> float:
        """The (peak) learning rate trained with, the protocol's."""
        return float(self.protocol_.lr)

    def _steps_per_round(self, fed: Federation) -> int:
        """Local gradient steps of the largest client in one round: epochs per round × its batches."""
        return int(self._epochs_per_round(fed)) * self._steps_per_epoch()

    def _min_local_steps(self) -> int:
        """The fewest local steps a round gives every client (the protocol's ``local_steps``)."""
        return int(self.protocol_.local_steps)

    def _epochs_per_round(self, fed: Federation) -> int:
        """Passes over the data per round: the fewest whole epochs that give the smallest client
        ``protocol.local_steps`` steps."""
        b = self._batch()
        per_epoch = min(1 if b is None else max(1, math.ceil(int(n) / int(b))) for n in self.train_sizes_)
        return max(1, math.ceil(self._min_local_steps() / per_epoch))

    def _total_steps(self) -> int:
        """Optimiser steps of the whole run, the schedule's length: rounds × steps per round."""
        return int(self.rounds_) * self._steps_per_round(self.federation_)

    def _decay_names(self) -> tuple[str, ...]:
        """The weights (not biases) the protocol's weight decay applies to."""
        return tuple(k for k, s in self.spec_.shapes.items() if len(s) >= 2)

    def _val_losses(self, state: dict, data: Padded) -> list[float]:
        """Each client's mean task loss on its tuning rows (``data``) under the models of ``state``.

        What the client would predict with after this round (:meth:`finish`, then
        :meth:`client_scores`); recorded every round as ``val_loss_history_`` so that
        convergence is visible (issue 9), and what early stopping and the learning-rate grid
        read.  The tuning rows are the validation rows unless the protocol has a ``tune_split``
        (:mod:`coalitions.learners.data.roles`).  Nothing is trained on it.
        """
        self.finish(state)
        with torch.no_grad():
            scores = self.client_scores(data)
            per = self.per_sample_loss_(scores.to(torch.float32), data.y)
            mean = (per * data.m).sum(1) / data.m.sum(1).clamp(min=1.0)
        return [float(x) for x in mean.double().cpu().numpy()]

    # -- what subclasses provide
    @abstractmethod
    def init_state(self, fed: Federation, gen: torch.Generator, device) -> dict:
        """The state before the first round (tensors, arrays, numbers, lists of them)."""

    #: The round as a site step and a server step (:meth:`site_step`, :meth:`server_step`): the state
    #: keys a site uploads (stacked, one row per site), the keys the server sends down (a tensor with
    #: one row per site: each site its row; with one row: the same to every site), and the keys each
    #: site keeps between rounds besides its optimiser states (its personal parameters).  Nothing
    #: up (Local): the sites run all their rounds without an exchange.
    up: tuple[str, ...] = ()
    down: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    #: Random draws per local step on a stream other than 0 (``{stream: draws}``; SuPerFed's mixing
    #: coefficient, Per-FedAvg's two minibatches): a Flower site skips the steps of larger clients.
    step_draws: ClassVar[dict[int, int]] = {}

    def train_round(self, state: dict, r: int, rng: Callable) -> tuple[dict, dict]:
        """Round ``r``: the new state and ``info`` (``{"loss": ...}``); ``rng(stream)`` draws this round's randomness.

        ``server_step(site_step(state))``: every client's site step, batched over
        the stacked clients, then the server's aggregation of what they upload;
        over Flower one generic strategy and one site handler call the same two
        functions (``coalitions.learners.federated.personal.engine``).
        """
        state, info = self.site_step(state, r, rng)
        return self.server_step(state, r), info

    def server_finish(self, state: dict) -> None:
        """Set what the server alone knows at the end (its own state's record: AFL's ``λ``); nothing by default."""

    def record_shapes(self, key: str) -> dict:
        """What a site's upload ``key`` holds: ``{name: shape of one row}`` (default: the whole model)."""
        return dict(self.spec_.shapes)

    def site_step(self, state: dict, r: int, rng: Callable) -> tuple[dict, dict]:
        """What every client does in round ``r`` with its own data and its own kept state.

        Written on the stacked clients of ``state`` (``federation_.n`` rows: all
        ``N`` in process, one at a Flower site); returns the state with the
        :attr:`up` keys set, and ``info`` (``{"loss": mean over the rows}``).
        """
        raise NotImplementedError

    def server_step(self, state: dict, r: int) -> dict:
        """The server's aggregation of round ``r``: from the :attr:`up` keys (``N`` rows) to the :attr:`down` keys."""
        raise NotImplementedError

    @abstractmethod
    def finish(self, state: dict) -> None:
        """Set ``params_``, ``weights_`` and ``weights_history_`` from the final state."""

    def client_scores(self, data: Padded) -> torch.Tensor:
        """Each client's scores on its own padded split: ``(N, n_max, k)`` (logits or predictions)."""
        params = {k: v.to(data.X.device) for k, v in self.params_.items()}
        return self.engine_.map(self.spec_.forward, params, (data.X,))

    # -- helpers for subclasses
    def _init_params(self, gen: torch.Generator, device, copies: int) -> dict:
        """One model drawn from ``gen``, repeated ``copies`` times (every client starts alike)."""
        one = self.spec_.init(gen, 1)
        return {k: v.expand(copies, *v.shape[1:]).clone().to(device) for k, v in one.items()}

    def _task_loss(self, params: dict, X, y, m) -> torch.Tensor:
        """Mean per-sample task loss of one model on a padded minibatch."""
        per = self.per_sample_loss_(self.spec_.forward(params, X), y)
        return (per * m).sum() / m.sum().clamp(min=1.0)

    def _make_optimizer(self):
        """A site's optimiser: the protocol's, with its schedule over the whole budget.

        The weight decay is not the optimiser's: it enters the loss
        (:meth:`_decayed_loss`), on the weights only, as in the exact game.
        """
        return Scheduled(self.protocol_, self._total_steps())

    def _decayed_loss(self, loss: Callable) -> Callable:
        """``loss`` plus the protocol's ``weight_decay/2·‖weights‖²`` of the model it is given (as is when 0)."""
        if not self.protocol_.weight_decay:
            return loss
        wd, names = float(self.protocol_.weight_decay), self._decay_names()

        def with_decay(params, *args):
            return loss(params, *args) + decayed(params, wd, [k for k in names if k in params])
        return with_decay

    def _site_steps(self, state: dict, params: dict, loss: Callable, rng: np.random.Generator, *,
                    key: str = "site_opt", data: Padded | None = None, epochs: int | None = None,
                    batch_size: int | None | Literal["default"] = "default", opt=None, **kwargs) -> tuple[dict, dict, np.ndarray]:
        """Every site's local steps of one round, continuing the optimiser state the site kept.

        Runs :func:`~coalitions.learners.training.engine.train_epochs` on
        ``params`` (one stacked model per site) with the optimiser state found
        under ``state[key]`` (a fresh one in the first round) and returns
        ``(params, {key: new_state}, losses)``: the caller puts the second item
        into the round's new state, so the moments persist to the next round
        and into the checkpoint.

        Parameters
        ----------
        key : str
            Where the state lives (a method with two optimised parts, e.g.
            Ditto's global and personal models, may use one key per part).
        data, epochs, batch_size
            Default to the training split, the epochs of a round and the protocol's batch.
        opt : optimiser, optional
            Default: :meth:`_make_optimizer`.
        **kwargs
            Passed on to ``train_epochs`` (``args``, ``step_args``, ``enabled``).
        """
        opt = self._make_optimizer() if opt is None else opt
        kept = state.get(key)
        opt_state = kept if kept is not None else opt.init(params)
        params, opt_state, losses = train_epochs(
            self.engine_, self._decayed_loss(loss), params, opt, opt_state, self.train_data_ if data is None else data,
            self._epochs_per_round(self.federation_) if epochs is None else epochs,
            self._batch() if batch_size == "default" else batch_size, rng,
            # a Flower site alone: its schedule advances by the federation's epoch, as in process (train_epochs)
            epoch_steps=self._steps_per_epoch() if (data is None or data is self.train_data_) and batch_size == "default"
            else None, **kwargs)
        return params, {key: opt_state}, losses

    # -- scoring, the oracle and the estimate
    def _utilities(self, fed: Federation, device) -> dict:
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

    def rule_weights(self) -> np.ndarray:
        """The row-stochastic matrix the weight rule reads (``weights_`` unless the method says otherwise).

        FedAMP and HeurFedAMP read their self-referenced affinity (``docs/concepts.md`` §5).
        """
        if self.weights_ is None:
            raise InputError(f"{self.method} has no pairwise weights")
        return self.weights_

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

    def weight_oracle(self, names, weights) -> WeightOracle:
        """The :class:`~coalitions.oracles.WeightOracle` of this learner's rule and threshold on ``weights``."""
        return WeightOracle(names, weights, self.rule, self.threshold)

    def estimate_config(self) -> dict:
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
                "lr": self._lr_for(), "patience": self._patience_for()}

    def estimate_extra(self, peeling: Peeling) -> dict:
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
