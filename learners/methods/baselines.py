"""Utility baselines: ``local`` (everyone alone) and ``fedavg`` (one model for all) (docs/concepts.md §5).

Neither learns pairwise weights; each writes ``weights: null`` and the
*structural* benefit graph of what it trains (Local: no edges, so peeling
leaves every client alone; FedAvg: every client draws on every other, so the
grand coalition), and serves as the yardstick for the personalised methods'
utilities.

* **Local**: client ``i`` minimises its own loss ``F_i(w_i)`` for
  the protocol's budget of local steps (one optimiser state over all rounds, like
  every site here, so that FedAMP with ``α_k = 0`` equals Local exactly).  Its clients'
  models are independent, so each is tuned on its own data as the exhaustive game tunes its
  model of ``{i}``: under a patience each client stops on its own tuning loss and
  keeps its own best round, and under an ``lr_grid`` each client keeps the rate whose kept
  model has its lowest tuning loss.
* **FedAvg** (McMahan et al. 2017): every round all clients start from the
  global model ``w``, take a round's local steps on their own data, and the
  server averages ``w ← Σ_i n_i w_i / Σ_i n_i`` (``n_i`` training samples;
  full participation, the cross-silo setting).  Every client predicts with ``w``.

Both train all clients in one batched step per minibatch (:mod:`coalitions.learners.training.engine`).

The training protocol (``protocol=``, :class:`~coalitions.learners.training.protocol.TrainingProtocol`,
which every personalised learner takes: :class:`~coalitions.learners.methods.base.PersonalizedLearner`)
fixes the model, optimiser, learning rate and its schedule, batch and weight decay
(``weight_decay/2·‖w‖²`` on weights, not biases, in the loss), and the rounds follow from its
budget of gradient steps per client (:meth:`TrainingProtocol.rounds_for` on the largest client):

* **Local** keeps one optimiser state over all rounds (its models never leave their clients, so a
  round is only bookkeeping) and the schedule runs over the whole budget: client ``i``'s model is
  then the exhaustive oracle's subset model of ``{i}`` under the same protocol and seed — the same
  initial parameters, objective, optimiser, schedule and steps, the same stopping step and the
  same rate from the grid (full batch; with a batch size the two draw minibatches differently).  With ``closed_form=True`` (linear regression) both solve the
  same ridge problem exactly (:func:`coalitions.learners.exact.closed_form_weights`) and no round is run.
* **FedAvg**: each site keeps its optimiser state across rounds (as a real site would), and the
  learning-rate schedule runs over the whole budget in that state.  With SGD, full batch and one
  local step per round the average of the clients' steps is one gradient step on the pooled
  objective ``Σ_i n_i F_i / Σ_i n_i`` (plain SGD keeps no state; with momentum the average of the
  sites' momentum buffers is the pooled buffer, so this holds too), so FedAvg *is* the exact
  game's grand-coalition model under the same protocol; with several local steps, or Adam (whose
  per-site moments are not the pooled gradient's), it is not — the clients drift towards their own
  optima between averages (tests/test_protocol.py checks both).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch

from coalitions.learners.methods.base import PersonalizedLearner, default_model
from coalitions.learners.training.tuning import choose_rate

__all__ = ["Local", "FedAvg", "weighted_average", "broadcast", "average_step"]


def weighted_average(params: dict, sizes) -> dict:
    """``Σ_i n_i p_i / Σ_i n_i`` of stacked params, kept with a leading dimension of 1."""
    dev = next(iter(params.values())).device
    w = torch.as_tensor(np.asarray(sizes, dtype=np.float64) / float(np.sum(sizes)), device=dev)
    return {k: torch.tensordot(w.to(v.dtype), v, dims=1)[None] for k, v in params.items()}


def broadcast(params: dict, n: int) -> dict:
    """A model with leading dimension 1 copied to ``n`` stacked models (the server's broadcast)."""
    return {k: v.expand(n, *v.shape[1:]).clone() for k, v in params.items()}


def average_step(state: dict, sizes, up: str = "model", down: str = "global") -> dict:
    """FedAvg's server step: ``state[down] = Σ_i n_i state[up]_i / Σ_i n_i``, the uploads dropped."""
    out = {k: v for k, v in state.items() if k != up}
    return {**out, down: weighted_average(state[up], sizes)}


class Local(PersonalizedLearner):
    """Every client trains alone on its own data (no communication), tuned on its own data.

    Parameters are the common ones of :class:`~coalitions.learners.methods.base.PersonalizedLearner`
    (the training settings are the ``protocol``'s): client ``i``'s model is the exhaustive
    oracle's model of ``{i}`` under the same protocol and seed (module docstring).  Under the
    protocol's ``patience`` each client stops on its own tuning loss (:attr:`stops_per_client`);
    under its ``lr_grid`` Local is fitted once per rate and each client keeps the rate whose kept
    model has its lowest tuning loss (ties: the earlier rate), as the game's model of ``{i}``
    does.  No other column tunes per client: their models depend on one another.

    Attributes
    ----------
    lr_clients_ : list of float
        The rate each client trained at (the protocol's ``lr`` for every client without a grid).
    lr_tuning_ : dict or None
        With a grid: ``{"grid": [...], "val_loss": [...], "chosen": {client: rate}}``, ``val_loss``
        the mean over clients of the kept models' tuning losses at each rate (the estimate's
        ``extra.lr_tuning``).  ``loss_history_`` is then empty: the clients trained at different rates.
    """

    method = "local"
    has_weights = False
    shares_model = False
    stops_per_client = True
    tunes_own_rate = True


    def _closed_form(self, fed) -> bool:
        """Linear regression under a ``closed_form`` protocol: each client's ridge fit, no rounds."""
        p = self.protocol_for(fed)
        return p.closed_form and fed.task == "regression" and (p.model or default_model(fed)) == "linear"

    def fit(self, federation):
        """Train every client alone; with the protocol's ``lr_grid``, each client at the rate its own data choose."""
        grid = getattr(self.protocol, "lr_grid", None)   # (a bad protocol is refused by the fit below)
        if not grid or self._closed_form(federation):
            super().fit(federation)
            self.lr_clients_ = [self.lr_] * self.federation_.n
            self.lr_tuning_ = None
            return self
        protocol = self.protocol_for(federation)
        fits = [self._at_rate(protocol, k).fit(federation) for k in range(len(grid))]
        return self._per_client(fits, protocol)

    def _at_rate(self, protocol, k: int) -> Local:
        """An unfitted copy training at rate ``k`` of ``protocol``'s grid (its own checkpoint, ``<checkpoint>.lr<k>``)."""
        lr = protocol.lr_grid[k]
        return type(self)(**{**self.get_params(deep=False), "protocol": protocol.with_(lr=lr, lr_grid=None),
                             "checkpoint": None if self.checkpoint is None else Path(f"{self.checkpoint}.lr{k}")})

    def _per_client(self, fits: list, protocol) -> Local:
        """Become the fit whose client ``i`` is client ``i`` of the fit at its chosen rate (the lowest kept tuning loss)."""
        kept = np.array([f.best_val_loss_clients_ for f in fits])            # (rates, clients)
        pick = [int(k) for k in choose_rate(kept)]   # the lowest, ties to the earlier rate, non-finite never wins
        first = fits[0]
        self.__dict__.update({k: copy.copy(v) for k, v in vars(first).items() if k.endswith("_")})
        self._forget_estimate()
        self.protocol_ = protocol
        names = list(first.federation_.names)
        chosen = [fits[k] for k in pick]
        self.params_ = {key: torch.stack([f.params_[key][i] for i, f in enumerate(chosen)])
                        for key in first.params_}
        self.utilities_ = {part: {c: f.utilities_[part][c] for c, f in zip(names, chosen, strict=True)}
                           for part in first.utilities_}
        for attr in ("best_round_clients_", "stopped_at_clients_", "best_val_loss_clients_"):
            setattr(self, attr, [getattr(f, attr)[i] for i, f in enumerate(chosen)])
        self.best_val_loss_ = float(np.mean(self.best_val_loss_clients_))
        self.best_round_ = max(self.best_round_clients_)
        self.rounds_run_ = max(f.rounds_run_ for f in chosen)
        self.stopped_at_ = max(self.stopped_at_clients_)
        # a client ran its whole budget when its own last evaluation is its fit's last round (another client of
        # that fit, at a rate this client did not choose, says nothing about it)
        self.hit_max_ = any(f.stopped_at_clients_[i] == f.rounds_ * f.steps_per_round_ for i, f in enumerate(chosen))
        self.val_loss_clients_ = _curves(chosen, self.best_val_loss_clients_, self.rounds_run_)
        self.val_loss_history_ = [float(np.mean(row)) for row in self.val_loss_clients_]
        self.loss_history_ = []
        self.lr_clients_ = [float(protocol.lr_grid[k]) for k in pick]
        self.lr_ = None   # the clients' rates differ: lr_clients_
        self.fit_seconds_ = float(sum(f.fit_seconds_ for f in fits))
        self.state_ = {"params": self.params_}
        self.lr_tuning_ = {"grid": [float(g) for g in protocol.lr_grid],
                           "val_loss": [round(float(np.mean(f.best_val_loss_clients_)), 12) for f in fits],
                           "chosen": dict(zip(names, self.lr_clients_, strict=True))}
        return self

    def _stopping_record(self) -> dict:
        """The base's record with each client's rate and stopping step (they stop, and may tune, per client).

        The Flower server's twin, which does not run :meth:`fit`, trained every site at one rate
        and stopped them together (the server's rule is on the sites' mean loss): its record says so.
        """
        out = super()._stopping_record()
        if not hasattr(self, "lr_clients_"):
            n = self.federation_.n
            return {**out, "lr_clients": [out["lr"]] * n, "stopped_at_clients": [out["stopped_at"]] * n}
        return {**out, "lr": out["lr"] if self.lr_tuning_ is None else None, "lr_clients": self.lr_clients_,
                "stopped_at_clients": [int(v) for v in self.stopped_at_clients_]}

    def estimate_extra(self, peeling):
        extra = super().estimate_extra(peeling)
        tuning = getattr(self, "lr_tuning_", None)    # None for the Flower server's twin, which tunes nothing
        return extra if tuning is None else {**extra, "lr_tuning": tuning}

    def _rounds_for(self, fed) -> int:
        return 0 if self._closed_form(fed) else super()._rounds_for(fed)

    def _min_local_steps(self) -> int:
        """One epoch a round whatever the protocol's ``local_steps``: Local never communicates, so its rounds are
        only its early stopping's evaluations, one per epoch as for the exact game's models of ``{i}``
        (:mod:`coalitions.learners.game.stopping`), whose models Local's are."""
        return 1

    def init_state(self, fed, gen, device):
        params = self.init_params(gen, device, fed.n)
        if self._closed_form(fed):
            return {"params": self._closed_form_params(fed, params)}
        return {"params": params}

    def _closed_form_params(self, fed, like: dict) -> dict:
        """Each client's ridge least-squares fit, the oracle's closed form for ``{i}`` (bias last)."""
        import torch

        from coalitions.learners.exact import closed_form_weights

        W = closed_form_weights(fed, self.protocol_.weight_decay)[[1 << i for i in range(fed.n)]]  # (N, d+1)
        dev, dtype = like["weight"].device, like["weight"].dtype
        return {"weight": torch.as_tensor(W[:, :-1, None], device=dev, dtype=dtype),
                "bias": torch.as_tensor(W[:, -1:], device=dev, dtype=dtype)}

    def _keep_best(self, best, state, improved):
        """The kept state: each client's model from the round of its own best tuning loss (rows ``improved`` now)."""
        if best is None or improved.all():
            return copy.deepcopy(state)
        rows = torch.as_tensor(improved)
        params = {k: torch.where(rows.to(v.device).view(-1, *([1] * (v.dim() - 1))), v.detach(), best["params"][k])
                  for k, v in state["params"].items()}
        return {**best, "params": params}

    kept = ("params",)      # nothing goes up or down: over Flower one message starts every site's rounds

    def site_step(self, state, r, rng):
        """Each site: its local epochs on its own model (its optimiser state continued)."""
        params, kept, loss = self._site_steps(state, state["params"], self._task_loss, rng(0))
        return {**state, "params": params, **kept}, {"loss": float(np.mean(loss))}

    def server_step(self, state, r):
        """No server: the models never leave their clients."""
        return state

    def finish(self, state):
        self.params_ = {k: v.detach().cpu() for k, v in state["params"].items()}
        self.weights_ = None
        self.weights_history_ = []


class FedAvg(PersonalizedLearner):
    """Federated averaging: one global model trained by all clients (full participation).

    Parameters are the common ones of :class:`~coalitions.learners.methods.base.PersonalizedLearner`
    (the training settings are the ``protocol``'s; module docstring: what FedAvg then equals, and when).

    Attributes
    ----------
    global_ : dict
        The final global model (leading dimension 1).
    """

    method = "fedavg"
    has_weights = False
    shares_model = True


    up, down = ("model",), ("global",)

    def init_state(self, fed, gen, device):
        return {"global": self.init_params(gen, device, 1)}

    def site_step(self, state, r, rng):
        """Each site: its local epochs from the global model (its optimiser state continued); uploads its model."""
        params = broadcast(state["global"], self.federation_.n)
        params, kept, loss = self._site_steps(state, params, self._task_loss, rng(0))
        return {**state, "model": params, **kept}, {"loss": float(np.mean(loss))}

    def server_step(self, state, r):
        """``w ← Σ_i n_i w_i / Σ_i n_i`` over the uploaded models."""
        return average_step(state, self.train_sizes_)

    def finish(self, state):
        n = self.federation_.n
        self.global_ = {k: v.detach().cpu() for k, v in state["global"].items()}
        self.params_ = {k: v.expand(n, *v.shape[1:]).clone() for k, v in self.global_.items()}
        self.weights_ = None
        self.weights_history_ = []


def _curves(fits: list, kept: list[float], rounds: int) -> list[list[float]]:
    """Rounds × clients tuning losses: client ``i``'s from ``fits[i]``, then its kept loss once that fit has ended."""
    return [[float(f.val_loss_clients_[r][i]) if r < len(f.val_loss_clients_) else float(kept[i])
             for i, f in enumerate(fits)] for r in range(rounds)]
