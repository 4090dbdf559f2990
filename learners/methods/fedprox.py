"""FedProx: federated averaging with a proximal local objective (Li et al., MLSys 2020; docs/learners-baselines.md).

Every round ``t`` the server broadcasts the global model ``w^t``; client ``k``
takes a round's local steps of minibatch descent from ``w^t`` on

``h_k(w; w^t) = F_k(w) + (μ/2)·‖w − w^t‖²``

(the paper's Algorithm 2 with full participation), whose gradient
``∇F_k(w) + μ(w − w^t)`` pulls the local model back towards the round's
global model; the server then averages ``w^{t+1} = Σ_k n_k w_k / Σ_k n_k``.
Every client predicts with the global model.  The proximal term is computed on
live tensors (it has a gradient; with one plain SGD step per round it is zero at
the start ``w = w^t`` and cannot act, so it matters with several local steps).
``μ = 0`` is FedAvg exactly.

FedProx has no pairwise weights: the estimate carries utilities and the
structural graph of its one shared model (everybody), like FedAvg.  Default
``μ = 0.01``, from the paper's grid ``{0.001, 0.01, 0.1, 1}``.
"""

from __future__ import annotations

import numpy as np

from coalitions.learners.methods.base import PersonalizedLearner
from coalitions.learners.methods.baselines import average_step, broadcast
from coalitions.params import check_param

__all__ = ["FedProx", "proximal_term"]


def proximal_term(params: dict, anchor: dict):
    """``Σ_k ‖params_k − anchor_k‖²`` over one model's tensors (differentiable in ``params``)."""
    return sum(((params[k] - anchor[k]) ** 2).sum() for k in params)


class FedProx(PersonalizedLearner):
    """FedProx (module docstring).

    Parameters
    ----------
    mu : float
        Proximal weight ``μ ≥ 0`` (0.01); 0 gives FedAvg.
    **common
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner`.

    Attributes
    ----------
    global_ : dict
        The final global model (leading dimension 1); ``params_`` is it for every client.
    """

    method = "fedprox"
    has_weights = False
    shares_model = True

    mu: float = 0.01

    def check_params(self):
        super().check_params()
        check_param("mu", self.mu, "number", low=0)

    def _loss(self, p, X, y, m, g):
        return self._task_loss(p, X, y, m) + 0.5 * float(self.mu) * proximal_term(p, g)

    def init_state(self, fed, gen, device):
        return {"global": self.init_params(gen, device, 1)}

    up, down = ("model",), ("global",)

    def site_step(self, state, r, rng):
        """Each site: its local epochs on ``F_i(w) + μ/2‖w − w_g‖²`` from the global model; uploads its model."""
        g = broadcast(state["global"], self.federation_.n)
        p = {k: v.clone() for k, v in g.items()}
        p, kept, loss = self._site_steps(state, p, self._loss, rng(0), args=(g,))
        return {**state, "model": p, **kept}, {"loss": float(np.mean(loss))}

    def server_step(self, state, r):
        """FedAvg's average of the uploaded models."""
        return average_step(state, self.train_sizes_)

    def finish(self, state):
        self.global_ = {k: v.detach().cpu() for k, v in state["global"].items()}
        self.params_ = broadcast(self.global_, self.federation_.n)
        self.weights_ = None
        self.weights_history_ = []
