"""Train every subset model of a chunk together, one shared output layer per subset
(:mod:`coalitions.learners.exact`, "Batched training").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from coalitions.learners.game.masks import membership
from coalitions.learners.game.stepper import SubsetStepper
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

    from coalitions.learners.data.metrics import loss_function
    from coalitions.learners.training.models import product_major, stack_init

    loss = loss_function(task)
    device = X.device
    M = len(masks)
    dtype = next(iter(init.values())).dtype
    W = torch.as_tensor(membership(masks, n_clients), device=device).to(dtype)   # (M, N) membership
    onehot = torch.nn.functional.one_hot(owner, n_clients).to(W.dtype)
    params = stack_init(init, M, product_major(spec))   # the first layer product-major (no copy per step)
    decay = decayed_names({k: v.shape for k, v in init.items()})
    n = X.shape[0]
    bs = n if batch_size is None else max(1, min(int(batch_size), n))
    steps_per_epoch = math.ceil(n / bs)
    stepper = SubsetStepper(params, lr, epochs * steps_per_epoch, protocol)
    gen = torch.Generator().manual_seed(int(seed))
    active = None
    from coalitions.learners.training.models import stacked_forward

    for epoch in range(epochs):
        order = None if batch_size is None else torch.randperm(n, generator=gen).to(device)
        for b in range(steps_per_epoch):
            idx = None if order is None else order[b * bs:(b + 1) * bs]
            xb, yb, oh = (X, y, onehot) if idx is None else (X[idx], y[idx], onehot[idx])
            per_sample = loss(stacked_forward(spec, params, xb), yb)  # (M, b)
            per_client = per_sample @ oh                             # (M, N) loss sums
            count = W @ oh.sum(0)                                    # member samples in batch
            mean = (W * per_client).sum(1) / count.clamp(min=1)
            # + (l2/2)·‖W‖² over the weights, entered as its gradient
            params = stepper.step(params, mean.sum(), active, decay_gradient(params, decay, l2))
        if progress is not None:
            progress(epoch + 1)
        if early is not None:
            with torch.no_grad():
                active = early[0].update(early[1](params), params, (epoch + 1) * steps_per_epoch)
            if not bool(active.any()):
                break
    if early is not None:
        params = early[0].best_params(params)
    return {k: v.detach() for k, v in params.items()}


def _scores(spec, params: dict, X, batch: int = 4096) -> np.ndarray:
    """Outputs ``(M, n, k)`` of every stacked model on ``X`` as float64 NumPy."""
    import torch

    from coalitions.learners.training.models import stacked_forward

    with torch.no_grad():
        outs = [stacked_forward(spec, params, X[s:s + batch]).double().cpu().numpy()
                for s in range(0, X.shape[0], batch)]
    return np.concatenate(outs, axis=1)
