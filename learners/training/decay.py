"""Weight decay, defined once for every trainer (docs/concepts.md §5).

Every model of a comparison minimises its loss plus ``(weight_decay/2)·‖weights‖²``
(:class:`~coalitions.learners.training.protocol.TrainingProtocol`): the **weights** are the
parameters with at least two axes (a layer's matrix, a convolution's kernel); biases, one axis,
are not decayed.  The term enters a trainer in one of two equivalent forms:

* as a **penalty** added to the loss, :func:`decay_penalty`, whose gradient autograd derives
  (the learners' round engine, SPO's hypernetwork objective);
* as its **gradient** ``weight_decay·W`` added to the loss's gradient, :func:`decay_gradient`
  and :func:`with_decay` (the exhaustive game's stacked subset trainers, FedeRiCo's M-step,
  the federated game's sites): autograd's derivative of the penalty, ``(weight_decay/2)·2W``,
  is this product exactly (the factor 2 is exact in binary floating point), so the two forms
  step to the same bits.

The optimisers themselves never decay (:func:`~coalitions.learners.training.engine.make_optimizer`):
a decay inside an optimiser would reach the biases too.  The closed-form solvers are the
exception the protocol states: there ``weight_decay`` is a ridge on every coefficient, the bias
included (``coalitions.learners.game.closed_form``).

Examples
--------
>>> decayed_names({"w1": (4, 8), "b1": (8,), "w2": (8, 1), "b2": (1,)})
('w1', 'w2')
>>> decayed_names({"head.w": (3, 8, 1), "head.b": (3, 1)}, stacked=1)
('head.w',)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

__all__ = ["decayed_names", "decay_penalty", "decay_gradient", "with_decay"]


def decayed_names(shapes: Mapping[str, Sequence[int]], stacked: int = 0) -> tuple[str, ...]:
    """The parameters weight decay applies to: the weights, those with at least two axes of their own.

    Parameters
    ----------
    shapes : mapping of str -> sequence of int
        Each parameter's shape (a model's :attr:`~coalitions.learners.training.models.ModelSpec.shapes`,
        or the shapes of tensors with ``stacked`` leading axes).
    stacked : int
        Leading axes of each shape that stack models or clients rather than belong to one
        parameter (a personal head's client axis: 1).

    Returns
    -------
    tuple of str
        The weights' names, in the order of ``shapes``; biases are left out.
    """
    return tuple(k for k, s in shapes.items() if len(s) - int(stacked) >= 2)


def decay_penalty(params: Mapping, names: Iterable[str], weight_decay: float, stacked: int = 0):
    """``(weight_decay/2)·Σ_k ‖params[k]‖²`` over the weights ``names`` found in ``params``.

    Parameters
    ----------
    params : mapping of str -> torch.Tensor
        One model's parameters, or models stacked along ``stacked`` leading axes.
    names : iterable of str
        The decayed parameters (:func:`decayed_names`), summed in this order; a name that
        ``params`` lacks is skipped.
    weight_decay : float
        The protocol's ``weight_decay``; ``0`` gives ``0.0``.
    stacked : int
        ``0``: the penalty of one model, a scalar; ``1``: one value per model of the leading
        axis, ``(M,)``.

    Returns
    -------
    torch.Tensor or float
        The penalty (``0.0`` when the decay is off or no weight is found).
    """
    keep = [k for k in names if k in params]
    if not weight_decay or not keep:
        return 0.0
    if stacked:
        return 0.5 * weight_decay * sum((params[k] ** 2).flatten(stacked).sum(stacked) for k in keep)
    return 0.5 * weight_decay * sum((params[k] ** 2).sum() for k in keep)


def decay_gradient(params: Mapping, names: Iterable[str], weight_decay: float, member=None) -> dict:
    """The gradient of the penalty, ``weight_decay·W``, for each weight ``W = params[k]``, ``k`` in ``names``.

    Parameters
    ----------
    params : mapping of str -> torch.Tensor
        The parameters (read detached: the result carries no graph).
    names : iterable of str
        The decayed parameters (:func:`decayed_names`).
    weight_decay : float
        ``0``: no term at all (an empty dict).
    member : torch.Tensor (M, N) of 0/1, optional
        With personal heads ``(M, N, ...)``: only a member's head is decayed,
        ``member[m, i]·weight_decay·W[m, i]``.

    Returns
    -------
    dict of str -> torch.Tensor
        One gradient per weight, to add to the loss's (:func:`with_decay`).
    """
    import torch

    if not weight_decay:
        return {}
    out = {}
    with torch.no_grad():
        for k in names:
            d = torch.mul(params[k].detach(), weight_decay)
            if member is not None:
                d = d * member.view(*member.shape, *([1] * (d.dim() - 2)))
            out[k] = d
    return out


def with_decay(grads: Mapping, decay: Mapping) -> dict:
    """``grads`` with the decay's gradients (:func:`decay_gradient`) added, parameter by parameter."""
    return {k: g + decay[k] if k in decay else g for k, g in grads.items()}
