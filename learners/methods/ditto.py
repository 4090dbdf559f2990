"""Ditto: a global model and a personal model held near it (Li, Hu, Beirami, Smith, ICML 2021; docs/learners-baselines.md).

Ditto solves, for every client ``k``, the bi-level problem

``min_{v_k} F_k(v_k) + (λ/2)·‖v_k − w*‖²   s.t.   w* ∈ argmin_w Σ_k (n_k/n) F_k(w)``

by alternating, every round ``t`` (the paper's Algorithm 1, full participation):

1. **global**: client ``k`` takes a round's local steps of descent on ``F_k`` from
   ``w^t``, and the server averages ``w^{t+1} = Σ_k n_k w_k / Σ_k n_k`` (FedAvg);
2. **personal**: client ``k`` takes a round's local steps of descent on
   ``F_k(v_k) + (λ/2)·‖v_k − w^t‖²`` from its own ``v_k``, which never leaves it.

Both updates use the same minibatches: they run as one stacked optimisation of
``F_k(w_k) + F_k(v_k) + (λ/2)‖v_k − w^t‖²``, whose gradient separates (the two
parts share no parameter), so each part takes exactly the steps it would take
alone (the round's reported loss is the sum of the two parts).  The
regulariser is computed on live tensors: its gradient ``λ(v_k − w^t)`` pulls
the personal model towards the round's global model.  ``λ = 0`` is Local
training of ``v_k``; large ``λ`` ties ``v_k`` to the global model.  Every
client predicts with its personal ``v_k``.

No pairwise weights: utilities and the structural graph of the shared global
model (everybody).  Default ``λ = 0.1`` (the paper tunes ``λ`` in
``{0.05, 0.1, 0.2, 0.5, 1, 2}``).
"""

from __future__ import annotations

import numpy as np

from coalitions.learners.methods.base import PersonalizedLearner
from coalitions.learners.methods.baselines import average_step, broadcast
from coalitions.learners.methods.fedprox import proximal_term
from coalitions.params import check_param

__all__ = ["Ditto"]


class Ditto(PersonalizedLearner):
    """Ditto (module docstring).

    Parameters
    ----------
    lam : float
        Weight ``λ ≥ 0`` of the personal models' regulariser (0.1).
    **common
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner`.

    Attributes
    ----------
    global_ : dict
        The final global model ``w`` (leading dimension 1).
    params_ : dict
        The personal models ``v_k`` (stacked).
    """

    method = "ditto"
    has_weights = False
    shares_model = True

    lam: float = 0.1

    def check_params(self):
        super().check_params()
        check_param("lam", self.lam, "number", low=0)

    def _loss(self, p, X, y, m, g):
        w = {k[2:]: v for k, v in p.items() if k.startswith("w.")}
        v = {k[2:]: t for k, t in p.items() if k.startswith("v.")}
        return (self._task_loss(w, X, y, m) + self._task_loss(v, X, y, m)
                + 0.5 * float(self.lam) * proximal_term(v, g))

    def init_state(self, fed, gen, device):
        glob = self.init_params(gen, device, 1)
        return {"global": glob, "personal": broadcast(glob, fed.n)}

    up, down, kept = ("model",), ("global",), ("personal",)
    model_prefixes = ("w.", "v.")   # the global and the personal model train in one dict

    def site_step(self, state, r, rng):
        """Each site: the global model's local epochs and its personal model's, together; uploads the former."""
        g = broadcast(state["global"], self.federation_.n)
        p = {**{"w." + k: v.clone() for k, v in g.items()}, **{"v." + k: v for k, v in state["personal"].items()}}
        p, kept, loss = self._site_steps(state, p, self._loss, rng(0), args=(g,))
        w = {k[2:]: v for k, v in p.items() if k.startswith("w.")}
        personal = {k[2:]: v for k, v in p.items() if k.startswith("v.")}
        return {**state, "model": w, "personal": personal, **kept}, {"loss": float(np.mean(loss))}

    def server_step(self, state, r):
        """FedAvg's average of the uploaded global models (the personal ones never leave their sites)."""
        return average_step(state, self.train_sizes_)

    def finish(self, state):
        self.global_ = {k: v.detach().cpu() for k, v in state["global"].items()}
        self.params_ = {k: v.detach().cpu() for k, v in state["personal"].items()}
        self.weights_ = None
        self.weights_history_ = []
