"""Utility baselines: ``local`` (everyone alone) and ``fedavg`` (one model for all) (docs/concepts.md §5).

Neither learns pairwise weights; each writes ``weights: null`` and the
*structural* benefit graph of what it trains (Local: no edges, so peeling
leaves every client alone; FedAvg: every client draws on every other, so the
grand coalition), and serves as the yardstick for the personalised methods'
utilities.

* **Local**: client ``i`` minimises its own loss ``F_i(w_i)`` for
  ``rounds × local_epochs`` epochs (a fresh optimiser each round, like every
  method here, so that FedAMP with ``α_k = 0`` equals Local exactly).
* **FedAvg** (McMahan et al. 2017): every round all clients start from the
  global model ``w``, train ``local_epochs`` epochs on their own data, and the
  server averages ``w ← Σ_i n_i w_i / Σ_i n_i`` (``n_i`` training samples;
  full participation, the cross-silo setting).  Every client predicts with ``w``.

Both train all clients in one batched step per minibatch (:mod:`coalitions.learners.training.engine`).
"""

from __future__ import annotations

import numpy as np
import torch

from coalitions.learners.methods.base import PersonalizedLearner
from coalitions.learners.training.engine import train_epochs

__all__ = ["Local", "FedAvg", "weighted_average", "broadcast"]


def weighted_average(params: dict, sizes) -> dict:
    """``Σ_i n_i p_i / Σ_i n_i`` of stacked params, kept with a leading dimension of 1."""
    dev = next(iter(params.values())).device
    w = torch.as_tensor(np.asarray(sizes, dtype=np.float64) / float(np.sum(sizes)), device=dev)
    return {k: torch.tensordot(w.to(v.dtype), v, dims=1)[None] for k, v in params.items()}


def broadcast(params: dict, n: int) -> dict:
    """A model with leading dimension 1 copied to ``n`` stacked models (the server's broadcast)."""
    return {k: v.expand(n, *v.shape[1:]).clone() for k, v in params.items()}


class Local(PersonalizedLearner):
    """Every client trains alone on its own data (no communication).

    Parameters are the common ones of :class:`~coalitions.learners.methods.base.PersonalizedLearner`
    (defaults: 50 rounds of 1 local epoch, SGD lr 0.1 momentum 0.9, batch 32).
    """

    method = "local"
    has_weights = False
    shares_model = False

    def __init__(self, *, model=None, hidden=64, rounds=50, local_epochs=1, batch_size=32, optimizer="sgd",
                 lr=0.1, momentum=0.9, weight_decay=0.0, rule="relative", threshold=None, refit=False,
                 device="auto", engine="auto", chunk=None, seed=0, checkpoint=None, progress=None):
        self._store(locals())

    def init_state(self, fed, gen, device):
        return {"params": self._init_params(gen, device, fed.n)}

    def train_round(self, state, r, rng):
        opt = self._make_optimizer()
        params = state["params"]
        params, _, loss = train_epochs(self.engine_, self._task_loss, params, opt, opt.init(params),
                                       self.train_data_, self.local_epochs, self.batch_size, rng(0))
        return {"params": params}, {"loss": float(np.mean(loss))}

    def finish(self, state):
        self.params_ = {k: v.detach().cpu() for k, v in state["params"].items()}
        self.weights_ = None
        self.weights_history_ = []


class FedAvg(PersonalizedLearner):
    """Federated averaging: one global model trained by all clients (full participation).

    Parameters are the common ones of :class:`~coalitions.learners.methods.base.PersonalizedLearner`.

    Attributes
    ----------
    global_ : dict
        The final global model (leading dimension 1).
    """

    method = "fedavg"
    has_weights = False
    shares_model = True

    def __init__(self, *, model=None, hidden=64, rounds=50, local_epochs=1, batch_size=32, optimizer="sgd",
                 lr=0.1, momentum=0.9, weight_decay=0.0, rule="relative", threshold=None, refit=False,
                 device="auto", engine="auto", chunk=None, seed=0, checkpoint=None, progress=None):
        self._store(locals())

    def init_state(self, fed, gen, device):
        return {"global": self._init_params(gen, device, 1)}

    def train_round(self, state, r, rng):
        n = self.federation_.n
        params = {k: v.expand(n, *v.shape[1:]).clone() for k, v in state["global"].items()}
        opt = self._make_optimizer()
        params, _, loss = train_epochs(self.engine_, self._task_loss, params, opt, opt.init(params),
                                       self.train_data_, self.local_epochs, self.batch_size, rng(0))
        return {"global": weighted_average(params, self.train_data_.sizes)}, {"loss": float(np.mean(loss))}

    def finish(self, state):
        n = self.federation_.n
        self.global_ = {k: v.detach().cpu() for k, v in state["global"].items()}
        self.params_ = {k: v.expand(n, *v.shape[1:]).clone() for k, v in self.global_.items()}
        self.weights_ = None
        self.weights_history_ = []
