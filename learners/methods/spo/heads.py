r"""SPO with personal heads: the hypernetwork generates the body, each client owns its head.

The paper's CIFAR-10 code gives every client its own output layer on the body that the
hypernetwork generates (FedPer's split, Arivazhagan et al. 2019): with label skew a shared
output layer would have to serve clients whose classes differ, a personal one never does.  For a
direction ``d`` client ``j``'s model is ``(h(d), head_j)``, and the training objective of
:mod:`coalitions.learners.methods.spo` becomes

.. math::  f_b = \sum_j d_{bj}\,\big[L_j(h(d_b), \mathrm{head}_j)
           + \tfrac{\lambda}{2}\lVert W_{\mathrm{head}_j}\rVert^2\big]
           + \tfrac{\lambda}{2}\lVert W(h(d_b))\rVert^2 ,

minimised (through ``log f_b`` with ``log_loss``) over the hypernetwork and the heads.

**A head learns from its own client only** ("trained locally").  Client ``j``'s head enters
``f_b`` only through ``d_{bj}·L_j``, so its gradient is a sum of gradients of ``L_j`` alone; but
the logarithm would scale each direction's term by ``1/f_b``, which depends on every client's
loss.  :func:`personal_loss_matrix` therefore hands the heads to each direction through a view
whose gradient is multiplied by ``f_b`` (``scale``): the head's update is then exactly
``mean_b d_{bj}·(∇L_j + λ W_j)`` — the mean over the batch's directions of its own client's
scalarised loss — whatever the other clients' losses are, while the hypernetwork still sees the
gradient of ``log f_b``.  EPO weights depend on all clients' gradients, so they are not offered
with personal heads.

:class:`HeadsDirectionSearch` is the direction search of :mod:`.search` with each row's
validation loss computed through its target client's head.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.func import vmap

from coalitions.learners.methods.spo.hypernetwork import ParetoHypernetwork
from coalitions.learners.methods.spo.search import DirectionSearch
from coalitions.learners.training.decay import decayed_names
from coalitions.learners.training.models import ModelSpec

__all__ = ["personal_loss_matrix", "head_penalty", "HeadsDirectionSearch"]


def _expand(heads: dict, B: int, scale) -> dict:
    """Each head parameter viewed once per direction ``(B, N, ...)``, its gradient multiplied by ``scale[b]``.

    ``scale``: ``None``, a tensor ``(B,)``, or a list whose first item is set to
    that tensor before the backward pass (the hook reads it then).
    """
    def hook(g):
        s = scale[0] if isinstance(scale, list) else scale
        return g * s.detach().reshape((B,) + (1,) * (g.dim() - 1))

    out = {}
    for k, h in heads.items():
        e = h.unsqueeze(0).expand(B, *h.shape)
        if scale is not None and e.requires_grad:
            e.register_hook(hook)
        out[k] = e
    return out


def personal_loss_matrix(spec: ModelSpec, loss: Callable, body: dict, heads: dict, X, y, m,
                         scale=None) -> torch.Tensor:
    """``L[b, j]``: client ``j``'s mean loss with the ``b``-th generated body and its own head, ``(B, N)``.

    Parameters
    ----------
    spec : ModelSpec
        The target model.
    loss : callable
        Per-sample loss ``loss(outputs, y)``.
    body : dict
        Generated body parameters ``(B, *shape)``.
    heads : dict
        Each client's head ``(N, *shape)``.
    X, y, m : tensor
        Padded data of every client ``(N, n, ...)`` (``m``: 1 for real samples).
    scale : tensor (B,) or list, optional
        Multiplies the gradient reaching the heads through direction ``b``
        (module docstring; ``f_b`` undoes the logarithm's ``1/f_b``).  A list
        ``[None]`` whose item is set to the tensor after the forward pass and
        before the backward one lets ``f`` itself, computed from the result, be
        the scale.
    """
    B = next(iter(body.values())).shape[0]
    expanded = _expand(heads, B, scale)
    if spec.kind == "mlp":
        return _mlp_loss_matrix(loss, body, expanded, X, y, m)

    def one_client(bd, hd, Xj, yj, mj):
        out = spec.forward({**bd, **hd}, Xj)
        return (loss(out, yj) * mj).sum() / mj.sum()

    per_direction = vmap(one_client, in_dims=(None, 0, 0, 0, 0))             # over clients
    return vmap(per_direction, in_dims=(0, 0, None, None, None))(body, expanded, X, y, m)


def _mlp_loss_matrix(loss: Callable, body: dict, heads: dict, X, y, m) -> torch.Tensor:
    """:func:`personal_loss_matrix` of the MLP in batched products: ``(B, N)``.

    Every client's rows through every direction's first layer in one product
    ``(N·n, d) @ (d, B·h)`` (its backward pass is one product too), then each (direction,
    client)'s head as one batched product.  The same function as the ``vmap`` over directions
    and clients; the sums run in another order (last-bit differences), in about half the time
    of a training step on ``reproduce fashion``'s SPO.
    """
    W1 = body["w1"]
    B, d, h = W1.shape
    N, n = X.shape[:2]
    pre = (X.reshape(N * n, d) @ W1.permute(1, 0, 2).reshape(d, B * h)).reshape(N, n, B, h)
    hid = torch.relu(pre + body["b1"]).permute(2, 0, 1, 3)                      # (B, N, n, h)
    out = torch.matmul(hid, heads["w2"]) + heads["b2"].unsqueeze(-2)           # (B, N, n, k)
    return (loss(out, y) * m).sum(-1) / m.sum(-1)


def head_penalty(spec: ModelSpec, heads: dict, D: torch.Tensor, scale=None) -> torch.Tensor:
    """``Σ_j d_{bj}·½‖W_head_j‖²`` for each direction, ``(B,)`` (weights only, biases not decayed).

    The heads enter through the same gradient-scaled view as in :func:`personal_loss_matrix`.
    """
    B = D.shape[0]
    expanded = _expand({k: heads[k] for k in decayed_names({k: spec.shapes[k] for k in heads})}, B, scale)
    total = D.new_zeros(B)
    for v in expanded.values():
        total = total + 0.5 * (D * v.pow(2).flatten(2).sum(2)).sum(1)
    return total


class HeadsDirectionSearch(DirectionSearch):
    """:class:`~coalitions.learners.methods.spo.search.DirectionSearch` where row ``r``'s model is
    ``(h(d_r), head_{targets[r]})``: each client searches the body that suits its own head."""

    hypernet: ParetoHypernetwork

    def row_params(self, d: torch.Tensor, targets: torch.Tensor) -> dict:
        """Row ``r``'s parameters: the body ``h(d[r])`` with client ``targets[r]``'s own head.

        The base class's :meth:`~.DirectionSearch.own_loss` then groups the rows by target, so
        each client's validation set enters once per batch instead of being copied once per row
        (the copy took about 40 % of a Fashion-MNIST search; the losses are the same bits).
        """
        return self.hypernet.member_params(self.hypernet(d), targets)

    def client_params(self, generated: dict, client: int) -> dict:
        """The folded path's parameters of rows that all target ``client``: the generated body with its head
        (one head for all the rows, broadcast, not copied per row)."""
        return {**generated, **{k: v[client] for k, v in self.hypernet.client_heads.items()}}
