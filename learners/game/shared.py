"""Train every subset model of a chunk together, one shared output layer per subset
(:mod:`coalitions.learners.exact`, "Batched training").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from coalitions.learners.game.masks import membership
from coalitions.learners.game.stepper import train_stacked
from coalitions.learners.training.decay import decay_gradient, decayed_names


def train_subsets(spec, task: str, X, y, owner, masks, n_clients: int, init: dict, *, epochs: int,
                  lr: float, l2: float = 0.0, batch_size: int | None = None, seed: int = 0,
                  progress: Callable[[int], None] | None = None, protocol=None, early=None) -> dict:
    """Train one model per mask, all at once; returns stacked parameters ``(M, ...)``.

    Parameters
    ----------
    spec : coalitions.learners.training.models.ModelSpec
    task : {"regression", "binary", "multiclass"}
    X, y : torch.Tensor
        All clients' training data concatenated (on the training device).
    owner : torch.LongTensor of shape (n,)
        Client index of each sample.
    masks : sequence of int
        The subsets, one model each.
    init : dict
        One model's initial parameters (unstacked); every model starts there.
    epochs, lr, l2, batch_size, seed
        Adam with cosine-decayed ``lr``; ``l2/2·‖w‖²`` on weights (parameters
        of dimension ≥ 2, not biases); full batch when ``batch_size`` is None,
        else a random order drawn from ``seed`` (the same for every chunk).
    progress : callable, optional
        Called with the number of finished epochs after each epoch.
    protocol : coalitions.learners.training.protocol.TrainingProtocol, optional
        When given, its optimiser, momentum and schedule replace PyTorch's Adam
        and cosine schedule: the stacked optimisers of the training engine
        (:class:`~coalitions.learners.training.protocol.Scheduled`), the very
        update Local applies, so that the subset model of ``{i}`` and Local's
        model of client ``i`` are the same computation (``epochs``, ``lr``,
        ``l2`` and ``batch_size`` are then the protocol's, as
        :meth:`ExhaustiveOracle.config` sets them).
    early : (SubsetEarlyStop, callable) or None
        Early stopping (protocol only): after every epoch ``early[1](params)`` gives each
        model's pooled validation loss ``(M,)`` and ``early[0]``
        (:class:`~coalitions.learners.game.stopping.SubsetEarlyStop`) freezes the models that
        stopped; the best parameters of every model are returned.

    Returns
    -------
    dict of str -> torch.Tensor
        Trained stacked parameters (detached).
    """
    import torch

    dtype = next(iter(init.values())).dtype
    W = torch.as_tensor(membership(masks, n_clients), device=X.device).to(dtype)   # (M, N) membership
    return train_stacked(SharedHead(spec, task, X, y, owner, W, init), X.shape[0], epochs=epochs, lr=lr, l2=l2,
                         batch_size=batch_size, seed=seed, progress=progress, protocol=protocol, early=early,
                         device=X.device)


class SharedHead:
    """The head objective of one output layer per subset model (``coalitions.learners.game.stepper.train_stacked``).

    Model ``S`` minimises the mean per-sample loss over its members' samples in the batch,
    ``Σ_{i∈S} Σ_{x∈batch_i} ℓ(x) / Σ_{i∈S} |batch_i|``; its weights (not biases) decay.

    Parameters
    ----------
    spec, task, X, y, owner, init
        As :func:`train_subsets`.
    W : torch.Tensor (M, N)
        Each model's membership (0/1, in the parameters' dtype).
    """

    def __init__(self, spec, task: str, X, y, owner, W, init: dict):
        import torch

        from coalitions.learners.data.metrics import loss_function
        from coalitions.learners.training.models import product_major, stack_init

        self.spec, self.loss, self.X, self.y, self.W = spec, loss_function(task), X, y, W
        self.onehot = torch.nn.functional.one_hot(owner, W.shape[1]).to(W.dtype)
        self.params = stack_init(init, W.shape[0], product_major(spec))   # the first layer product-major (no copy per step)
        self.names = decayed_names({k: v.shape for k, v in init.items()})

    def rows(self, idx):
        """A minibatch's rows as drawn."""
        return idx

    def __call__(self, params: dict, idx):
        """Each model's mean loss over its members' samples among the rows ``idx`` (all when ``None``), ``(M,)``."""
        from coalitions.learners.training.models import stacked_forward

        xb, yb, oh = (self.X, self.y, self.onehot) if idx is None else (self.X[idx], self.y[idx], self.onehot[idx])
        per_sample = self.loss(stacked_forward(self.spec, params, xb), yb)  # (M, b)
        per_client = per_sample @ oh                                        # (M, N) loss sums
        count = self.W @ oh.sum(0)                                          # member samples in batch
        return (self.W * per_client).sum(1) / count.clamp(min=1)

    def decay(self, params: dict, l2: float) -> dict:
        """``l2·W`` for every weight: the gradient of ``(l2/2)·‖W‖²``."""
        return decay_gradient(params, self.names, l2)

def _scores(spec, params: dict, X, batch: int = 4096) -> np.ndarray:
    """Outputs ``(M, n, k)`` of every stacked model on ``X`` as float64 NumPy."""
    import torch

    from coalitions.learners.training.models import stacked_forward

    with torch.no_grad():
        outs = [stacked_forward(spec, params, X[s:s + batch]).double().cpu().numpy()
                for s in range(0, X.shape[0], batch)]
    return np.concatenate(outs, axis=1)
