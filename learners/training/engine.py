"""One training engine for every client at once (docs/concepts.md §5).

Personalised federated methods keep one model per client (FedAMP, Local,
FedeRiCo) or two (SuPerFed).  Public implementations train them one client
after another in a Python loop; here every client's parameters live in one
*stacked* dict (leading dimension = number of models ``M``) and a local step
for all of them is a single call of ::

    vmap(grad_and_value(loss), in_dims=(0, 0, ..., None, ...))(params, *per_model, *shared)

(``torch.func``), followed by one element-wise optimiser update of the whole
stack.  Clients hold different amounts of data: each epoch every client draws a
permutation of its own samples, batches are padded to a common shape and
carry a mask (the loss is the mean over real samples only), and a client whose
epoch has run out of batches keeps its parameters *and* its optimiser state
unchanged for the remaining steps (``active`` mask) — exactly what a per-client
loop does.

Paths
-----
``"batched"``
    ``vmap`` over the models, in chunks of ``chunk`` models
    (``torch.func.vmap(..., chunk_size=chunk)``; ``None``: all at once).
``"sequential"``
    A Python loop over the models calling the same ``grad_and_value``; the
    reference for tests and benchmarks.  Both paths share the batch plan and
    the optimiser, so they differ only by floating-point rounding.
``"auto"``
    A rule on the shapes of the first call decides, never a timing
    (:func:`coalitions.learners.training.paths.choose`): on CUDA batched, all
    models at once; on the CPU sequential for convolutions over images larger
    than 12×12 pixels (the grouped convolution ``vmap`` makes of them is slow
    there) and batched otherwise.  The choice is recorded
    (:attr:`Engine.choice_`, each estimate's ``config.engine_used``, and the
    checkpoint, so a resumed run keeps it); the same command gives the same
    numbers whatever the machine's load.

Examples
--------
>>> import torch
>>> eng = Engine("cpu", path="batched")
>>> p = {"w": torch.tensor([[1.0], [2.0]])}
>>> g, v = eng.value_and_grad(lambda q, x: (q["w"] * x).sum() ** 2, p, (torch.tensor([[1.0], [3.0]]),))
>>> g["w"].flatten().tolist(), v.tolist()
([2.0, 36.0], [1.0, 36.0])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import numpy as np
import torch
from torch.func import grad_and_value, vmap

from coalitions.learners.training.paths import choose
from coalitions.params import ParameterError, check_param

__all__ = ["Engine", "PATHS", "resolve_device", "Padded", "epoch_plan", "epoch_steps_of", "SGD", "Adam", "make_optimizer",
           "masked_mean", "train_epochs", "flatten", "tree_map", "stack_select"]

PATHS = ("auto", "batched", "sequential")


def resolve_device(device: str = "auto") -> torch.device:
    """``"auto"``: CUDA when available, else the CPU; ``"cuda"`` without a GPU is an error."""
    check_param("device", device, "choice", choices=("auto", "cpu", "cuda"))
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ParameterError("device", "{name} cuda: no CUDA device is available (use {name} cpu or auto)")
    return torch.device(device)


# --------------------------------------------------------------------------- stacked dicts
def tree_map(fn: Callable, *trees: dict) -> dict:
    """Apply ``fn`` key by key to dicts with the same keys."""
    return {k: fn(*(t[k] for t in trees)) for k in trees[0]}


def flatten(params: dict) -> torch.Tensor:
    """Stacked params ``{name: (M, ...)}`` as one ``(M, P)`` matrix (keys in dict order)."""
    return torch.cat([v.reshape(v.shape[0], -1) for v in params.values()], dim=1)


def stack_select(params: dict, index) -> dict:
    """Rows ``index`` of every stacked tensor (gather, e.g. one copy of model ``j`` per pair)."""
    return {k: v[index] for k, v in params.items()}


def masked_mean(per_sample: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``per_sample`` over the real samples (``mask`` 1), 0 when there are none."""
    return (per_sample * mask).sum() / mask.sum().clamp(min=1.0)


# --------------------------------------------------------------------------- data
class Draws(Protocol):
    """What the batch plans read from a random source: ``random(shape)`` uniform on [0, 1).

    A :class:`numpy.random.Generator`, or a Flower site's row of the federation's draws
    (:class:`~coalitions.learners.federated.personal.randomness.SiteGenerator`).
    """

    def random(self, size=None) -> np.ndarray: ...


class Padded:
    """One split of every client, padded to a common length, on a device.

    Attributes
    ----------
    X : tensor (N, n_max, ...)
    y : tensor (N, n_max)
        ``float32`` for regression, ``int64`` class ids otherwise.
    m : tensor (N, n_max)
        1.0 for real samples, 0.0 for padding.
    sizes : ndarray (N,)
    raw_X, raw_y : list of ndarray
        Each client's unpadded features and targets (for the metrics).
    """

    def __init__(self, federation, part: str, device, clients: Sequence[int] | None = None):
        idx = range(federation.n) if clients is None else clients
        splits = [getattr(federation.clients[i], part) for i in idx]
        self.sizes = np.array([len(s) for s in splits], dtype=np.int64)
        n_max = int(self.sizes.max())
        shape = splits[0].X.shape[1:]
        X = np.zeros((len(splits), n_max, *shape), dtype=np.float32)
        y = np.zeros((len(splits), n_max), dtype=splits[0].y.dtype)
        m = np.zeros((len(splits), n_max), dtype=np.float32)
        for j, s in enumerate(splits):
            X[j, :len(s)] = s.X
            y[j, :len(s)] = s.y
            m[j, :len(s)] = 1.0
        self.X = torch.as_tensor(X, device=device)
        self.y = torch.as_tensor(y, device=device)
        self.m = torch.as_tensor(m, device=device)
        self.raw_X = [s.X for s in splits]
        self.raw_y = [s.y for s in splits]

    def __len__(self) -> int:
        return len(self.sizes)

    def sample(self, batch: int | None, rng: Draws, longest: int | None = None):
        """``X, y, m``: ``batch`` samples per client drawn with replacement, or the whole split.

        With ``batch`` of ``None`` or at least the longest split (``longest``: the
        federation's, when these are some of its clients, as at a Flower site), the padded
        split itself (with its mask); otherwise ``batch`` uniform draws from each client's
        own samples (the mask is then all ones).
        """
        if batch is None or batch >= (self.X.shape[1] if longest is None else longest):
            return self.X, self.y, self.m
        draws = np.floor(rng.random((len(self.sizes), batch)) * self.sizes[:, None]).astype(np.int64)
        idx = torch.as_tensor(draws, device=self.X.device)
        rows = torch.arange(len(self.sizes), device=self.X.device)[:, None]
        return self.X[rows, idx], self.y[rows, idx], torch.ones_like(idx, dtype=self.m.dtype)

    def gather(self, idx: torch.Tensor, rows: torch.Tensor | None = None):
        """Samples ``idx`` (K, B) of clients ``rows`` (K,) (default: all, in order): ``X, y``."""
        if rows is None:
            rows = torch.arange(idx.shape[0], device=idx.device)
        return self.X[rows[:, None], idx], self.y[rows[:, None], idx]


def epoch_plan(sizes: np.ndarray, batch_size: int | None, rng: Draws):
    """Minibatches of one local epoch for every client, padded and masked.

    Client ``i`` visits a fresh permutation of its ``n_i`` samples in
    ``ceil(n_i / B)`` batches (the last one possibly short).  The plan has
    ``S = max_i ceil(n_i / B)`` steps; at step ``s`` client ``i`` is *active*
    when ``s < ceil(n_i / B)``.

    Returns
    -------
    idx : ndarray (S, N, B) int64
        Sample indices (0 where padded).
    mask : ndarray (S, N, B) float32
        1 for a real sample.
    active : ndarray (S, N) bool
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    n, n_max = sizes.size, int(sizes.max())
    b = n_max if batch_size is None else int(min(batch_size, n_max))
    keys = rng.random((n, n_max))
    keys[np.arange(n_max)[None, :] >= sizes[:, None]] = 2.0  # padding sorts last
    perm = np.argsort(keys, axis=1, kind="stable")
    steps_i = epoch_steps_of(sizes, batch_size)
    steps = int(steps_i.max())
    full = np.zeros((n, steps * b), dtype=np.int64)
    full[:, :n_max] = perm
    valid = np.arange(steps * b)[None, :] < sizes[:, None]
    full[~valid] = 0
    idx = full.reshape(n, steps, b).transpose(1, 0, 2)
    mask = valid.reshape(n, steps, b).transpose(1, 0, 2).astype(np.float32)
    active = np.arange(steps)[:, None] < steps_i[None, :]
    return np.ascontiguousarray(idx), np.ascontiguousarray(mask), active


def epoch_steps_of(sizes, batch_size: int | None) -> np.ndarray:
    """Each client's minibatch steps in one epoch of :func:`epoch_plan`: ``ceil(n_i / B)``.

    ``B`` is ``batch_size`` capped at the largest client's ``n_max`` (``None``: ``n_max``, one
    full batch); the plan's ``S`` is the largest of these.

    >>> epoch_steps_of([5, 9, 3], 4).tolist()
    [2, 3, 1]
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    n_max = int(sizes.max())
    b = n_max if batch_size is None else int(min(batch_size, n_max))
    return -(-sizes // b)


# --------------------------------------------------------------------------- optimisers
class SGD:
    """Stacked SGD with momentum (PyTorch's update rule).

    With momentum ``b ← μ·b + g`` (``b = g`` on the first step) and
    ``p ← p − lr·b``.  Models whose ``active`` flag is False keep their
    parameters and momentum.  No weight decay: it belongs to the objective,
    on the weights only (:mod:`coalitions.learners.training.decay`, whose
    gradient a caller adds to ``grads``).
    """

    def __init__(self, lr: float, momentum: float = 0.0):
        self.lr, self.momentum = float(lr), float(momentum)

    def init(self, params: dict) -> dict:
        m = next(iter(params.values())).shape[0]
        dev = next(iter(params.values())).device
        state: dict[str, Any] = {"t": torch.zeros(m, dtype=torch.int64, device=dev)}
        if self.momentum:
            state["buf"] = tree_map(torch.zeros_like, params)
        return state

    def step(self, params: dict, grads: dict, state: dict, active: torch.Tensor) -> tuple[dict, dict]:
        new_p, new_buf = {}, {}
        first = state["t"] == 0
        for k, p in params.items():
            a = active.view(-1, *([1] * (p.dim() - 1)))
            g = grads[k]
            if self.momentum:
                f = first.view(-1, *([1] * (p.dim() - 1)))
                b = torch.where(f, g, self.momentum * state["buf"][k] + g)
                new_buf[k] = torch.where(a, b, state["buf"][k])
                g = b
            new_p[k] = torch.where(a, p - self.lr * g, p)
        out = {"t": state["t"] + active.to(torch.int64)}
        if self.momentum:
            out["buf"] = new_buf
        return new_p, out


class Adam:
    """Stacked Adam (Kingma & Ba; PyTorch's defaults ``β = (0.9, 0.999)``, ``ε = 1e-8``).

    Each model has its own step count, so bias correction is exact for clients
    that skipped steps (inactive models keep parameters and moments).  No weight
    decay, as :class:`SGD`.
    """

    def __init__(self, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        self.lr, self.betas, self.eps = float(lr), tuple(betas), float(eps)

    def init(self, params: dict) -> dict:
        m = next(iter(params.values())).shape[0]
        dev = next(iter(params.values())).device
        return {"t": torch.zeros(m, dtype=torch.int64, device=dev),
                "m": tree_map(torch.zeros_like, params), "v": tree_map(torch.zeros_like, params)}

    def step(self, params: dict, grads: dict, state: dict, active: torch.Tensor) -> tuple[dict, dict]:
        b1, b2 = self.betas
        t = state["t"] + active.to(torch.int64)
        tf = t.clamp(min=1).to(next(iter(params.values())).dtype)
        c1, c2 = 1 - b1 ** tf, 1 - b2 ** tf
        new_p, new_m, new_v = {}, {}, {}
        for k, p in params.items():
            shape = (-1, *([1] * (p.dim() - 1)))
            a = active.view(shape)
            g = grads[k]
            m = b1 * state["m"][k] + (1 - b1) * g
            v = b2 * state["v"][k] + (1 - b2) * g * g
            upd = (m / c1.view(shape)) / ((v / c2.view(shape)).sqrt() + self.eps)
            new_p[k] = torch.where(a, p - self.lr * upd, p)
            new_m[k] = torch.where(a, m, state["m"][k])
            new_v[k] = torch.where(a, v, state["v"][k])
        return new_p, {"t": t, "m": new_m, "v": new_v}

    def step_(self, params: dict, grads: dict, state: dict, active: torch.Tensor) -> None:
        """:meth:`step` in place: ``params`` and the moments of ``state`` are overwritten.

        The same floating-point operations in the same order as :meth:`step`, element by element,
        so the same bits (``tests/test_stepper.py``), without the dozen parameter-sized temporaries
        and the three ``where`` passes per parameter that the functional step allocates, and a block
        of models at a time (about :data:`BLOCK` elements, so that the fourteen passes of the update
        stay in the core's cache; ``docs/performance.md``).  A model whose ``active`` flag is False is left untouched
        (the active rows are updated on a copy and written back).  ``params`` must not be tensors
        that autograd tracks (pass ``detach()``-ed views).
        """
        b1, b2 = self.betas
        t = state["t"] = state["t"] + active.to(torch.int64)
        tf = t.clamp(min=1).to(next(iter(params.values())).dtype)
        c1, c2 = 1 - b1 ** tf, 1 - b2 ** tf
        rows = None if bool(active.all()) else active.nonzero().flatten()
        if rows is not None:
            if rows.numel() == 0:
                return
            c1, c2 = c1[rows], c2[rows]
        for k, p_all in params.items():
            m_all, v_all, g = state["m"][k], state["v"][k], grads[k]
            p, m, v = (p_all, m_all, v_all) if rows is None else (p_all[rows], m_all[rows], v_all[rows])
            if rows is not None:
                g = g[rows]
            shape = (-1, *([1] * (p.dim() - 1)))
            # blocks along the axis whose slices are contiguous in memory: the models (axis 0), or
            # the input axis of a product-major first layer (models.stack_init)
            axis = max(range(p.dim()), key=p.stride)
            size = p.shape[axis]
            per = max(1, BLOCK // max(1, p.numel() // max(1, size)))
            for s in range(0, size, per):
                pb, mb, vb, gb = (x.narrow(axis, s, min(per, size - s)) for x in (p, m, v, g))
                cb1, cb2 = (c1, c2) if axis else (c1[s:s + per], c2[s:s + per])
                mb.mul_(b1).add_(torch.mul(gb, 1 - b1))                 # b1·m + (1 − b1)·g
                vb.mul_(b2).add_(torch.mul(gb, 1 - b2).mul_(gb))        # b2·v + (1 − b2)·g·g
                den = torch.div(vb, cb2.view(shape)).sqrt_().add_(self.eps)
                pb.sub_(torch.div(mb, cb1.view(shape)).div_(den).mul_(self.lr))
            if rows is not None:
                p_all.index_copy_(0, rows, p)
                m_all.index_copy_(0, rows, m)
                v_all.index_copy_(0, rows, v)


#: Elements per block of :meth:`Adam.step_`: 256 Ki float32, 1 MiB a tensor, so that the update's
#: half-dozen live tensors stay in a core's share of the last-level cache while Python's per-call
#: overhead stays small.  On this 2-core EPYC (1 MiB L2, 32 MiB L3), one step on a 40 × 784 × 32
#: parameter, best of 20 (several runs, quiet machine): whole tensor 3.9–8.7 ms (it varies with what
#: else holds the L3), 2^20 2.7–7.4, 2^18 2.5–3.3, 2^17 2.6–3.0, 2^16 4.1–4.8 ms.
#: ``python benchmarks/adam_blocks.py`` times the whole tensor against this block.
BLOCK = 1 << 18


def make_optimizer(name: str, lr: float, momentum: float = 0.0, params: Iterable[torch.Tensor] | None = None,
                   fused: bool = False):
    """The one place an optimiser is built: ``"sgd"`` (with ``momentum``) or ``"adam"``.

    Parameters
    ----------
    name : {"sgd", "adam"}
    lr : float
        The learning rate (the peak rate under a schedule: :func:`make_schedule`,
        :class:`~coalitions.learners.training.protocol.Scheduled`).
    momentum : float
        SGD's momentum (Adam has none).
    params : iterable of torch.Tensor, optional
        ``None``: the stacked optimiser of this module (:class:`SGD`, :class:`Adam`), one
        state per model of a stacked dict.  Given: PyTorch's optimiser of the same rule
        over these tensors (a network trained as one, whose ``.grad`` autograd fills: SPO's
        hypernetwork, the protocol-less subset trainers).  Neither decays: weight decay
        belongs to the objective (:mod:`coalitions.learners.training.decay`).
    fused : bool
        With ``params`` and Adam: PyTorch's fused kernel (one pass over the parameters per
        step) where it has one, else its default Adam.  The fused kernel computes the same
        update, rounded differently in the last bit (as does the stacked :class:`Adam`, whose
        operations are PyTorch's in another order), so each trainer keeps the form it has.
    """
    check_param("optimizer", name, "choice", choices=("sgd", "adam"))
    if params is not None:
        params = list(params)
        if name == "sgd":
            return torch.optim.SGD(params, lr=lr, momentum=momentum)
        if fused:
            try:
                return torch.optim.Adam(params, lr=lr, fused=True)
            except (RuntimeError, TypeError, ValueError):   # an older PyTorch, or a device without the kernel
                pass
        return torch.optim.Adam(params, lr=lr)
    if name == "sgd":
        return SGD(lr, momentum)
    return Adam(lr)



# --------------------------------------------------------------------------- the engine
def _slice(args, i):
    return tuple({k: v[i] for k, v in a.items()} if isinstance(a, dict) else a[i] for a in args)


class Engine:
    """Evaluate a per-model function (and its gradient) for ``M`` stacked models.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda"} or torch.device
    path : {"auto", "batched", "sequential"}
        See the module docstring.
    chunk : int or None
        Models per ``vmap`` call on the batched path (``None``: all).

    Attributes
    ----------
    device_ : torch.device
    choice_ : tuple (path, chunk) or None
        The path in use (``None`` until the first call on ``"auto"``).
    """

    def __init__(self, device="auto", path: str = "auto", chunk: int | None = None):
        check_param("path", path, "choice", choices=PATHS)
        check_param("chunk", chunk, "int", low=1, allow_none=True)
        self.device_ = device if isinstance(device, torch.device) else resolve_device(device)
        self.path = path
        self.chunk = None if chunk is None else int(chunk)
        self.choice_: tuple[str, int | None] | None = None
        if path == "sequential":
            self.choice_ = ("sequential", None)
        elif path == "batched" or self.device_.type != "cpu":
            self.choice_ = ("batched", self.chunk)

    @property
    def label(self) -> str:
        """``"sequential"``, ``"batched"`` or ``"batched[chunk]"`` (``"auto"`` before the first call)."""
        return "auto" if self.choice_ is None else _label(self.choice_)

    # -- the two primitives
    def value_and_grad(self, fn: Callable, params: dict, args: tuple = (), shared: tuple = (),
                       active: torch.Tensor | None = None):
        """Gradients and values of ``fn(p_i, *args_i, *shared)`` for every model ``i``.

        ``params`` and every tensor of ``args`` have leading dimension ``M``;
        ``shared`` is passed whole to every model.  Returns ``(grads, values)``
        with ``grads`` stacked like ``params`` and ``values`` of shape ``(M,)``.
        ``active`` (bool, ``(M,)``) lets the sequential path skip models whose
        result is not used (their gradient and value are returned as zeros);
        the batched path computes every model regardless.
        """
        self._ensure_choice(params, args)
        return self._run(fn, params, args, shared, True, self.choice_, active)

    def map(self, fn: Callable, params: dict, args: tuple = (), shared: tuple = ()):
        """``fn(p_i, *args_i, *shared)`` for every model, without gradients, stacked."""
        self._ensure_choice(params, args)
        with torch.no_grad():
            return self._run(fn, params, args, shared, False, self.choice_)

    def _run(self, fn, params, args, shared, grad: bool, choice, active=None):
        path, chunk = choice
        g = grad_and_value(fn) if grad else fn
        m = next(iter(params.values())).shape[0]
        if path == "batched":
            in_dims = (0,) + (0,) * len(args) + (None,) * len(shared)
            chunk = None if chunk is None or chunk >= m else chunk
            return vmap(g, in_dims=in_dims, chunk_size=chunk)(params, *args, *shared)
        if not grad:
            return _stack_tree([fn({k: v[i] for k, v in params.items()}, *_slice(args, i), *shared)
                                for i in range(m)])
        use = [True] * m if active is None else active.tolist()
        grads = {k: torch.zeros_like(v) for k, v in params.items()}
        values: list[torch.Tensor | None] = [None] * m
        for i in range(m):
            if not use[i]:
                continue
            gi, vi = g({k: v[i] for k, v in params.items()}, *_slice(args, i), *shared)
            for k in grads:
                grads[k][i] = gi[k]
            values[i] = vi
        ref = next(v for v in values if v is not None) if any(use) else torch.zeros(())
        stacked = torch.stack([torch.zeros_like(ref) if v is None else v for v in values])
        return grads, stacked

    # -- the path on "auto": a rule on shapes (paths.py), decided once
    def _ensure_choice(self, params, args) -> None:
        if self.choice_ is None:
            path, chunk = choose(self.device_, params, args)
            self.choice_ = (path, self.chunk if path == "batched" else chunk)


def _label(choice) -> str:
    path, chunk = choice
    return path if chunk is None or path == "sequential" else f"{path}[{chunk}]"


def _stack_tree(outs):
    first = outs[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(outs)
    if isinstance(first, dict):
        return {k: torch.stack([o[k] for o in outs]) for k in first}
    if isinstance(first, tuple):
        return tuple(_stack_tree([o[i] for o in outs]) for i in range(len(first)))
    raise TypeError(f"cannot stack outputs of type {type(first).__name__}")


# --------------------------------------------------------------------------- local training
def train_epochs(engine: Engine, loss: Callable, params: dict, optimizer, opt_state: dict, data: Padded,
                 epochs: int, batch_size: int | None, rng: Draws, args: tuple = (),
                 step_args: Callable | None = None, shared: tuple = (), enabled: torch.Tensor | None = None,
                 epoch_steps: int | None = None):
    """Local training of every model on its own client's data, all models per step.

    Model ``i`` trains on client ``i`` of ``data`` with
    ``loss(p_i, X_b, y_b, m_b, *args_i, *step_args(s)_i, *shared) -> scalar``
    where ``(X_b, y_b, m_b)`` is the client's padded minibatch.

    Parameters
    ----------
    epochs : int
        Local epochs; each is one pass over every client's data (:func:`epoch_plan`).
    step_args : callable, optional
        ``step_args(step) -> tuple`` of per-model tensors drawn for each step
        (e.g. SuPerFed's mixing coefficient); ``step`` counts over all epochs.
    enabled : bool tensor (M,), optional
        Models that train at all this round (others keep parameters and state).
    epoch_steps : int, optional
        The steps of one epoch of the whole federation.  In process every step of the stack
        advances a schedule's step counter (``opt_state["schedule_step"]``,
        :class:`~coalitions.learners.training.protocol.Scheduled`), a client whose data ran out
        included; a Flower site training its own data alone passes the federation's epoch length,
        and its counter is moved on by the steps it did not take, so that its next step runs at the
        rate it runs at in process.

    Returns
    -------
    params, opt_state, mean_loss : dict, dict, ndarray (M,)
        ``mean_loss`` is each model's mean minibatch loss over its active steps.
    """
    dev = next(iter(params.values())).device
    m = len(data)
    total = torch.zeros(m, dtype=torch.float64, device=dev)
    count = torch.zeros(m, dtype=torch.float64, device=dev)
    step = 0
    for _ in range(int(epochs)):
        idx, mask, active = epoch_plan(data.sizes, batch_size, rng)
        for s in range(idx.shape[0]):
            X, y = data.gather(torch.as_tensor(idx[s], device=dev))
            mb = torch.as_tensor(mask[s], device=dev)
            act = torch.as_tensor(active[s], device=dev)
            if enabled is not None:
                act = act & enabled
            extra = step_args(step) if step_args is not None else ()
            grads, values = engine.value_and_grad(loss, params, (X, y, mb, *args, *extra), shared, active=act)
            params, opt_state = optimizer.step(params, grads, opt_state, act)
            total += torch.where(act, values.detach().to(torch.float64), torch.zeros_like(total))
            count += act.to(torch.float64)
            step += 1
        opt_state = skip_schedule(opt_state, epoch_steps, idx.shape[0])
    return params, opt_state, (total / count.clamp(min=1)).cpu().numpy()


def skip_schedule(opt_state: dict, epoch_steps: int | None, taken: int) -> dict:
    """``opt_state`` with its schedule counter moved on by the ``epoch_steps − taken`` steps of an epoch not taken.

    A Flower site trains its own data alone (``taken`` steps an epoch); in process the stack takes
    the federation's ``epoch_steps`` and each advances the protocol's schedule
    (:class:`~coalitions.learners.training.protocol.Scheduled`).  Unchanged without a schedule
    counter, without ``epoch_steps``, or when nothing was skipped.
    """
    if epoch_steps is None or "schedule_step" not in opt_state or taken >= int(epoch_steps):
        return opt_state
    return {**opt_state, "schedule_step": opt_state["schedule_step"] + (int(epoch_steps) - int(taken))}
