"""pFedHN: a server hypernetwork generates every client's model (Shamsian, Navon, Fetaya, Chechik, ICML 2021; docs/learners-baselines.md).

The server holds a hypernetwork ``h(·; φ)`` and one trainable embedding ``v_k``
per client; client ``k``'s model is generated, ``θ_k = h(v_k; φ)``.  Here ``h``
is an MLP ``v ↦ W_o·ReLU(W_2·ReLU(W_1 v + b_1) + b_2) + b_o`` whose output is
the target model's parameters flattened (``θ`` unflattened in the target's
parameter order).  Its output bias ``b_o`` starts at one draw of the target
model's standard initialisation and ``W_o`` near zero, so every client starts
near a common, properly scaled model.

Every round ``t`` (the paper's Algorithm 1, all clients per round):

1. the server sends ``θ_k = h(v_k; φ)``; client ``k`` runs a round's
   epochs of descent on ``F_k`` from ``θ_k`` to ``θ̃_k``;
2. the server updates ``φ`` and the embeddings along
   ``∇_{φ,v} = (1/N) Σ_k (∇_{φ,v} θ_k)ᵀ (θ_k − θ̃_k)`` — the paper's update with
   ``Δθ_k = θ_k − θ̃_k`` standing for the clients' gradient, computed as the
   gradient of the surrogate ``(1/N) Σ_k ⟨θ_k(φ, v_k), sg(θ_k − θ̃_k)⟩``
   (:func:`hypernet_surrogate`; ``sg`` stops the gradient) — with Adam (step
   ``hn_lr``; its state lives on the server across rounds).  The paper samples
   one client per step uniformly, hence the uniform ``1/N``.

The inner loop of step 1 starts afresh every round: client ``k``'s local descent
is the paper's device for estimating ``Δθ_k`` at the point ``θ_k`` the server just
generated, so its optimiser state (Adam's moments, a momentum buffer) is not carried
from the previous round's trajectory, which started elsewhere; only the protocol's
schedule runs on over the whole budget (each round's state starts at the round's first
global step).  This is the one learner whose sites do not keep their optimiser state:
carried over, the previous round's moments drive ``Δθ`` and the
hypernetwork diverges — on ``digits`` (twins, seed 0, the experiment's protocol at a
constant rate) the test accuracy was 0.20 with the state kept and 0.994 afresh, the
validation loss rising from 1.7 to 3.6 over the rounds in the first case.

Every client predicts with its generated model ``h(v_k; φ)`` (no local
fine-tuning).  No pairwise weights: utilities and the structural graph of the
shared hypernetwork (everybody).  Defaults (ours): embedding width 8,
hypernetwork width 100, ``hn_lr = 0.01``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from coalitions.learners.methods.base import PersonalizedLearner, unflatten
from coalitions.learners.training.engine import flatten, make_optimizer
from coalitions.learners.training.models import check_trainable
from coalitions.params import MAX_STEPS, check_param

__all__ = ["PFedHN", "generate", "hypernet_surrogate"]


def generate(phi: dict) -> torch.Tensor:
    """Every client's flattened target parameters ``h(v_k; φ)``: ``(N, P)`` (``phi`` unstacked)."""
    h = torch.relu(phi["emb"] @ phi["w1"] + phi["b1"])
    h = torch.relu(h @ phi["w2"] + phi["b2"])
    return h @ phi["wo"] + phi["bo"]


def hypernet_surrogate(phi: dict, delta: torch.Tensor) -> torch.Tensor:
    """``(1/N) Σ_k ⟨h(v_k; φ), Δθ_k⟩``; its gradient in ``φ`` and ``v`` is pFedHN's server direction."""
    return (generate(phi) * delta).sum() / delta.shape[0]


class PFedHN(PersonalizedLearner):
    """pFedHN (module docstring).

    Parameters
    ----------
    embed : int
        Width of the client embeddings ``v_k`` (8).
    hn_hidden : int
        Width of the hypernetwork's two hidden layers (100).
    hn_lr : float
        Adam step of the hypernetwork and embeddings (0.01).
    **common
        See :class:`~coalitions.learners.methods.base.PersonalizedLearner` (the clients' local training).

    Attributes
    ----------
    hypernet_ : dict
        The final hypernetwork and embeddings (``"emb"``: ``(N, embed)``).
    params_ : dict
        Each client's generated model (stacked).
    """

    method = "pfedhn"
    has_weights = False
    shares_model = True

    embed: int = 8
    hn_hidden: int = 100
    hn_lr: float = 0.01

    def check_params(self):
        super().check_params()
        check_param("embed", self.embed, "int", low=1, high=MAX_STEPS)
        check_param("hn_hidden", self.hn_hidden, "int", low=1, high=MAX_STEPS)
        check_param("hn_lr", self.hn_lr, "number", low=0, low_open=True)

    def init_state(self, fed, gen, device):
        e, H = int(self.embed), int(self.hn_hidden)
        P = self.spec_.n_params
        check_trainable(fed.n * e + (e + 1) * H + (H + 1) * H + (H + 1) * P,
                        f"pFedHN's hypernetwork (--client-embed {e}, --hn-hidden {H})")
        target = self.init_params(gen, device, 1)

        def u(shape, bound):
            return ((2 * torch.rand(shape, generator=gen, dtype=torch.float64) - 1) * bound).float().to(device)

        phi = {"emb": torch.randn((fed.n, e), generator=gen, dtype=torch.float64).float().to(device),
               "w1": u((e, H), 1 / math.sqrt(e)), "b1": u((H,), 1 / math.sqrt(e)),
               "w2": u((H, H), 1 / math.sqrt(H)), "b2": u((H,), 1 / math.sqrt(H)),
               "wo": u((H, P), 0.01 / math.sqrt(H)), "bo": flatten(target)[0].clone()}
        stacked = {k: v[None] for k, v in phi.items()}
        return {"phi": stacked, "opt": make_optimizer("adam", float(self.hn_lr)).init(stacked), "theta": self._theta(stacked)}

    def server_finish(self, state):
        if "phi" in state:   # the server's hypernetwork (a Flower site holds its own θ_k only)
            self.hypernet_ = {k: v[0].detach().cpu() for k, v in state["phi"].items()}

    def _theta(self, phi: dict) -> dict:
        """Every client's generated model ``θ_k = h(v_k; φ)``, the server's message."""
        with torch.no_grad():
            return {k: v.to(phi["bo"].device) for k, v in self._generated(phi).items()}

    def _generated(self, phi: dict) -> dict:
        like = {k: torch.empty((1, *shape)) for k, shape in self.spec_.shapes.items()}  # shapes only
        return unflatten(generate({k: v[0] for k, v in phi.items()}), like)

    up, down = ("model",), ("theta",)

    def site_step(self, state, r, rng):
        """Each site: its inner loop from its generated model ``θ_k`` (afresh each round); uploads where it ended."""
        p = {k: v.clone() for k, v in state["theta"].items()}
        fresh = self._fresh_inner_state(p, r)   # the inner loop starts afresh at θ_k (module docstring)
        p, _, loss = self._site_steps(fresh, p, self._task_loss, rng(0))
        return {**state, "model": p}, {"loss": float(np.mean(loss))}

    def server_step(self, state, r):
        """The hypernetwork's Adam step on ``Σ_k ⟨Δθ_k, θ_k(φ)⟩`` (``Δθ_k = θ_k − θ̃_k``), then the new ``θ``."""
        phi = state["phi"]
        delta = (flatten(state["theta"]) - flatten(state["model"])).detach()
        live = {k: v[0].detach().requires_grad_(True) for k, v in phi.items()}
        hypernet_surrogate(live, delta).backward()
        grads = {k: live[k].grad[None] for k in live}
        server = make_optimizer("adam", float(self.hn_lr))
        one = torch.ones(1, dtype=torch.bool, device=delta.device)
        phi, ost = server.step(phi, grads, state["opt"], one)
        rest = {k: v for k, v in state.items() if k != "model"}
        return {**rest, "phi": phi, "opt": ost, "theta": self._theta(phi)}

    def _fresh_inner_state(self, params: dict, r: int) -> dict:
        """A new optimiser state for round ``r``'s inner loop, its schedule at the round's first step."""
        state = self.make_optimizer().init(params)
        state["schedule_step"] = torch.full_like(state["schedule_step"], r * self.steps_per_round(self.federation_))
        return {"site_opt": state}

    def finish(self, state):
        self.server_finish(state)
        self.params_ = {k: v.detach().cpu() for k, v in state["theta"].items()}    # θ_k = h(v_k; φ)
        self.weights_ = None
        self.weights_history_ = []
