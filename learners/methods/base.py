"""What every personalised federated learner shares (SPEC §5, issue 4).

:class:`PersonalizedLearner` is the scikit-learn-style base of ``fedamp``,
``fedamp-heuristic``, ``federico``, ``superfed-mm``, ``superfed-lm``, ``local``
and ``fedavg``.  A subclass says how to start (:meth:`~PersonalizedLearner._init_state`),
what one communication round does (:meth:`~PersonalizedLearner._round`) and how a
client predicts; the base runs the rounds on the batched :class:`~coalitions.learners.training.engine.Engine`,
saves a checkpoint after every round, reports progress, scores every client on its
validation and test data, and turns the result into a ``coalitions/estimate@1``.

Randomness
    Everything random in round ``r`` comes from ``numpy.random.default_rng([seed, r, stream])``
    (stream 0: minibatch order; 1: the method's own draws) and the initial
    parameters from ``torch.Generator().manual_seed(seed)``.  Hence the same
    seed gives the same result, and a run resumed from the checkpoint of round
    ``r`` continues exactly as the uninterrupted run would.  Every client
    starts from the same initial model (as a server's broadcast would give).
Optimiser
    Each round every client starts a fresh optimiser (as a client process of
    a federated round does) unless the method says otherwise (FedeRiCo keeps
    each model's Adam state: its models never leave their owners).
From weights to an equilibrium (SPEC §5)
    With a weight matrix (FedAMP's ``ξ``, FedeRiCo's posteriors) ``BG(R)``
    comes from :class:`~coalitions.estimate.WeightOracle` (rule and threshold
    configurable): for ``R ⊊ all`` rows are **renormalised** over ``R`` by
    default; ``refit=True`` trains the method again on the clients of ``R``
    alone and reads ``BG(R)`` off the new weights (:class:`RefitOracle`).  The
    estimate's config says which (``"restricted": "renormalise" | "refit"``).
    Baselines without pairwise weights (Local, FedAvg, SuPerFed) write
    ``weights: null`` and the *structural* graph of what they train: Local no
    edges (everyone alone), FedAvg and SuPerFed every client on every other
    (one shared federated model) — config ``"graph": "structural"``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from coalitions.bitmask import mask_of, members
from coalitions.errors import InputError
from coalitions.estimate import DEFAULT_THRESHOLDS, WEIGHT_RULES, Estimate, WeightOracle
from coalitions.graph import BenefitGraph
from coalitions.learners.data.federation import Federation
from coalitions.learners.data.metrics import evaluate_batch, loss_function
from coalitions.learners.training.engine import Engine, Padded, resolve_device
from coalitions.learners.training.models import KINDS, make_model
from coalitions.learners.training.threads import applied, step_macs
from coalitions.peeling import peel_oracle

__all__ = ["PersonalizedLearner", "RefitOracle", "StructuralOracle", "COMMON_DEFAULTS", "save_checkpoint", "load_checkpoint",
           "unflatten", "default_model"]

#: Defaults shared by every method (each method may override some).
COMMON_DEFAULTS = dict(model=None, hidden=64, rounds=50, local_epochs=1, batch_size=32, optimizer="sgd",
                       lr=0.1, momentum=0.9, weight_decay=0.0, rule="relative", threshold=None, refit=False,
                       device="auto", engine="auto", chunk=None, seed=0, checkpoint=None, progress=None)
#: Settings that never change the result (left out of the checkpoint fingerprint).
_NOT_RESULT = ("device", "checkpoint", "progress", "engine", "chunk", "rule", "threshold", "refit")


def default_model(federation: Federation) -> str:
    """``"cnn"`` for images, ``"linear"`` for regression, ``"logistic"`` otherwise."""
    if len(federation.input_shape) == 3:
        return "cnn"
    return "linear" if federation.task == "regression" else "logistic"


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
    import inspect

    try:
        params = list(inspect.signature(callback).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 3


# --------------------------------------------------------------------------- checkpoints
def _to_saveable(x):
    if isinstance(x, np.ndarray):
        return {"__ndarray__": torch.from_numpy(np.ascontiguousarray(x))}
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, dict):
        return {k: _to_saveable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_to_saveable(v) for v in x]
    return x


def _from_saved(x, device):
    if isinstance(x, dict):
        if set(x) == {"__ndarray__"}:
            return x["__ndarray__"].numpy()
        return {k: _from_saved(v, device) for k, v in x.items()}
    if isinstance(x, list):
        return [_from_saved(v, device) for v in x]
    if isinstance(x, torch.Tensor):
        return x.to(device)
    return x


def save_checkpoint(path, key: str, round_done: int, state: dict, meta: dict) -> None:
    """Write ``state`` after ``round_done`` rounds to ``path`` atomically (temporary file, then rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save({"key": key, "round": int(round_done), "state": _to_saveable(state), "meta": dict(meta)}, tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise InputError(f"{path}: cannot write checkpoint ({e.strerror})") from None


def load_checkpoint(path, key: str, device):
    """``(round_done, state, meta)`` from ``path``; ``None`` when there is no file.

    A file of another run (different data, method settings or seed) or an
    unreadable one raises :class:`InputError`.
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        ok = isinstance(blob, dict) and {"key", "round", "state", "meta"} <= set(blob)
    except Exception as e:  # torch raises many kinds on a damaged file
        raise InputError(f"{path}: not a readable learner checkpoint ({e.__class__.__name__}); "
                         "delete it to start afresh") from None
    if not ok:
        raise InputError(f"{path}: not a learner checkpoint; delete it or pass another --checkpoint")
    if blob["key"] != key:
        raise InputError(f"{path}: checkpoint of a different run (data, method, options or seed differ); "
                         "delete it or pass another --checkpoint")
    return int(blob["round"]), _from_saved(blob["state"], device), dict(blob["meta"])


def _fingerprint(config: dict, federation: Federation) -> str:
    h = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for c in federation.clients:
        h.update(c.name.encode())
        for part in (c.train, c.val, c.test):
            h.update(str(part.X.shape).encode())
            h.update(part.X.tobytes())
            h.update(part.y.tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------- refit oracle
class RefitOracle:
    """``BG(R)`` by training the method again on the clients of ``R`` alone (SPEC §5, ``--refit``).

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
            graph = self._learner._weight_oracle(self.clients, self._weights).benefit_graph(within)
        elif len(idx) == 1:
            graph = BenefitGraph(self.clients, within, ((idx[0], 0),))
        else:
            sub = Federation(self._fed.name, self._fed.task, self._fed.metric,
                             tuple(self._fed.clients[i] for i in idx), self._fed.n_classes, None,
                             self._fed.options)
            params = {**self._learner.get_params(), "checkpoint": None, "progress": None, "refit": False}
            clone = type(self._learner)(**params)
            clone._skip_estimate = True
            clone.fit(sub)
            self.refits_ += 1
            local = clone._weight_oracle(sub.names, clone.weights_).benefit_graph((1 << len(idx)) - 1)
            collab = tuple((idx[a], mask_of(idx[b] for b in members(c))) for a, c in local.collaborators)
            graph = BenefitGraph(self.clients, within, collab)
        self._cache[within] = graph
        return graph


class StructuralOracle:
    """The graph a baseline's training implies: nobody (``shared=False``, Local) or everybody
    (``shared=True``: one federated model, FedAvg and SuPerFed) is a collaborator of each client."""

    def __init__(self, clients, shared: bool):
        self.clients = tuple(clients)
        self.shared = bool(shared)

    def benefit_graph(self, within: int) -> BenefitGraph:
        within = int(within)
        return BenefitGraph(self.clients, within,
                            tuple((i, (within & ~(1 << i)) if self.shared else 0) for i in members(within)))


# --------------------------------------------------------------------------- the base estimator
class PersonalizedLearner:
    """Base of the personalised learners (see the module docstring).

    Common parameters
    -----------------
    model : {"linear", "logistic", "mlp", "cnn"} or None
        Each client's model (:func:`coalitions.learners.training.models.make_model`); ``None``:
        :func:`default_model` (``cnn`` for images).
    hidden : int
        MLP hidden units (64).
    rounds : int
        Communication rounds.
    local_epochs : int
        Passes over each client's training data per round (1).
    batch_size : int or None
        Minibatch size per client (32); ``None``: full batch.
    optimizer : {"sgd", "adam"}
    lr, momentum, weight_decay : float
        Optimiser settings (SGD with momentum 0.9, lr 0.1 unless the method
        documents other defaults).
    rule : {"relative", "absolute", "mass"}
        How a weight row becomes collaborators (:class:`~coalitions.estimate.WeightOracle`).
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

    Attributes (after ``fit``)
    --------------------------
    params_ : dict
        Each client's personalised model, stacked ``{name: (N, ...)}`` on the CPU.
    weights_ : ndarray (N, N) or None
    weights_history_ : list of ndarray
        The weight matrix used in each round (methods with weights).
    utilities_ : dict
        ``{"val": {name: metric}, "test": {name: metric}}``.
    loss_history_ : list of float
        Mean training loss of each round.
    estimate_ : coalitions.estimate.Estimate
    engine_ : coalitions.learners.training.engine.Engine
    fit_seconds_ : float
    resumed_from_ : int
        Rounds loaded from the checkpoint (0 when none).
    """

    #: The method's name in estimates and on the command line.
    method: str = ""
    #: The method's own constructor parameters, in order.
    _own_params: tuple = ()
    #: Does the method produce a pairwise weight matrix?
    has_weights: bool = True

    def __init__(self, **common):
        unknown = set(common) - set(COMMON_DEFAULTS)
        if unknown:
            raise TypeError(f"unknown parameter(s) {', '.join(sorted(unknown))}")
        for k, v in COMMON_DEFAULTS.items():
            setattr(self, k, common.get(k, v))

    # -- configuration
    def get_params(self) -> dict:
        """Every constructor setting (method's own first, then the common ones)."""
        return {k: getattr(self, k) for k in (*self._own_params, *COMMON_DEFAULTS)}

    def set_params(self, **params) -> PersonalizedLearner:
        for k, v in params.items():
            if k not in self.get_params():
                raise InputError(f"{self.method}: unknown option {k!r}")
            setattr(self, k, v)
        return self

    def config(self) -> dict:
        """The JSON-ready settings written to the estimate."""
        out = {k: v for k, v in self.get_params().items() if k not in ("checkpoint", "progress")}
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()}

    def _check(self) -> None:
        """Validate the common settings (each raises :class:`InputError` naming the option)."""
        def integer(name, lo, allow_none=False):
            v = getattr(self, name)
            if allow_none and v is None:
                return
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise InputError(f"--{name.replace('_', '-')} must be an integer >= {lo}, got {v!r}")

        def number(name, lo, strict):
            v = getattr(self, name)
            ok = isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) and math.isfinite(v)
            if not ok or v < lo or (strict and v == lo):
                raise InputError(f"--{name.replace('_', '-')} must be a number {'>' if strict else '>='} {lo}, "
                                 f"got {v!r}")

        integer("rounds", 0)
        integer("local_epochs", 1)
        integer("batch_size", 1, allow_none=True)
        integer("hidden", 1)
        integer("seed", 0)
        number("lr", 0, True)
        number("momentum", 0, False)
        number("weight_decay", 0, False)
        if self.momentum >= 1:
            raise InputError(f"--momentum must be below 1, got {self.momentum!r}")
        if self.model is not None and self.model not in KINDS:
            raise InputError(f"--model must be one of {', '.join(KINDS)}, got {self.model!r}")
        if self.optimizer not in ("sgd", "adam"):
            raise InputError(f"--optimizer must be sgd or adam, got {self.optimizer!r}")
        if self.rule not in WEIGHT_RULES:
            raise InputError(f"--rule must be one of {', '.join(WEIGHT_RULES)}, got {self.rule!r}")
        if self.threshold is not None:
            number("threshold", 0, False)
        if self.progress is not None and not callable(self.progress):
            raise InputError("progress must be callable")
        self._check_own()

    def _check_own(self) -> None:
        """Validate the method's own settings (subclasses)."""

    # -- fitting
    def _step_macs(self, fed: Federation) -> float:
        """Work of one local step of every client (the thread policy's input)."""
        spec = make_model(self.model or default_model(fed), fed.input_shape, fed.n_outputs, hidden=self.hidden)
        batch = int(fed.sizes("train").max()) if self.batch_size is None else int(self.batch_size)
        return step_macs(spec, batch, fed.n)

    @applied
    def fit(self, federation: Federation) -> PersonalizedLearner:
        """Train every client for ``rounds`` rounds, score them, and build the estimate."""
        if not isinstance(federation, Federation):
            raise InputError(f"{self.method}: fit() takes a Federation, got {type(federation).__name__}")
        self._check()
        t0 = time.perf_counter()
        fed = self.federation_ = federation
        dev = resolve_device(self.device)
        self.model_ = self.model or default_model(fed)
        self.spec_ = make_model(self.model_, fed.input_shape, fed.n_outputs, hidden=self.hidden)
        self.per_sample_loss_ = loss_function(fed.task)
        self.train_data_ = Padded(fed, "train", dev)
        self.engine_ = Engine(dev, self.engine, self.chunk)
        key = _fingerprint({k: v for k, v in self.config().items() if k not in _NOT_RESULT}
                           | {"method": self.method, "model_": self.model_}, fed)
        state = None
        self.resumed_from_ = 0
        self.loss_history_ = []
        if self.checkpoint is not None:
            loaded = load_checkpoint(self.checkpoint, key, dev)
            if loaded is not None:
                self.resumed_from_, state, meta = loaded
                self.loss_history_ = list(meta.get("loss_history", []))
                if meta.get("engine") and self.engine == "auto":
                    path, chunk = meta["engine"]
                    self.engine_ = Engine(dev, path, chunk)
        if state is None:
            gen = torch.Generator().manual_seed(int(self.seed))
            state = self._init_state(fed, gen, dev)
        for r in range(self.resumed_from_, int(self.rounds)):
            state, info = self._round(state, r, lambda stream, r=r: np.random.default_rng([int(self.seed), r, stream]))
            self.loss_history_.append(float(info.get("loss", float("nan"))))
            if self.checkpoint is not None:
                meta = {"loss_history": self.loss_history_, "engine": list(self.engine_.choice_ or ("auto", None))}
                save_checkpoint(self.checkpoint, key, r + 1, state, meta)
            if self.progress is not None:
                if _takes_info(self.progress):
                    self.progress(r + 1, int(self.rounds), info)
                else:
                    self.progress(r + 1, int(self.rounds))
        self.state_ = state
        self._finish(state)
        self.utilities_ = self._utilities(fed, dev)
        self.fit_seconds_ = time.perf_counter() - t0
        if not getattr(self, "_skip_estimate", False):
            self.estimate_ = self._estimate(fed)
        return self

    # -- what subclasses provide
    def _init_state(self, fed: Federation, gen: torch.Generator, device) -> dict:
        raise NotImplementedError

    def _round(self, state: dict, r: int, rng: Callable) -> tuple[dict, dict]:
        raise NotImplementedError

    def _finish(self, state: dict) -> None:
        """Set ``params_``, ``weights_`` and ``weights_history_`` from the final state."""
        raise NotImplementedError

    def _scores(self, data: Padded) -> torch.Tensor:
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
        from coalitions.learners.training.engine import make_optimizer

        return make_optimizer(self.optimizer, self.lr, self.momentum, self.weight_decay)

    # -- scoring and the estimate
    def _utilities(self, fed: Federation, device) -> dict:
        out = {}
        for part in ("val", "test"):
            data = Padded(fed, part, device)
            scores = self._scores(data).detach().cpu().double().numpy()
            out[part] = {}
            for i, name in enumerate(fed.names):
                n = int(data.sizes[i])
                out[part][name] = float(evaluate_batch(fed.metric, data.raw_y[i], scores[i:i + 1, :n])[0])
        return out

    def _weight_oracle(self, names, weights) -> WeightOracle:
        return WeightOracle(names, weights, self.rule, self.threshold)

    #: Baselines: does the method train one shared model for everyone (FedAvg, SuPerFed)
    #: or a model per client alone (Local)?  Gives the structural graph.
    shares_model: bool = True

    def _estimate(self, fed: Federation) -> Estimate:
        names = fed.names
        grand = (1 << fed.n) - 1
        config = {"method": self.method, **self.config(), "model_": self.model_, "dataset": fed.name,
                  "data_options": dict(fed.options), "device_used": str(self.engine_.device_),
                  "engine_used": self.engine_.label,
                  "threshold_used": self.threshold if self.threshold is not None else DEFAULT_THRESHOLDS[self.rule]}
        if self.has_weights:
            oracle = (RefitOracle(self, fed, self.weights_) if self.refit
                      else self._weight_oracle(names, self.weights_))
            config["restricted"] = "refit" if self.refit else "renormalise"
            config["graph"] = "weights"
        else:
            oracle = StructuralOracle(names, self.shares_model)
            config["restricted"] = "structural"
            config["graph"] = "structural"
        peeling = peel_oracle(oracle)
        extra = {"loss_history": self.loss_history_, "fit_seconds": self.fit_seconds_,
                 "resumed_from": self.resumed_from_}
        if self.has_weights:
            extra["weights_history"] = [np.round(w, 8).tolist() for w in self.weights_history_]
        extra.update(self._extra())
        return Estimate(clients=names, method=self.method, config=config,
                        weights=self.weights_ if self.has_weights else None, utilities=self.utilities_,
                        metric=fed.metric, sense=fed.sense, benefit_graph=oracle.benefit_graph(grand),
                        partition=peeling.partition, rounds=tuple(r.stable for r in peeling.rounds if r.stable),
                        planted_groups=fed.planted_groups, extra=extra)

    def _extra(self) -> dict:
        """Method-specific JSON-ready results for the estimate's ``extra``."""
        return {}

    def __repr__(self) -> str:
        own = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._own_params)
        return f"{type(self).__name__}({own})"
