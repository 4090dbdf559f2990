"""Per-FedAvg: federated model-agnostic meta-learning (Fallah, Mokhtari, Ozdaglar, NeurIPS 2020; docs/learners-baselines.md).

Per-FedAvg trains one global model ``w`` to be a good *starting point*: it
minimises ``Σ_k p_k F_k(w − α∇F_k(w))``, the clients' losses after one
personal gradient step of size ``α``.  The gradient of client ``k``'s term is

``∇[F_k(w − α∇F_k(w))] = (I − α∇²F_k(w)) ∇F_k(w − α∇F_k(w))``.

Local step (the paper's Per-FedAvg (HF), Hessian-vector product, three
independent minibatches ``D, D', D''`` of client ``k``)::

    w̃ = w − α ∇f_k(w; D)
    w ← w − β (∇f_k(w̃; D') − α ∇²f_k(w; D'') ∇f_k(w̃; D'))

with ``β = lr`` (the engine's optimiser applies it: plain SGD with ``momentum
= 0`` is the paper's step).  ``D'`` (the outer gradient's batch) is the epoch's
minibatch, ``D`` and ``D''`` are drawn with replacement from the client's
training split — so with ``α = 0`` the step is FedAvg's, on the same batches.  The
Hessian-vector product is exact (automatic differentiation of
``⟨v, w − α∇f_k(w; D'')⟩`` with ``v = ∇f_k(w̃; D')`` held fixed), no first-order
approximation.  Every round the clients take a round's local steps of such
steps from the global model and the server averages ``Σ_k n_k w_k / Σ_k n_k``.

After training each client personalises with one gradient step on its whole
training split, ``w_k = w − α∇F_k(w)``, and predicts with it.  ``α = 0`` is
FedAvg exactly.  No pairwise weights: utilities and the structural graph of
the shared model (everybody).  Default ``α = 0.01`` (ours).
"""

from __future__ import annotations

import numpy as np
from torch.func import grad

from coalitions.learners.methods.base import PersonalizedLearner
from coalitions.learners.methods.baselines import average_step, broadcast
from coalitions.params import check_param

__all__ = ["PerFedAvg"]


class PerFedAvg(PersonalizedLearner):
    """Per-FedAvg (HF) (module docstring).

    Parameters
    ----------
    alpha : float
        Personal step size ``α ≥ 0`` (0.01); 0 gives FedAvg.
    **common
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner`; ``lr`` is ``β``.

    Attributes
    ----------
    global_ : dict
        The final meta-model ``w`` (leading dimension 1).
    params_ : dict
        Each client's personalised model ``w − α∇F_k(w)``.
    """

    method = "per-fedavg"
    has_weights = False
    shares_model = True

    alpha: float = 0.01

    def check_params(self):
        super().check_params()
        check_param("alpha", self.alpha, "number", low=0)

    def meta_loss(self, p, X2, y2, m2, X, y, m, X3, y3, m3):
        """A scalar whose value is ``f(w̃; D')`` and whose gradient is the HF meta-gradient (module docstring).

        Arguments after ``p``: the batches ``D'``, ``D`` and ``D''``, each ``(X, y, mask)``.
        """
        a = float(self.alpha)
        g1 = grad(self._task_loss)(p, X, y, m)
        tilde = {k: (p[k] - a * g1[k]).detach() for k in p}
        value = self._task_loss(tilde, X2, y2, m2)
        v = grad(self._task_loss)(tilde, X2, y2, m2)
        g3 = grad(self._task_loss)(p, X3, y3, m3)
        surrogate = sum((v[k].detach() * (p[k] - a * g3[k])).sum() for k in p)
        return surrogate - surrogate.detach() + value.detach()

    def init_state(self, fed, gen, device):
        return {"global": self.init_params(gen, device, 1)}

    up, down = ("model",), ("global",)
    step_draws = {1: 2}     # two minibatches (the inner and the outer step's) drawn per local step

    def site_step(self, state, r, rng):
        """Each site: its local meta-steps from the global model (its optimiser state continued); uploads its model."""
        p = broadcast(state["global"], self.federation_.n)
        draw = rng(1)
        data = self.train_data_

        b, longest = self.minibatch_size(), int(self.train_sizes_.max())

        def extra(step):
            return (*data.sample(b, draw, longest), *data.sample(b, draw, longest))

        p, kept, loss = self._site_steps(state, p, self.meta_loss, rng(0), data=data, step_args=extra)
        return {**state, "model": p, **kept}, {"loss": float(np.mean(loss))}

    def server_step(self, state, r):
        """FedAvg's average of the uploaded models."""
        return average_step(state, self.train_sizes_)

    def finish(self, state):
        self.global_ = {k: v.detach().cpu() for k, v in state["global"].items()}
        d = self.train_data_
        w = broadcast(state["global"], self.federation_.n)
        g, _ = self.engine_.value_and_grad(self._task_loss, w, (d.X, d.y, d.m))
        a = float(self.alpha)
        self.params_ = {k: (w[k] - a * g[k]).detach().cpu() for k in w}
        self.weights_ = None
        self.weights_history_ = []


