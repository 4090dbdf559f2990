r"""Each client's data folded into the hypernetwork's output layer: the target's first layer without its weights.

The hypernetwork's output layer generates the target's first-layer weight as
``W(d) = reshape(A z(d) + a)`` (``A``: the layer's rows for that weight, ``(d_in·h, hidden)``;
``z(d)``: the last hidden layer), so on client ``c``'s data ``X_c`` ``(n, d_in)`` the
pre-activation is

.. math::  X_c W(d) = \big(X_c A\big)\, z(d) + X_c\, a ,

exact in real arithmetic (only the order of the float sums changes).  ``X_c A`` (``(n, h,
hidden)``) and ``X_c a`` are computed once per client (the first layer's generated bias folded
in with them, :class:`FoldedData`); each direction then costs ``n·h·hidden``
multiply-adds for its pre-activation instead of ``d_in·h·hidden`` to generate the weight and
``n·d_in·h`` to apply it: on ``reproduce fashion`` (``d_in = 784``, ``h = 32``, ``hidden = 100``,
100 validation samples) 0.32 M instead of 5.0 M per direction and client.

It pays where many directions meet the same data and the hypernetwork is fixed: SPO's direction
search (:mod:`.search`), which evaluates thousands of directions per client on a frozen network.
Not in training, where the output layer changes every step and each step's few directions meet
each client's batch once (fashion: 16 directions against 20 samples per client, the fold would
cost 4× the step).  :func:`fold_pays` says when a search folds.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from coalitions.learners.methods.spo.hypernetwork import ParetoHypernetwork
from coalitions.learners.training.engine import Padded
from coalitions.learners.training.models import ModelSpec

__all__ = ["FIRST_LAYER", "fold_pays", "after_first", "FoldedData"]

#: The first layer of each model kind that starts with an affine map of the flattened input:
#: ``(weight (d_in, h), bias (h,))``.  The CNN starts with a convolution: not folded.
FIRST_LAYER = {"linear": ("weight", "bias"), "logistic": ("weight", "bias"), "mlp": ("w1", "b1")}


def fold_pays(hypernet: ParetoHypernetwork, spec: ModelSpec, samples: int) -> bool:
    """Whether folding ``samples`` rows of a client's data at least halves the cost of a direction.

    Per direction, folded: ``samples·h·hidden`` multiply-adds; unfolded: ``d_in·h·hidden`` (the
    weight) plus ``samples·d_in·h`` (its product).  The one-off ``samples·d_in·h·hidden`` equals
    fewer than ``samples`` unfolded directions, which every search exceeds (each of its rows is
    evaluated ``1 + line_search`` times per iteration).  False when the hypernetwork does not
    generate an affine first layer (a CNN target, or personal heads on an affine target), and for
    a front that is not a :class:`~.hypernetwork.ParetoHypernetwork` (the closed form of :mod:`.exact_front`).
    """
    names = FIRST_LAYER.get(spec.kind)
    if not isinstance(hypernet, ParetoHypernetwork) or names is None or names[0] not in hypernet.names:
        return False
    d_in, h = spec.shapes[names[0]]
    width = hypernet.head.in_features
    return 2 * samples * h * width <= d_in * h * width + samples * d_in * h


def after_first(kind: str, pre_t: torch.Tensor, params: dict) -> torch.Tensor:
    """The target's outputs ``(B, n, k)`` from its first layer's pre-activation, transposed: ``pre_t`` ``(B, h, n)``.

    ``params`` holds the later layers' parameters, each either per direction ``(B, *shape)`` or
    one for all ``(*shape)`` (a client's own head).  The outputs are computed as ``(B, k, n)``
    and returned as their transposed view, so a reduction over the ``k`` outputs (the
    cross-entropy's ``logsumexp``) runs along the samples, not over rows of ten values (3.6×
    faster on fashion's ten classes).
    """
    if kind == "mlp":
        out_t = torch.matmul(params["w2"].transpose(-1, -2), torch.relu(pre_t)) + params["b2"].unsqueeze(-1)
        return out_t.transpose(-1, -2)
    return pre_t.transpose(-1, -2)


class FoldedData:
    """One split of every client folded into a frozen hypernetwork's first-layer rows (module docstring).

    The first layer's bias, generated as ``B z(d) + b``, is folded in too: on every sample it adds
    the same ``h`` values, so ``X_c W(d) + 1 b(d)ᵀ = [X_c A + 1 ⊗ B] z(d) + [X_c a + 1 ⊗ b]``, and
    a row's pre-activation is one product with its bias added in the same call (``addmm``).

    Parameters
    ----------
    hypernet : ParetoHypernetwork
        Not trained further while this object is used (the folds are cached per client).
    spec : ModelSpec
        The target; its kind must be in :data:`FIRST_LAYER`.
    split : Padded
        The clients' data; each client's padding rows are left out.
    """

    def __init__(self, hypernet: ParetoHypernetwork, spec: ModelSpec, split: Padded):
        self.hypernet, self.spec, self.split = hypernet, spec, split
        self.weight, self.bias = FIRST_LAYER[spec.kind]
        self._folds: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def client(self, c: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``c``'s fold: ``(hidden, h·n)`` and the constant ``(h·n,)``, ``h``-major; computed on first use."""
        if c not in self._folds:
            n = int(self.split.sizes[c])
            d_in, h = self.spec.shapes[self.weight]
            A, a = self.hypernet.output_rows(self.weight)
            B, b = self.hypernet.output_rows(self.bias)
            width = A.shape[1]
            with torch.no_grad():
                X = self.split.X[c, :n].reshape(n, d_in)
                XA = (X @ A.reshape(d_in, h * width)).reshape(n, h, width).permute(2, 1, 0) + B.T.unsqueeze(-1)
                Xa = (X @ a.reshape(d_in, h)).T + b.unsqueeze(-1)
                self._folds[c] = (XA.reshape(width, h * n).contiguous(), Xa.reshape(h * n).contiguous())
        return self._folds[c]

    def outputs(self, c: int, z: torch.Tensor, later: dict) -> torch.Tensor:
        """The target's outputs on client ``c``'s data for each row of features ``z`` ``(B, hidden)``: ``(B, n, k)``.

        ``later``: the later layers' parameters (:func:`after_first`).
        """
        XA, Xa = self.client(c)
        n = int(self.split.sizes[c])
        pre_t = torch.addmm(Xa, z, XA).reshape(z.shape[0], -1, n)
        return after_first(self.spec.kind, pre_t, later)

    def losses(self, c: int, z: torch.Tensor, later: dict, loss: Callable) -> torch.Tensor:
        """Client ``c``'s mean loss for each row of ``z``: ``(B,)`` (``loss(outputs, y)`` per sample)."""
        n = int(self.split.sizes[c])
        return loss(self.outputs(c, z, later), self.split.y[c, :n]).sum(-1) / n
