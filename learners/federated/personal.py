"""The personalised learners as Flower strategies: Local, FedAvg, FedAMP, SuPerFed (docs/federated.md).

``coalitions learn DATASET --method M`` trains a personalised learner
(:mod:`coalitions.learners.methods`) in one process holding every client's
data.  Here the same learner runs over Flower: each site runs the *client*
half of the method's round on its own data, and a Flower :class:`Strategy`
on the ServerApp runs the *server* half; the server never sees a row.  Both
halves are the method's own code, called on different objects:

* a **site** builds the learner (same class, same parameters) over a
  one-client federation holding only its own data (:func:`site_learner`) and
  calls the learner's round on its part of the state —
  :meth:`~coalitions.learners.methods.baselines.Local.train_round`,
  :meth:`~coalitions.learners.methods.baselines.FedAvg.train_round`,
  :meth:`~coalitions.learners.methods.fedamp.FedAMP.local_step`,
  :meth:`~coalitions.learners.methods.superfed.SuPerFed.train_round` — then
  the learner's ``finish`` and its utilities on the site's validation and
  test splits;
* the **server** keeps what the in-process learner keeps for everyone and
  runs the method's server step: FedAvg's and SuPerFed's
  :func:`~coalitions.learners.methods.baselines.weighted_average`, FedAMP's
  :meth:`~coalitions.learners.methods.fedamp.FedAMP.message_passing` (``ξ``
  from the uploaded models, the cloud model ``u_i`` of each site) and, at the
  end, FedAMP's ``finish`` (``ξ`` and the affinity of the final models), the
  benefit oracle and the estimate (:attr:`Learner.estimate_
  <coalitions.learners.methods.base.Learner.estimate_>`, i.e.
  :func:`coalitions.estimate.build_estimate`, as ``coalitions learn``).

Randomness.  In process, round ``r``'s draws come from
``default_rng([seed, r, stream])`` for all clients at once (stream 0: every
client's minibatch order, one ``(N, n_max)`` key matrix per epoch; stream 1:
SuPerFed's mixing coefficients, one ``(N, …)`` draw per step).  A site draws
from the same generator and keeps its own row (:class:`SiteGenerator`), so
its minibatches and coefficients are those the in-process learner gives it;
the server tells each site every site's training-set size (which the server
learns from the sites' descriptions, as in any FedAvg) for that.  The tests
require the federated estimate to equal ``learner.fit(federation)``'s (same
seed): the same weights, utilities and equilibrium, parameters within
``1e-5``.

What leaves a site (docs/federated.md has the table): its split sizes, its
model after each round's local training (FedAvg, FedAMP; SuPerFed: its
*federated* half, the local half stays at the site), its mean training loss
per round and, at the end, its validation and test metric (SuPerFed: also its
``λ*`` and validation curve).  Local sends no model at all.

Site state.  FedAvg and FedAMP sites keep nothing between messages (the
server sends what a round needs).  Local and SuPerFed keep their local model
in Flower's per-run node state (``Context.state``), which Flower keeps between
the messages of a run, in the simulation engine and on a SuperNode.  Unlike
the exact game, these runs are not checkpointed: an interrupted run starts
again.

References
----------
Huang et al. (2021), *Personalized cross-silo federated learning on non-IID data* (FedAMP), AAAI.
Hahn, Jeong, Lee (2022), *Connecting low-loss subspace for personalized federated learning* (SuPerFed), KDD.
McMahan et al. (2017), *Communication-efficient learning of deep networks from decentralized data*, AISTATS.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.federated.replies import BadReply, check_losses, check_metrics, check_number, reply_json

__all__ = ["PERSONAL", "method_params", "check_method", "SiteGenerator", "site_learner", "server_learner", "learner_params", "site_round",
           "site_train", "site_finish", "PersonalStrategy", "FedAvgStrategy", "LocalStrategy", "FedAMPStrategy",
           "SuPerFedStrategy", "FedeRiCoStrategy", "STRATEGIES", "federico_site", "run_personal"]

#: ``coalitions federate --method`` name -> the learner's registry name (coalitions.learners.methods.registry).
PERSONAL = {"local": "local", "fedavg": "fedavg", "fedamp": "fedamp", "fedamp-heuristic": "fedamp-heuristic",
            "federico": "federico", "superfed": "superfed-mm", "superfed-lm": "superfed-lm"}

#: Learner parameters that are not the method's (the server's business, or meaningless at a site).
_NOT_SENT = ("progress", "checkpoint", "device")


# --------------------------------------------------------------------------- randomness
class SiteGenerator:
    """Site ``site``'s row of the in-process draws of round ``r``, stream ``stream``.

    The in-process learner draws, for all ``N`` clients at once, from
    ``default_rng([seed, r, stream])``.  A site's learner, built over its own
    data alone, asks for one row; this generator draws the whole matrix from
    the same generator and hands back the site's row, so the site sees exactly
    what the in-process learner gives it.

    * stream 0 (minibatch order, :func:`coalitions.learners.training.engine.epoch_plan`):
      a request ``(1, n_i)`` is the site's row of ``(N, n_max)``, first ``n_i`` keys;
    * other streams: a request ``(1, …)`` is the site's row of ``(N, …)``.  With
      ``steps = (S, s_i)`` the draws are one per minibatch step: in process an
      epoch has ``S`` steps (the largest client's), the site takes ``s_i``, so
      after each ``s_i`` draws the generator skips ``S − s_i`` (SuPerFed's
      mixing coefficients over several local epochs).
    """

    def __init__(self, seed: int, r: int, stream: int, site: int, sizes, steps: tuple[int, int] | None = None):
        self._g = np.random.default_rng([int(seed), int(r), int(stream)])
        self.stream = int(stream)
        self.site = int(site)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.steps = steps
        self._drawn = 0

    def random(self, size=None):
        """The site's row of the federation-wide ``random`` draw (shape ``(1, …)``)."""
        shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size or ())
        if not shape or shape[0] != 1:
            raise ValueError(f"a site draws its own row (shape (1, ...)), not {shape}")
        n = len(self.sizes)
        if self.stream == 0:
            if shape != (1, int(self.sizes[self.site])):
                raise ValueError(f"stream 0 holds minibatch keys (1, {self.sizes[self.site]}), not {shape}")
            full = self._g.random((n, int(self.sizes.max())))
            return full[self.site:self.site + 1, :shape[1]]
        full_shape = (n, *shape[1:])
        out = self._g.random(full_shape)[self.site:self.site + 1]
        self._drawn += 1
        if self.steps is not None:
            total, mine = self.steps
            if self._drawn % mine == 0:
                for _ in range(total - mine):
                    self._g.random(full_shape)
        return out


def _epoch_steps(sizes, batch_size, site: int) -> tuple[int, int]:
    """``(S, s_i)``: minibatch steps of an in-process epoch and of site ``site`` (``epoch_plan``'s rule)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    b = int(sizes.max()) if batch_size is None else int(min(batch_size, sizes.max()))
    steps = -(-sizes // b)
    return int(steps.max()), int(steps[site])


# --------------------------------------------------------------------------- learners
def learner_params(learner) -> dict:
    """The JSON-ready parameters a site needs to build the same learner."""
    out = {k: v for k, v in learner.get_params().items() if k not in _NOT_SENT}
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()}


def method_params(protocol, options: dict | None = None) -> dict:
    """A personalised learner's parameters: the common ones from the federate ``protocol``, then ``options``.

    A setting of ``protocol`` left at its default (:class:`~coalitions.learners.federated.protocol.Protocol`,
    the exact game's: SGD, lr 0.1, momentum 0.9, batch 32, 50 rounds) leaves the
    method's own default in place, as ``coalitions learn`` does (they agree
    except for FedeRiCo's Adam with lr 1e-3); a changed one is passed on.
    ``options`` holds the method's own parameters (``alpha_k``, ``mu``, …) by
    their constructor names; one that names a common parameter (``lr``,
    ``optimizer``) overrides it.
    """
    from dataclasses import fields

    from coalitions.learners.federated.protocol import Protocol

    default = Protocol()
    common = {f.name: getattr(protocol, f.name) for f in fields(Protocol)
              if getattr(protocol, f.name) != getattr(default, f.name) or f.name in ("rounds", "seed")}
    return {**common, **dict(options or {})}


def check_method(method: str, protocol, options: dict | None) -> None:
    """Refuse a bad method or option before anything starts (:class:`InputError` naming the option)."""
    from coalitions.params import ParameterError

    params = method_params(protocol, options)
    if params.get("refit"):
        raise InputError(f"--method-option refit: --method {method} over Flower reads BG(R) off the learned "
                         "weights (refit would train again on every set peeling asks about)")
    try:
        _create(method, params)
    except ParameterError as e:
        raise InputError(f"--method {method}: {e}") from None
    except TypeError as e:
        raise InputError(f"--method-option: {e}") from None


def _create(method: str, params: dict):
    from coalitions.learners.methods.base import COMMON_PARAMS
    from coalitions.learners.methods.registry import METHODS

    if method not in PERSONAL:
        raise InputError(f"--method {method}: the federated personalised methods are {', '.join(PERSONAL)}")
    cls = METHODS[PERSONAL[method]].estimator_class()
    names = cls.param_names()
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise InputError(f"--method-option {unknown[0]}: --method {method} takes no such option "
                         f"(its own: {', '.join(n for n in names if n not in COMMON_PARAMS) or 'none'})")
    learner = cls(**{**{k: params[k] for k in params}, "device": "cpu"})
    learner.check_params()
    return learner


def site_learner(method: str, params: dict, site):
    """The learner of ``method`` over a one-client federation holding ``site``'s data only.

    Set up as :meth:`PersonalizedLearner.fit <coalitions.learners.methods.base.PersonalizedLearner.fit>`
    sets it up (model, loss, padded training data, engine), without training:
    the site then calls the learner's own round.
    """
    import torch

    from coalitions.learners.data.federation import Federation
    from coalitions.learners.data.metrics import loss_function
    from coalitions.learners.methods.base import default_model
    from coalitions.learners.training.engine import Engine, Padded
    from coalitions.learners.training.models import make_model

    learner = _create(method, params)
    fed = Federation(site.client.name, site.task, site.metric, (site.client,), site.n_classes, None, {})
    learner.federation_ = fed
    learner.model_ = learner.model or default_model(fed)
    learner.spec_ = make_model(learner.model_, fed.input_shape, fed.n_outputs, hidden=learner.hidden)
    learner.per_sample_loss_ = loss_function(fed.task)
    learner.train_data_ = Padded(fed, "train", torch.device("cpu"))
    learner.engine_ = Engine("cpu", learner.engine, learner.chunk)
    return learner


def server_learner(method: str, params: dict, sites: list[dict], dataset: str | None, data_options: dict):
    """The learner of ``method`` as the server holds it: the federation's shape and names, no data.

    ``federation_`` is a stand-in with what the server knows from the sites'
    descriptions (names, task, metric, classes, feature shape), enough for
    the learner's server step, its ``finish`` where that needs no data
    (FedAMP), its oracle and its estimate.
    """
    from coalitions.learners.federated.protocol import described_federation
    from coalitions.learners.methods.base import default_model
    from coalitions.learners.training.engine import Engine
    from coalitions.learners.training.models import make_model

    learner = _create(method, params)
    fed = described_federation(sites, dataset, data_options)
    learner.federation_ = fed
    learner.model_ = learner.model or default_model(fed)
    learner.spec_ = make_model(learner.model_, fed.input_shape, fed.n_outputs, hidden=learner.hidden)
    learner.engine_ = Engine("cpu", learner.engine, learner.chunk)
    return learner


def initial_state(learner, n: int) -> dict:
    """The in-process initial state of ``n`` clients (from ``torch.Generator().manual_seed(seed)``): no data."""
    import torch

    gen = torch.Generator().manual_seed(int(learner.seed))
    return learner.init_state(SimpleNamespace(n=n), gen, torch.device("cpu"))


def _rows(params: dict, i: int) -> dict:
    return {k: v[i:i + 1] for k, v in params.items()}


def _tensors(arrays: dict) -> dict:
    import torch

    return {k: torch.as_tensor(np.array(v, dtype=np.float32)) for k, v in arrays.items()}


def _numpy(params: dict) -> dict:
    return {k: v.detach().cpu().numpy().astype(np.float32) for k, v in params.items()}


# --------------------------------------------------------------------------- the site's half
def site_round(method: str, learner, r: int, site: int, sizes, received: dict, kept: dict | None):
    """Site ``site``'s part of round ``r`` of ``method``, on its own data.

    Parameters
    ----------
    learner
        :func:`site_learner` of the site.
    received : dict of str -> dict of ndarray (1, ...)
        What the server sent: ``"model"`` (FedAvg, SuPerFed: the global model;
        FedAMP: the site's cloud model ``u_i``; Local: the initial model, round
        0 only) and, SuPerFed's round 0, ``"local"`` (the initial local model).
    kept : dict or None
        What the site kept from its previous round (Local, SuPerFed).

    Returns
    -------
    reply : dict of str -> dict of ndarray
        What goes back to the server (``{}`` for Local).
    loss : float
        The site's mean training loss of the round.
    kept : dict or None
        What the site keeps for its next round.
    """
    seed = int(learner.seed)
    rng = lambda stream: SiteGenerator(seed, r, stream, site, sizes)  # noqa: E731
    if method == "local":
        params = _tensors(kept["model"] if kept else received["model"])
        state, info = learner.train_round({"params": params}, r, rng)
        return {}, float(info["loss"]), {"model": _numpy(state["params"])}
    if method == "fedavg":
        state, info = learner.train_round({"global": _tensors(received["model"])}, r, rng)
        return {"model": _numpy(state["global"])}, float(info["loss"]), None
    if method in ("fedamp", "fedamp-heuristic"):
        new, losses = learner.local_step(_tensors(received["model"]), rng(0), sizes)
        return {"model": _numpy(new)}, float(np.mean(losses)), None
    if method in ("superfed", "superfed-lm"):
        local = _tensors(kept["local"] if kept else received["local"])
        steps = _epoch_steps(sizes, learner.batch_size, site)

        def srng(stream):
            return SiteGenerator(seed, r, stream, site, sizes, steps if stream == 1 else None)

        state, info = learner.train_round({"global": _tensors(received["model"]), "local": local}, r, srng)
        return {"model": _numpy(state["global"])}, float(info["loss"]), {"local": _numpy(state["local"])}
    raise InputError(f"--method {method}: not a federated personalised method ({', '.join(PERSONAL)})")


def site_train(method: str, learner, cfg: dict, received: dict, kept: dict | None):
    """A ``train`` message at a site: one round (Local: every round, no exchange; FedeRiCo: one phase).

    Returns ``(reply, metrics, kept)``: the arrays for the server, the numbers
    for the server (``{"losses": [...]}``, one per round run), what the site keeps.
    """
    sizes = [int(x) for x in cfg["sizes"]]
    site, r = int(cfg["site-index"]), int(cfg["round"])
    if method == "federico":
        return federico_site(learner, cfg, received, kept)
    if method != "local":
        reply, loss, kept = site_round(method, learner, r, site, sizes, received, kept)
        return reply, {"losses": [loss]}, kept
    losses = []
    for r in range(int(cfg["rounds"])):
        _, loss, kept = site_round(method, learner, r, site, sizes, received, kept)
        losses.append(loss)
    return {}, {"losses": losses}, kept


def federico_site(learner, cfg: dict, received: dict, kept: dict | None):
    """FedeRiCo at site ``i``: its neighbours, its E-step, its share of each M-step (one message each).

    The site keeps its own row of the tracked losses ``L̂_i·``, of the prior and
    of the posterior ``w_i·`` (``kept["row"]``).  Phases (``cfg["phase"]``):

    ``sample``
        The ε-greedy neighbours of the site from its posterior row
        (:func:`~coalitions.learners.methods.federico.sample_neighbours` on the
        round's generator ``default_rng([seed, r, 1])``, the site's row).
    ``step`` (epoch ``e``, step ``s``)
        ``received["models"]`` holds ``φ_i`` and its neighbours' models, as
        they stand.  On the round's first step the site first runs the E-step
        on them (:meth:`FedeRiCo.e_step <coalitions.learners.methods.federico.FedeRiCo.e_step>`,
        loss on its whole training split); then it returns ``∇ w_ij·ℓ(φ_j; batch_i)``
        for each of the models (:meth:`~coalitions.learners.methods.federico.FedeRiCo.pair_gradients`),
        which the server sums per model and applies.
    """
    import torch

    from coalitions.learners.methods.federico import sample_neighbours
    from coalitions.learners.training.engine import epoch_plan

    sizes = [int(x) for x in cfg["sizes"]]
    n, site, r = len(sizes), int(cfg["site-index"]), int(cfg["round"])
    k = min(int(learner.neighbours), n - 1)
    if kept is None:   # the in-process initial state: uniform prior and posterior; L̂ set on the first E-step
        kept = {"row": {"ema": np.full((1, n), np.nan), "log_prior": np.full((1, n), -np.log(n)),
                        "w": np.full((1, n), 1.0 / n)}}
    row = {key: torch.as_tensor(np.asarray(v, dtype=np.float64)) for key, v in kept["row"].items()}
    if cfg["phase"] == "sample":
        W = np.zeros((n, n))
        W[site] = row["w"][0].numpy()
        nb = sample_neighbours(W, k, float(learner.eps), np.random.default_rng([int(learner.seed), r, 1]))[site]
        return {}, {"neighbours": [int(j) for j in nb]}, kept
    pairs = [site, *[int(j) for j in cfg["neighbours"]]]
    models = _tensors(received["models"])
    cli_t = torch.zeros(len(pairs), dtype=torch.int64)
    mod_t = torch.as_tensor(pairs, dtype=torch.int64)
    metrics: dict = {}
    epoch, step = int(cfg["epoch"]), int(cfg["step"])
    if epoch == 0 and step == 0:
        losses = learner._full_losses(models, cli_t, torch.arange(len(pairs))).to(torch.float64)
        if torch.isnan(row["ema"]).any():     # before the first round every model is the initial one
            row["ema"] = torch.full((1, n), float(losses[0]), dtype=torch.float64)
        ema, w, log_prior = learner.e_step(row["ema"], row["log_prior"], cli_t, mod_t, losses)
        row = {"ema": ema, "log_prior": log_prior, "w": w}
        kept = {"row": {key: v.numpy() for key, v in row.items()}}
        metrics.update({"w": [float(x) for x in w[0]], "ema": [float(x) for x in ema[0]]})
    gen = SiteGenerator(int(learner.seed), r, 0, site, sizes)
    data = learner.train_data_
    for _ in range(epoch + 1):
        idx, mask, active = epoch_plan(data.sizes, learner.batch_size, gen)
    weight = row["w"][0, mod_t].to(next(iter(models.values())).dtype)
    if step < idx.shape[0]:
        idx_t = torch.as_tensor(idx[step])
        X, y = data.gather(idx_t[cli_t], cli_t)
        mb = torch.as_tensor(mask[step])[cli_t]
        act = torch.as_tensor(active[step])[cli_t]
        grads, values = learner.pair_gradients(models, X, y, mb, weight, act)
        metrics.update({"active": 1, "own-loss": float((values / weight.clamp(min=1e-30))[0])})
    else:   # this site's epoch is over; larger sites still step
        grads = {key: torch.zeros_like(v) for key, v in models.items()}
        metrics.update({"active": 0, "own-loss": 0.0})
    return {"grads": _numpy(grads)}, metrics, kept


def site_finish(method: str, learner, received: dict, kept: dict | None) -> dict:
    """The site's final model, scored on its own validation and test splits (the learner's ``finish``).

    Returns ``{"val": x, "test": y}`` and, for SuPerFed, ``"lambda"`` and
    ``"val_curve"`` (its ``λ*`` and the validation metric along the grid).
    """
    import torch

    kept = kept or {}
    state: dict
    if method == "local":
        state = {"params": _tensors(kept["model"])}
    elif method == "fedavg":
        state = {"global": _tensors(received["model"])}
    elif method in ("fedamp", "fedamp-heuristic"):
        state = {"params": _tensors(received["model"]), "history": [], "guarded": 0}
    elif method == "federico":   # every model, mixed by the site's own posterior row
        state = {"phi": _tensors(received["models"]), "history": [], "ema_history": [], "neighbours": [],
                 **{key: torch.as_tensor(np.asarray(v, dtype=np.float64)) for key, v in kept["row"].items()}}
    else:
        state = {"global": _tensors(received["model"]), "local": _tensors(kept["local"])}
    learner.finish(state)
    u = learner._utilities(learner.federation_, torch.device("cpu"))
    name = learner.federation_.names[0]
    out = {"val": u["val"][name], "test": u["test"][name]}
    if method in ("superfed", "superfed-lm"):
        out["lambda"] = float(learner.lambda_[0])
        out["val_curve"] = [float(x) for x in learner.val_curve_[0]]
    return out


# --------------------------------------------------------------------------- the server's half: Flower strategies
try:
    from flwr.serverapp.strategy import Strategy as _FlowerStrategy
except ImportError:  # pragma: no cover - flwr is optional; the strategies need it
    _FlowerStrategy = object  # type: ignore[assignment,misc]


class PersonalStrategy(_FlowerStrategy):  # type: ignore[misc,valid-type]
    """A personalised learner's server over Flower's strategy API (``Strategy.start`` runs the rounds).

    Parameters
    ----------
    method : str
        A key of :data:`PERSONAL`.
    learner
        :func:`server_learner` of the method.
    sites : list of dict
        The sites' descriptions, in order (site ``i`` is client ``i``).
    nodes : dict
        Site name -> Flower node id.
    data_config : dict
        What every message carries so that a site finds its data (dataset,
        loader options, threads).

    Every message to site ``i`` carries ``config`` (the method, the learner's
    parameters as JSON, the round, ``i`` and every site's training-set size)
    and the arrays of :meth:`payload`; replies carry the arrays of the site's
    half (:func:`site_round`) and its loss.  After the last round
    ``configure_evaluate`` asks each site for its utilities (:func:`site_finish`).
    Traffic is counted as in the exact game (the records' bytes).
    """

    def __init__(self, method: str, learner, sites: list[dict], nodes: dict, data_config: dict, log=print):
        self.method = method
        self.learner = learner
        self.sites = sites
        self.names = [d["name"] for d in sites]
        self.nodes = nodes
        self.sizes = [int(d["n-train"]) for d in sites]
        self.data_config = dict(data_config)
        self.log = log
        self.rounds = int(learner.rounds)
        self.loss_history: list[float] = []
        self.utilities: dict = {"val": {}, "test": {}}
        self.site_extra: dict = {}
        self.sent = self.received = self.messages = 0
        self.state = self.initial_state()

    def initial_state(self) -> dict:
        """The server's state before the first round (the learner's ``init_state``: no data needed)."""
        return initial_state(self.learner, len(self.sites))

    # -- what a subclass says
    def payload(self, r: int, i: int) -> dict:
        """``{"model": ..., ...}`` (stacked numpy dicts, leading dimension 1) for site ``i`` in round ``r``."""
        raise NotImplementedError

    def absorb(self, r: int, replies: list[dict]) -> None:
        """The server step after round ``r`` from the sites' reply arrays (site order)."""
        raise NotImplementedError

    def final_payload(self, i: int) -> dict:
        """What site ``i`` needs to score its final model."""
        return {}

    def exchanges(self) -> int:
        """Training exchanges (Flower rounds)."""
        return self.rounds

    # -- messages
    def _message(self, i: int, kind: str, r: int, arrays: dict, grid, extra: dict | None = None):
        from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

        from coalitions.learners.federated.server import _bytes

        cfg = {**self.data_config, "method": self.method, "params": json.dumps(learner_params(self.learner)),
               "round": int(r), "site-index": int(i), "sizes": [int(s) for s in self.sizes],
               "rounds": self.rounds, **(extra or {})}
        content = RecordDict({"config": ConfigRecord(cfg)})
        for key, arr in arrays.items():
            content[key] = ArrayRecord([np.asarray(v) for v in arr.values()])
        self.sent += _bytes(content)
        self.messages += 1
        return Message(content, dst_node_id=self.nodes[self.names[i]], message_type=kind)

    def _replies(self, replies, kind: str) -> list:
        from coalitions.learners.federated.server import _bytes

        by_node = {}
        for rep in replies:
            src = rep.metadata.src_node_id
            site = next((n for n, node in self.nodes.items() if node == src), str(src))
            if rep.has_error():
                reason = str(rep.error.reason).strip().splitlines()[-1] if rep.error.reason else ""
                raise InputError(f"site {site}: {kind} failed ({reason})")
            self.received += _bytes(rep.content)
            self.messages += 1
            by_node[src] = rep
        missing = [n for n in self.names if self.nodes[n] not in by_node]
        if missing:
            raise InputError(f"site(s) {', '.join(missing)} did not answer {kind}")
        return [by_node[self.nodes[n]] for n in self.names]

    def _name(self, rep) -> str:
        src = rep.metadata.src_node_id
        return next((n for n, node in self.nodes.items() if node == src), str(src))

    def _arrays(self, rep, key: str, rows: int = 1) -> dict:
        """Record ``key`` of a reply as ``{parameter: (rows, ...)}``, checked (:func:`~.replies.check_arrays`)."""
        from coalitions.learners.federated.replies import check_arrays
        from coalitions.learners.federated.server import _arrays

        spec = self.learner.spec_
        name = self._name(rep)
        arrays = check_arrays(_arrays(rep, key, name, rep.metadata.src_node_id),
                              [(rows, *s) for s in spec.shapes.values()], name, key)
        return dict(zip(spec.shapes, arrays, strict=True))

    def _metrics(self, rep):
        from coalitions.learners.federated.server import _record

        return _record(rep, "metrics", self._name(rep), rep.metadata.src_node_id, "metric_records")

    # -- Flower's strategy API
    def configure_train(self, server_round, arrays, config, grid):
        r = int(server_round) - 1
        return [self._message(i, "train", r, self.payload(r, i), grid) for i in range(len(self.names))]

    def aggregate_train(self, server_round, replies):
        from flwr.app import MetricRecord

        r = int(server_round) - 1
        reps = self._replies(replies, f"train round {server_round}")
        n_losses = self.rounds if self.exchanges() == 1 else 1
        losses = np.array([check_losses(self._metrics(rep).get("losses", []), self._name(rep), n=n_losses)
                           for rep in reps], dtype=np.float64)
        self.loss_history += [float(x) for x in losses.mean(axis=0)]   # in process: the mean over clients
        self.absorb(r, [{k: self._arrays(rep, k) for k in rep.content.array_records} for rep in reps])
        self.log(f"{self.method}: exchange {server_round}/{self.exchanges()}, mean loss {self.loss_history[-1]:.4f}")
        return None, MetricRecord({"loss": self.loss_history[-1]})

    def configure_evaluate(self, server_round, arrays, config, grid):
        if int(server_round) < self.exchanges():
            return []
        return [self._message(i, "evaluate", int(server_round), self.final_payload(i), grid)
                for i in range(len(self.names))]

    def aggregate_evaluate(self, server_round, replies):
        from flwr.app import MetricRecord

        replies = list(replies)
        if int(server_round) < self.exchanges() and not replies:
            return None
        reps = self._replies(replies, "evaluate")
        metric = self.learner.federation_.metric
        for name, rep in zip(self.names, reps, strict=True):
            if "result" not in rep.content.config_records or "json" not in rep.content["result"]:
                raise BadReply(name, "its evaluation holds no result record", rep.metadata.src_node_id)
            res = reply_json(rep.content["result"]["json"], name)
            for part in ("val", "test"):
                self.utilities[part][name] = float(check_metrics(res.pop(part, None), metric, name, 1,
                                                                 f"{part} utility")[0])
            self.site_extra[name] = self.check_extra(name, res)
        return MetricRecord({"val-mean": float(np.mean(list(self.utilities["val"].values())))})

    def check_extra(self, name: str, res: dict) -> dict:
        """What a site's evaluation returns besides its utilities, checked (none for most methods)."""
        if res:
            raise BadReply(name, f"its evaluation holds unexpected fields {sorted(res)}")
        return res

    def summary(self) -> None:
        self.log(f"{self.method} over Flower: {len(self.names)} sites, {self.rounds} rounds")

    # -- the learner the estimate comes from
    def finish(self, seconds: float):
        """Fill the server's learner as ``fit`` would (oracle, utilities, weights) and return it."""
        from coalitions.oracles import StructuralOracle

        lr = self.learner
        lr.loss_history_ = list(self.loss_history)
        lr.resumed_from_ = 0
        lr.rounds_ = int(self.rounds)
        # The validation loss per round is not collected over Flower (a site would have to score
        # every round's model on its validation split); the estimate says so by empty series.
        lr.val_loss_history_, lr.val_loss_clients_ = [], []
        lr.fit_seconds_ = float(seconds)
        lr.utilities_ = {part: dict(v) for part, v in self.utilities.items()}
        self.finish_weights()
        if not lr.has_weights:
            lr.oracle_ = StructuralOracle(lr.federation_.names, lr.shares_model)
        else:
            lr.oracle_ = lr.weight_oracle(lr.federation_.names, lr.rule_weights())
        return lr

    def finish_weights(self) -> None:
        """Set the learner's weights (none for the utility baselines)."""
        self.learner.weights_ = None
        self.learner.weights_history_ = []


class LocalStrategy(PersonalStrategy):
    """Local: no exchange.  One message starts every site on its own rounds (the initial model from the seed)."""

    def payload(self, r, i):
        return {"model": _numpy(_rows(self.state["params"], i))}

    def absorb(self, r, replies):
        pass

    def exchanges(self) -> int:
        return 1


class FedAvgStrategy(PersonalStrategy):
    """FedAvg: the global model out, each site's locally trained model back, the weighted average."""

    def payload(self, r, i):
        return {"model": _numpy(self.state["global"])}

    def absorb(self, r, replies):
        import torch

        from coalitions.learners.methods.baselines import weighted_average

        stacked = {k: torch.cat([_tensors(rep["model"])[k] for rep in replies]) for k in self.learner.spec_.shapes}
        self.state = {**self.state, "global": weighted_average(stacked, np.asarray(self.sizes))}

    def final_payload(self, i):
        return {"model": _numpy(self.state["global"])}


class SuPerFedStrategy(FedAvgStrategy):
    """SuPerFed: the global (federated) model averaged as in FedAvg; each site's local model stays there."""

    def payload(self, r, i):
        out = {"model": _numpy(self.state["global"])}
        if r == 0:
            out["local"] = _numpy(_rows(self.state["local"], i))
        return out

    def check_extra(self, name, res):
        if set(res) != {"lambda", "val_curve"}:
            raise BadReply(name, f"its evaluation holds fields {sorted(res)}, expected lambda and val_curve")
        return {"lambda": check_number(res["lambda"], name, "its lambda", 0.0, 1.0),
                "val_curve": [float(x) for x in check_metrics(res["val_curve"], self.learner.federation_.metric,
                                                                 name, len(self.learner.lambda_grid),
                                                                 "validation curve")]}

    def finish(self, seconds):
        lr = super().finish(seconds)
        names = self.names
        lr.lambda_ = np.array([self.site_extra[n]["lambda"] for n in names])
        lr.val_curve_ = np.array([self.site_extra[n]["val_curve"] for n in names])
        return lr


class FedAMPStrategy(PersonalStrategy):
    """FedAMP: the server computes ``ξ`` from the uploaded models and sends each site its cloud model ``u_i``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.history: list = []
        self.learner._guarded = 0

    def payload(self, r, i):
        if i == 0:
            self._xi, self._u = self.learner.message_passing(self.state["params"])
            self.history.append(self._xi.cpu())
        return {"model": _numpy(_rows(self._u, i))}

    def absorb(self, r, replies):
        import torch

        self.state = {**self.state, "params": {k: torch.cat([_tensors(rep["model"])[k] for rep in replies])
                                               for k in self.learner.spec_.shapes}}

    def final_payload(self, i):
        return {"model": _numpy(_rows(self.state["params"], i))}

    def finish_weights(self):
        self.learner.finish({"params": self.state["params"], "history": self.history,
                             "guarded": self.learner._guarded})


class FedeRiCoStrategy(PersonalStrategy):
    """FedeRiCo: models travel through the server; each site keeps and computes its own posterior row.

    The server holds the models ``φ_j`` and their Adam states (in process each
    model's owner keeps them; here the server is the switchboard through which
    the sites reach each other's models).  Per round: one ``sample`` exchange
    (each site names its ε-greedy neighbours), then one ``step`` exchange per
    minibatch step of every local epoch: the server sends each site its own
    model and its neighbours', the site returns ``∇ w_ij·ℓ(φ_j; batch_i)`` for
    each (and, on the round's first step, after its E-step, its posterior and
    tracked-loss rows, which the estimate's weights and history need), and the
    server applies :meth:`FedeRiCo.apply_gradients
    <coalitions.learners.methods.federico.FedeRiCo.apply_gradients>`.  At the
    end every site receives every model and scores its posterior mixture.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        n = len(self.sites)
        steps = _epoch_steps(self.sizes, self.learner.batch_size, 0)[0]
        self.schedule = []
        for r in range(self.rounds):
            self.schedule.append(("sample", r, 0, 0))
            self.schedule += [("step", r, e, s) for e in range(int(self.learner.local_epochs)) for s in range(steps)]
        self.k = min(int(self.learner.neighbours), n - 1)
        self.nb = np.zeros((n, self.k), dtype=np.int64)
        self.w_history: list = []
        self.ema_history: list = []
        self.nb_history: list = []
        self._total, self._count = 0.0, 0

    def initial_state(self):
        import torch

        lr = self.learner
        phi = lr._init_params(torch.Generator().manual_seed(int(lr.seed)), torch.device("cpu"), len(self.sites))
        self.opt = lr._make_optimizer()
        return {"phi": phi, "opt": self.opt.init(phi)}

    def exchanges(self) -> int:
        return len(self.schedule)

    def configure_train(self, server_round, arrays, config, grid):
        phase, r, e, s = self.schedule[int(server_round) - 1]
        out = []
        for i in range(len(self.names)):
            extra = {"phase": phase, "epoch": e, "step": s, "neighbours": [int(j) for j in self.nb[i]]}
            payload = {} if phase == "sample" else {"models": _numpy(
                {k: v[[i, *self.nb[i]]] for k, v in self.state["phi"].items()})}
            out.append(self._message(i, "train", r, payload, grid, extra))
        return out

    def aggregate_train(self, server_round, replies):
        import torch
        from flwr.app import MetricRecord

        phase, r, e, s = self.schedule[int(server_round) - 1]
        reps = self._replies(replies, f"train exchange {server_round}")
        metrics = [self._check_federico(i, rep, phase, e == 0 and s == 0) for i, rep in enumerate(reps)]
        if phase == "sample":
            self.nb = np.array([list(m["neighbours"]) for m in metrics], dtype=np.int64).reshape(len(reps), self.k)
            return None, None
        if e == 0 and s == 0:
            self.w_history.append(torch.as_tensor(np.array([list(m["w"]) for m in metrics])))
            self.ema_history.append(torch.as_tensor(np.array([list(m["ema"]) for m in metrics])))
            self.nb_history.append(torch.as_tensor(self.nb.copy()))
            self._total, self._count = 0.0, 0
        names = list(self.learner.spec_.shapes)
        grads = {k: torch.cat([_tensors(self._arrays(rep, "grads", self.k + 1))[k] for rep in reps]) for k in names}
        mod_t = torch.as_tensor(np.concatenate([[i, *self.nb[i]] for i in range(len(reps))]), dtype=torch.int64)
        act = torch.as_tensor(np.repeat([bool(m["active"]) for m in metrics], self.k + 1))
        phi, opt_state = self.learner.apply_gradients(self.state["phi"], self.opt, self.state["opt"], mod_t, act,
                                                      grads)
        self.state = {"phi": phi, "opt": opt_state}
        self._total += sum(float(m["own-loss"]) for m in metrics if int(m["active"]))
        self._count += sum(int(m["active"]) for m in metrics)
        if int(server_round) == len(self.schedule) or self.schedule[int(server_round)][0] == "sample":
            self.loss_history.append(self._total / max(self._count, 1))
            self.log(f"federico: round {r + 1}/{self.rounds}, mean loss {self.loss_history[-1]:.4f}")
        return None, MetricRecord({"active": self._count})

    def _check_federico(self, i: int, rep, phase: str, first: bool) -> dict:
        """Site ``i``'s numbers of a FedeRiCo exchange, checked: neighbours, posterior row, losses."""
        name, n = self.names[i], len(self.names)
        m = self._metrics(rep)
        if phase == "sample":
            nb = m.get("neighbours", [])
            nb = nb if isinstance(nb, list) else [nb]
            if len(nb) != self.k or len(set(nb)) != len(nb) or not all(
                    isinstance(j, int) and not isinstance(j, bool) and 0 <= j < n and j != i for j in nb):
                raise BadReply(name, f"neighbours {nb!r} are not {self.k} distinct other sites of 0..{n - 1}")
            return {"neighbours": nb}
        out = {"active": check_number(m.get("active"), name, "active", 0, 1),
               "own-loss": check_number(m.get("own-loss"), name, "its own loss", 0.0)}
        if first:
            w = check_losses(m.get("w", []), name, "posterior row", n)
            if any(x > 1.0 for x in w) or abs(sum(w) - 1.0) > 1e-4:
                raise BadReply(name, "its posterior row is not a probability vector")
            out.update({"w": w, "ema": check_losses(m.get("ema", []), name, "tracked losses", n)})
        return out

    def final_payload(self, i):
        return {"models": _numpy(self.state["phi"])}

    def finish_weights(self):
        self.learner.finish({"phi": self.state["phi"], "w": self.w_history[-1], "ema": self.ema_history[-1],
                             "history": self.w_history, "ema_history": self.ema_history,
                             "neighbours": self.nb_history})


STRATEGIES = {"local": LocalStrategy, "fedavg": FedAvgStrategy, "fedamp": FedAMPStrategy,
              "fedamp-heuristic": FedAMPStrategy, "federico": FedeRiCoStrategy, "superfed": SuPerFedStrategy, "superfed-lm": SuPerFedStrategy}


def run_personal(grid, settings, method: str, params: dict, log=print):
    """The ServerApp's work for a personalised ``method``: discover the sites, run the strategy, build the learner.

    Returns ``(learner, record)``: the server's learner, fitted as far as the
    server can fit it (its :attr:`estimate_` is the estimate), and the run
    record (sites, traffic, seconds).
    """
    import flwr
    from flwr.app import ArrayRecord

    from coalitions.learners.federated.server import _check_sites, _Link

    t0 = time.perf_counter()
    if params.get("refit"):
        raise InputError(f"--method {method}: refit trains the method again on every set peeling asks about; "
                         "it is not offered over Flower")
    link = _Link(grid, settings, log)
    link.discover(settings.sites, time.monotonic() + settings.wait_s)
    sites = _check_sites(link.descriptions)
    learner = server_learner(method, params, sites, settings.dataset, settings.data_options)
    strategy = STRATEGIES[method](method, learner, sites, dict(link.nodes), link._data_config(), log=log)
    strategy.start(grid, ArrayRecord(), num_rounds=strategy.exchanges(),
                   timeout=settings.round_timeout_s or 3600.0)
    if len(strategy.utilities["val"]) != len(sites):
        raise InputError("the sites' final evaluation did not come back (see the log above)")
    seconds = time.perf_counter() - t0
    learner = strategy.finish(seconds)
    record = {"method": method, "sites": [{k: d[k] for k in ("name", "n-train", "n-val", "n-test")} for d in sites],
              "rounds": learner.rounds, "communication_rounds": strategy.exchanges() + 2,
              "bytes_sent": link.sent + strategy.sent, "bytes_received": link.received + strategy.received,
              "messages": link.messages + strategy.messages, "seconds": seconds, "flower_version": flwr.__version__}
    return learner, record
