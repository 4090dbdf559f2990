"""The optimiser step shared by the two stacked subset trainers.
"""

from __future__ import annotations

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

