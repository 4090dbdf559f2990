"""Functional models that train many copies at once (docs/concepts.md §5).

A :class:`ModelSpec` holds a model as a pure function ``forward(params, X)`` of
a parameter dict, plus ``init(generator, n_models)`` drawing a dict of
*stacked* parameters (leading dimension ``n_models``).  Many models then run as
``torch.func.vmap(spec.forward, in_dims=(0, None))(stacked, X)`` — one batched
call for all copies, no Python loop over models.  :meth:`ModelSpec.module`
gives an equivalent ``torch.nn.Module`` whose ``state_dict`` keys are the
parameter names, so ``torch.func.functional_call(spec.module(), params, (X,))``
computes the same outputs.

Kinds (``make_model``):

* ``"linear"``, ``"logistic"``: one affine map ``X.flatten() @ W + b``; the
  loss (squared error, cross-entropy) comes from the task, so they differ only
  in name.
* ``"mlp"``: affine, ReLU, affine (``hidden`` units, default 64).
* ``"cnn"``: for images ``(C, H, W)``: two 3×3 convolutions (16, 32 channels,
  padding 1) each followed by ReLU and 2×2 max-pooling, then an affine head.

Personal heads (FedPer's split, Arivazhagan et al. 2019).  Every model has a *body* and a
*head*: the head is its output layer (``ModelSpec.head``: ``weight, bias`` of the affine
models, ``w2, b2`` of the MLP, ``w, b`` of the CNN), the body everything before it
(:meth:`ModelSpec.body`; empty for the affine models, whose only layer is the output layer).
A federated method that averages the body and keeps each client's head (FedPer), or the
reverse (LG-FedAvg), selects the parameters by these names (:func:`split_params`,
:func:`merge_params`) on the stacked dicts the engine trains.  :func:`with_heads` turns a model
into one body with ``K`` heads — ``forward_head(params, X, k)`` — the model one subset trains
when its members share features but each keeps its own output layer.  For many such models at
once (the exhaustive oracle's personal-head game, ``learners/exact.py``),
:func:`personal_init` stacks one head per client behind each body and
:func:`stacked_personal_forward` runs every model on data grouped by client, each sample through
its own client's head: the body's :func:`features` once per model, then one batched product per
client.

Initialisation is PyTorch's default for ``nn.Linear`` / ``nn.Conv2d``: every
weight and bias ``~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, drawn from the given
``torch.Generator`` so a seed fixes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from coalitions.errors import InputError
from coalitions.params import check_param

__all__ = ["ModelSpec", "check_trainable", "TRAINED_PARAM_BYTES", "make_model", "KINDS", "stacked_forward",
           "split_params", "merge_params", "HeadsSpec", "with_heads", "features", "stacked_personal_forward", "member_personal_outputs", "personal_init"]

KINDS = ("linear", "logistic", "mlp", "cnn")


@dataclass(frozen=True)
class ModelSpec:
    """A functional model: parameter shapes, fan-ins, and a forward function.

    Attributes
    ----------
    kind : str
    input_shape : tuple of int
    n_outputs : int
    shapes : dict
        Parameter name -> shape of one model's tensor.
    fan_in : dict
        Parameter name -> fan-in used by the initialisation bound.
    forward : callable
        ``forward(params, X) -> (n, n_outputs)`` for one model's params.
    stacked : callable or None
        ``stacked(params, X) -> (M, n, n_outputs)`` for stacked params and a
        shared ``X``, written with batched matrix products; equal to
        ``vmap(forward, in_dims=(0, None))`` and several times faster for the
        affine and MLP models (vmap of ``X @ W`` with an unbatched ``X``
        falls back to slower batched kernels).  ``None``: use vmap.
    head : tuple of str
        The output layer's parameter names (the rest is the body).
    """

    kind: str
    input_shape: tuple
    n_outputs: int
    shapes: dict
    fan_in: dict
    forward: Callable
    stacked: Callable | None = None
    head: tuple = ()

    @property
    def body(self) -> tuple:
        """The parameter names before the output layer, in order (empty for the affine models)."""
        return tuple(k for k in self.shapes if k not in self.head)

    def init(self, generator: torch.Generator | None, n_models: int, dtype=torch.float32,
             device="cpu") -> dict:
        """Stacked parameters for ``n_models`` models, each ``~ U(±1/sqrt(fan_in))``.

        Raises :class:`~coalitions.errors.InputError` before drawing when they do not fit in memory.
        """
        _check_room(self.shapes, n_models, self.kind)
        out = {}
        for name, shape in self.shapes.items():
            bound = 1.0 / math.sqrt(self.fan_in[name])
            u = torch.rand((n_models, *shape), generator=generator, dtype=torch.float64)
            out[name] = ((2 * u - 1) * bound).to(dtype=dtype, device=device)
        return out

    @property
    def n_params(self) -> int:
        """Parameters of one model."""
        return sum(math.prod(s) for s in self.shapes.values())

    def module(self) -> torch.nn.Module:
        """An ``nn.Module`` computing ``forward`` (for ``torch.func.functional_call``)."""
        return _Module(self)


#: Bytes a trained float32 parameter holds: itself, its gradient and Adam's two moments.
TRAINED_PARAM_BYTES = 16


def check_trainable(n_params: int, what: str) -> None:
    """Refuse, before building it, a network of ``n_params`` parameters that cannot be trained in memory.

    ``what`` names it and the options that sized it, for the one-line message
    (:func:`coalitions.resources.check_memory`); each parameter costs
    :data:`TRAINED_PARAM_BYTES`.
    """
    from coalitions.resources import check_memory

    check_memory(TRAINED_PARAM_BYTES * int(n_params), f"{what} of {int(n_params):,} parameters")


def _check_room(shapes: dict, n_models: int, kind: str) -> None:
    """Refuse, before drawing, ``n_models`` models of ``shapes`` that do not fit in memory.

    The draw holds each parameter in float64 beside its float32 copy: 12 bytes a value.
    """
    from coalitions.resources import check_memory

    per_model = sum(math.prod(s) for s in shapes.values())
    check_memory(12 * int(n_models) * per_model,
                 f"{int(n_models):,} {kind} model{'s' if n_models != 1 else ''} of {per_model:,} parameters")


class _Module(torch.nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self._spec = spec
        for name, shape in spec.shapes.items():
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(shape)))

    def forward(self, X):
        return self._spec.forward({n: getattr(self, n) for n in self._spec.shapes}, X)


def stacked_forward(spec: ModelSpec, params: dict, X: torch.Tensor) -> torch.Tensor:
    """Outputs of every stacked model on the same ``X``: shape ``(M, n, n_outputs)``.

    Uses the model's hand-batched ``stacked`` function when it has one, else
    ``torch.func.vmap(spec.forward, in_dims=(0, None))``.
    """
    if spec.stacked is not None:
        return spec.stacked(params, X)
    return torch.func.vmap(spec.forward, in_dims=(0, None))(params, X)


def _affine_stacked(params, X):
    # (n, d) x (M, d, k) -> (M, n, k) as one (n, d) @ (d, M·k) product
    W = params["weight"]
    M, d, k = W.shape
    out = X.flatten(1) @ W.permute(1, 0, 2).reshape(d, M * k)
    return out.reshape(-1, M, k).transpose(0, 1) + params["bias"][:, None, :]


def _mlp_stacked(params, X):
    W1 = params["w1"]
    M, d, h = W1.shape
    hid = (X.flatten(1) @ W1.permute(1, 0, 2).reshape(d, M * h)).reshape(-1, M, h).transpose(0, 1)
    hid = torch.relu(hid + params["b1"][:, None, :])
    return torch.bmm(hid, params["w2"]) + params["b2"][:, None, :]


def _affine(params, X):
    return X.flatten(1) @ params["weight"] + params["bias"]


def _mlp(params, X):
    h = torch.relu(X.flatten(1) @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def _cnn(params, X):
    h = F.max_pool2d(torch.relu(F.conv2d(X, params["c1"], params["cb1"], padding=1)), 2)
    h = F.max_pool2d(torch.relu(F.conv2d(h, params["c2"], params["cb2"], padding=1)), 2)
    return h.flatten(1) @ params["w"] + params["b"]


def make_model(kind: str, input_shape, n_outputs: int, hidden: int = 64, channels=(16, 32)) -> ModelSpec:
    """The functional model ``kind`` for inputs of ``input_shape`` and ``n_outputs`` outputs.

    Raises
    ------
    InputError
        For an unknown kind, or ``"cnn"`` on inputs that are not ``(C, H, W)``
        images of at least 4×4 pixels.
    """
    shape = tuple(int(s) for s in input_shape)
    d = math.prod(shape)
    k = int(n_outputs)
    if kind in ("linear", "logistic"):
        return ModelSpec(kind, shape, k, {"weight": (d, k), "bias": (k,)}, {"weight": d, "bias": d}, _affine,
                         _affine_stacked, ("weight", "bias"))
    if kind == "mlp":
        check_param("hidden", hidden, "int", low=1)
        h = int(hidden)
        return ModelSpec(kind, shape, k, {"w1": (d, h), "b1": (h,), "w2": (h, k), "b2": (k,)},
                         {"w1": d, "b1": d, "w2": h, "b2": h}, _mlp, _mlp_stacked, ("w2", "b2"))
    if kind == "cnn":
        if len(shape) != 3 or shape[1] < 4 or shape[2] < 4:
            raise InputError(f"model 'cnn' needs image inputs (C, H, W) of at least 4x4, got {shape}")
        c, hgt, wid = shape
        c1, c2 = (int(x) for x in channels)
        flat = c2 * (hgt // 2 // 2) * (wid // 2 // 2)
        shapes = {"c1": (c1, c, 3, 3), "cb1": (c1,), "c2": (c2, c1, 3, 3), "cb2": (c2,),
                  "w": (flat, k), "b": (k,)}
        fan = {"c1": c * 9, "cb1": c * 9, "c2": c1 * 9, "cb2": c1 * 9, "w": flat, "b": flat}
        return ModelSpec(kind, shape, k, shapes, fan, _cnn, None, ("w", "b"))
    raise InputError(f"unknown model {kind!r}: choose one of {', '.join(KINDS)}")


# --------------------------------------------------------------------------- personal heads
def split_params(spec: ModelSpec, params: dict) -> tuple[dict, dict]:
    """``(body, head)``: the parameters of ``params`` (stacked or not) in ``spec.body`` and in ``spec.head``."""
    return ({k: v for k, v in params.items() if k not in spec.head},
            {k: v for k, v in params.items() if k in spec.head})


def merge_params(spec: ModelSpec, body: dict, head: dict) -> dict:
    """One parameter dict in ``spec``'s order from a body part and a head part (inverse of :func:`split_params`)."""
    both = {**body, **head}
    return {k: both[k] for k in spec.shapes}


@dataclass(frozen=True)
class HeadsSpec:
    """One body and ``heads`` output layers (FedPer's split inside a single model).

    The parameters are the body's as in ``base`` and each head parameter with an extra
    leading dimension ``heads``: ``{"w1": (d, h), ..., "w2": (K, h, k), "b2": (K, k)}``.
    :meth:`forward_head` ``(params, X, j)`` is ``base.forward`` with head ``j``, so a subset
    ``S`` trains one body and a head per member by summing the members' losses, each through
    its own head.  Stacked over models (leading dimension ``M``) like every spec here.
    """

    base: ModelSpec
    heads: int

    @property
    def shapes(self) -> dict:
        return {k: ((self.heads, *s) if k in self.base.head else s) for k, s in self.base.shapes.items()}

    def init(self, generator: torch.Generator | None, n_models: int, dtype=torch.float32, device="cpu") -> dict:
        """Stacked parameters: every head drawn like ``base``'s output layer (PyTorch's default bounds)."""
        _check_room(self.shapes, n_models, self.base.kind)
        out = {}
        for name, shape in self.shapes.items():
            bound = 1.0 / math.sqrt(self.base.fan_in[name])
            u = torch.rand((n_models, *shape), generator=generator, dtype=torch.float64)
            out[name] = ((2 * u - 1) * bound).to(dtype=dtype, device=device)
        return out

    def member(self, params: dict, j) -> dict:
        """The ordinary model (``base``'s parameters) of head ``j`` of one multi-head model."""
        return {k: (v[j] if k in self.base.head else v) for k, v in params.items()}

    def forward_head(self, params: dict, X: torch.Tensor, j) -> torch.Tensor:
        """Outputs of the body followed by head ``j`` (``j`` an int or a 0-d integer tensor)."""
        return self.base.forward(self.member(params, j), X)


def with_heads(spec: ModelSpec, heads: int) -> HeadsSpec:
    """``spec`` with ``heads`` output layers on one shared body (see :class:`HeadsSpec`)."""
    check_param("heads", heads, "int", low=1)
    return HeadsSpec(spec, int(heads))


# --------------------------------------------------------------------------- one head per client, many models
def features(spec: ModelSpec, params: dict, X: torch.Tensor) -> torch.Tensor:
    """The body's output of one model (the input to its output layer): ``(n, f)``.

    Affine models have no body: their features are the flattened input.
    """
    if spec.kind == "mlp":
        return torch.relu(X.flatten(1) @ params["w1"] + params["b1"])
    if spec.kind == "cnn":
        h = F.max_pool2d(torch.relu(F.conv2d(X, params["c1"], params["cb1"], padding=1)), 2)
        h = F.max_pool2d(torch.relu(F.conv2d(h, params["c2"], params["cb2"], padding=1)), 2)
        return h.flatten(1)
    return X.flatten(1)


def _stacked_features(spec: ModelSpec, params: dict, X: torch.Tensor, rows=None) -> torch.Tensor:
    """:func:`features` of every stacked model, ``(M, n, f)`` (MLP by one matrix product, CNN by vmap).

    ``rows`` (an index tensor): only those models, ``(len(rows), n, f)``; the MLP's first layer is
    then gathered in its product-major layout (one copy).
    """
    if spec.kind == "mlp":
        W1, b1 = params["w1"].permute(1, 0, 2), params["b1"]     # (d, M, h): product-major (stack_init)
        if rows is not None:   # index_select: an order of magnitude faster than W1[:, rows] on this layout
            W1, b1 = W1.index_select(1, rows), b1.index_select(0, rows)
        d, M, h = W1.shape
        hid = (X.flatten(1) @ W1.reshape(d, M * h)).reshape(-1, M, h).transpose(0, 1)
        return torch.relu(hid + b1[:, None, :])
    body = {k: (params[k] if rows is None else params[k][rows]) for k in spec.body}
    return torch.func.vmap(lambda p: features(spec, p, X))(body)


def product_major(spec: ModelSpec) -> tuple[str, ...]:
    """The stacked parameters read by one ``(n, d) @ (d, M·k)`` product: the first layer's weight.

    :func:`_affine_stacked` and :func:`_stacked_features` multiply the data by every stacked
    model's first layer at once; :func:`stack_init` lays these weights out product-major.
    """
    return {"mlp": ("w1",), "linear": ("weight",), "logistic": ("weight",)}.get(spec.kind, ())


def stack_init(init: dict, models: int, product: tuple[str, ...] = ()) -> dict:
    """``models`` copies of one model's parameters on a new leading axis, as leaves autograd tracks.

    Each parameter ``p`` becomes ``(M, *p.shape)``.  A name in ``product`` (a ``(d, k)`` weight,
    :func:`product_major`) is laid out product-major: its memory is ``(d, M, k)`` and the stacked
    ``(M, d, k)`` tensor a view of it, so that the one ``(n, d) @ (d, M·k)`` product of all models
    reads it where it lies instead of copying it every step.  The values, and every
    result computed from them, are the same bits in either layout.

    >>> import torch
    >>> w = stack_init({"w1": torch.arange(6.0).reshape(3, 2)}, 4, ("w1",))["w1"]
    >>> w.shape, w.permute(1, 0, 2).is_contiguous(), bool((w == torch.arange(6.0).reshape(3, 2)).all())
    (torch.Size([4, 3, 2]), True, True)
    """
    out = {}
    for k, v in init.items():
        v = v.detach()
        if k in product and v.dim() == 2:
            out[k] = v.unsqueeze(1).repeat(1, int(models), 1).permute(1, 0, 2).requires_grad_(True)
        else:
            out[k] = v.unsqueeze(0).repeat((int(models),) + (1,) * v.dim()).requires_grad_(True)
    return out


def personal_init(spec: ModelSpec, init: dict, clients: int) -> dict:
    """One model's parameters with each head parameter repeated ``clients`` times (leading axis).

    Every client's head starts at the model's own initial output layer, so a
    one-member model starts exactly where the ordinary model would.
    """
    check_param("clients", clients, "int", low=1)
    return {k: (v.unsqueeze(0).repeat((int(clients),) + (1,) * v.dim()) if k in spec.head else v)
            for k, v in init.items()}


def stacked_personal_forward(spec: ModelSpec, params: dict, X: torch.Tensor, counts) -> torch.Tensor:
    r"""Outputs ``(M, n, n_outputs)`` of ``M`` personal-head models on data grouped by client.

    ``params`` holds the body stacked ``(M, ...)`` and each head parameter
    stacked ``(M, N, ...)`` (:func:`personal_init`); ``X``'s rows are client
    0's ``counts[0]`` samples, then client 1's, and so on.  Sample ``s`` of client
    ``i`` goes through the body of model ``m`` and client ``i``'s head:
    ``out[m, s] = φ_m(x_s) W_{m,i} + b_{m,i}`` with ``φ`` the body's
    :func:`features` (the flattened input for the bodyless affine models, whose
    head is the whole model).  One batched product per client, never a loop
    over models.
    """
    wname, bname = spec.head
    counts = [int(c) for c in counts]
    # One unbind and one split, not a slice per client: a slice's backward writes its gradient into a
    # zero tensor of the whole input and autograd adds the N of them, N² traffic per step;
    # unbind's and split's backward place every client's gradient once (the same values)
    W, b = params[wname].unbind(1), params[bname].unbind(1)
    if not spec.body:
        parts = X.split(counts, dim=0)
    else:
        parts = _stacked_features(spec, params, X).split(counts, dim=1)
    outs = []
    for i, c in enumerate(counts):
        if c:
            if not spec.body:
                out = _affine_stacked({"weight": W[i], "bias": b[i]}, parts[i])
            else:
                out = torch.bmm(parts[i], W[i]) + b[i][:, None, :]
            outs.append(out)
    if not outs:
        return X.new_zeros((params[wname].shape[0], 0, spec.n_outputs))
    return torch.cat(outs, dim=1)


def member_personal_outputs(spec: ModelSpec, params: dict, X: torch.Tensor, counts, members) -> list:
    r"""Each client's outputs under the stacked personal-head models it is a member of.

    ``X``, ``counts`` and ``params`` as in :func:`stacked_personal_forward`; ``members[i]`` an index
    tensor of the models that hold client ``i``.  Item ``i`` is ``(len(members[i]), counts[i],
    n_outputs)``: client ``i``'s samples through those models' bodies and their head ``i``
    (``None`` when either is empty), the values :func:`stacked_personal_forward` gives those rows,
    without the products of the models ``i`` is not in (half the work of a subset game's
    validation, where each client is in half the subsets).  The products run over client ``i``'s
    rows alone, which BLAS may round differently in the last bit than the whole batch (on the
    Fashion-MNIST game they gave the same bits: ``docs/performance.md``).
    """
    wname, bname = spec.head
    counts = [int(c) for c in counts]
    outs: list = []
    for i, (rows, part) in enumerate(zip(members, X.split(counts, dim=0), strict=True)):
        if not len(rows) or not counts[i]:
            outs.append(None)
            continue
        W, b = params[wname].select(1, i).index_select(0, rows), params[bname].select(1, i).index_select(0, rows)
        if not spec.body:
            outs.append(_affine_stacked({"weight": W, "bias": b}, part))
        else:
            outs.append(torch.bmm(_stacked_features(spec, params, part, rows), W) + b[:, None, :])
    return outs
