"""The Pareto hypernetwork ``h(d)``: a direction on the simplex to a target model's parameters."""

from __future__ import annotations

import math

import torch

from coalitions.learners.training.models import ModelSpec

__all__ = ["ParetoHypernetwork"]


class ParetoHypernetwork(torch.nn.Module):
    """``h(d)``: an MLP from a direction on the N-simplex to a target model's parameters.

    ``φ(d) → Linear(·, embed) → [ReLU → Linear(·, hidden)] × layers → ReLU →
    Linear(hidden, P)``, split into the target's parameter tensors (Navon et
    al. 2021).  The input features are ``φ(d) = (d, log(d + ε))`` (``ε = log_eps``;
    just ``d`` when ``log_eps`` is None): the logarithm is steep near 0, so the
    network can tell a face of the simplex (``d_j = 0``, client ``j`` absent)
    from points close to it, where the Pareto model can change quickly.  The output layer's bias starts at one draw of the target's own
    initialisation and its weight is scaled down, so ``h`` starts near an
    ordinary initial model for every ``d``.
    """

    def __init__(self, n_clients: int, spec: ModelSpec, hidden: int = 100, embed: int = 16, layers: int = 2,
                 log_eps: float | None = 1e-3):
        super().__init__()
        self.log_eps = log_eps
        self.spec = spec
        self.names = tuple(spec.shapes)
        self.shapes = tuple(tuple(spec.shapes[k]) for k in self.names)
        self.sizes = tuple(math.prod(s) for s in self.shapes)
        n_in = n_clients if log_eps is None else 2 * n_clients
        mods: list[torch.nn.Module] = [torch.nn.Linear(n_in, embed)]
        width = embed
        for _ in range(layers):
            mods += [torch.nn.ReLU(), torch.nn.Linear(width, hidden)]
            width = hidden
        mods.append(torch.nn.ReLU())
        self.body = torch.nn.Sequential(*mods)
        self.head = torch.nn.Linear(width, sum(self.sizes))
        with torch.no_grad():
            init = spec.init(None, 1)
            self.head.bias.copy_(torch.cat([init[k].reshape(-1) for k in self.names]))
            self.head.weight.mul_(0.1)

    def forward(self, d: torch.Tensor) -> dict:
        """Parameters for each direction: ``{name: (B, *shape)}`` for ``d`` of shape (B, N)."""
        feats = [d]
        if self.log_eps is not None:
            feats.append(torch.log(d.clamp(min=0) + self.log_eps))
        x = torch.cat(feats, dim=-1)
        flat = self.head(self.body(x))
        parts = torch.split(flat, self.sizes, dim=-1)
        return {k: p.reshape(*d.shape[:-1], *s) for k, p, s in zip(self.names, parts, self.shapes, strict=True)}
