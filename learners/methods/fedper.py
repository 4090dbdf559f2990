"""FedPer and LG-FedAvg: federated averaging of one part of the model, the other part personal (docs/learners-baselines.md).

Both split every client's model into a *body* (the layers before the output
layer) and a *head* (the output layer), as
:class:`~coalitions.learners.training.models.ModelSpec` names them, and average
only one part; the other part never leaves its client.  Every round ``t``:

1. client ``k`` starts from the shared part of the round and its own personal
   part, ``θ_k = (s^t, π_k)``, and trains the whole model for a round's
   epochs on ``F_k`` (minibatch descent; the site's optimiser state persists
   across rounds);
2. the server averages the shared parts, ``s^{t+1} = Σ_k n_k s_k / Σ_k n_k``;
   each client keeps its trained personal part ``π_k``.

* **FedPer** (Arivazhagan, Aggarwal, Singh, Choudhary, "Federated learning with
  personalization layers", 2019): the body is shared, the head personal —
  shared features, a personal output layer per client (the split the paper's
  CIFAR-10 code uses for label skew).
* **LG-FedAvg** (Liang, Liu, Ziyin, Allen, Auerbach, Brent, Salakhutdinov,
  Morency, "Think locally, act globally", 2020): the reverse — local
  representations (the body) and one global head on top of them.

Every client predicts with its own ``(s, π_k)``.  The affine models
(``linear``, ``logistic``) have no body: FedPer is then Local training and
LG-FedAvg is FedAvg (use ``mlp`` or ``cnn``).  No pairwise weights: utilities
and the structural graph of the shared part (everybody).
"""

from __future__ import annotations

import numpy as np

from coalitions.learners.methods.base import PersonalizedLearner
from coalitions.learners.methods.baselines import average_step

__all__ = ["PartialAverage", "FedPer", "LGFedAvg"]


class PartialAverage(PersonalizedLearner):
    """Average one part of the model, keep the other personal (module docstring).

    Subclasses set ``shared_part`` to ``"body"`` (FedPer) or ``"head"`` (LG-FedAvg).

    Attributes
    ----------
    params_ : dict
        Each client's model (stacked): the shared part equal for all clients.
    shared_ : tuple of str
        The names of the averaged parameters.
    """

    shared_part = "body"
    has_weights = False
    shares_model = True


    def _shared_names(self) -> tuple:
        return self.spec_.body if self.shared_part == "body" else self.spec_.head

    def init_state(self, fed, gen, device):
        return {"params": self.init_params(gen, device, fed.n)}

    up, down, kept = ("model",), ("shared",), ("params",)

    def record_shapes(self, key: str) -> dict:
        """The uploads hold the shared part only."""
        return {k: v for k, v in self.spec_.shapes.items() if k in set(self._shared_names())}

    @staticmethod
    def _with_shared(state) -> dict:
        """Each site's parameters with the server's average of the shared part in place."""
        shared = state.get("shared") or {}
        return {k: (shared[k].expand_as(v).clone() if k in shared else v) for k, v in state["params"].items()}

    def site_step(self, state, r, rng):
        """Each site: its local epochs from its own model with the last shared average; uploads the shared part."""
        p, kept, loss = self._site_steps(state, self._with_shared(state), self._task_loss, rng(0))
        shared = set(self._shared_names())
        return ({**state, "params": p, "model": {k: v for k, v in p.items() if k in shared}, **kept},
                {"loss": float(np.mean(loss))})

    def server_step(self, state, r):
        """The size-weighted average of the uploaded shared parts (nothing shared: nothing to average)."""
        if not state["model"]:
            return {**{k: v for k, v in state.items() if k != "model"}, "shared": {}}
        return average_step(state, self.train_sizes_, down="shared")

    def finish(self, state):
        self.shared_ = self._shared_names()
        self.params_ = {k: v.detach().cpu() for k, v in self._with_shared(state).items()}
        self.weights_ = None
        self.weights_history_ = []


class FedPer(PartialAverage):
    """FedPer: shared body, personal heads (Arivazhagan et al. 2019; module docstring)."""

    method = "fedper"
    shared_part = "body"


class LGFedAvg(PartialAverage):
    """LG-FedAvg: personal bodies (local representations), one shared head (Liang et al. 2020)."""

    method = "lg-fedavg"
    shared_part = "head"
