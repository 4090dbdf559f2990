"""Train every subset model of a chunk together with one output layer per member (personal heads;
FedPer's split, Arivazhagan et al. 2019; :mod:`coalitions.learners.exact`, "Personal heads").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from coalitions.learners.game.masks import membership
from coalitions.learners.game.stepper import SubsetStepper
from coalitions.learners.training.decay import decay_gradient, decayed_names


def scaled_gradient(x, scale):
    """``x`` in the forward pass; ``scale · grad`` in the backward pass (``scale`` broadcast, no gradient).

    >>> import torch
    >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> (scaled_gradient(x, torch.tensor([3.0, 0.5])) * 2).sum().backward()
    >>> x.grad.tolist()
    [6.0, 1.0]
    """
    global _SCALED
    if _SCALED is None:   # built on first use: the module imports without PyTorch
        import torch

        class ScaledGradient(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, scale):
                ctx.save_for_backward(scale)
                return x.view_as(x)

            @staticmethod
            def backward(ctx, grad):
                (scale,) = ctx.saved_tensors
                return grad * scale, None

        _SCALED = ScaledGradient
    return _SCALED.apply(x, scale)


_SCALED = None


def train_subsets_personal(spec, task: str, X, y, owner, masks, n_clients: int, init: dict, *, epochs: int,
                           lr: float, l2: float = 0.0, batch_size: int | None = None, seed: int = 0,
                           progress: Callable[[int], None] | None = None, protocol=None, early=None) -> dict:
    """Train one body and a head per member for each mask, all masks at once (module docstring).

    Parameters as :func:`train_subsets`, except that ``X, y, owner`` must be
    grouped by client (client 0's samples first, ``owner`` non-decreasing, as
    the oracle concatenates them) and ``init`` holds one model's parameters
    with a client axis on each head parameter
    (:func:`coalitions.learners.training.models.personal_init`).  Each step
    uses the same samples as :func:`train_subsets` would (the same random order
    from ``seed``); a minibatch is regrouped by client, which changes no loss.

    The body of model ``S`` descends the pooled objective
    ``Σ_{i∈S} (n_i/n_S)·L_i + (l2/2)‖W_body‖²`` and each member's head its own client's,
    ``L_i + (l2/2)‖W_head_i‖²``, with ``L_i`` the mean over client ``i``'s samples in the
    batch of the per-sample loss (every member's mean weighted by its whole data share, as
    the full-batch mean over the union is, renormalised over the members present in a
    minibatch).  One scalar carries both: the heads enter the forward pass through
    :func:`scaled_gradient`, the identity in value whose backward multiplies ``h``'s
    gradient by ``n_S/n_i`` (no copy of the heads in the forward pass).  So a subset trains exactly as FedPer
    (Arivazhagan et al. 2019) restricted to it would with one full-batch SGD step per
    round: the average of the members' body steps is the pooled step, each head takes its
    own client's step (tests/test_fedper.py).  A non-member's head appears in no term: its
    gradient is exactly zero and the optimiser leaves it at ``init``.
    ``protocol`` and ``early`` as in :func:`train_subsets`: its stacked optimiser and schedule
    replace PyTorch's Adam and cosine schedule, so that the model of ``{i}``
    (body and ``i``'s head) is the model Local trains for client ``i``.

    Returns
    -------
    dict of str -> torch.Tensor
        Trained stacked parameters (detached): body ``(M, ...)``, heads ``(M, N, ...)``.
    """
    import torch

    from coalitions.learners.data.metrics import loss_function
    from coalitions.learners.training.models import product_major, stack_init, stacked_personal_forward

    loss = loss_function(task)
    device = X.device
    M = len(masks)
    dtype = next(iter(init.values())).dtype
    W = torch.as_tensor(membership(masks, n_clients), device=device).to(dtype)   # (M, N) membership
    sizes = torch.bincount(owner, minlength=n_clients).to(dtype)                  # n_i
    share = W * sizes / (W @ sizes).clamp(min=1)[:, None]                         # (M, N): n_i / n_S
    params = stack_init(init, M, product_major(spec) if spec.body else ())   # the first layer product-major (no copy per step)
    body_decay = decayed_names({k: init[k].shape for k in spec.body})
    head_decay = decayed_names({k: init[k].shape for k in spec.head}, stacked=1)    # a head weight: (N, f, k)
    n = X.shape[0]
    bs = n if batch_size is None else max(1, min(int(batch_size), n))
    steps_per_epoch = math.ceil(n / bs)
    stepper = SubsetStepper(params, lr, epochs * steps_per_epoch, protocol)
    gen = torch.Generator().manual_seed(int(seed))
    active = None
    for _epoch in range(epochs):
        order = None if batch_size is None else torch.randperm(n, generator=gen).to(device)
        for b in range(steps_per_epoch):
            if order is None:
                xb, yb, ob = X, y, owner
            else:
                idx = torch.sort(order[b * bs:(b + 1) * bs]).values   # grouped by client: owner is sorted
                xb, yb, ob = X[idx], y[idx], owner[idx]
            counts = torch.bincount(ob, minlength=n_clients)
            present = (counts > 0).to(dtype)
            # members with samples in the batch, weighted by their whole-data share (renormalised)
            w = share * present
            w = w / w.sum(1, keepdim=True).clamp(min=torch.finfo(dtype).tiny)
            # each head's gradient scaled by 1/w_i: its own client's mean loss, not its share of the pooled one
            scale = torch.where(w > 0, 1.0 / w.clamp(min=torch.finfo(dtype).tiny), torch.zeros_like(w))
            seen = {k: (v if k not in spec.head else scaled_gradient(v, scale.view(*scale.shape, *([1] * (v.dim() - 2)))))
                    for k, v in params.items()}
            per_sample = loss(stacked_personal_forward(spec, seen, xb, counts.tolist()), yb)     # (M, b)
            oh = torch.nn.functional.one_hot(ob, n_clients).to(dtype)
            client_mean = (per_sample @ oh) / counts.clamp(min=1).to(dtype)                      # (M, N)
            total = (w * client_mean).sum(1)
            # + (l2/2)·‖W_body‖² + Σ_{i∈S} (l2/2)·‖W_head_i‖², entered as its gradient (a non-member's head: none)
            decay = {**decay_gradient(params, body_decay, l2), **decay_gradient(params, head_decay, l2, W)}
            params = stepper.step(params, total.sum(), active, decay)
        if progress is not None:
            progress(_epoch + 1)
        if early is not None:
            with torch.no_grad():
                active = early[0].update(early[1](params), params, (_epoch + 1) * steps_per_epoch)
            if not bool(active.any()):
                break
    if early is not None:
        params = early[0].best_params(params)
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
