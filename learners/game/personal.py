"""Train every subset model of a chunk together with one output layer per member (personal heads;
FedPer's split, Arivazhagan et al. 2019; :mod:`coalitions.learners.exact`, "Personal heads").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from coalitions.learners.game.masks import membership
from coalitions.learners.game.stepper import SubsetStepper


def train_subsets_personal(spec, task: str, X, y, owner, masks, n_clients: int, init: dict, *, epochs: int,
                           lr: float, l2: float = 0.0, batch_size: int | None = None, seed: int = 0,
                           progress: Callable[[int], None] | None = None, protocol=None) -> dict:
    """Train one body and a head per member for each mask, all masks at once (module docstring).

    Parameters as :func:`train_subsets`, except that ``X, y, owner`` must be
    grouped by client (client 0's samples first, ``owner`` non-decreasing, as
    the oracle concatenates them) and ``init`` holds one model's parameters
    with a client axis on each head parameter
    (:func:`coalitions.learners.training.models.personal_init`).  Each step
    uses the same samples as :func:`train_subsets` would (the same random order
    from ``seed``); a minibatch is regrouped by client, which changes no loss.

    The loss of model ``S`` is
    ``Σ_{i∈S} (n_i/n_S)·[L_i + (l2/2)‖W_head_i‖²] + (l2/2)‖W_body‖²`` with ``L_i``
    the mean over client ``i``'s samples in the batch of the per-sample loss
    (so that every member's mean is weighted by its whole data share, as the
    full-batch mean over the union is).  A non-member's head appears in no
    term: its gradient is exactly zero and Adam leaves it at ``init``.
    ``protocol`` as in :func:`train_subsets`: its stacked optimiser and schedule
    replace PyTorch's Adam and cosine schedule, so that the model of ``{i}``
    (body and ``i``'s head) is the model Local trains for client ``i``.

    Returns
    -------
    dict of str -> torch.Tensor
        Trained stacked parameters (detached): body ``(M, ...)``, heads ``(M, N, ...)``.
    """
    import torch

    from coalitions.learners.data.metrics import loss_function
    from coalitions.learners.training.models import stacked_personal_forward

    loss = loss_function(task)
    device = X.device
    M = len(masks)
    dtype = next(iter(init.values())).dtype
    W = torch.as_tensor(membership(masks, n_clients), device=device).to(dtype)   # (M, N) membership
    sizes = torch.bincount(owner, minlength=n_clients).to(dtype)                  # n_i
    share = W * sizes / (W @ sizes).clamp(min=1)[:, None]                         # (M, N): n_i / n_S
    params = {k: v.detach().unsqueeze(0).repeat((M,) + (1,) * v.dim()).requires_grad_(True)
              for k, v in init.items()}
    body_decay = [k for k in spec.body if init[k].dim() >= 2]
    head_decay = [k for k in spec.head if init[k].dim() >= 3]    # a head weight: (N, f, k)
    n = X.shape[0]
    bs = n if batch_size is None else max(1, min(int(batch_size), n))
    steps_per_epoch = math.ceil(n / bs)
    stepper = SubsetStepper(params, lr, epochs * steps_per_epoch, protocol)
    gen = torch.Generator().manual_seed(int(seed))
    for _epoch in range(epochs):
        order = None if batch_size is None else torch.randperm(n, generator=gen).to(device)
        for b in range(steps_per_epoch):
            if order is None:
                xb, yb, ob = X, y, owner
            else:
                idx = torch.sort(order[b * bs:(b + 1) * bs]).values   # grouped by client: owner is sorted
                xb, yb, ob = X[idx], y[idx], owner[idx]
            counts = torch.bincount(ob, minlength=n_clients)
            per_sample = loss(stacked_personal_forward(spec, params, xb, counts.tolist()), yb)   # (M, b)
            oh = torch.nn.functional.one_hot(ob, n_clients).to(dtype)
            client_mean = (per_sample @ oh) / counts.clamp(min=1).to(dtype)                      # (M, N)
            present = (counts > 0).to(dtype)
            # members with samples in the batch, weighted by their whole-data share (renormalised)
            w = share * present
            w = w / w.sum(1, keepdim=True).clamp(min=torch.finfo(dtype).tiny)
            total = (w * client_mean).sum(1)
            if l2:
                for k in body_decay:
                    total = total + 0.5 * l2 * params[k].pow(2).flatten(1).sum(1)
                for k in head_decay:
                    total = total + 0.5 * l2 * (share * params[k].pow(2).flatten(2).sum(2)).sum(1)
            params = stepper.step(params, total.sum())
        if progress is not None:
            progress(_epoch + 1)
    return {k: v.detach() for k, v in params.items()}


def _scores_personal(spec, params: dict, X, counts, batch: int = 4096) -> np.ndarray:
    """Outputs ``(M, n, k)`` of every stacked personal-head model on ``X`` grouped by client (``counts``)."""
    import torch

    from coalitions.learners.training.models import stacked_personal_forward

    outs = []
    with torch.no_grad():
        start = 0
        for i, c in enumerate(int(c) for c in counts):
            for s in range(0, c, batch):
                rows = min(batch, c - s)
                one = [0] * len(counts)
                one[i] = rows
                outs.append(stacked_personal_forward(spec, params, X[start + s:start + s + rows], one)
                            .double().cpu().numpy())
            start += c
    if not outs:
        return np.zeros((len(next(iter(params.values()))), 0, spec.n_outputs))
    return np.concatenate(outs, axis=1)
