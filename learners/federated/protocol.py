"""FedOpt within every coalition: how the federated game trains its coalition models.

The exact game (docs/concepts.md §1, §5) needs, for every coalition ``S``, a model trained on the
data of ``S`` and its metric on each member's validation data.  Where the data may not leave the
sites, ``S``'s model is trained among ``S``'s members only, under the **same**
:class:`~coalitions.learners.training.protocol.TrainingProtocol` as every other column (the
in-process exact game, Local, the learners): its model, optimiser, learning rate and schedule,
batch, weight decay, budget of local steps and patience.  The protocol's optimiser runs at the
server, one state per coalition (FedOpt, Reddi et al. 2021):

* every coalition model starts from the same initial parameters, drawn from
  ``torch.Generator().manual_seed(seed)`` (PyTorch's default initialisation,
  :func:`coalitions.learners.training.models.make_model`);
* in round ``r`` member ``i`` of ``S`` starts from ``w_S`` and takes ``local_steps`` plain
  gradient steps at the protocol's rate ``η`` on its own objective
  ``F_i(w) = mean loss + (weight_decay/2)·‖weights‖²`` (minibatches of ``batch_size``, or all its
  data), and returns ``w_S^i`` (:func:`local_round`; a site keeps no state);
* the server forms the coalition's pseudo-gradient
  ``g_S = (w_S − Σ_{i∈S} n_i w_S^i / Σ_{i∈S} n_i) / η`` and applies the protocol's optimiser
  (Adam, or SGD with momentum) at ``η·s(r/R)`` with the protocol's schedule ``s`` over the
  ``R = ⌈steps / local_steps⌉`` rounds (:class:`GameServer`).  Its state (moments, step counts)
  lives with the coalition models at the server and goes into the checkpoint: a resumed game
  equals an uninterrupted one.

With ``local_steps = 1`` and full batch, ``g_S = Σ_{i∈S} (n_i/n_S)·∇F_i(w_S) = ∇F_S(w_S)``, the
gradient of ``S``'s pooled objective: the federated game is then the in-process exact game's
shared-head training of every subset (:class:`~coalitions.learners.exact.ExhaustiveOracle`),
the same model up to floating-point rounding (``tests/test_federated.py``).  With more local
steps it is FedAvg's local work under a server optimiser (Reddi et al.'s FedAdam / FedAvgM).

**Early stopping** (``patience``): every round's message finds the sites with the coalition models
of the previous server step; each scores them on its validation data (mean loss) and the server
pools the members' losses, ``ℓ_S = Σ_{i∈S} n_i^val·L_i / Σ_{i∈S} n_i^val``, as the in-process
game does after every step (:mod:`coalitions.learners.game.stopping`).  A coalition whose
``ℓ_S`` has not improved for ``patience`` evaluations stops (the server no longer applies its
updates) and keeps its best parameters, which the final evaluation scores.

A site serves every coalition it belongs to at once: the ``2^{N-1}`` models of its coalitions are
stacked (leading dimension = coalition) and trained in one batched step per minibatch, all on the
same minibatches.  The minibatch order of site ``i`` in round ``r`` comes from
``numpy.random.default_rng([seed, r, i])`` (:func:`coalitions.learners.training.engine.epoch_plan`),
so it does not depend on which coalitions are trained together, where the site's process runs, or
whether the run was resumed.  Hence the federated game (:mod:`coalitions.learners.federated.server`)
and :func:`inprocess_game`, the in-process reference that calls the same :func:`local_round` and
:class:`GameServer` without any network, compute the same models.

References
----------
Reddi, Charles, Zaheer, Garrett, Rush, Konečný, Kumar, McMahan (2021), *Adaptive federated
optimization*, ICLR.
McMahan, Moore, Ramage, Hampson, Agüera y Arcas (2017), *Communication-efficient learning of deep
networks from decentralized data*, AISTATS.
Cui et al. 2022, §6: an impartial third party learns the benefit graph without direct access to the
data; docs/federated.md.
"""

from __future__ import annotations

import numpy as np

from coalitions.errors import InputError

__all__ = ["federated_protocol", "check_training", "game_rounds", "coalition_masks", "site_masks", "game_masks",
           "initial_params", "local_round", "aggregate", "GameServer", "evaluate_models", "evaluate_replicates", "inprocess_game",
           "payload_bytes", "refuse_tuning_split"]

#: The models a site can train from flat features (no image shape reaches the server).
FLAT_MODELS = ("linear", "logistic", "mlp")
#: Most sites of the federated game over all coalitions (``2^N − 1`` models).
MAX_SITES = 12


def refuse_tuning_split(protocol) -> None:
    """Refuse a protocol with a ``tune_split``: the sites would have to hold their tuning rows out of training
    (:mod:`coalitions.learners.data.roles`), which no federated run does yet; they tune on validation rows."""
    share = protocol.get("tune_split") if isinstance(protocol, dict) else getattr(protocol, "tune_split", None)
    if share is not None:
        raise InputError(f"tune_split {share:g}: a federated run tunes on the sites' validation rows; separate "
                         "tuning rows are held out in process only (coalitions.learners.data.roles)")


def check_training(changes: dict) -> None:
    """Refuse training settings no federated run can use, before anything starts (one line naming the flag).

    ``changes``: :class:`~coalitions.learners.training.protocol.TrainingProtocol` field -> value (the
    training flags given).  Each is checked as the protocol checks it; ``model`` must be one the
    sites can train on flat features.
    """
    from coalitions.learners.training.protocol import TrainingProtocol
    from coalitions.params import ParameterError

    refuse_tuning_split(changes)
    if changes.get("lr_grid") is not None:
        raise InputError("--lr-grid: a federated run trains at one rate; choose it in process on data like the "
                         "sites' (coalitions oracle or learn --lr-grid) and give it as --lr")
    model = changes.get("model")
    if model is not None and model not in FLAT_MODELS:
        raise InputError(f"--model {model}: the sites ship flat features; choose {', '.join(FLAT_MODELS)}")
    try:
        TrainingProtocol(**{k: v for k, v in changes.items() if k != "model"})
    except ParameterError as e:
        raise InputError(e.phrase({"hidden": "--mlp-hidden"}.get(e.param, "--" + e.param.replace("_", "-")))) from None
    except TypeError as e:
        raise InputError(f"training settings: {e}") from None


def federated_protocol(task: str, changes: dict | None = None):
    """The protocol a federated run trains with: the task's default with ``changes`` (the one rule,
    :func:`~coalitions.learners.training.protocol.protocol_with`; flat features: no CNN).
    """
    from coalitions.learners.training.protocol import protocol_with
    from coalitions.params import ParameterError

    changes = dict(changes or {})
    check_training(changes)
    try:
        protocol = protocol_with(task, (), changes)
    except ParameterError as e:     # hidden units for a model without a hidden layer
        raise InputError(e.phrase({"hidden": "--mlp-hidden"}.get(e.param, "--" + e.param.replace("_", "-")))) from None
    if protocol.model == "linear" and task != "regression":
        raise InputError(f"--model linear fits regression; the sites' task is {task} (use --model logistic)")
    return protocol.with_(closed_form=False)    # the game iterates: no site sees the union it would solve for


def game_rounds(protocol) -> int:
    """Rounds of the federated game: ``⌈steps / local_steps⌉`` (each round ``local_steps`` local steps)."""
    return max(1, -(-int(protocol.steps) // int(protocol.local_steps)))


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


def site_masks(n: int, i: int, masks=None) -> np.ndarray:
    """The coalitions site ``i`` belongs to: of all of them, ascending (``2^{n-1}``), or of ``masks``, in their order."""
    m = coalition_masks(n) if masks is None else np.asarray(masks, dtype=np.int64)
    return m[(m >> i) & 1 == 1]


def game_masks(n: int, masks=None) -> np.ndarray:
    """The coalitions a federated game trains: all ``2^n − 1`` (``masks=None``; at most 12 sites), or ``masks``.

    ``masks``: distinct non-empty coalitions of the ``n`` sites (int64 bitmasks, at most 62 sites), kept
    in their order; anything else is an :class:`~coalitions.errors.InputError` (one line).
    """
    from coalitions.lazy import MAX_LAZY_CLIENTS, check_masks

    if masks is None:
        if n > MAX_SITES:
            raise InputError(f"{n} sites: the federated exact game trains 2^N - 1 models; use at most {MAX_SITES} "
                             "(or ask for some coalitions: coalitions sample-ce --federated)")
        return coalition_masks(n)
    if n > MAX_LAZY_CLIENTS:
        raise InputError(f"{n} sites: coalitions are 64-bit bitmasks; a federated game over chosen coalitions "
                         f"holds at most {MAX_LAZY_CLIENTS}")
    game = check_masks(masks, n)
    if not game.size:
        raise InputError("a federated game over chosen coalitions needs at least one coalition")
    return game


def payload_bytes(arrays: dict) -> int:
    """Bytes of the parameter arrays in ``arrays`` (what a model transfer carries)."""
    return int(sum(np.asarray(a).nbytes for a in arrays.values()))


# --------------------------------------------------------------------------- training
def initial_params(spec, seed: int, copies: int) -> dict:
    """One model drawn from ``seed`` (float32 NumPy), repeated ``copies`` times."""
    import torch

    one = spec.init(torch.Generator().manual_seed(int(seed)), 1)
    return {k: np.repeat(v.numpy().astype(np.float32), copies, axis=0) for k, v in one.items()}


def local_round(spec, task: str, params: dict, X, y, protocol, round_index: int, site_index: int,
                seed: int) -> dict:
    """One site's local work on several coalition models: ``local_steps`` plain gradient steps each.

    Parameters
    ----------
    spec : coalitions.learners.training.models.ModelSpec
    task : {"regression", "binary", "multiclass"}
    params : dict of str -> ndarray (M, ...)
        The current models of the ``M`` coalitions this site trains this round.
    X, y : ndarray
        The site's training split.
    protocol : coalitions.learners.training.protocol.TrainingProtocol
        ``local_steps`` steps of ``w ← w − lr·∇F_i(w)``, ``F_i`` the mean per-sample loss of a
        minibatch of ``batch_size`` (all the site's data when ``None``) plus
        ``(weight_decay/2)·‖weights‖²`` (weights, not biases, as everywhere).
    round_index, site_index, seed : int
        Select the minibatch order, ``default_rng([seed, round_index, site_index])``.

    Returns
    -------
    dict of str -> ndarray (M, ...)
        The models after the local steps.  The site keeps nothing: the protocol's optimiser
        (its moments, its schedule) runs at the server (:class:`GameServer`), so a game resumed
        from the server's checkpoint, or measured again without an excluded site, equals the
        uninterrupted one.  Model ``m`` follows exactly the path it would follow alone: the loss
        of the stack is the sum of the models' own losses, so each model's gradient is its own.
    """
    import torch

    from coalitions.learners.data.metrics import loss_function
    from coalitions.learners.training.decay import decay_gradient, decayed_names, with_decay
    from coalitions.learners.training.engine import epoch_plan, make_optimizer
    from coalitions.learners.training.models import stacked_forward

    loss = loss_function(task)
    p = {k: torch.as_tensor(np.array(v, dtype=np.float32)) for k, v in params.items()}
    Xt = torch.as_tensor(np.array(X, dtype=np.float32))
    yt = torch.as_tensor(np.array(y))
    weights = decayed_names(spec.shapes)
    batches: list = []
    if protocol.batch_size is None:
        batches = [None] * protocol.local_steps
    else:
        rng = np.random.default_rng([int(seed), int(round_index), int(site_index)])
        sizes = np.array([len(Xt)], dtype=np.int64)
        while len(batches) < protocol.local_steps:   # passes over the data until the round's steps are drawn
            idx, mask, _ = epoch_plan(sizes, protocol.batch_size, rng)
            batches += [torch.as_tensor(idx[s, 0][mask[s, 0] > 0]) for s in range(idx.shape[0])]
    decay = float(protocol.weight_decay)
    opt = make_optimizer("sgd", float(protocol.lr))     # plain gradient descent at the protocol's rate (stacked SGD)
    opt_state = opt.init(p)
    every = torch.ones(next(iter(p.values())).shape[0], dtype=torch.bool)
    for rows in batches[:protocol.local_steps]:
        q = {k: v.detach().requires_grad_(True) for k, v in p.items()}
        xb, yb = (Xt, yt) if rows is None else (Xt[rows], yt[rows])
        objective = loss(stacked_forward(spec, q, xb), yb).mean(dim=1).sum()
        grads = dict(zip(q, torch.autograd.grad(objective, list(q.values())), strict=True))
        with torch.no_grad():
            grads = with_decay(grads, decay_gradient(q, weights, decay))
            p, opt_state = opt.step({k: v.detach() for k, v in q.items()}, grads, opt_state, every)
    return {k: v.numpy().astype(np.float32) for k, v in p.items()}


def aggregate(updates: list, sizes) -> dict:
    """The size-weighted average of one coalition's member models: ``Σ_i n_i w^i / Σ_i n_i`` (float64).

    ``updates`` holds one dict of unstacked arrays per member, in member order;
    ``sizes`` their training-sample counts.
    """
    w = np.asarray(sizes, dtype=np.float64)
    w = w / w.sum()
    return {k: np.tensordot(w, np.stack([np.asarray(u[k], dtype=np.float64) for u in updates]), axes=1)
            for k in updates[0]}


class GameServer:
    """The server's half of the federated game: the coalition models, their optimiser, their early stop.

    Parameters
    ----------
    spec : ModelSpec
    protocol : TrainingProtocol
    n : int
        Sites.
    sizes, val_sizes : sequence of int
        Each site's training and validation sample counts.
    seed : int
        Draws the initial parameters (:func:`initial_params`).
    masks : sequence of int, optional
        The coalitions to train (:func:`game_masks`): ``None`` for all ``1 .. 2^n − 1`` (row ``k`` =
        coalition ``k + 1``), else these, row ``k`` = ``masks[k]``.  A coalition's model does not
        depend on the others trained beside it (its own initial parameters, its members' minibatch
        orders, its own optimiser state and early stop), so a game over some coalitions gives the
        columns of the game over all of them.

    Attributes
    ----------
    masks : ndarray of int64
        The coalitions, one per row.
    params : dict of str -> ndarray (len(masks), ...)
        float32 coalition models after :attr:`round` server steps.
    state : dict
        The protocol's stacked optimiser state (:class:`~coalitions.learners.training.protocol.Scheduled`).
    stop : SubsetEarlyStop or None
        Per-coalition patience (``protocol.patience``).
    """

    def __init__(self, spec, protocol, n: int, sizes, val_sizes, seed: int, masks=None):
        import torch

        from coalitions.learners.game.masks import membership
        from coalitions.learners.game.stopping import SubsetEarlyStop
        from coalitions.learners.training.protocol import Scheduled

        refuse_tuning_split(protocol)
        self.spec, self.protocol, self.n = spec, protocol, int(n)
        self.masks = game_masks(self.n, masks)
        self.rows = {int(m): k for k, m in enumerate(self.masks)}
        self.sizes = [int(x) for x in sizes]
        self.val_sizes = np.asarray(val_sizes, dtype=np.float64)
        self.rounds = game_rounds(protocol)
        self.round = 0
        self.params = initial_params(spec, seed, len(self.masks))
        self.optimizer = Scheduled(protocol, self.rounds)
        self.state = self.optimizer.init({k: torch.as_tensor(v) for k, v in self.params.items()})
        self.member = membership(self.masks, self.n).astype(np.float64)
        self.stop = None if protocol.patience is None else SubsetEarlyStop(protocol.patience, len(self.masks))
        self.active = np.ones(len(self.masks), dtype=bool)

    # -- what the sites get
    def site_masks(self, i: int) -> np.ndarray:
        """The coalitions of this game that site ``i`` belongs to, in row order (none: the site trains nothing)."""
        return site_masks(self.n, i, self.masks)

    def site_rows(self, i: int) -> np.ndarray:
        """The rows of :meth:`site_masks`."""
        return np.flatnonzero((self.masks >> i) & 1 == 1)

    def site_params(self, i: int) -> dict:
        """The current models of site ``i``'s coalitions, ``(len(site_masks(i)), ...)`` each."""
        rows = self.site_rows(i)
        return {k: v[rows] for k, v in self.params.items()}

    @property
    def scores_losses(self) -> bool:
        """Whether this round's sites score their coalitions' models on validation data first (patience)."""
        return self.stop is not None and self.round > 0

    @property
    def finished(self) -> bool:
        """Every round run, or every coalition stopped."""
        return self.round >= self.rounds or not self.active.any()

    # -- what the server does with the replies
    def record_losses(self, losses: dict) -> None:
        """Feed each coalition's pooled validation loss of the current models to its early stop.

        ``losses``: site index -> mean validation losses of its coalitions' models (as
        :meth:`site_params` sent them); a site in none of the coalitions may be left out.
        """
        import torch

        from coalitions.learners.game.stopping import pooled_validation_loss

        if self.stop is None:
            raise ValueError("record_losses needs a protocol with patience")
        per_client = np.zeros((len(self.masks), self.n))
        for i, values in losses.items():
            per_client[self.site_rows(i), i] = values
        pooled = pooled_validation_loss(torch.as_tensor(per_client), torch.as_tensor(self.member),
                                        torch.as_tensor(self.val_sizes))
        active = self.stop.update(pooled, {k: torch.as_tensor(v) for k, v in self.params.items()}, self.round)
        self.active = active.numpy().copy()

    def apply(self, updates: dict) -> None:
        """One server step from the sites' local models: ``updates[(mask, i)]`` = site ``i``'s model of ``mask``."""
        import torch

        averaged = {k: np.empty(v.shape, dtype=np.float64) for k, v in self.params.items()}
        for row, mask in enumerate(self.masks):
            members = [i for i in range(self.n) if mask >> i & 1]
            avg = aggregate([updates[(int(mask), i)] for i in members], [self.sizes[i] for i in members])
            for k in averaged:
                averaged[k][row] = avg[k]
        lr = float(self.protocol.lr)
        params = {k: torch.as_tensor(v) for k, v in self.params.items()}
        grads = {k: torch.as_tensor(((self.params[k] - averaged[k]) / lr).astype(np.float32)) for k in params}
        new, self.state = self.optimizer.step(params, grads, self.state, torch.as_tensor(self.active))
        self.params = {k: v.numpy().astype(np.float32) for k, v in new.items()}
        self.round += 1

    def final_params(self) -> dict:
        """The models the game scores: each coalition's best under patience, else the last."""
        import torch

        if self.stop is None:
            return self.params
        best = self.stop.best_params({k: torch.as_tensor(v) for k, v in self.params.items()})
        return {k: np.asarray(v.numpy(), dtype=np.float32) for k, v in best.items()}

    def stopped_at(self) -> list | None:
        """The server step at which each coalition stopped (``None`` without patience)."""
        return None if self.stop is None else [int(x) for x in self.stop.stopped_at.tolist()]

    # -- the checkpoint
    def state_dict(self) -> dict:
        """Everything a resumed server needs (arrays and tensors; :func:`~coalitions.learners.training.checkpoint.save_state`)."""
        out = {"params": self.params, "optimizer": self.state, "active": self.active.astype(np.int64)}
        if self.stop is not None:
            out["stop"] = self.stop.state_dict()
        return out

    def load(self, rounds_done: int, state: dict) -> None:
        """Continue after ``rounds_done`` server steps from :meth:`state_dict`'s content."""

        self.round = int(rounds_done)
        self.params = {k: np.asarray(v, dtype=np.float32) for k, v in state["params"].items()}
        self.state = state["optimizer"]
        self.active = np.asarray(state["active"]).astype(bool)
        if self.stop is not None:
            self.stop.load_state_dict(state["stop"])


def evaluate_models(spec, task: str, metric: str, params: dict, X, y) -> tuple[np.ndarray, np.ndarray]:
    """The metric and the mean loss of each of ``M`` stacked models on one split ``(X, y)``: two ``(M,)`` arrays."""
    import torch

    from coalitions.learners.data.metrics import evaluate_batch, mean_loss_batch
    from coalitions.learners.training.models import stacked_forward

    with torch.no_grad():
        scores = stacked_forward(spec, {k: torch.as_tensor(np.asarray(v)) for k, v in params.items()},
                                 torch.as_tensor(np.array(X, dtype=np.float32))).double().numpy()
    return evaluate_batch(metric, y, scores), mean_loss_batch(task, y, scores)


def evaluate_replicates(spec, metric: str, params: dict, X, y, draws: np.ndarray) -> np.ndarray:
    """``(B, M)``: the metric of each of ``M`` stacked models on each resample ``draws[b]`` of ``(X, y)``."""
    import torch

    from coalitions.learners.game.bootstrap import rescore
    from coalitions.learners.training.models import stacked_forward

    with torch.no_grad():
        scores = stacked_forward(spec, {k: torch.as_tensor(np.asarray(v)) for k, v in params.items()},
                                 torch.as_tensor(np.array(X, dtype=np.float32))).double().numpy()
    return rescore(metric, np.asarray(y), scores, draws)


def validation_losses(spec, task: str, params: dict, X, y) -> np.ndarray:
    """Each stacked model's mean loss on a site's validation split (the early stop's evaluation)."""
    import torch

    from coalitions.learners.data.metrics import loss_function
    from coalitions.learners.training.models import stacked_forward

    with torch.no_grad():
        out = stacked_forward(spec, {k: torch.as_tensor(np.asarray(v)) for k, v in params.items()},
                              torch.as_tensor(np.array(X, dtype=np.float32)))
        return loss_function(task)(out, torch.as_tensor(np.array(y))).double().mean(dim=1).numpy()


def inprocess_game(federation, protocol=None, seed: int = 0, threads: int | None = 1, replicates: int = 0,
                   masks=None):
    """The federated game computed in one process: the reference of the Flower one.

    Same protocol, same functions (:func:`local_round`, :class:`GameServer`,
    :func:`validation_losses`, :func:`evaluate_models`) as the Flower app; only the network is
    missing.  ``protocol``: a :class:`~coalitions.learners.training.protocol.TrainingProtocol`
    (default: :func:`federated_protocol` of the federation's task).  ``masks``: the coalitions to
    train (:func:`game_masks`; ``None``: all ``2^N − 1``, at most 12 sites).

    Returns
    -------
    dict
        ``val``, ``test``, ``val_loss`` ``(N, 2^N)`` (column ``S`` = coalition ``S``; NaN where
        ``i ∉ S``), or ``(N, k)`` with ``masks`` (column ``j`` = ``masks[j]``); ``params`` (one
        row per coalition, row ``k`` = coalition ``k + 1`` or ``masks[k]``: the models scored);
        ``masks`` (the coalitions, one per row); ``rounds`` (server steps run) and ``stopped_at``
        (per coalition, or ``None`` without patience); with ``replicates`` ``B > 0``,
        ``val_replicates`` ``(B, N, 2^N)`` or ``(B, N, k)``: each site's values on ``B`` resamples
        of its validation rows (:func:`~coalitions.learners.game.bootstrap.site_draws`, which
        depend on the seed and the site only: paired across games).
    """
    import torch

    from coalitions.learners.game.bootstrap import site_draws
    from coalitions.learners.training.models import make_model

    fed = federation
    game = game_masks(fed.n, masks)
    protocol = federated_protocol(fed.task) if protocol is None else protocol
    width = 1 << fed.n if masks is None else len(game)
    before = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(int(threads))
        spec = make_model(protocol.model, fed.input_shape, fed.n_outputs, hidden=protocol.hidden)
        flat = [(c.train.X, c.val.X, c.test.X) for c in fed.clients]
        server = GameServer(spec, protocol, fed.n, fed.sizes("train"), fed.sizes("val"), seed, masks=game)
        asked = [i for i in range(fed.n) if len(server.site_rows(i))]    # a site in no coalition is not asked
        while not server.finished:
            if server.scores_losses:
                server.record_losses({i: validation_losses(spec, fed.task, server.site_params(i), flat[i][1],
                                                           fed.clients[i].val.y) for i in asked})
                if server.finished:
                    break
            updates = {}
            for i in asked:
                c = fed.clients[i]
                out = local_round(spec, fed.task, server.site_params(i), flat[i][0], c.train.y, protocol,
                                  server.round, i, seed)
                for j, mask in enumerate(server.site_masks(i)):
                    updates[(int(mask), i)] = {k: v[j] for k, v in out.items()}
            server.apply(updates)
        last = server.round
        if server.stop is not None and server.active.any():   # the last step's models, scored as every step's
            server.record_losses({i: validation_losses(spec, fed.task, server.site_params(i), flat[i][1],
                                                       fed.clients[i].val.y) for i in asked})
        final = server.final_params()
        out = {key: np.full((fed.n, width), np.nan) for key in ("val", "test", "val_loss")}
        if replicates:
            out["val_replicates"] = np.full((replicates, fed.n, width), np.nan)
        for i in asked:
            c = fed.clients[i]
            rows = server.site_rows(i)
            cols = game[rows] if masks is None else rows
            sub = {k: v[rows] for k, v in final.items()}
            out["val"][i, cols], out["val_loss"][i, cols] = evaluate_models(spec, fed.task, fed.metric, sub,
                                                                            flat[i][1], c.val.y)
            out["test"][i, cols], _ = evaluate_models(spec, fed.task, fed.metric, sub, flat[i][2], c.test.y)
            if replicates:
                draws = site_draws(c.val.y, fed.metric, replicates, seed, i)
                out["val_replicates"][:, i, cols] = evaluate_replicates(spec, fed.metric, sub, flat[i][1], c.val.y,
                                                                        draws)
    finally:
        torch.set_num_threads(before)
    return {**out, "params": final, "masks": game, "rounds": last, "stopped_at": server.stopped_at()}
