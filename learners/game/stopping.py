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

from coalitions.learners.training.stopping import Patience

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
    """Patience per stacked model (module docstring); ``update`` returns which models still train.

    The rule of :class:`~coalitions.learners.training.stopping.Patience` with one track per model,
    on the models' device, counted in local steps; besides it, every model's parameters at its
    best evaluation.
    """

    def __init__(self, patience: int, n_models: int, device=None):
        self.rule = Patience(int(patience), tracks=n_models, device=device)
        self.patience = self.rule.patience
        self._best: dict = {}

    @property
    def best(self):
        """Each model's lowest pooled loss so far, float64 ``(M,)``."""
        return self.rule.best

    @property
    def bad(self):
        """Evaluations since each model's last improvement, int64 ``(M,)``."""
        return self.rule.bad

    @property
    def active(self):
        """Which models still train, bool ``(M,)``."""
        return self.rule.active

    @property
    def stopped_at(self):
        """The step of each model's last evaluation while it trained (where it stopped), int64 ``(M,)``."""
        return self.rule.stopped_at

    @property
    def best_step(self):
        """The step of each model's best evaluation (the parameters it keeps), int64 ``(M,)``."""
        return self.rule.best_step

    def update(self, loss, params: dict, step: int):
        """Record evaluation ``loss`` ``(M,)`` at ``step`` of the ``params`` just reached; the models still active."""
        import torch

        improved = self.rule.update(loss, step)
        for k, v in params.items():
            kept = self._best.get(k)
            if kept is None:
                self._best[k] = v.detach().clone()
            else:   # an elementwise select, not a boolean index (which scatters across a product-major layout)
                self._best[k] = torch.where(improved.view(-1, *([1] * (v.dim() - 1))), v.detach(), kept)
        return self.rule.active

    def state_dict(self) -> dict:
        """The record as tensors (a checkpoint holds it; :meth:`load_state_dict` restores it)."""
        return {**self.rule.state_dict(), "kept": dict(self._best)}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`'s content."""
        self.rule.load_state_dict(state)
        self._best = dict(state["kept"])

    def best_params(self, params: dict) -> dict:
        """Every model's parameters at its best evaluation (``params`` when nothing was evaluated)."""
        return {k: self._best.get(k, v) for k, v in params.items()}
