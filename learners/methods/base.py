"""The estimator contract, and the personalised federated learner as a method: its steps.

:class:`Learner` is the abstract base of every method (scikit-learn's conventions, from
:class:`~coalitions.learners.estimator.EstimatorMixin`): ``__init__`` only stores its explicitly
named parameters (a personalised learner declares them as fields, and its constructor is
generated: :class:`~coalitions.learners.estimator.DeclaredEstimator`), which
``get_params(deep=True)`` reads off the signature, ``set_params`` changes (``protocol__lr``
included) and ``sklearn.base.clone`` copies; ``fit(federation)``
validates them (:meth:`Learner.check_params`, errors naming the parameter), fits, and exposes
what was learned — ``oracle_`` (a benefit oracle), ``utilities_`` and, where the method has
them, ``weights_``.  The estimate (``estimate_``) is built from those by the core's one function,
:func:`coalitions.estimate.build_estimate` (``BG(all)``, peeling, the record); a method adds
its own settings and results through the public hooks :meth:`Learner.estimate_config` and
:meth:`Learner.estimate_extra`.

:class:`PersonalizedLearner` is the base of the personalised methods (``fedamp``, ``federico``,
``superfed-mm``, ``local``, ``fedavg``, the paper's baselines).  A subclass says how to start
(:meth:`~PersonalizedLearner.init_state`), what one communication round does — a site step and a
server step (:meth:`~PersonalizedLearner.site_step`, :meth:`~PersonalizedLearner.server_step`),
or one pair per exchange of a round of several (:meth:`~PersonalizedLearner.phases`,
:mod:`coalitions.learners.methods.phases`) — what the final state means
(:meth:`~PersonalizedLearner.finish`) and, if it is not one model per client, how a client
predicts (:meth:`~PersonalizedLearner.client_scores`).  Three pieces do the rest, each in its
own module:

* :mod:`coalitions.learners.methods.runner`: the budget as rounds
  (:class:`~coalitions.learners.methods.runner.RoundBudget`) and the fit loop
  (:class:`~coalitions.learners.methods.runner.RoundRunner`: checkpoint, resume, early stopping,
  progress) on the batched :class:`~coalitions.learners.training.engine.Engine`;
* :mod:`coalitions.learners.methods.readout`: the scores, the weights, the benefit oracle and
  the estimate's record (:class:`~coalitions.learners.methods.readout.Readout`).

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
    descent at a constant rate.
"""

from __future__ import annotations

import copy
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import KW_ONLY
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from coalitions.errors import InputError
from coalitions.estimate import Estimate, build_estimate
from coalitions.graph import BenefitOracle
from coalitions.learners.data.federation import Federation
from coalitions.learners.data.metrics import loss_function
from coalitions.learners.data.roles import data_roles, with_roles
from coalitions.learners.estimator import DeclaredEstimator, EstimatorMixin
from coalitions.learners.methods.phases import Phase, run_phases
from coalitions.learners.methods.readout import Readout, RefitOracle
from coalitions.learners.methods.runner import ClientsEarlyStop, EarlyStop, RoundBudget, RoundRunner
from coalitions.learners.training.decay import decay_penalty, decayed_names
from coalitions.learners.training.engine import PATHS, Engine, Padded, resolve_device, train_epochs
from coalitions.learners.training.models import make_model
from coalitions.learners.training.protocol import Scheduled, TrainingProtocol, default_kind, protocol_with
from coalitions.learners.training.threads import applied, step_macs
from coalitions.oracles import WEIGHT_RULES
from coalitions.params import ParameterError, check_param
from coalitions.peeling import Peeling, peel_oracle

#: ``RefitOracle``, ``EarlyStop`` and ``ClientsEarlyStop`` live in the readout and the runner; they are
#: importable from here as well.
__all__ = ["Learner", "PersonalizedLearner", "RefitOracle", "COMMON_PARAMS", "unflatten", "default_model",
           "default_kind", "EarlyStop", "ClientsEarlyStop"]



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


# --------------------------------------------------------------------------- the contract
class Learner(EstimatorMixin, ABC):
    """Abstract base of every learner: parameters, ``fit``, and the estimate from what was learned.

    Subclasses name every parameter in ``__init__`` (no ``*args`` / ``**kwargs``; or declare them
    as the fields of a :class:`~coalitions.learners.estimator.DeclaredEstimator`) and
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


# --------------------------------------------------------------------------- the personalised learners
class _Fitted:
    """What a personalised learner's ``fit`` sets (:class:`PersonalizedLearner`'s Attributes), declared for the type checker.

    Not in :class:`PersonalizedLearner`'s body, where an annotation declares a parameter.
    """

    protocol_: TrainingProtocol
    params_: dict
    weights_history_: list[np.ndarray]
    lr_: float | None   # None: Local whose clients chose their rates (lr_clients_)
    # What the round runner records of the run (RoundRunner).
    loss_history_: list[float]
    val_loss_history_: list[float]
    val_loss_clients_: list[list[float]]
    resumed_from_: int
    rounds_run_: int
    hit_max_: bool
    best_round_: int
    best_round_clients_: list[int]
    best_val_loss_: float
    best_val_loss_clients_: list[float]
    steps_per_round_: int
    stopped_at_: int
    stopped_at_clients_: list[int]
    state_: dict


class PersonalizedLearner(_Fitted, RoundBudget, Readout, Learner, DeclaredEstimator):
    """Base of the personalised learners (see the module docstring).

    The parameters below are every personalised learner's, keyword-only after the method's own:
    they are declared once, here, as fields, and each method declares only its own (the
    constructor is generated, :class:`~coalitions.learners.estimator.DeclaredEstimator`).

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

    # The parameters every personalised learner takes (the class docstring), keyword-only, after the
    # method's own: declared here once, the constructor is generated (DeclaredEstimator).
    _: KW_ONLY
    protocol: TrainingProtocol | None = None
    rule: str = "relative"
    threshold: float | None = None
    refit: bool = False
    device: str = "auto"
    engine: str = "auto"
    chunk: int | None = None
    seed: int = 0
    checkpoint: str | os.PathLike | None = None
    progress: Callable[..., Any] | None = None

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
        state = RoundRunner(self, fed, dev).run()
        self.finish(state)
        self.utilities_ = self.client_utilities(fed, dev)
        self.fit_seconds_ = time.perf_counter() - t0
        self.oracle_ = self._benefit_oracle(fed)
        return self

    def _model_for(self, fed: Federation) -> str:
        """The model kind trained on ``fed``: the protocol's, or :func:`default_model` when it names none."""
        return self.protocol_for(fed).model or default_model(fed)

    #: Are the clients' models independent, so that each stops on its own tuning loss (Local)?  Otherwise the
    #: mean over clients stops them all at one round (``EarlyStop``, in ``coalitions.learners.methods.runner``).
    stops_per_client: ClassVar[bool] = False
    #: Does the learner choose its rate on the protocol's ``lr_grid`` itself (Local, per client)?  Otherwise a
    #: column fits it once per rate (:func:`~coalitions.learners.training.tuning.fit_on_grid`).
    tunes_own_rate: ClassVar[bool] = False

    def _keep_best(self, best: dict | None, state: dict, improved: np.ndarray) -> dict:
        """The kept state after an evaluation where the clients ``improved`` (all of them here) reached their best."""
        return copy.deepcopy(state)

    #: The prefixes of a site step that trains several models of one spec in one parameter dict
    #: (Ditto's global ``w.`` and personal ``v.`` models, SuPerFed's federated ``f.`` and local ``l.``
    #: ones): the protocol's weight decay reaches the weights of each (:meth:`_decay_names`).
    model_prefixes: ClassVar[tuple[str, ...]] = ()

    def _decay_names(self) -> tuple[str, ...]:
        """The weights (not biases) the protocol's weight decay applies to (:func:`decayed_names`).

        The model's weights under their own names, and under each of :attr:`model_prefixes`.
        """
        names = decayed_names(self.spec_.shapes)
        return names + tuple(prefix + k for prefix in self.model_prefixes for k in names)

    # -- the method: what subclasses provide
    @abstractmethod
    def init_state(self, fed: Federation, gen: torch.Generator, device) -> dict:
        """The state before the first round (tensors, arrays, numbers, lists of them)."""

    #: The round as a site step and a server step (:meth:`site_step`, :meth:`server_step`): the state
    #: keys a site uploads (stacked, one row per site), the keys the server sends down (a tensor with
    #: one row per site: each site its row; with one row: the same to every site), and the keys each
    #: site keeps between rounds besides its optimiser states (its personal parameters).  Nothing
    #: up (Local): the sites run all their rounds without an exchange.
    up: ClassVar[tuple[str, ...]] = ()
    down: ClassVar[tuple[str, ...]] = ()
    kept: ClassVar[tuple[str, ...]] = ()
    #: Random draws per local step on a stream other than 0 (``{stream: draws}``; SuPerFed's mixing
    #: coefficient, Per-FedAvg's two minibatches): a Flower site skips the steps of larger clients.
    step_draws: ClassVar[dict[int, int]] = {}

    def train_round(self, state: dict, r: int, rng: Callable) -> tuple[dict, dict]:
        """Round ``r``: the new state and ``info`` (``{"loss": ...}``); ``rng(stream)`` draws this round's randomness.

        ``server_step(site_step(state))``: every client's site step, batched over
        the stacked clients, then the server's aggregation of what they upload;
        over Flower one generic strategy and one site handler call the same two
        functions (``coalitions.learners.federated.personal.engine``).  A round of
        several exchanges (:meth:`phases`) runs the two for each phase in turn
        (:func:`~coalitions.learners.methods.phases.run_phases`).
        """
        return run_phases(self, state, r, rng)

    def phases(self, r: int) -> tuple[Phase, ...]:
        """The exchanges of round ``r`` (:class:`~coalitions.learners.methods.phases.Phase`): one by default.

        A method whose round is several exchanges (FedeRiCo: a neighbour sampling, then one
        per minibatch step) returns one phase for each and writes :meth:`site_phase` and
        :meth:`server_phase`; the default phase uploads :attr:`up` and sends :attr:`down`.
        """
        return (Phase(self.up, self.down),)

    def site_phase(self, state: dict, r: int, rng: Callable, phase: Phase) -> tuple[dict, dict]:
        """The site step of ``phase`` (:meth:`site_step` for the one phase of a round by default).

        ``info["count"]``, where given, is how many losses ``info["loss"]`` averages
        (:func:`~coalitions.learners.methods.phases.combine_infos`).
        """
        return self.site_step(state, r, rng)

    def server_phase(self, state: dict, r: int, phase: Phase) -> dict:
        """The server step of ``phase`` (:meth:`server_step` for the one phase of a round by default)."""
        return self.server_step(state, r)

    def share(self, key: str, value: dict, i: int, n: int) -> dict:
        """What site ``i`` of ``n`` receives of the server's down key ``key`` (stacked tensors by name).

        By default its row when the tensors hold one row per site, otherwise all of them
        (one row: the same to every site).
        """
        return {k: v[i:i + 1] for k, v in value.items()} if next(iter(value.values())).shape[0] == n else dict(value)

    def server_finish(self, state: dict) -> None:
        """Set what the server alone knows at the end (its own state's record: AFL's ``λ``); nothing by default."""

    def record_shapes(self, key: str) -> dict:
        """What a site's upload ``key`` holds: ``{name: shape of one row}`` (default: the whole model)."""
        return dict(self.spec_.shapes)

    def record_rows(self, key: str) -> int:
        """How many rows a site's upload ``key`` holds (one by default: the site's own)."""
        return 1

    def record_dtype(self, key: str) -> str:
        """The dtype of a site's upload ``key``: ``"float32"`` (parameters, gradients) by default.

        ``"float64"`` and ``"int64"`` records hold statistics and indices, which
        :meth:`check_upload` checks beyond their type, shape and finiteness.
        """
        return "float32"

    def check_upload(self, key: str, value: dict, site: int) -> str | None:
        """What is wrong with site ``site``'s upload ``key`` (numpy arrays by name, shapes checked), or None.

        Called by the server on every reply before the server step; the default
        finds nothing beyond the type, shape and bounds already checked.
        """
        return None

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
    def init_params(self, gen: torch.Generator, device, copies: int) -> dict:
        """One model drawn from ``gen``, repeated ``copies`` times (every client starts alike)."""
        one = self.spec_.init(gen, 1)
        return {k: v.expand(copies, *v.shape[1:]).clone().to(device) for k, v in one.items()}

    def _task_loss(self, params: dict, X, y, m) -> torch.Tensor:
        """Mean per-sample task loss of one model on a padded minibatch."""
        per = self.per_sample_loss_(self.spec_.forward(params, X), y)
        return (per * m).sum() / m.sum().clamp(min=1.0)

    def make_optimizer(self):
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
            return loss(params, *args) + decay_penalty(params, names, wd)
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
            Default: :meth:`make_optimizer`.
        **kwargs
            Passed on to ``train_epochs`` (``args``, ``step_args``, ``enabled``).
        """
        opt = self.make_optimizer() if opt is None else opt
        kept = state.get(key)
        opt_state = kept if kept is not None else opt.init(params)
        params, opt_state, losses = train_epochs(
            self.engine_, self._decayed_loss(loss), params, opt, opt_state, self.train_data_ if data is None else data,
            self.epochs_per_round(self.federation_) if epochs is None else epochs,
            self.minibatch_size() if batch_size == "default" else batch_size, rng,
            # a Flower site alone: its schedule advances by the federation's epoch, as in process (train_epochs)
            epoch_steps=self._steps_per_epoch() if (data is None or data is self.train_data_) and batch_size == "default"
            else None, **kwargs)
        return params, {key: opt_state}, losses


#: The parameters every personalised learner takes, after its own (declared once, in
#: :class:`PersonalizedLearner`'s body).  No training setting is among them: the model, optimiser, rate,
#: schedule, batch, weight decay, budget and patience are the ``protocol``'s alone (one place for each setting).
COMMON_PARAMS = PersonalizedLearner.param_names()
