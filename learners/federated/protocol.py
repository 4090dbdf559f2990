"""FedAvg within every coalition: the training protocol of the federated game.

The exact game (docs/concepts.md §1, §5) needs, for every coalition ``S``, a model trained
on the data of ``S`` and its metric on each member's validation data.  Where
the data may not leave the sites, ``S``'s model is trained by federated
averaging (McMahan et al. 2017) among ``S``'s members only, with the protocol
of the toolkit's ``fedavg`` learner (:class:`coalitions.learners.methods.baselines.FedAvg`):

* every coalition model starts from the same initial parameters, drawn from
  ``torch.Generator().manual_seed(seed)`` (PyTorch's default initialisation,
  :func:`coalitions.learners.training.models.make_model`);
* in round ``r`` member ``i`` of ``S`` starts from ``w_S``, runs
  ``local_epochs`` epochs of a *fresh* optimiser (SGD with momentum or Adam,
  weight decay on every parameter) on its training data, minimising the mean
  per-sample loss of each minibatch, and returns ``w_S^i``;
* the server averages ``w_S ← Σ_{i∈S} n_i w_S^i / Σ_{i∈S} n_i`` (``n_i``
  training samples of ``i``);
* after ``rounds`` rounds ``v_i(S)`` is the metric of ``w_S`` on ``i``'s
  validation split (the test split is scored alongside, for reporting).

A site serves every coalition it belongs to at once: the ``2^{N-1}`` models of
its coalitions are stacked (leading dimension = coalition) and trained in one
batched step per minibatch, all on the same minibatches.  The minibatch order
of site ``i`` in round ``r`` comes from ``numpy.random.default_rng([seed, r, i])``
(:func:`coalitions.learners.training.engine.epoch_plan`), so it does not depend
on which coalitions are trained together, where the site's process runs, or
whether the run was resumed.  Hence the federated game
(:mod:`coalitions.learners.federated.server`) and :func:`inprocess_game`, the
in-process reference that calls the same :func:`local_round` and
:func:`aggregate` without any network, compute the same models.

References
----------
McMahan, Moore, Ramage, Hampson, Agüera y Arcas (2017), *Communication-efficient
learning of deep networks from decentralized data*, AISTATS.
Mohri et al. / the CE paper (Cui et al. 2022, §6): an impartial third party
learns the benefit graph without direct access to the data; docs/federated.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from coalitions.errors import InputError

__all__ = ["Protocol", "coalition_masks", "site_masks", "initial_params", "local_round", "aggregate",
           "evaluate_models", "inprocess_game", "payload_bytes"]


@dataclass(frozen=True)
class Protocol:
    """Settings of FedAvg within each coalition (defaults: the ``fedavg`` learner's).

    Parameters
    ----------
    model : {"linear", "logistic", "mlp"} or None
        ``None``: linear for regression, logistic otherwise.
    hidden : int
        MLP hidden units.
    rounds : int
        Communication rounds (>= 1).
    local_epochs : int
        Passes over a site's training data per round.
    batch_size : int or None
        Minibatch size (``None``: full batch).
    optimizer : {"sgd", "adam"}
    lr, momentum, weight_decay : float
    seed : int
        Seeds the initial parameters and every site's minibatch order.
    """

    model: str | None = None
    hidden: int = 64
    rounds: int = 50
    local_epochs: int = 1
    batch_size: int | None = 32
    optimizer: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 0.0
    seed: int = 0

    def __post_init__(self):
        def integer(name, lo, allow_none=False):
            v = getattr(self, name)
            if allow_none and v is None:
                return
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise InputError(f"--{name.replace('_', '-')} must be an integer >= {lo}, got {v!r}")

        integer("rounds", 1)
        integer("local_epochs", 1)
        integer("hidden", 1)
        integer("seed", 0)
        integer("batch_size", 1, allow_none=True)
        for name, strict in (("lr", True), ("momentum", False), ("weight_decay", False)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 \
                    or (strict and v == 0):
                raise InputError(f"--{name.replace('_', '-')} must be a number {'>' if strict else '>='} 0, "
                                 f"got {v!r}")
        if self.momentum >= 1:
            raise InputError(f"--momentum must be below 1, got {self.momentum!r}")
        if self.model is not None and self.model not in ("linear", "logistic", "mlp"):
            raise InputError(f"--model must be linear, logistic or mlp, got {self.model!r}")
        if self.optimizer not in ("sgd", "adam"):
            raise InputError(f"--optimizer must be sgd or adam, got {self.optimizer!r}")

    def to_dict(self) -> dict:
        """JSON-ready settings (the game's provenance)."""
        return asdict(self)

    def model_kind(self, task: str) -> str:
        """The model trained for ``task``."""
        if self.model is None:
            from coalitions.learners.methods.base import default_kind

            return default_kind(task)   # the sites ship flat features: no image shape, no CNN
        if self.model == "linear" and task != "regression":
            raise InputError(f"--model linear fits regression; the sites' task is {task} (use --model logistic)")
        return self.model


# --------------------------------------------------------------------------- coalitions
def described_federation(sites: list, dataset: str | None, data_options: dict):
    """The server's view of the federation, from the sites' ``describe`` replies: no data, only its shape.

    A namespace with the attributes a learner reads off a
    :class:`~coalitions.learners.data.federation.Federation` before training (name, options,
    task, metric and its sense, client names, class count, input shape, outputs, split sizes).
    """
    from types import SimpleNamespace

    from coalitions.learners.data.federation import METRIC_SENSE

    first = sites[0]
    task = first["task"]
    n_classes = first["n-classes"] or None
    counts = {part: np.array([int(d[f"n-{part}"]) for d in sites], dtype=np.int64) for part in ("train", "val", "test")}
    return SimpleNamespace(sizes=lambda part="train": counts[part].copy(), name=dataset or "site CSV files", options=dict(data_options), task=task,
                           metric=first["metric"], sense=METRIC_SENSE[first["metric"]],
                           names=tuple(d["name"] for d in sites), n=len(sites), n_classes=n_classes,
                           input_shape=tuple(first["input-shape"]), planted_groups=None,
                           n_outputs=n_classes if task == "multiclass" else 1)


def coalition_masks(n: int) -> np.ndarray:
    """All non-empty coalitions ``1 .. 2^n − 1`` as bitmasks (bit ``i`` = site ``i``)."""
    return np.arange(1, 1 << n, dtype=np.int64)


def site_masks(n: int, i: int) -> np.ndarray:
    """The coalitions site ``i`` belongs to, ascending (``2^{n-1}`` of them)."""
    m = coalition_masks(n)
    return m[(m >> i) & 1 == 1]


def payload_bytes(arrays: dict) -> int:
    """Bytes of the parameter arrays in ``arrays`` (what a model transfer carries)."""
    return int(sum(np.asarray(a).nbytes for a in arrays.values()))


# --------------------------------------------------------------------------- training
def initial_params(spec, seed: int, copies: int) -> dict:
    """One model drawn from ``seed`` (float32 NumPy), repeated ``copies`` times."""
    import torch

    one = spec.init(torch.Generator().manual_seed(int(seed)), 1)
    return {k: np.repeat(v.numpy().astype(np.float32), copies, axis=0) for k, v in one.items()}


def local_round(spec, task: str, params: dict, X, y, protocol: Protocol, round_index: int,
                site_index: int) -> dict:
    """One site's local training of several coalition models on its own data.

    Parameters
    ----------
    spec : coalitions.learners.training.models.ModelSpec
    task : {"regression", "binary", "multiclass"}
    params : dict of str -> ndarray (M, ...)
        The current models of the ``M`` coalitions this site trains this round.
    X, y : ndarray
        The site's training split.
    protocol : Protocol
    round_index, site_index : int
        Select the minibatch order, ``default_rng([seed, round_index, site_index])``.

    Returns
    -------
    dict of str -> ndarray (M, ...)
        The models after ``protocol.local_epochs`` epochs of a fresh optimiser.  Unlike the
        personalised learners' sites, which keep their optimiser state across rounds
        (:meth:`~coalitions.learners.methods.base.PersonalizedLearner._site_steps`), the game's
        sites start each round afresh: a game resumed from the server's checkpoint, or
        measured again without an excluded site, then equals the uninterrupted one (the
        sites' state would be lost with a new Flower run).  With plain SGD (no momentum)
        there is no state and the two agree.
        Model ``m`` follows exactly the path it would follow alone: the loss
        of the stack is the sum of the models' own losses, so each model's
        gradient is its own.
    """
    import torch

    from coalitions.learners.data.metrics import loss_function
    from coalitions.learners.training.engine import epoch_plan, make_optimizer
    from coalitions.learners.training.models import stacked_forward

    loss = loss_function(task)
    p = {k: torch.as_tensor(np.array(v, dtype=np.float32)) for k, v in params.items()}
    m = next(iter(p.values())).shape[0]
    Xt = torch.as_tensor(np.array(X, dtype=np.float32))
    yt = torch.as_tensor(np.array(y))
    opt = make_optimizer(protocol.optimizer, protocol.lr, protocol.momentum, protocol.weight_decay)
    state = opt.init(p)
    active = torch.ones(m, dtype=torch.bool)
    rng = np.random.default_rng([int(protocol.seed), int(round_index), int(site_index)])
    sizes = np.array([len(Xt)], dtype=np.int64)
    for _ in range(protocol.local_epochs):
        idx, mask, _ = epoch_plan(sizes, protocol.batch_size, rng)
        for s in range(idx.shape[0]):
            rows = torch.as_tensor(idx[s, 0][mask[s, 0] > 0])
            q = {k: v.detach().requires_grad_(True) for k, v in p.items()}
            per_sample = loss(stacked_forward(spec, q, Xt[rows]), yt[rows])   # (M, b)
            per_sample.mean(dim=1).sum().backward()
            p, state = opt.step({k: v.detach() for k, v in q.items()}, {k: v.grad for k, v in q.items()},
                                state, active)
    return {k: v.detach().numpy().astype(np.float32) for k, v in p.items()}


def aggregate(updates: list, sizes) -> dict:
    """FedAvg of one coalition's member models: ``Σ_i n_i w^i / Σ_i n_i`` (float64 sums, float32 out).

    ``updates`` holds one dict of unstacked arrays per member, in member order;
    ``sizes`` their training-sample counts.
    """
    w = np.asarray(sizes, dtype=np.float64)
    w = w / w.sum()
    return {k: np.tensordot(w, np.stack([np.asarray(u[k], dtype=np.float64) for u in updates]), axes=1)
            .astype(np.float32) for k in updates[0]}


def evaluate_models(spec, metric: str, params: dict, X, y) -> np.ndarray:
    """The metric of each of ``M`` stacked models on one split ``(X, y)``: shape ``(M,)``."""
    import torch

    from coalitions.learners.data.metrics import evaluate_batch
    from coalitions.learners.training.models import stacked_forward

    with torch.no_grad():
        scores = stacked_forward(spec, {k: torch.as_tensor(np.asarray(v)) for k, v in params.items()},
                                 torch.as_tensor(np.array(X, dtype=np.float32)))
    return evaluate_batch(metric, y, scores.double().numpy())


def run_round(spec, task: str, coalition_params: dict, train: list, protocol: Protocol, round_index: int) -> dict:
    """One round of every coalition, in process: each site trains its coalitions, then FedAvg per coalition.

    ``coalition_params`` maps names to ``(2^N − 1, ...)`` arrays (row ``k`` =
    coalition ``k + 1``); ``train`` holds each site's ``(X, y)``.
    """
    n = len(train)
    masks = coalition_masks(n)
    updates = {}
    for i, (X, y) in enumerate(train):
        mine = site_masks(n, i)
        out = local_round(spec, task, {k: v[mine - 1] for k, v in coalition_params.items()}, X, y, protocol,
                          round_index, i)
        for j, mask in enumerate(mine):
            updates[(int(mask), i)] = {k: v[j] for k, v in out.items()}
    sizes = [len(y) for _, y in train]
    new = {k: np.empty_like(v) for k, v in coalition_params.items()}
    for mask in masks:
        members = [i for i in range(n) if mask >> i & 1]
        avg = aggregate([updates[(int(mask), i)] for i in members], [sizes[i] for i in members])
        for k in new:
            new[k][mask - 1] = avg[k]
    return new


def inprocess_game(federation, protocol: Protocol = Protocol(), threads: int | None = 1):
    """The FedAvg-within-coalition game computed in one process: the reference of the federated one.

    Same protocol, same functions (:func:`local_round`, :func:`aggregate`,
    :func:`evaluate_models`) as the Flower app; only the network is missing.

    Returns
    -------
    val, test : ndarray (N, 2^N)
        ``v_i(S)`` on validation / test data (NaN where ``i ∉ S``).
    params : dict of str -> ndarray (2^N − 1, ...)
        The final coalition models (row ``k`` = coalition ``k + 1``).
    """
    import torch

    from coalitions.learners.training.models import make_model

    fed = federation
    if fed.n > 12:
        raise InputError(f"{fed.n} clients: the federated exact game trains 2^N - 1 models; use at most 12")
    before = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(int(threads))
        spec = make_model(protocol.model_kind(fed.task), fed.input_shape, fed.n_outputs, hidden=protocol.hidden)
        params = initial_params(spec, protocol.seed, (1 << fed.n) - 1)
        train = [(c.train.X, c.train.y) for c in fed.clients]
        for r in range(protocol.rounds):
            params = run_round(spec, fed.task, params, train, protocol, r)
        val = np.full((fed.n, 1 << fed.n), np.nan)
        test = np.full((fed.n, 1 << fed.n), np.nan)
        for i, c in enumerate(fed.clients):
            mine = site_masks(fed.n, i)
            sub = {k: v[mine - 1] for k, v in params.items()}
            val[i, mine] = evaluate_models(spec, fed.metric, sub, c.val.X, c.val.y)
            test[i, mine] = evaluate_models(spec, fed.metric, sub, c.test.X, c.test.y)
    finally:
        torch.set_num_threads(before)
    return val, test, params
