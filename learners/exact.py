"""The exhaustive subset oracle: a model for every coalition (docs/concepts.md §5).

``v_i(S)`` is the metric, on client ``i``'s validation data, of a model trained
on the union of the training data of the clients in ``S``.  The oracle trains
all ``2^N − 1`` subset models and returns the exhaustive game (docs/concepts.md §1, docs/formats.md),
with the test-set values alongside.

Every subset model trains under one
:class:`~coalitions.learners.training.protocol.TrainingProtocol` (the oracle's ``protocol``, or the
default protocol of the federation's task and input shape), two ways, never one Python loop per
subset:

* **Closed form** (a linear model with ``closed_form`` on a regression task).  With the bias
  folded in (``x̃ = (x, 1)``), client ``i`` contributes ``G_i = X̃_iᵀX̃_i`` and
  ``b_i = X̃_iᵀy_i``.  The sums ``G_S = Σ_{i∈S} G_i`` for all ``2^N`` masks come
  from one doubling pass (``G[2^i : 2^{i+1}] = G[0 : 2^i] + G_i``), and all
  systems are solved in one batched call
  ``w_S = (G_S + λ·n_S·I)⁻¹ b_S`` with the protocol's ``weight_decay`` as ridge ``λ``
  (the default protocol's is ``1e-10``, relative to the mean loss; ``n_S`` = training samples
  of ``S``), a tiny ridge that keeps
  under-determined subsets solvable and, as ``λ → 0``, tends to the
  minimum-norm least-squares fit.  The validation MSE of every subset model on
  client ``i`` is the quadratic form ``(wᵀA_i w − 2wᵀc_i + e_i)/n_i`` with
  ``A_i = X̃ᵀX̃``, ``c_i = X̃ᵀy``, ``e_i = yᵀy`` of ``i``'s validation set, so
  predictions are never materialised.
* **Batched training** (every other model).  All subset models of a chunk are
  stacked (leading dimension = subset) and trained together with
  ``torch.func.vmap``: each model sees every training sample once per step;
  per-sample losses are summed per client (``(M, n) @ onehot(owner) → (M, N)``)
  and weighted by the subset-membership matrix, so model ``S`` minimises

  ``L_S(θ) = Σ_{i∈S} Σ_{x∈D_i} ℓ(θ; x) / Σ_{i∈S} |D_i| + (λ/2)·‖weights‖²``

  (``λ`` the protocol's ``weight_decay``), the mean loss over the union of its members' data,
  without copying data per subset.  The protocol's optimiser and learning-rate schedule, full
  batch unless the protocol has a ``batch_size`` (then one shared random order of all samples
  per epoch; a subset's loss on a batch is the mean over its members' samples in it).  Every subset model starts from the same initial parameters (drawn
  from ``seed``) and sees the same batch order, so a subset's result does not
  depend on which chunk holds it, and a resumed run gives the same game.
  Chunks are sized to a memory budget; a checkpoint file
  (:mod:`coalitions.learners.training.checkpoint`) records finished chunks.

**Personal heads** (``heads="personal"``; FedPer's split, Arivazhagan et al. 2019, as in the
paper's CIFAR-10 code).  Subset ``S`` trains *one body and one output layer per member*: client
``i``'s samples go through the body of ``S`` and ``i``'s own head; the body descends the mean
loss over the union of the members' data and each head its own client's loss,

``body: Σ_{i∈S} (n_i/n_S)·L_i(body, head_i) + (λ/2)·‖W_body‖²``,  ``head_i: L_i(body, head_i) + (λ/2)·‖W_head_i‖²``

(``L_i`` client ``i``'s mean training loss, ``n_S = Σ_{i∈S} n_i``, ``λ`` the protocol's ``weight_decay``), so that a singleton ``{i}`` is
exactly client ``i``'s own full model, a non-member's head has no term at all (it keeps its
initial value: no gradient, no decay), and a subset trains as FedPer restricted to it does with
one full-batch SGD step per round (:func:`~coalitions.learners.game.personal.train_subsets_personal`;
tests/test_fedper.py).  ``v_i(S)`` is client ``i``'s validation
metric with the body of ``S`` and head ``i``.  Heads are stacked per client (each parameter of
the output layer gets a client axis), all subsets of a chunk still train together
(:func:`train_subsets_personal`).  Label skew then costs a coalition nothing in the output layer
and shared features can only help.  With an affine model (``linear``, ``logistic``) the whole
model is the head, so ``v_i(S) = v_i({i})`` for every ``S ∋ i``; in closed form that is how the
game is filled.

**Bootstrap replicates** (``replicates=B``, docs/concepts.md §6).  Before
training, ``B`` resamples of each client's validation rows are drawn with
replacement from ``numpy.random.default_rng([seed, 0xB007])`` — from all of a
client's rows, or within each class when the metric is AUC (a stratified
bootstrap: every replicate keeps each class's count, so AUC stays defined;
:func:`~coalitions.learners.game.bootstrap.bootstrap_draws` says why accuracy is
not stratified).  After training, the same subset
models are scored on every resample: no retraining.  In closed form the
resample enters the quadratic form as row multiplicities ``w``
(``A_i = X̃ᵀ diag(w) X̃`` etc.); otherwise the stored scores of a chunk are
re-evaluated on the resampled rows (:func:`rescore`).

**The validation-loss game** (``loss_game=True``, classification).  The same subset models
scored a second way: ``ℓ_i(S)`` is the mean cross-entropy of the model of ``S`` on client
``i``'s validation data (:func:`~coalitions.learners.data.metrics.mean_loss_batch`, sense
``"min"``), with its own bootstrap replicates on the same resampled rows.  Accuracy on ``n``
validation samples moves in steps of ``1/n``; the loss does not, so the two games can
disagree where a coalition makes a client more confident without changing its decisions.
No extra training: ``loss_game_`` comes from the scores that ``game_`` comes from.
"""

from __future__ import annotations

import time

import numpy as np

import coalitions as co
from coalitions.errors import InputError
from coalitions.learners.data.federation import Federation
from coalitions.learners.data.roles import data_roles, with_roles
from coalitions.learners.estimator import EstimatorMixin
from coalitions.learners.game.bootstrap import DEFAULT_REPLICATES, bootstrap_draws, rescore
from coalitions.learners.game.chunks import ChunkTrainer
from coalitions.learners.game.closed_form import (
    _aug,
    closed_form_mse,
    closed_form_replicates,
    closed_form_weights,
    personal_from_singletons,
)
from coalitions.learners.game.masks import membership, subset_sums
from coalitions.learners.game.memory import activation_floats, cache_chunk, eval_batch, memory_chunk
from coalitions.learners.game.personal import train_subsets_personal
from coalitions.learners.game.shared import train_subsets
from coalitions.learners.training.protocol import TrainingProtocol, default_kind, protocol_with
from coalitions.learners.training.threads import step_macs, using
from coalitions.params import ParameterError, check_param

__all__ = ["ExhaustiveOracle", "subset_sums", "membership", "closed_form_weights", "closed_form_mse",
           "train_subsets", "bootstrap_draws", "rescore", "closed_form_replicates", "train_subsets_personal",
           "HEADS", "personal_from_singletons", "DEFAULT_REPLICATES"]

#: Output layers of a subset's model: one for all members, or one per member (module docstring).
HEADS = ("shared", "personal")



def chunk_trainer(params: dict, federation, config: dict, device) -> ChunkTrainer:
    """A :class:`ChunkTrainer` for an oracle with constructor ``params`` (what a Ray worker builds).

    The driver sends the protocol it resolved (``protocol_``) as ``params["protocol"]``, so the
    worker trains with that very protocol.
    """
    oracle = ExhaustiveOracle(**params)
    draws = bootstrap_draws(federation, oracle.replicates, oracle.seed) if oracle.replicates else None
    return ChunkTrainer(oracle, federation, config, device, draws)


def _measured(game: co.Game, replicates) -> co.Game:
    """``game`` carrying ``replicates`` as its uncertainty (two or more are needed for a standard error)."""
    from coalitions.noise import Uncertainty

    return game.with_uncertainty(Uncertainty.from_replicates(replicates)) if replicates.b >= 2 else game


class ExhaustiveOracle(EstimatorMixin):
    """Train a model on every non-empty subset of clients; the exact game (docs/concepts.md §5).

    The training protocol (``protocol``) is the only source of the training settings: the
    model, its hidden units, the optimiser, learning rate and schedule, the weight decay (the
    ridge in closed form), the batch, the budget, the patience and the learning-rate grid.  The
    oracle keeps none of its own; its other parameters say how the work is run (chunks,
    memory, device, precision, threads, checkpoint, backend), what is scored (``replicates``,
    ``loss_game``) and the subset models' output layers (``heads``).

    Parameters
    ----------
    protocol : coalitions.learners.training.protocol.TrainingProtocol, optional
        How every subset model is trained (docs/concepts.md §5), the protocol shared with the
        learners.  ``None``: the default protocol of the federation's task and input shape,
        :func:`~coalitions.learners.training.protocol.protocol_with` ``(task, input_shape)``
        (what ``coalitions oracle`` and ``coalitions learn`` train with when no training flag is
        given: linear regression solved in closed form with ridge ``1e-10``, logistic
        regression, the CNN for images); it is resolved when :meth:`fit` runs and kept as
        ``protocol_``.  A protocol whose ``model`` is ``None`` takes the same default-model rule
        (:func:`~coalitions.learners.training.protocol.default_kind`).  A linear model on a
        non-regression task is an error.
        Its model, weight decay, optimiser, schedule and batch train every subset model, for
        ``protocol.epochs_for(n)`` epochs over the ``n`` training samples of all clients
        (``protocol.steps`` optimiser steps); with ``closed_form`` on a linear regression the
        subsets are solved exactly with ridge ``weight_decay``.
        With an ``lr_grid`` every subset model trains once per rate and keeps the one with
        the lowest pooled validation loss (``lr_chosen_``); with a ``patience`` every subset
        model stops on its own pooled validation loss (``stopped_at_``); with a ``tune_split``
        "validation" there means the tuning rows held out of training
        (:mod:`coalitions.learners.data.roles`), and the validation rows only score.  Under the same
        protocol and seed the model of ``{i}`` is the model
        :class:`~coalitions.learners.methods.baselines.Local` trains for client ``i`` (full
        batch; tests/test_protocol.py).  With ``heads="personal"`` the singleton ``{i}``
        (body and ``i``'s head) is Local's model of client ``i`` in the same way.
    chunk_size : int, optional
        Subset models trained together; by default as many as keep a step's forward
        activations in the cache share of a core
        (:func:`coalitions.learners.game.memory.cache_chunk`), at most as many as fit
        ``memory_mb`` of activations.
    memory_mb : float
        Activation budget used to size chunks (sized for a full-batch step, whatever the
        protocol's batch).
    device : {"auto", "cpu", "cuda"}
    dtype : {"float32", "float64"}
        Precision of trained models (closed form is always float64).
    seed : int
        Seeds the initial parameters and the batch order.
    checkpoint : str or Path, optional
        File recording finished chunks; an interrupted run resumes from it.
    threads : int, optional
        PyTorch intra-op CPU threads during :meth:`fit` (restored afterwards);
        ``None``: the thread policy decides from the size of a chunk's training
        step (:mod:`coalitions.learners.training.threads`: one thread unless the
        step is large, then the free cores).
    progress : callable, optional
        ``progress(done, total)`` in model-epochs (closed form: one step).
    backend : {"local", "ray"}
        ``"ray"`` trains the chunks as Ray tasks (:mod:`coalitions.learners.distributed`),
        each finished chunk stored in ``checkpoint`` as it arrives; the game is
        the same as the local backend's, to the bit on the CPU.
    address : str, optional
        The Ray cluster to join (``ray start --head`` prints it); ``None``
        starts a private local Ray on this machine (all its cores).
    replicates : int
        Bootstrap replicates of the validation sets to score the trained
        models on (module docstring); they are the measured game's uncertainty
        (:attr:`game_` carries them, :mod:`coalitions.noise`), so that it is solved at a
        significance level.  The default, ``DEFAULT_REPLICATES`` (200), estimates each
        paired standard error to about 3 % (median relative error against 4,000
        replicates on heart: 4.6 % at 100, 3.4 % at 200, 2.1 % at 400); 0 for none
        (an exact game, point values).
    heads : {"shared", "personal"}
        ``"shared"``: one model per subset.  ``"personal"``: one body per
        subset and one output layer per member (module docstring, "Personal
        heads"); ``v_i(S)`` uses ``i``'s own head.
    loss_game : bool
        Also score every subset model by its mean validation loss: ``loss_game_``
        (module docstring, "The validation-loss game"); batched training only.

    Attributes
    ----------
    protocol_ : coalitions.learners.training.protocol.TrainingProtocol
        The protocol every subset model was trained with: ``protocol``, or the default
        protocol of the federation's task and input shape when ``protocol`` is ``None``.
        Recorded in the games' provenance (``model.protocol``).
    values_val_, values_test_ : ndarray of shape (N, 2**N)
        The metric (raw units: MSE, accuracy or AUC) of the model of ``S`` on
        client ``i``'s validation / test data; NaN where ``i ∉ S``.
    game_ : coalitions.Game
        The game from ``values_val_`` with the metric's sense and provenance; it
        carries the replicates as its uncertainty (``replicates ≥ 2``), so that
        :func:`coalitions.solve` compares its values at a significance level.
    test_game_ : coalitions.Game
        The same from ``values_test_`` (for reporting, never for choosing).
    replicates_ : coalitions.replicates.Replicates or None
        The game on each bootstrap resample of the validation sets (None
        when ``replicates`` is 0).
    stopped_at_ : ndarray of shape (2**N,) or None
        Under a protocol with ``patience``: the local step at which each subset model stopped
        (:mod:`coalitions.learners.game.stopping`: its pooled validation loss had not improved for
        ``patience`` evaluations, one per epoch; it keeps its best parameters); the game's
        provenance summarises them (``model.stopping``).  ``None`` otherwise.
    lr_chosen_ : ndarray of shape (2**N,) or None
        Under a protocol with an ``lr_grid``: the rate each subset model kept, chosen on its
        pooled validation loss (:mod:`coalitions.learners.game.chunks`; index 0, the empty set,
        is NaN); the game's provenance counts them (``model.lr_chosen``).  ``None`` otherwise.
    loss_game_, loss_replicates_ : coalitions.Game, Replicates or None
        With ``loss_game``: the validation-loss game of the same models and its
        replicates on the same resamples; None otherwise.
    federation_ : Federation
        The federation the subset models trained on: the one given, with its tuning rows held out
        of training under a protocol's ``tune_split`` (the game's provenance records the roles,
        ``data_roles``).
    method_ : str
        ``"closed-form"`` or ``"batched"``.
    config_ : dict
        :meth:`config` of the fitted federation (with the learning rates kept and the stopping
        steps summarised, where there are any): the game's ``model`` provenance.
    device_ : str
    backend_ : dict
        What actually trained the subset models, not what was asked for (the games' provenance,
        ``backend``): ``{"name": "local", "workers": 1}`` in this process (the closed form
        always, with ``"requested": "ray"`` when Ray was asked for), or on Ray ``{"name": "ray",
        "address": the cluster's, "nodes", "workers": the machines and worker processes that
        returned chunks, "tasks": chunks trained there}``.
    chunks_trained_, chunks_resumed_ : int
        Chunks trained in this call and chunks loaded from the checkpoint.
    elapsed_ : float
        Seconds spent in :meth:`fit`.
    """

    def __init__(self, protocol: TrainingProtocol | None = None, *, chunk_size: int | None = None,
                 memory_mb: float = 512.0, device: str = "auto", dtype: str = "float32", seed: int = 0,
                 checkpoint=None, threads: int | None = None, progress=None, backend: str = "local",
                 address: str | None = None, replicates: int = DEFAULT_REPLICATES, heads: str = "shared",
                 loss_game: bool = False):
        self.protocol = protocol
        self.loss_game = loss_game
        self.chunk_size = chunk_size
        self.memory_mb = memory_mb
        self.device = device
        self.dtype = dtype
        self.seed = seed
        self.checkpoint = checkpoint
        self.threads = threads
        self.progress = progress
        self.backend = backend
        self.address = address
        self.replicates = replicates
        self.heads = heads

    # -------------------------------------------------------------- configuration
    def _protocol_for(self, fed: Federation) -> TrainingProtocol:
        """The protocol that trains ``fed``'s subset models: ``protocol``, or the default of ``fed``'s task and shape."""
        if self.protocol is not None:
            return self.protocol
        return protocol_with(fed.task, tuple(fed.input_shape))

    @staticmethod
    def _kind(p: TrainingProtocol, fed: Federation) -> str:
        """``p``'s model on ``fed``: its own, or the default-model rule when it names none."""
        kind = p.model or default_kind(fed.task, tuple(fed.input_shape))
        if kind == "linear" and fed.task != "regression":
            raise ParameterError("model", f"{{name}} linear fits regression; dataset {fed.name!r} is {fed.task} "
                                          "(the protocol's model)")
        return kind

    def _config(self, fed: Federation, p: TrainingProtocol) -> dict:
        """:meth:`config` under the protocol ``p``."""
        kind = self._kind(p, fed)
        heads = {"heads": "personal"} if self.heads == "personal" else {}
        if p.closed_form and kind == "linear":
            return {"model": kind, "solver": "closed-form", "ridge": float(p.weight_decay), "protocol": p.to_json(),
                    **heads}
        n = int(fed.sizes("train").sum())
        cfg = {"model": kind, "solver": f"batched-{p.optimizer}", "epochs": p.epochs_for(n), "lr": float(p.lr),
               "l2": float(p.weight_decay), "batch_size": p.batch_size, "dtype": self.dtype, "seed": int(self.seed),
               "protocol": p.to_json(), **heads}
        if kind == "mlp":
            cfg["hidden"] = int(p.hidden)
        if self.loss_game:  # absent otherwise: earlier games and checkpoints keep their config
            cfg["loss_game"] = True
        return cfg

    def config(self, fed: Federation) -> dict:
        """The options that determine the result on ``fed`` (written as provenance, ``model``).

        Everything comes from the protocol :meth:`fit` trains ``fed`` with (``protocol``, or the
        default of ``fed``'s task and input shape), recorded whole under ``"protocol"``; the
        model, solver, epochs, rate, weight decay (``"l2"``, or ``"ridge"`` in closed form) and
        batch it implies on ``fed`` are spelled out beside it, with the precision and seed.
        """
        self._check()
        return self._config(fed, self._protocol_for(fed))

    def _check(self):
        check_param("chunk_size", self.chunk_size, "int", low=1, allow_none=True)
        check_param("memory_mb", self.memory_mb, "number", low=0, low_open=True)
        check_param("threads", self.threads, "int", low=1, allow_none=True)
        check_param("dtype", self.dtype, "choice", choices=("float32", "float64"))
        check_param("backend", self.backend, "choice", choices=("local", "ray"))
        check_param("replicates", self.replicates, "int", low=0)
        check_param("heads", self.heads, "choice", choices=HEADS)
        check_param("loss_game", self.loss_game, "choice", choices=(False, True))
        if self.protocol is not None and not isinstance(self.protocol, TrainingProtocol):
            raise ParameterError("protocol", "{name} must be a TrainingProtocol or None, got "
                                 f"{type(self.protocol).__name__}")


    # -------------------------------------------------------------- fitting
    def fit(self, federation: Federation) -> ExhaustiveOracle:
        """Train every subset model of ``federation``; returns ``self``."""
        self._check()
        fed = federation
        if fed.n > 20:
            raise InputError(f"{fed.n} clients: the exhaustive oracle trains 2^N - 1 models; use at most 20")
        start = time.perf_counter()
        self.protocol_ = p = self._protocol_for(fed)   # resolved once: everything below reads this one
        fed = with_roles(fed, p)   # tune_split: the rows that tune held out of training (data roles)
        self.federation_ = fed
        cfg = self._config(fed, p)
        if self.replicates:
            from coalitions.replicates import check_count
            from coalitions.resources import check_memory

            rows = sum(len(c.val.y) for c in fed.clients)
            try:
                check_count(self.replicates, fed.n)
                # the resampled row indices and the (B, N, 2^N) replicates, scored, stacked and validated
                check_memory(8 * self.replicates * (2 * rows + 3 * fed.n * (1 << fed.n)),
                             f"a bootstrap of {self.replicates:,} replicates over {rows:,} validation rows")
            except InputError as e:
                why = str(e).replace("{", "{{").replace("}", "}}")
                raise ParameterError("replicates", f"{{name}} {self.replicates}: {why}") from None
        draws = bootstrap_draws(fed, self.replicates, self.seed) if self.replicates else None
        self.chunks_trained_ = 0
        self.backend_: dict = {"name": "local", "workers": 1}   # the Ray branch replaces it by what ran there
        if self.backend != "local":
            self.backend_["requested"] = self.backend
        self.chunks_resumed_ = 0
        self.lr_chosen_: np.ndarray | None = None
        self.stopped_at_: np.ndarray | None = None
        loss = reps_loss = None
        if cfg["solver"] == "closed-form":
            self.method_ = "closed-form"
            self.device_ = "cpu"
            W = closed_form_weights(fed, cfg["ridge"])
            val, test = closed_form_mse(fed, W, "val"), closed_form_mse(fed, W, "test")
            reps = closed_form_replicates(fed, W, draws) if draws is not None else None
            if self.heads == "personal":  # the affine model is all head: everyone trains alone
                val, test = personal_from_singletons(val), personal_from_singletons(test)
                reps = None if reps is None else personal_from_singletons(reps)
            self.weights_ = W
            if self.progress is not None:
                self.progress(1, 1)
        else:
            from coalitions.learners.training.engine import resolve_device

            self.method_ = "batched"
            # a Ray cluster may have the GPUs this driver lacks: "cuda" is then checked by the tasks
            self.device_ = ("cuda" if self.backend == "ray" and self.device == "cuda"
                            else str(resolve_device(self.device)))
            val, test, reps, loss, reps_loss = self._fit_batched(fed, cfg, p, draws)
            if self.lr_chosen_ is not None:   # how many subset models kept each rate of the grid
                rates, counts = np.unique(self.lr_chosen_[1:], return_counts=True)
                cfg = {**cfg, "lr_chosen": {f"{r:g}": int(c) for r, c in zip(rates, counts, strict=True)}}
            if self.stopped_at_ is not None:  # where the subset models stopped, in local steps
                steps = self.stopped_at_[1:]
                cfg = {**cfg, "stopping": {"min": int(steps.min()), "median": float(np.median(steps)),
                                           "max": int(steps.max()),
                                           "hit_max": int((steps >= int(p.steps)).sum())}}
        self.values_val_, self.values_test_ = val, test
        self.config_ = cfg
        self.game_ = co.Game.from_array(val, fed.names, fed.sense, self._provenance(fed, cfg, "val"))
        self.test_game_ = co.Game.from_array(test, fed.names, fed.sense, self._provenance(fed, cfg, "test"))
        self.replicates_ = None
        if reps is not None:
            from coalitions.replicates import Replicates

            self.replicates_ = Replicates.from_array(reps, fed.names, fed.sense)
            self.game_ = _measured(self.game_, self.replicates_)
        self.loss_game_ = self.loss_replicates_ = None
        if loss is not None:
            from coalitions.replicates import Replicates

            prov = dict(self._provenance(fed, cfg, "val"), metric="loss")
            self.loss_game_ = co.Game.from_array(loss, fed.names, "min", prov)
            if reps_loss is not None:
                self.loss_replicates_ = Replicates.from_array(reps_loss, fed.names, "min")
                self.loss_game_ = _measured(self.loss_game_, self.loss_replicates_)
        self.elapsed_ = time.perf_counter() - start
        return self

    def _provenance(self, fed: Federation, cfg: dict, split: str) -> dict:
        return {"source": "coalitions oracle (exhaustive subset oracle, docs/concepts.md §5)",
                "dataset": fed.name, "options": dict(fed.options), "task": fed.task,
                "metric": fed.metric, "split": split, "model": dict(cfg), "seed": int(self.seed),
                "backend": dict(self.backend_),        # what trained the models, not what was asked for
                "sizes": fed.sizes("train").tolist(),  # training samples: `coalitions welfare --weights sizes`
                "data_roles": data_roles(fed),         # which rows tuned the rates and stops, which scored
                "planted_groups": [list(g) for g in fed.planted_groups] if fed.planted_groups else None,
                "version": co.__version__}

    @staticmethod
    def _activation_floats(spec) -> int:
        """Floats one model keeps per sample (:func:`coalitions.learners.game.memory.activation_floats`)."""
        return activation_floats(spec)

    def _eval_batch(self, spec, n_models: int) -> int:
        """Evaluation samples per forward pass so that ``n_models`` fit ``memory_mb``."""
        return eval_batch(spec, n_models, self.memory_mb)

    def _chunk_size(self, spec, fed: Federation, n_masks: int) -> int:
        if self.chunk_size is not None:
            return min(self.chunk_size, n_masks)
        # sized for a full-batch step whatever the protocol's batch (an upper bound on a step's activations),
        # as protocol runs always were: the chunk size is part of a checkpoint's key
        n = int(fed.sizes("train").sum())
        # the memory budget caps the chunk; the cache model sizes it (game.memory.cache_chunk)
        return min(memory_chunk(spec, n, n_masks, self.memory_mb), cache_chunk(spec, n, n_masks))

    def _fit_batched(self, fed: Federation, cfg: dict, p: TrainingProtocol, draws=None):
        from coalitions.learners.training.checkpoint import Checkpoint, fingerprint
        from coalitions.learners.training.models import make_model

        spec = make_model(cfg["model"], fed.input_shape, fed.n_outputs, hidden=p.hidden)
        n = fed.n
        masks = np.arange(1, 1 << n)
        chunk = self._chunk_size(spec, fed, len(masks))
        if self.backend == "ray" and self.chunk_size is None:
            from coalitions.learners.distributed import oracle_chunk_size

            chunk = oracle_chunk_size(chunk, len(masks))
        chunks = [masks[s:s + chunk] for s in range(0, len(masks), chunk)]

        ckpt = None
        shape = (n, 1 << n)
        arrays: dict[str, tuple[int, ...]] = {"val": shape, "test": shape}
        if draws is not None:
            arrays["replicates"] = (len(draws[0]),) + shape
        if cfg.get("loss_game"):
            arrays["val_loss"] = shape
            if draws is not None:
                arrays["replicates_loss"] = arrays["replicates"]
        grid = p.lr_grid
        if grid:
            arrays["lr"] = (1 << n,)
        if p.patience is not None:
            arrays["stopped_at"] = (1 << n,)
        if self.checkpoint is not None:
            what = {"config": cfg, "chunk": chunk, "device": self.device_, "dataset": fed.name,
                    "options": fed.options}
            if draws is not None:
                what["replicates"] = len(draws[0])
            key = fingerprint(what,
                              [a for c in fed.clients for s in (c.train, c.val, c.test) for a in (s.X, s.y)])
            ckpt = Checkpoint(self.checkpoint, key, arrays, len(chunks)).load()
            results = ckpt.arrays
        else:
            results = {k: np.full(s, np.nan) for k, s in arrays.items()}

        epochs = cfg["epochs"] * (len(grid) if grid else 1)   # progress units: every rate's epochs
        total = len(masks) * epochs
        done = np.zeros(len(chunks), dtype=bool) if ckpt is None else ckpt.done
        self.chunks_resumed_ = int(done.sum())
        units = {"done": sum(len(chunks[k]) for k in np.flatnonzero(done)) * epochs}
        if self.progress is not None and units["done"]:
            self.progress(units["done"], total)

        def store(k: int, blocks: dict) -> None:
            """A finished chunk: its values into the results, then (atomically) into the checkpoint."""
            for part in ("val", "test", "val_loss"):
                if part in results:
                    results[part][:, chunks[k]] = blocks[part]
            for part in ("lr", "stopped_at"):
                if part in results:
                    results[part][chunks[k]] = blocks[part]
            for part in ("replicates", "replicates_loss"):
                if part in results:
                    results[part][:, :, chunks[k]] = blocks[part]
            done[k] = True
            self.chunks_trained_ += 1
            units["done"] += len(chunks[k]) * epochs
            if ckpt is not None:
                ckpt.save()
            if self.progress is not None:
                self.progress(units["done"], total)

        todo = [k for k in range(len(chunks)) if not done[k]]
        if self.backend == "ray":
            from coalitions.learners.distributed import oracle_chunks

            self.backend_ = oracle_chunks(self, fed, cfg, [(k, chunks[k]) for k in todo], store, chunk_trainer,
                                          address=self.address)
        else:
            trainer = ChunkTrainer(self, fed, cfg, self.device_, draws)
            with using(step_macs(spec, trainer.step_samples, chunk), self.threads):
                for k in todo:
                    base, size = units["done"], len(chunks[k])

                    def tick(ep, base=base, m=size):
                        if self.progress is not None:
                            self.progress(base + ep * m, total)

                    store(k, trainer(chunks[k], progress=tick))
        self.lr_chosen_ = results.get("lr")
        self.stopped_at_ = results.get("stopped_at")
        return (results["val"], results["test"], results.get("replicates"), results.get("val_loss"),
                results.get("replicates_loss"))

    # -------------------------------------------------------------- outputs of a few subset models
    def subset_outputs(self, federation: Federation, masks, part: str = "test") -> list[list[np.ndarray | None]]:
        """Outputs of the models of ``masks`` on each member client's ``part`` split, trained again.

        The game keeps each model's metric, not the model; a report's per-sample
        statistics (bootstrap intervals over test samples, docs/formats.md) need
        the outputs behind a few of them (each client alone, in the CE, with
        everyone).  A subset's model does not depend on the other subsets trained
        beside it (same initial parameters, same batch order: see
        :class:`ChunkTrainer`), so training only ``masks`` with this oracle's
        settings and seed (each model at the rate :meth:`fit` kept for it and, under
        a protocol's ``patience``, stopped where its own pooled validation loss stopped
        it, with its best parameters: :meth:`ChunkTrainer.train`) gives the models of
        :meth:`fit` again; the closed form solves the same normal equations.  Needs no
        prior :meth:`fit`.

        Parameters
        ----------
        federation : Federation
        masks : sequence of int
            Subsets (bitmasks), one model each.
        part : {"val", "test"}

        Returns
        -------
        list of list
            ``out[k][i]``: client ``i``'s outputs ``(n_i,)`` (regression, binary
            logits) or ``(n_i, C)`` (class logits) under the model of
            ``masks[k]``; ``None`` where ``i`` is not in ``masks[k]``.
        """
        self._check()
        fed = federation
        check_param("part", part, "choice", choices=("val", "test"))
        ms = np.asarray([int(m) for m in masks], dtype=np.int64)
        if ms.size and (ms.min() < 1 or ms.max() >= 1 << fed.n):
            raise InputError(f"subset_outputs: masks must lie in 1..{(1 << fed.n) - 1}")
        p = self._protocol_for(fed)
        fed = with_roles(fed, p)
        cfg = self._config(fed, p)
        if cfg["solver"] == "closed-form":
            W = closed_form_weights(fed, cfg["ridge"])
            personal = cfg.get("heads") == "personal"  # all head: each member's own model, {i}
            return [[_aug(getattr(c, part).X) @ W[1 << i if personal else m] if (m >> i) & 1 else None
                     for i, c in enumerate(fed.clients)] for m in ms]
        from coalitions.learners.training.engine import resolve_device

        trainer = ChunkTrainer(self, fed, cfg, str(resolve_device(self.device)))
        with using(step_macs(trainer.spec, trainer.step_samples, max(1, len(ms))), self.threads):
            if trainer.grid is None:
                scores = trainer.scores(ms, p, part)
            else:   # every model at the rate fit() kept for it: the lowest pooled validation loss (ChunkTrainer)
                chosen = trainer(ms)["lr"]
                # a model whose loss was NaN or +inf at every rate records no rate (NaN) and keeps the first
                # rate's model (ChunkTrainer): its outputs are that model's, not zeros
                chosen = np.where(np.isnan(chosen), trainer.grid[0], chosen)
                scores = None
                for rate in trainer.grid:
                    at = chosen == rate
                    if at.any():
                        got = trainer.scores(ms[at], p.with_(lr=rate, lr_grid=None), part)
                        scores = np.zeros((len(ms), *got.shape[1:]), dtype=got.dtype) if scores is None else scores
                        scores[at] = got
        if scores.ndim == 3 and scores.shape[2] == 1:
            scores = scores[:, :, 0]
        lo = trainer.bounds[part]
        return [[scores[k, lo[i]:lo[i + 1]] if (m >> i) & 1 else None for i in range(fed.n)]
                for k, m in enumerate(ms)]

    # -------------------------------------------------------------- benefit oracle protocol
    @property
    def clients(self) -> tuple[str, ...]:
        """Client names of the fitted game."""
        return self.game_.clients

    def benefit_graph(self, within: int, semantics: str = "personalized", tol: float = 1e-9):
        """``BG(within)`` of the fitted game (:class:`coalitions.ExactOracle`)."""
        return co.ExactOracle(self.game_, semantics, tol).benefit_graph(within)
