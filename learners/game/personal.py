"""Train every subset model of a chunk together with one output layer per member (personal heads;
FedPer's split, Arivazhagan et al. 2019; :mod:`coalitions.learners.exact`, "Personal heads").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from coalitions.learners.game.masks import membership
from coalitions.learners.game.stepper import train_stacked
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

    dtype = next(iter(init.values())).dtype
    W = torch.as_tensor(membership(masks, n_clients), device=X.device).to(dtype)   # (M, N) membership
    return train_stacked(PersonalHeads(spec, task, X, y, owner, W, init), X.shape[0], epochs=epochs, lr=lr, l2=l2,
                         batch_size=batch_size, seed=seed, progress=progress, protocol=protocol, early=early,
                         device=X.device)


class PersonalHeads:
    """The head objective of one output layer per member (``coalitions.learners.game.stepper.train_stacked``).

    The body of model ``S`` descends the pooled objective and each member's head its own
    client's (:func:`train_subsets_personal`); the body's weights and each member's head weights
    decay, a non-member's head not at all.

    Parameters
    ----------
    spec, task, X, y, owner, init
        As :func:`train_subsets_personal` (``X, y, owner`` grouped by client, ``init`` with a
        client axis on each head parameter).
    W : torch.Tensor (M, N)
        Each model's membership (0/1, in the parameters' dtype).
    """

    def __init__(self, spec, task: str, X, y, owner, W, init: dict):
        import torch

        from coalitions.learners.data.metrics import loss_function
        from coalitions.learners.training.models import product_major, stack_init

        n_clients = W.shape[1]
        self.spec, self.loss, self.X, self.y, self.owner, self.W = spec, loss_function(task), X, y, owner, W
        self.n_clients, self.dtype = n_clients, W.dtype
        sizes = torch.bincount(owner, minlength=n_clients).to(W.dtype)                   # n_i
        self.share = W * sizes / (W @ sizes).clamp(min=1)[:, None]                       # (M, N): n_i / n_S
        # the first layer product-major (no copy per step)
        self.params = stack_init(init, W.shape[0], product_major(spec) if spec.body else ())
        self.body_names = decayed_names({k: init[k].shape for k in spec.body})
        self.head_names = decayed_names({k: init[k].shape for k in spec.head}, stacked=1)    # a head weight: (N, f, k)

    def rows(self, idx):
        """A minibatch's rows grouped by client (``owner`` is sorted), which changes no loss."""
        import torch

        return torch.sort(idx).values

    def __call__(self, params: dict, idx):
        """Each model's objective on the rows ``idx`` (all when ``None``), ``(M,)``: the members' mean losses
        weighted by their data shares, each head seeing its own client's loss (:func:`scaled_gradient`)."""
        import torch

        from coalitions.learners.training.models import stacked_personal_forward

        spec, dtype, n_clients = self.spec, self.dtype, self.n_clients
        xb, yb, ob = (self.X, self.y, self.owner) if idx is None else (self.X[idx], self.y[idx], self.owner[idx])
        counts = torch.bincount(ob, minlength=n_clients)
        present = (counts > 0).to(dtype)
        # members with samples in the batch, weighted by their whole-data share (renormalised)
        w = self.share * present
        w = w / w.sum(1, keepdim=True).clamp(min=torch.finfo(dtype).tiny)
        # each head's gradient scaled by 1/w_i: its own client's mean loss, not its share of the pooled one
        scale = torch.where(w > 0, 1.0 / w.clamp(min=torch.finfo(dtype).tiny), torch.zeros_like(w))
        seen = {k: (v if k not in spec.head else scaled_gradient(v, scale.view(*scale.shape, *([1] * (v.dim() - 2)))))
                for k, v in params.items()}
        per_sample = self.loss(stacked_personal_forward(spec, seen, xb, counts.tolist()), yb)     # (M, b)
        oh = torch.nn.functional.one_hot(ob, n_clients).to(dtype)
        client_mean = (per_sample @ oh) / counts.clamp(min=1).to(dtype)                           # (M, N)
        return (w * client_mean).sum(1)

    def decay(self, params: dict, l2: float) -> dict:
        """``l2·W`` for the body's weights and each member's head weights (a non-member's head: none)."""
        return {**decay_gradient(params, self.body_names, l2), **decay_gradient(params, self.head_names, l2, self.W)}

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
