"""SPO's estimator: trains the Pareto hypernetwork and exposes its benefit oracle (package docstring)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch
from torch.func import functional_call, jacrev, vmap

from coalitions.bitmask import members
from coalitions.errors import InputError
from coalitions.learners.data.federation import Federation
from coalitions.learners.data.metrics import evaluate_batch, loss_function
from coalitions.learners.data.roles import data_roles, with_roles
from coalitions.learners.methods.base import Learner, default_model
from coalitions.learners.methods.spo.epo import epo_lp
from coalitions.learners.methods.spo.heads import HeadsDirectionSearch, head_penalty, personal_loss_matrix
from coalitions.learners.methods.spo.hypernetwork import HEADS, ParetoHypernetwork
from coalitions.learners.methods.spo.oracle import RULES, SPOOracle
from coalitions.learners.methods.spo.paper import PaperSearch
from coalitions.learners.methods.spo.search import DirectionSearch, check_search_memory
from coalitions.learners.methods.spo.simplex import sample_directions
from coalitions.learners.training.decay import decay_penalty, decayed_names
from coalitions.learners.training.engine import Padded, make_optimizer, resolve_device
from coalitions.learners.training.models import make_model
from coalitions.learners.training.protocol import TrainingProtocol, make_schedule, protocol_with
from coalitions.learners.training.stopping import Patience
from coalitions.learners.training.threads import applied, step_macs
from coalitions.learners.training.tuning import RateChoice
from coalitions.params import MAX_STEPS, ParameterError, check_param
from coalitions.partition import canonical
from coalitions.peeling import Peeling, peel_oracle
from coalitions.resources import check_memory
from coalitions.sensitivity import SensitivityRow, default_thresholds

__all__ = ["SPO", "VARIANTS", "PROTOCOL_FIELDS"]

#: The fields of the :class:`~coalitions.learners.training.protocol.TrainingProtocol` that SPO trains
#: with (one place for every training setting; SPO has no parameter of its own for them): the
#: budget in hypernetwork steps, the training samples per client and step, the early-stopping patience,
#: the learning-rate grid and the rows that tune them (``tune_split``).  The protocol's other fields describe how *target* models are trained (their
#: optimiser, rate, schedule, weight decay, model); SPO trains a hypernetwork that emits the target, so
#: its rate ``lr``, its target ``model``/``target_hidden`` and its ridge ``l2`` stay its own (on synthetic
#: regime II the protocol's rate 0.1 made SPO's test MSE 5 to 8 where its own 0.01 gives 0.003 to 0.05).
PROTOCOL_FIELDS = ("steps", "batch_size", "patience", "lr_grid", "tune_split")

#: Training steps between two evaluations of the validation loss (history and early stopping).
EVAL_EVERY = 50
#: How the front is learned and searched: this project's one hypernetwork, or the paper's code's procedure.
VARIANTS = ("ours", "paper", "readme")
#: The variants that train one hypernetwork per searched client and face (:mod:`.paper`).
PER_SEARCH = ("paper", "readme")


#: The share of SPO's rate its cosine schedule keeps at the end of ``protocol.steps``
#: (:func:`~coalitions.learners.training.protocol.lr_factor`'s ``floor``).
LR_FLOOR = 0.01


_SPO = TypeVar("_SPO", bound="SPO")   # _conclude returns the instance it was called on (FederatedSPO too)


class SPO(Learner):
    """Specific Pareto Optimization: a benefit oracle from one Pareto hypernetwork (package docstring).

    The training settings come from the comparison's training protocol and only from it
    (``protocol``: one place for every training setting): SPO trains its hypernetwork
    for ``protocol.steps`` steps on ``protocol.batch_size`` samples per client and step, stops
    early on ``protocol.patience`` and tunes its rate on ``protocol.lr_grid``
    (:data:`PROTOCOL_FIELDS`).  What the hypernetwork is and emits stays SPO's own: its Adam rate
    ``lr`` (the protocol's rate is a target model's step, not a hypernetwork's), the target
    ``model``, ``target_hidden`` and ridge ``l2``, the hypernetwork's shape, the direction search
    and the paper variant's alternation.

    Parameters
    ----------
    hidden : int
        Width of the hypernetwork's hidden layers.
    embed : int
        Width of the direction embedding.
    layers : int
        Hidden layers of the hypernetwork.
    lr : float
        The hypernetwork's Adam learning rate (cosine-decayed to 1 % over ``protocol.steps``), used
        when the protocol has no ``lr_grid``.  SPO's own, not the protocol's ``lr``: that is the
        step of a target model trained directly, and on synthetic regime II the protocol's 0.1
        made SPO's test MSE 5 to 8 where 0.01 gives 0.003 to 0.05.
    directions : int
        Directions drawn per training step.
    alpha : float
        Dirichlet concentration of the training directions (below 1 favours
        sparse directions near the faces, which the searches visit).
    faces : float
        Share of training directions drawn on a random face (:func:`sample_directions`).
    log_loss : bool
        Minimise the log of each direction's scalarised loss (module docstring).
    l2 : float or None
        Ridge on the target's weights (``None``: 0.01 for regression, 0.001 otherwise).
    log_eps : float or None
        ``ε`` of the ``log(d + ε)`` input features (``None``: ``d`` alone).
    rule : {"ratio", "elimination"}
        How collaborators are read off the search (module docstring).
    threshold : float
        Ratio rule: ``d_j / d_i ≥ threshold`` (the paper's 0.7).
    tol : float
        Elimination rule: relative loss tolerance for dropping a client.
    min_weight : float
        Elimination rule: weights at or below this count as zero.
    epo : bool
        Weight each direction's losses by the EPO linear program instead of ``d``.
    search_steps : int
        Projected-gradient iterations of each direction search.
    starts : int
        Starts per search (barycentre, vertex ``e_i``, then random points; ≥ 2).
    line_search : int
        Step lengths tried per iteration (``1, 1/2, …, 2^{1-line_search}``).
    model : str or None
        Target model kind (``None``: ``"linear"`` for regression, ``"logistic"`` otherwise);
        ``"mlp"`` or ``"cnn"`` (images) for a target with a body.
    target_hidden : int
        Hidden units of an ``"mlp"`` target.
    variant : {"ours", "paper", "readme"}
        ``"ours"``: one hypernetwork for the whole simplex, trained on sampled directions, then
        the projected-gradient search (package docstring).  ``"paper"``: the paper's public code
        (:mod:`.paper`): for every searched (client, face) a fresh hypernetwork trained with EPO
        at the direction being searched, ``front_steps`` front steps alternating with
        ``direction_steps`` direction steps, directions clamped to ``[1/(3k), 1 − 1/(3k)]``.
        There ``protocol.steps`` is each hypernetwork's number of front steps (the code: 2000
        rounds of 5, i.e. 10,000), ``protocol.batch_size`` its samples per client and step (the
        protocol must have neither ``patience`` nor ``lr_grid``: the code's schedule is fixed), ``lr`` SGD's learning rate with ``momentum``, and ``hidden``/``layers``
        its width and number of hidden layers (the code: 100 and 2); ``embed``, ``directions``,
        ``alpha``, ``faces``, ``log_loss``, ``l2``, ``log_eps``, ``epo``, ``search_steps``,
        ``starts``, ``line_search`` and ``heads`` belong to ``"ours"`` only.  ``"readme"``: the
        procedure of the authors' README for synthetic, on the same per-search networks: the front
        first, ``protocol.steps`` steps of linear scalarisation each at a direction drawn from
        ``Dir(1/k)`` on the face, then ``direction_steps`` direction steps from the last
        direction drawn, once (``--sample_ray --solver_type linear --total_epoch 1``; the
        README: 1,000 and 200 steps, ``layers=1``, an affine hypernetwork).
    protocol : TrainingProtocol or None
        The comparison's training protocol (docs/learners-protocol.md), SPO's only source of
        its training settings (:data:`PROTOCOL_FIELDS`):

        * ``steps``: the hypernetwork's training steps;
        * ``batch_size``: training samples per client per step (``None``: the whole split);
        * ``patience``: early stopping.  The validation loss is evaluated every ``EVAL_EVERY``
          steps (the mean over clients of ``val_loss_clients_``); training stops when it has
          not improved for ``patience`` evaluations and the hypernetwork with the best one is
          kept (``None``: train all ``steps``);
        * ``lr_grid``: train once per rate and keep the rate whose kept hypernetwork has the
          lowest validation loss (same measure); ``None``: ``lr`` alone;
        * ``tune_split``: the "validation loss" of the two choices above is read on that share
          of each client's training rows, held out of training
          (:mod:`coalitions.learners.data.roles`, the same rows as every other column's); the
          validation rows then only score (the direction search, the utilities).

        ``patience`` and ``lr_grid`` only with ``variant="ours"``.  ``None``: the default
        protocol of the federation's task and input shape,
        ``protocol_with(fed.task, tuple(fed.input_shape))`` (what ``coalitions learn`` gives
        without training flags), resolved at fit time (``protocol_``).
    front_steps, direction_steps : int
        ``variant="paper"``: the alternation (the code's 5 and 1); ``variant="readme"`` takes
        ``direction_steps`` after its whole front (the README's 200).
    direction_lr : float
        ``variant="paper"``: the direction's gradient step (the code's ``lr_prefer``, 0.01).
    momentum : float
        ``variant="paper"``: SGD momentum of the hypernetworks (the code's 0.5).
    heads : {"shared", "personal"}
        ``"personal"``: the hypernetwork generates the target's body and each client owns
        its output layer, trained on its own loss only (:mod:`.heads`; the paper's CIFAR-10
        code).  Needs a target with a body (``model`` mlp or cnn); not with ``epo``.
    device : {"auto", "cpu", "cuda"}
    seed : int
    progress : callable, optional
        ``progress(done, total)`` during training.

    Attributes
    ----------
    protocol_ : TrainingProtocol
        The protocol trained with: ``protocol``, or the federation's default (recorded in the
        estimate's ``config.protocol``).
    hypernet_ : ParetoHypernetwork or None
    oracle_ : SPOOracle
    weights_ : ndarray (N, N)
        Row ``i``: client ``i``'s best direction within all clients (rows sum to 1).
    utilities_ : dict
        ``{"val": {name: metric}, "test": {name: metric}}`` at each client's best direction.
    val_loss_ : ndarray (N,)
        Each client's validation loss at that direction.
    search_ : DirectionSearch
    estimate_ : Estimate
        Built on first use by peeling ``oracle_``; its ``extra`` holds ``ce_utilities``
        (the metric at each client's best direction on the face of its learned
        coalition: the paper's "CE" row), ``ce_directions`` and ``rules``: for the
        rule used and, beside elimination, the paper's ratio rule ``d_j/d_i ≥
        threshold`` on the same searches, each with its ``label``, ``BG(all)``
        (``ocs``, ``edges``) and equilibrium (``partition``).
    history_ : list of float
        Mean scalarised training loss every 50 steps.
    val_loss_steps_, val_loss_clients_ : list
        At the same evaluations (steps in ``val_loss_steps_``): each client's
        validation loss under ``h(d)`` for 16 fixed directions ``d``, weighted
        by ``d_j`` (the training objective's terms on validation data); in the
        estimate's ``extra.val_loss_history`` with their mean over clients.
    lr_ : float
        The learning rate trained with (the grid's choice, or ``lr``).
    lr_losses_ : dict
        ``{lr: best validation loss}`` over the grid (one entry without one).
    stopped_at_ : int
        The step where training stopped (``protocol_.steps`` when it never stopped early).
    best_step_ : int
        The step whose hypernetwork was kept (the best evaluation under patience, else the last).
    hit_max_ : bool
        True when training ran all ``protocol_.steps`` without stopping early.
    fit_seconds_ : float
    timings_ : dict
        Seconds spent training, on ``BG(all)`` (searches and rule), and in total
        (the rest of the peeling runs when the estimate is built: ``peeling_seconds_``).
    """

    method = "spo"
    #: The protocol's fields SPO trains with (``coalitions learn`` builds its protocol from these flags).
    protocol_fields = PROTOCOL_FIELDS

    # The parameters (kept by __init__ under their own names) and what fit() sets, declared for the
    # type checker.
    hidden: int
    embed: int
    layers: int
    lr: float
    directions: int
    alpha: float
    faces: float
    log_loss: bool
    l2: float | None
    log_eps: float | None
    rule: str
    threshold: float
    tol: float
    min_weight: float
    epo: bool
    search_steps: int
    starts: int
    line_search: int
    model: str | None
    device: str
    seed: int
    progress: Callable[..., Any] | None
    heads: str
    target_hidden: int
    variant: str
    front_steps: int
    direction_steps: int
    direction_lr: float
    momentum: float
    protocol: TrainingProtocol | None
    protocol_: TrainingProtocol
    oracle_: SPOOracle
    hypernet_: ParetoHypernetwork | None   # None under variant="paper" or "readme" (one network per search)
    weights_: np.ndarray   # always a matrix after fit: each client's best direction, as weights
    best_val_: float
    stopped_at_: int
    hit_max_: bool
    val_loss_steps_: list[int]
    val_loss_clients_: list[list[float]]

    def __init__(self, hidden: int = 200, embed: int = 64, layers: int = 3,
                 lr: float = 0.01, directions: int = 64, alpha: float = 0.5, faces: float = 0.5,
                 log_loss: bool = True, l2: float | None = None, log_eps: float | None = 1e-3,
                 rule: str = "elimination",
                 threshold: float = 0.7, tol: float = 0.02, min_weight: float = 0.01, epo: bool = False,
                 search_steps: int = 100, starts: int = 4, line_search: int = 16, model: str | None = None,
                 device: str = "auto", seed: int = 0, progress: Callable | None = None, heads: str = "shared",
                 target_hidden: int = 64, variant: str = "ours", front_steps: int = 5, direction_steps: int = 1,
                 direction_lr: float = 0.01, momentum: float = 0.5, protocol: TrainingProtocol | None = None):
        self._store(locals())

    # -- configuration
    def check_params(self) -> None:
        for k, lo in dict(hidden=1, embed=1, layers=0, directions=1, search_steps=0, starts=2,
                          line_search=1, seed=0, target_hidden=1, front_steps=1, direction_steps=0).items():
            # counts and widths stop at MAX_STEPS; memory is checked where they size a tensor
            check_param(k, getattr(self, k), "int", low=lo, high=None if k == "seed" else MAX_STEPS)
        check_param("momentum", self.momentum, "number", low=0, high=1)
        check_param("variant", self.variant, "choice", choices=VARIANTS)
        if self.variant in PER_SEARCH and (self.heads != "shared" or self.epo):
            raise ParameterError("variant", f"{{name}} {self.variant} takes neither heads personal nor epo (it "
                                            "weighs by its own rule, one shared target model per hypernetwork)")
        for k in ("lr", "alpha", "direction_lr"):
            check_param(k, getattr(self, k), "number", low=0, low_open=True)
        check_param("faces", self.faces, "number", low=0, high=1)
        check_param("min_weight", self.min_weight, "number", low=0, high=0.999)
        check_param("l2", self.l2, "number", low=0, allow_none=True)
        check_param("log_eps", self.log_eps, "number", low=0, low_open=True, allow_none=True)
        for k in ("threshold", "tol"):
            check_param(k, getattr(self, k), "number", low=0)
        check_param("rule", self.rule, "choice", choices=RULES)
        check_param("log_loss", self.log_loss, "bool")
        check_param("epo", self.epo, "bool")
        check_param("model", self.model, "choice", choices=("linear", "logistic", "mlp", "cnn"), allow_none=True)
        check_param("heads", self.heads, "choice", choices=HEADS)
        if self.heads == "personal" and self.model not in ("mlp", "cnn"):
            raise ParameterError("heads", "{name} personal needs a target with a body (model mlp or cnn), "
                                          f"got model {self.model!r}")
        if self.heads == "personal" and self.epo:
            raise ParameterError("heads", "{name} personal does not combine with epo (EPO's weights mix "
                                          "every client's gradients into each head)")
        check_param("device", self.device, "choice", choices=("auto", "cpu", "cuda"))
        check_param("progress", self.progress, "callable", allow_none=True)
        if self.protocol is not None:
            if not isinstance(self.protocol, TrainingProtocol):
                raise ParameterError("protocol", "{name} must be a TrainingProtocol or None, got "
                                                 f"{type(self.protocol).__name__}")
            self._check_variant_protocol(self.protocol)

    def _check_variant_protocol(self, protocol: TrainingProtocol) -> None:
        """The paper's variant runs the code's fixed schedule: refuse a protocol with patience or a rate grid."""
        if self.variant in PER_SEARCH and (protocol.patience is not None or protocol.lr_grid is not None):
            raise ParameterError("variant", f"{{name}} {self.variant} runs the code's fixed schedule: a protocol "
                                            "without patience or lr_grid")

    def protocol_for(self, fed: Federation) -> TrainingProtocol:
        """The protocol a fit on ``fed`` trains with: ``protocol``, or the default of ``fed``'s task and input shape.

        The default is :func:`~coalitions.learners.training.protocol.protocol_with` of the
        federation's task and input shape, what ``coalitions learn`` builds without training flags.
        """
        if self.protocol is not None:
            return self.protocol
        return protocol_with(fed.task, tuple(fed.input_shape))

    def _hypernet(self) -> ParetoHypernetwork:
        """The shared hypernetwork (``variant="ours"``); the paper's variant trains one per search instead."""
        if self.hypernet_ is None:
            raise AttributeError("SPO(variant='paper') has no shared hypernetwork: each search trained its own")
        return self.hypernet_

    # -- training
    def _step_macs(self, fed: Federation) -> float:
        """Work of one training step: the hypernetwork and the target model, for every direction."""
        spec = make_model(self.model or default_model(fed, images="logistic"),
                          fed.input_shape, fed.n_outputs, hidden=self.target_hidden)
        size = self.protocol_for(fed).batch_size
        batch = int(fed.sizes("train").max()) if size is None else int(size)
        hyper = self.hidden * (self.embed + self.hidden * (self.layers - 1) + spec.n_params)
        return self.directions * (hyper + step_macs(spec, batch, fed.n))

    @applied
    def fit(self, federation: Federation) -> SPO:
        """Train the hypernetwork and expose the oracle, each client's best direction and utilities."""
        if not isinstance(federation, Federation):
            raise InputError(f"spo: fit() takes a Federation, got {type(federation).__name__}")
        self.check_params()
        self._forget_estimate()
        t0 = time.perf_counter()
        self.protocol_ = self.protocol_for(federation)
        self._check_variant_protocol(self.protocol_)
        fed = with_roles(federation, self.protocol_)   # tune_split: the tuning rows held out of training
        self.federation_ = fed
        self.data_roles_ = data_roles(fed)
        self.device_ = resolve_device(self.device)
        self.model_ = self.model or default_model(fed, images="logistic")
        self.spec_ = make_model(self.model_, fed.input_shape, fed.n_outputs, hidden=self.target_hidden)
        self.l2_ = float(self.l2) if self.l2 is not None else (1e-2 if fed.task == "regression" else 1e-3)
        self._decay = decayed_names(self.spec_.shapes)
        self.loss_ = loss_function(fed.task)
        self.train_ = Padded(fed, "train", self.device_)
        self.val_ = Padded(fed, "val", self.device_)
        # the rows that stop the training and choose the rate: the validation rows unless tune_split holds some out
        self.tune_ = self.val_ if fed.tuning is None else Padded(fed, "tuning", self.device_)
        self.test_ = Padded(fed, "test", self.device_)
        self.hypernet_ = self._new_hypernet(fed)
        # a search batch holds at most one row per client, with at most one warm start besides ``starts``
        check_search_memory(fed.n, fed.n, max(int(self.starts), 3), int(self.line_search), self.spec_.n_params)
        self.epo_fallbacks_ = 0
        if self.variant in PER_SEARCH:
            return self._fit_paper(fed, t0)
        t_train = time.perf_counter()
        self._train_tuned(fed)
        t_train = time.perf_counter() - t_train
        search = HeadsDirectionSearch if self.heads == "personal" else DirectionSearch
        # the search's loss: logsumexp, not log_softmax (the same function, several times faster; metrics.py)
        search_loss = loss_function(fed.task, logsumexp=True)
        return self._conclude(fed, lambda: search(self._hypernet(), self.spec_, search_loss, self.val_, self.device_,
                                                  self.seed, self.search_steps, self.starts, self.line_search),
                              t0, t_train)

    def _new_hypernet(self, fed: Federation) -> ParetoHypernetwork:
        """The hypernetwork at its initialisation (drawn from ``seed``: the same for every learning rate)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net = ParetoHypernetwork(fed.n, self.spec_, self.hidden, self.embed, self.layers, self.log_eps,
                                     heads=self.heads)
        return net.to(self.device_)

    def _train_tuned(self, fed: Federation) -> None:
        """Train at every rate of ``lr_grid`` (or at ``lr``) and keep the run with the lowest validation loss."""
        grid = [float(self.lr)] if self.protocol_.lr_grid is None else [float(r) for r in self.protocol_.lr_grid]
        best = None
        # the rule every tuned place follows (training/tuning.py); here a NaN loss at the first rate is kept
        choice = RateChoice(finite_only=False)
        self.lr_losses_: dict[float, float] = {}
        for k, rate in enumerate(grid):
            if k:
                self.hypernet_ = self._new_hypernet(fed)
            history = self._train(fed, rate)
            self.lr_losses_[rate] = self.best_val_
            run = (self.best_val_, rate, self.hypernet_, history, self.val_loss_steps_, self.val_loss_clients_,
                   self.stopped_at_, self.hit_max_)
            if choice.offer(self.best_val_):
                best = run
        assert best is not None
        (_, self.lr_, self.hypernet_, self.history_, self.val_loss_steps_, self.val_loss_clients_,
         self.stopped_at_, self.hit_max_) = best

    def _fit_paper(self, fed: Federation, t0: float) -> SPO:
        """The paper's and the README's variants: no shared hypernetwork; each search trains its own (:mod:`.paper`)."""
        self.hypernet_ = None
        self.history_ = []
        self.val_loss_steps_, self.val_loss_clients_ = [], []
        readme = self.variant == "readme"   # the front once, at sampled rays, then the direction steps
        front = self.protocol_.steps if readme else self.front_steps
        search = PaperSearch(self.spec_, self.loss_, self.train_, self.val_, self.device_, self.seed,
                             rounds=1 if readme else max(1, self.protocol_.steps // self.front_steps),
                             front_steps=front, direction_steps=self.direction_steps, lr=self.lr,
                             momentum=self.momentum, direction_lr=self.direction_lr, hidden=self.hidden,
                             layers=self.layers, batch_size=self.protocol_.batch_size,
                             solver="linear" if readme else "epo", sample_rays=readme)
        self._conclude(fed, lambda: search, t0, 0.0)
        self.epo_fallbacks_ = search.epo_fallbacks_
        return self

    def _conclude(self: _SPO, fed, make_search: Callable, t0: float, t_train: float) -> _SPO:
        """After training: freeze the hypernetwork, search every client's best direction on the
        grand coalition's face, read ``BG(all)`` and the utilities there, record the timings."""
        if self.hypernet_ is not None:
            self.hypernet_.eval()
            for p in self.hypernet_.parameters():
                p.requires_grad_(False)
        self.search_ = make_search()
        self.oracle_ = SPOOracle(fed.names, self.search_, self.rule, self.threshold, self.tol, self.min_weight)
        grand = (1 << fed.n) - 1
        t_graph = time.perf_counter()
        D, self.val_loss_ = self.oracle_.best_directions(grand)
        self.oracle_.benefit_graph(grand)
        t_graph = time.perf_counter() - t_graph
        W = np.clip(D, 0, None)
        self.weights_ = W / W.sum(axis=1, keepdims=True)
        self.utilities_ = self.utilities_at(self.weights_)
        self.fit_seconds_ = time.perf_counter() - t0
        self.timings_ = {"train": t_train, "graph_all": t_graph, "total": self.fit_seconds_}
        return self

    # -- the estimate
    def ce_directions(self, partition) -> np.ndarray:
        """Row ``i``: client ``i``'s best direction on the face of its block of ``partition`` (bitmasks)."""
        out = np.zeros_like(self.weights_)
        for k in partition:
            Dk, _ = self.oracle_.best_directions(k)
            for i in members(k):
                out[i] = Dk[i]
        return out

    def estimate_config(self) -> dict:
        fed = self.federation_
        params = {k: v for k, v in self.get_params(deep=False).items() if k != "progress"}
        params["protocol"] = self.protocol_.to_json()   # the one trained with (the default when none was given)
        config = {"method": "spo", **params, "dataset": fed.name, "data_options": dict(fed.options),
                  "device_used": str(self.device_),
                  "rules_reported": [self.rule] + (["ratio"] if self.rule != "ratio" else [])}
        if getattr(self, "data_roles_", None) is not None:   # which rows tuned, which scored
            config["data_roles"] = self.data_roles_
        return config

    def estimate_extra(self, peeling: Peeling) -> dict:
        """The CE: each client's direction and utilities in its learned coalition, and every round's graph."""
        names = self.federation_.names
        ce_dirs = self.ce_directions(peeling.partition)
        rules = {self.rule: self._rule_record(self.oracle_, peeling, used=True)}
        if self.rule != "ratio":  # the paper's rule, always reported beside the one used
            ratio = self.oracle_.with_rule("ratio")
            rules["ratio"] = self._rule_record(ratio, peel_oracle(ratio), used=False)
        return {
            "rules": rules,
            "model": self.model_,
            "val_loss": {names[i]: float(self.val_loss_[i]) for i in range(len(names))},
            "ce_directions": {names[i]: [float(x) for x in ce_dirs[i]] for i in range(len(names))},
            "ce_utilities": self.utilities_at(ce_dirs),
            "graphs": [{"within": [names[i] for i in members(r.within)],
                        "ocs": {names[i]: [names[j] for j in members(c)] for i, c in r.graph.collaborators}}
                       for r in peeling.rounds],
            "train_loss": [float(x) for x in self.history_],
            "val_loss_history": {
                "steps": list(self.val_loss_steps_),
                "mean": [float(np.mean(v)) for v in self.val_loss_clients_],
                "clients": {c: [float(v[i]) for v in self.val_loss_clients_] for i, c in enumerate(names)}},
            "epo_fallbacks": self.epo_fallbacks_,
            "training": ({"variant": self.variant} if self.variant in PER_SEARCH else
                         {"variant": self.variant, "lr": self.lr_, "stopped_at": self.stopped_at_,
                          "best_step": self.best_step_, "hit_max": self.hit_max_, "max_steps": self.protocol_.steps,
                          "patience": self.protocol_.patience,
                          "lr_losses": {repr(k): v for k, v in getattr(self, "lr_losses_", {}).items()}}),
        }

    def sensitivity(self, thresholds=None) -> tuple[str, float, tuple[SensitivityRow, ...]]:
        """The paper's ratio rule across its threshold on these searches: ``("ratio", threshold, rows)``.

        Each row is ``BG(all)`` and the equilibrium that peeling reaches with the
        ratio rule ``d_j/d_i ≥ t`` on this hypernetwork (searches shared and cached,
        so a threshold costs only the searches of sets no other one visited).
        ``thresholds`` defaults to :func:`coalitions.sensitivity.default_thresholds`
        of ``"relative"`` plus ``self.threshold``.
        """
        grid = [*(default_thresholds("relative") if thresholds is None else thresholds), float(self.threshold)]
        try:
            values = sorted({float(t) for t in grid})
        except (TypeError, ValueError):
            raise InputError("thresholds must be numbers") from None
        grand = (1 << self.federation_.n) - 1
        rows = []
        for t in values:
            check_param("threshold", t, "number", low=0)
            o = self.oracle_.with_rule("ratio")
            o.threshold = t
            rows.append(SensitivityRow(t, o.benefit_graph(grand).edges, peel_oracle(o).partition))
        return "ratio", float(self.threshold), tuple(rows)

    def _rule_record(self, oracle: SPOOracle, peeling: Peeling, used: bool) -> dict:
        """``BG(all)`` and the equilibrium of one rule, labelled (the estimate's ``extra.rules``)."""
        names = self.federation_.names
        grand = (1 << len(names)) - 1
        graph = oracle.benefit_graph(grand)
        return {"label": oracle.rule_label(), "used": used,
                "threshold" if oracle.rule == "ratio" else "tol": self.threshold if oracle.rule == "ratio" else self.tol,
                "ocs": {names[i]: [names[j] for j in members(c)] for i, c in graph.collaborators},
                "edges": [[names[j], names[i]] for j, i in graph.edges],
                "partition": [[names[i] for i in members(k)] for k in canonical(peeling.partition)]}

    def _client_losses(self, params: dict, X, y, m) -> torch.Tensor:
        """Mean loss of one model (unstacked params) on every client's padded data: (N,)."""
        out = vmap(self.spec_.forward, in_dims=(None, 0))(params, X)
        per = self.loss_(out, y)
        return (per * m).sum(-1) / m.sum(-1)

    def _loss_matrix(self, params: dict, X, y, m) -> torch.Tensor:
        """``L[b, j]``: client ``j``'s mean loss under the ``b``-th stacked model, (B, N)."""
        return vmap(self._client_losses, in_dims=(0, None, None, None))(params, X, y, m)

    def _val_loss_matrix(self, params: dict) -> torch.Tensor:
        """``L[b, j]``: client ``j``'s mean loss on its tuning rows under the ``b``-th stacked model, (B, N).

        What early stopping and the rate grid read: the validation rows, or the rows the protocol's
        ``tune_split`` held out of training (``tune_``).  With personal heads ``params`` is the
        generated body and client ``j`` predicts through its own head.
        """
        rows = self.tune_
        if self.heads == "personal":
            return personal_loss_matrix(self.spec_, self.loss_, params, dict(self._hypernet().client_heads),
                                        rows.X, rows.y, rows.m)
        return self._loss_matrix(params, rows.X, rows.y, rows.m)

    def _train(self, fed: Federation, lr: float | None = None) -> list[float]:
        """Train ``hypernet_`` (Adam at ``lr``, default SPO's ``lr``) for ``protocol_.steps`` steps, early stopping
        under ``protocol_.patience``.

        Sets ``val_loss_steps_``, ``val_loss_clients_``, ``best_val_`` (the kept network's mean
        validation loss), ``stopped_at_`` and ``hit_max_``; returns the training-loss history.
        """
        net = self._hypernet()
        steps, batch, patience = self.protocol_.steps, self.protocol_.batch_size, self.protocol_.patience
        dev = self.device_
        rng = np.random.default_rng(self.seed)
        self.lr_ = float(self.lr if lr is None else lr)
        # PyTorch's fused Adam (one pass over the parameters per step, where it has the kernel): the hypernetwork's
        # output layer holds nearly all its parameters (fashion: 2.5 M), and the default CPU Adam's some ten passes
        # over them took 60 % of SPO's training there (benchmarks/spo_cost.py)
        opt = make_optimizer("adam", self.lr_, params=net.parameters(), fused=True)
        self.best_val_, self.best_step_, self.stopped_at_, self.hit_max_ = math.inf, steps, steps, True
        best_state, stop = None, Patience(patience)
        sched = make_schedule(opt, "cosine", steps, floor=LR_FLOOR)
        history, running = [], []
        # validation loss per evaluation: each client's validation loss under h(d) for 16 fixed
        # directions, weighted by its share d_j (the training objective's terms, on validation data)
        evals = torch.as_tensor(sample_directions(np.random.default_rng([int(self.seed), 0x7A1]), fed.n, 16,
                                                  self.alpha, self.faces), dtype=torch.float32, device=dev)
        self.val_loss_steps_ = []
        self.val_loss_clients_ = []
        # decided before the first step: per direction, the generated parameters, the hypernetwork's
        # activations and the target's on every client's batch, each kept for the backward pass with its
        # temporaries: 16 bytes a value (measured: synthetic, 200,000 directions, peak 5.4 GB, this 5.6 GB)
        rows = int(self.train_.sizes.max()) if batch is None else int(batch)
        width = max(int(s[-1]) for s in self.spec_.shapes.values())
        check_memory(16 * int(self.directions) * (sum(net.sizes) + self.hidden * max(self.layers, 1) + self.embed
                                                  + fed.n * rows * width),
                     f"SPO's training step (--directions {self.directions}, {fed.n} clients × {rows} rows)")
        for step in range(steps):
            D = torch.as_tensor(sample_directions(rng, fed.n, self.directions, self.alpha, self.faces),
                                dtype=torch.float32, device=dev)
            X, y, m = self.train_.sample(batch, rng)
            params = net(D)
            if net.personal:  # the bodies' ridge included
                f, L = self._personal_objective(D, params, X, y, m)
            else:
                L = self._loss_matrix(params, X, y, m)
                weights = self._epo_weights(D, X, y, m, L) if self.epo else D
                f = (weights * L).sum(dim=1)
            if self.l2_ > 0 and not net.personal:
                f = f + decay_penalty(params, self._decay, self.l2_, stacked=1)
            loss = torch.log(f).mean() if self.log_loss else f.mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            running.append(float((D * L.detach()).sum(dim=1).mean()))
            if (step + 1) % EVAL_EVERY == 0 or step + 1 == steps:
                history.append(float(np.mean(running)))
                running = []
                with torch.no_grad():
                    Lv = self._val_loss_matrix(net(evals))  # (16, N)
                    per = (evals * Lv).sum(0) / evals.sum(0).clamp(min=1e-12)
                self.val_loss_steps_.append(step + 1)
                self.val_loss_clients_.append([float(x) for x in per.double().cpu().numpy()])
                if self.progress is not None:
                    self.progress(step + 1, steps)
                mean_val = float(np.mean(self.val_loss_clients_[-1]))
                improved = bool(stop.update(mean_val, step + 1)[0])
                if patience is None:
                    self.best_val_, self.best_step_ = mean_val, step + 1   # no early stopping: the last is kept
                elif improved:
                    self.best_val_, self.best_step_ = mean_val, step + 1
                    best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
                elif stop.stopped:
                    self.stopped_at_, self.hit_max_ = step + 1, False
                    break
        if best_state is not None:
            net.load_state_dict(best_state)
        return history

    def _personal_objective(self, D, body: dict, X, y, m):
        """``(f, L)`` with personal heads: each direction's scalarised loss (ridge on the body and on
        each head included) and the loss matrix.  The heads' gradient through direction ``b`` is
        rescaled by ``f_b`` under ``log_loss``, so a head learns from its own client's loss alone (:mod:`.heads`)."""
        heads = dict(self._hypernet().client_heads)
        scale: list | None = [None] if self.log_loss else None   # f_b, set once f is known (before backward)
        L = personal_loss_matrix(self.spec_, self.loss_, body, heads, X, y, m, scale)
        f = (D * L).sum(dim=1)
        if self.l2_ > 0:
            f = f + self.l2_ * head_penalty(self.spec_, heads, D, scale)
            f = f + decay_penalty(body, self._decay, self.l2_, stacked=1)
        if scale is not None:
            scale[0] = f.detach()
        return f, L

    def _epo_weights(self, D, X, y, m, L) -> torch.Tensor:
        """Per-direction EPO weights ``N·α`` (PHN-EPO), from gradients w.r.t. the hypernetwork."""
        net = self._hypernet()
        hp = {k: v.detach() for k, v in net.named_parameters()}

        def loss_vec(p, d):
            params = functional_call(net, p, (d[None],))
            return self._client_losses({k: v[0] for k, v in params.items()}, X, y, m)

        jac = vmap(jacrev(loss_vec), in_dims=(None, 0))(hp, D)
        G = torch.cat([g.reshape(g.shape[0], g.shape[1], -1) for g in jac.values()], dim=-1)
        gram = (G @ G.transpose(1, 2)).double().cpu().numpy()
        losses = L.detach().double().cpu().numpy()
        rays = D.double().cpu().numpy()
        out = np.empty_like(rays)
        for b in range(rays.shape[0]):
            a = epo_lp(losses[b], gram[b], rays[b])
            if a is None:
                self.epo_fallbacks_ += 1
                a = rays[b] / rays[b].sum()
            out[b] = a * rays.shape[1]
        return torch.as_tensor(out, dtype=L.dtype, device=L.device)

    # -- evaluation
    def _scores(self, D: np.ndarray, split: Padded) -> list[np.ndarray]:
        if self.variant in PER_SEARCH:
            return self.search_.scores(D, split)
        with torch.no_grad():
            params = self._hypernet()(torch.as_tensor(D, dtype=torch.float32, device=self.device_))
            out = []
            params = self._hypernet().member_params(params, torch.arange(len(D), device=self.device_))
            for i, X in enumerate(split.raw_X):
                p = {k: v[i] for k, v in params.items()}
                s = self.spec_.forward(p, torch.tensor(X, device=self.device_))
                out.append(s.double().cpu().numpy())
        return out

    def utilities_at(self, D: np.ndarray) -> dict:
        """The federation's metric of each client at its direction (row of ``D``), val and test."""
        names = self.federation_.names
        res = {}
        for part, split in (("val", self.val_), ("test", self.test_)):
            scores = self._scores(D, split)
            res[part] = {names[i]: float(evaluate_batch(self.federation_.metric, split.raw_y[i], s[None])[0])
                         for i, s in enumerate(scores)}
        return res

    def client_outputs(self, part: str = "test") -> list[np.ndarray]:
        """Each client's outputs on its ``part`` split at its best direction (row ``i`` of ``weights_``).

        What ``utilities_`` scores: the target model ``h(d_i)`` (with client ``i``'s own head
        under personal heads); ``(n_i,)`` for one output, else ``(n_i, k)``.
        """
        split = {"train": self.train_, "val": self.val_, "test": self.test_}[part]
        return [s[:, 0] if s.ndim == 2 and s.shape[1] == 1 else s for s in self._scores(self.weights_, split)]

    def predict_params(self, d) -> dict:
        """The target model's parameters at direction(s) ``d`` (numpy, (B, N) or (N,)).

        With personal heads: the generated body only (the heads are ``hypernet_.client_heads``).
        Not for ``variant="paper"`` or ``"readme"``, which have one hypernetwork per searched client and face.
        """
        if self.hypernet_ is None:
            raise InputError(f"spo: variant {self.variant} has no single hypernetwork (one per searched client "
                             "and face)")
        d = np.atleast_2d(np.asarray(d, dtype=np.float64))
        with torch.no_grad():
            p = self._hypernet()(torch.as_tensor(d, dtype=torch.float32, device=self.device_))
        return {k: v.cpu().numpy() for k, v in p.items()}
