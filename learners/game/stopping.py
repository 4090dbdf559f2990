"""Early stopping of every subset model of a chunk, each on its own validation loss (docs/learners-protocol.md).

Under a protocol with ``patience`` every column of a comparison stops when its validation loss
has not improved for ``patience`` evaluations and keeps its best models; the exact game is a
column too, and each of its subset models is a model of its own.  After every epoch (one
evaluation per pass over the training data: every step in full batch) each model ``S`` of the
chunk is scored by its *pooled validation loss* over its members,

``ℓ_S = Σ_{i∈S} n_i^val·L_i(S) / Σ_{i∈S} n_i^val``

(the same measure the learning-rate grid reads, :mod:`coalitions.learners.game.chunks`).  A
model whose ``ℓ_S`` is strictly lower than its best so far records its parameters; one that has
not improved for ``patience`` evaluations stops: the optimiser leaves its parameters and its
state untouched from then on (the stacked optimisers' ``active`` mask, as a client whose epoch
has run out of batches), and at the end every model returns its best parameters.  A model's
path does not depend on the others of its chunk (each model's loss is its own), so the game
does not depend on the chunking.

Examples
--------
>>> import torch
>>> stop = SubsetEarlyStop(patience=1, n_models=2)
>>> [stop.update(torch.tensor(v), {"w": torch.tensor([[1.0], [2.0]]) * k}, step=k).tolist()
...  for k, v in enumerate([[3.0, 3.0], [2.0, 4.0], [2.5, 1.0]], start=1)]
[[True, True], [True, False], [False, False]]
>>> stop.stopped_at.tolist(), stop.best_step.tolist(), stop.best_params({"w": None})["w"].flatten().tolist()
([3, 2], [2, 1], [2.0, 2.0])
"""

from __future__ import annotations

import math

__all__ = ["SubsetEarlyStop", "pooled_validation_loss"]


def pooled_validation_loss(per_client, member, n_val):
    """``ℓ_S``: each model's members' mean validation losses ``(M, N)`` pooled by validation size.

    ``per_client[m, i]`` is client ``i``'s mean validation loss under model ``m`` (anything for a
    non-member), ``member`` the ``(M, N)`` 0/1 membership and ``n_val`` the ``(N,)`` sizes.
    """
    import torch

    weights = member * n_val
    return torch.nan_to_num(per_client * weights, nan=0.0).sum(1) / weights.sum(1).clamp(min=1.0)


class SubsetEarlyStop:
    """Patience per stacked model (module docstring); ``update`` returns which models still train."""

    def __init__(self, patience: int, n_models: int, device=None):
        import torch

        self.patience = int(patience)
        self.best = torch.full((n_models,), math.inf, dtype=torch.float64, device=device)
        self.bad = torch.zeros(n_models, dtype=torch.int64, device=device)
        self.active = torch.ones(n_models, dtype=torch.bool, device=device)
        self.stopped_at = torch.zeros(n_models, dtype=torch.int64, device=device)
        self.best_step = torch.zeros(n_models, dtype=torch.int64, device=device)
        self._best: dict = {}

    def update(self, loss, params: dict, step: int):
        """Record evaluation ``loss`` ``(M,)`` at ``step`` of the ``params`` just reached; the models still active."""
        import torch

        loss = loss.to(self.best.dtype)
        improved = self.active & (loss < self.best)
        self.best = torch.where(improved, loss, self.best)
        self.best_step = torch.where(improved, torch.full_like(self.best_step, step), self.best_step)
        self.bad = torch.where(improved, torch.zeros_like(self.bad), self.bad + self.active.to(self.bad.dtype))
        for k, v in params.items():
            kept = self._best.get(k)
            if kept is None:
                self._best[k] = v.detach().clone()
            else:   # an elementwise select, not a boolean index (which scatters across a product-major layout)
                self._best[k] = torch.where(improved.view(-1, *([1] * (v.dim() - 1))), v.detach(), kept)
        self.stopped_at = torch.where(self.active, torch.full_like(self.stopped_at, step), self.stopped_at)
        self.active = self.active & (self.bad < self.patience)
        return self.active

    def state_dict(self) -> dict:
        """The record as tensors (a checkpoint holds it; :meth:`load_state_dict` restores it)."""
        return {"best": self.best, "bad": self.bad, "active": self.active.to(self.bad.dtype),
                "stopped_at": self.stopped_at, "best_step": self.best_step, "kept": dict(self._best)}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`'s content."""
        import torch

        self.best, self.bad = state["best"], state["bad"]
        self.stopped_at, self.best_step = state["stopped_at"], state["best_step"]
        self.active = state["active"].to(torch.bool)
        self._best = dict(state["kept"])

    def best_params(self, params: dict) -> dict:
        """Every model's parameters at its best evaluation (``params`` when nothing was evaluated)."""
        return {k: self._best.get(k, v) for k, v in params.items()}
