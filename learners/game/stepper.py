"""The one stacked subset trainer and its optimiser step, whatever the heads.

:func:`train_stacked` trains one model per subset, all at once, with a pluggable *head objective*:
one output layer per subset (:class:`~coalitions.learners.game.shared.SharedHead`) or one per
member (:class:`~coalitions.learners.game.personal.PersonalHeads`).  The loop (the shared batch
order, the optimiser and its schedule, early stopping, progress) is the same for both; the
objective says what one step minimises.

A head objective has

* ``params``: the stacked initial parameters ``(M, ...)``;
* ``rows(idx)``: the sample indices of a minibatch drawn from the shared order, as it reads them;
* ``objective(params, idx)`` (its ``__call__``): each model's objective ``(M,)`` on the rows
  ``idx`` (``None``: every sample, full batch), the weight decay left out;
* ``decay(params, l2)``: the weight decay's gradient per weight
  (:func:`~coalitions.learners.training.decay.decay_gradient`), added to the objective's.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from coalitions.learners.training.decay import with_decay


class SubsetStepper:
    """The optimiser of a stacked subset training (:func:`train_subsets`, :func:`train_subsets_personal`).

    Without a protocol: PyTorch's Adam on all stacked parameters with a cosine-decayed learning
    rate over ``total`` steps (PyTorch's recursive form of the cosine,
    :func:`~coalitions.learners.training.engine.make_schedule` ``recursive=True``: the numbers these
    trainers have always given).  With one: the protocol's stacked optimiser and schedule
    (:class:`~coalitions.learners.training.protocol.Scheduled`), the update Local applies; Adam's
    step runs in place (:meth:`~coalitions.learners.training.engine.Adam.step_`), the same bits
    without a new set of parameter-sized tensors per step.
    """

    def __init__(self, params: dict, lr: float, total: int, protocol=None):
        import torch

        self.protocol = protocol
        if protocol is None:
            from coalitions.learners.training.engine import make_optimizer
            from coalitions.learners.training.protocol import make_schedule

            self.opt = make_optimizer("adam", lr, params=params.values())
            self.sched = make_schedule(self.opt, "cosine", total, recursive=True)
        else:
            from coalitions.learners.training.protocol import Scheduled

            self.stacked = Scheduled(protocol, total)
            self.state = self.stacked.init(params)
            first = next(iter(params.values()))
            self.every = torch.ones(first.shape[0], dtype=torch.bool, device=first.device)

    def step(self, params: dict, loss, active=None, decay: dict | None = None) -> dict:
        """One step on the scalar ``loss`` (the sum of every subset's objective); the parameters after it.

        ``active`` (bool ``(M,)``, protocol only): the models that move; the others keep their
        parameters and optimiser state (early stopping, :mod:`coalitions.learners.game.stopping`).
        ``decay``: gradients added to the loss's, parameter by parameter (the weight decay's
        ``l2·W``, :func:`~coalitions.learners.training.decay.decay_gradient`, which autograd would
        otherwise derive through a square, a sum and their backward passes over every weight: the
        same bits, fewer passes).
        """
        import torch

        if self.protocol is None:
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            with torch.no_grad():
                for k, d in (decay or {}).items():
                    params[k].grad.add_(d)
            self.opt.step()
            self.sched.step()
            return params
        grads = with_decay(dict(zip(params, torch.autograd.grad(loss, list(params.values())), strict=True)),
                           decay or {})
        if self.stacked.in_place:   # Adam: the parameters and moments are updated where they lie (same bits)
            with torch.no_grad():
                self.stacked.step_({k: v.detach() for k, v in params.items()}, grads, self.state,
                                   self.every if active is None else active)
            return params
        with torch.no_grad():
            new, self.state = self.stacked.step({k: v.detach() for k, v in params.items()}, grads, self.state,
                                                self.every if active is None else active)
        return {k: v.requires_grad_(True) for k, v in new.items()}



def train_stacked(objective, n: int, *, epochs: int, lr: float, l2: float = 0.0, batch_size: int | None = None,
                  seed: int = 0, progress: Callable[[int], None] | None = None, protocol=None, early=None,
                  device=None) -> dict:
    """Train the stacked models of a head ``objective`` (module docstring) on ``n`` samples; returns their parameters.

    Parameters
    ----------
    objective : SharedHead or PersonalHeads
        The head objective; its ``params`` are the starting point.
    n : int
        Training samples of all clients together.
    epochs, lr, l2, batch_size, seed, progress, protocol, early
        As :func:`~coalitions.learners.game.shared.train_subsets`: ``epochs`` passes over the
        ``n`` samples, full batch when ``batch_size`` is None, else one random order per epoch
        drawn from ``seed`` (the same for every chunk and either head); the optimiser
        :class:`SubsetStepper`; ``early`` the early stop evaluated after every epoch.
    device : torch.device, optional
        Where the batch order is put (the training data's device).

    Returns
    -------
    dict of str -> torch.Tensor
        Trained stacked parameters (detached; each model's best under ``early``).
    """
    import torch

    params = objective.params
    bs = n if batch_size is None else max(1, min(int(batch_size), n))
    steps_per_epoch = math.ceil(n / bs)
    stepper = SubsetStepper(params, lr, epochs * steps_per_epoch, protocol)
    gen = torch.Generator().manual_seed(int(seed))
    active = None
    for epoch in range(epochs):
        order = None if batch_size is None else torch.randperm(n, generator=gen).to(device)
        for b in range(steps_per_epoch):
            idx = None if order is None else objective.rows(order[b * bs:(b + 1) * bs])
            per_model = objective(params, idx)
            # + the weight decay, entered as its gradient
            params = stepper.step(params, per_model.sum(), active, objective.decay(params, l2))
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
