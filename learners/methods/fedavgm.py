"""FedAvgM: federated averaging with server momentum (Hsu, Qi & Brown 2019; docs/learners-baselines.md).

Every round ``t`` the server broadcasts the global model ``w^t``; every client takes the
round's local steps from it (FedAvg's site step) and uploads its model.  The server treats
the difference between its model and the clients' weighted average as a gradient,

``Δ^t = w^t − Σ_k n_k w_k / Σ_k n_k``,

and takes a heavy-ball step on it:

``v^{t+1} = β·v^t + Δ^t``,  ``w^{t+1} = w^t − η·v^{t+1}``,

with ``v^0 = 0``.  ``β = 0`` and ``η = 1`` are FedAvg exactly.  The velocity ``v`` is the
server's own state: it never leaves the server.  Every client predicts with the global model,
so the estimate carries utilities and the structural graph of one shared model, like FedAvg.

This module is the worked example of docs/adding-a-method.md: a method is its class (its
parameters, its site step and its server step on stacked tensors), one registration in the
methods registry, its tests and its documentation.

References
----------
Hsu, Qi & Brown (2019), *Measuring the effects of non-identical data distribution for federated
visual classification*, arXiv:1909.06335 (server momentum, their Algorithm 1 with full participation).
"""

from __future__ import annotations

import numpy as np
import torch

from coalitions.learners.methods.base import PersonalizedLearner
from coalitions.learners.methods.baselines import broadcast, weighted_average
from coalitions.params import check_param

__all__ = ["FedAvgM"]


class FedAvgM(PersonalizedLearner):
    """FedAvg with server momentum (module docstring).

    Parameters
    ----------
    server_momentum : float
        ``β`` in ``[0, 1)`` (0.9); 0 with ``server_lr = 1`` gives FedAvg.
    server_lr : float
        ``η > 0``, the server's step on the velocity (1).
    **common
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner`.

    Attributes
    ----------
    global_ : dict
        The final global model (leading dimension 1); ``params_`` is it for every client.

    Examples
    --------
    >>> from coalitions.learners.data.datasets import load
    >>> from coalitions.learners.training.protocol import protocol_with
    >>> fed = load("heart")
    >>> m = FedAvgM(server_momentum=0.5, protocol=protocol_with(fed.task, fed.input_shape, {"steps": 3}),
    ...             device="cpu").fit(fed)
    >>> m.estimate_.blocks()
    [['Cleveland', 'Hungary', 'Switzerland', 'VA']]
    """

    method = "fedavgm"
    has_weights = False
    shares_model = True
    #: What a site uploads after its step, and what the server sends down before it.
    up, down = ("model",), ("global",)

    server_momentum: float = 0.9
    server_lr: float = 1.0

    def check_params(self):
        super().check_params()
        check_param("server_momentum", self.server_momentum, "number", low=0, high=1, high_open=True)
        check_param("server_lr", self.server_lr, "number", low=0, low_open=True)

    def init_state(self, fed, gen, device):
        """The global model and a zero velocity (the server's)."""
        w = self.init_params(gen, device, 1)
        return {"global": w, "velocity": {k: torch.zeros_like(v) for k, v in w.items()}}

    def site_step(self, state, r, rng):
        """Each site: its local epochs from the global model (its optimiser state continued); uploads its model."""
        params = broadcast(state["global"], self.federation_.n)
        params, kept, loss = self._site_steps(state, params, self._task_loss, rng(0))
        return {**state, "model": params, **kept}, {"loss": float(np.mean(loss))}

    def server_step(self, state, r):
        """``Δ = w − avg``, ``v ← β v + Δ``, ``w ← w − η v``; the uploads dropped."""
        avg = weighted_average(state["model"], self.train_sizes_)
        beta, eta = float(self.server_momentum), float(self.server_lr)
        w = state["global"]
        v = {k: beta * state["velocity"][k] + (w[k] - avg[k]) for k in w}
        rest = {k: x for k, x in state.items() if k != "model"}
        return {**rest, "global": {k: w[k] - eta * v[k] for k in w}, "velocity": v}

    def finish(self, state):
        self.global_ = {k: v.detach().cpu() for k, v in state["global"].items()}
        self.params_ = broadcast(self.global_, self.federation_.n)
        self.weights_ = None
        self.weights_history_ = []
