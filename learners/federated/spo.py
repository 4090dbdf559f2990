r"""SPO over Flower: the server keeps the Pareto hypernetwork, the sites return losses and gradients.

The in-process learner (:class:`coalitions.learners.methods.spo.SPO`) trains a
hypernetwork ``h(d)`` on every client's data and searches its faces with every
client's validation loss.  Here the hypernetwork never leaves the server and
no row leaves a site; the protocol is pFedHN's (Shamsian et al. 2021):

* **training** (each step): the server draws the step's directions ``D`` and,
  for each site, the sample indices of its minibatch (from the same generator
  as in process: the sites' sizes suffice), computes the target models
  ``θ_b = h(d_b)`` and sends all of them to every site; site ``j`` returns its
  mean loss ``L_j(θ_b)`` on that minibatch and ``∇_θ L_j(θ_b)`` for every ``b``.
  The server forms the scalarised objective ``Σ_j d_bj L_j(θ_b)`` (plus the
  L2 term) exactly as in process, and back-propagates through ``h`` with the
  sites' gradients as the vector–Jacobian product of the remote part
  (:class:`RemoteLoss`), then steps Adam;
* **direction search** (:class:`RemoteSearch`): each search row targets one
  client; its site receives ``h(d)`` for its rows and returns the validation
  loss (and, for the projected-gradient step, ``∇_θ`` of it), so
  ``∇_d L_i^{val}(h(d))`` is the same chain through ``h``;
* **utilities**: site ``i`` receives ``h(d_i)`` at its direction and returns
  its validation and test metric.

Everything else is the library's own code: :meth:`SPO._train
<coalitions.learners.methods.spo.SPO._train>` (the training loop, its
generator, schedule and L2 term),
:class:`~coalitions.learners.methods.spo.search.DirectionSearch` (only its
``own_loss`` is remote), :class:`~coalitions.learners.methods.spo.oracle.SPOOracle`,
and the estimate (:attr:`SPO.estimate_`, i.e. :func:`coalitions.estimate.build_estimate`).
EPO weighting (``epo=True``) needs every client's Jacobian with respect to the
hypernetwork per direction and is not offered here.

What leaves a site: per training step, ``B`` losses and ``B`` gradients with
respect to the target model's parameters (``B`` = directions per step) on a
minibatch the server chose by index; per search step, the losses (and
gradients) of the rows that target it; at the end, its two metrics.  A
gradient of a minibatch loss is what every FedSGD-style protocol sends; it is
not differentially private.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from coalitions.errors import InputError
from coalitions.learners.federated.protocol import refuse_tuning_split
from coalitions.learners.methods.spo import SPO
from coalitions.learners.methods.spo.estimator import PROTOCOL_FIELDS
from coalitions.learners.methods.spo.search import DirectionSearch
from coalitions.learners.training.decay import decayed_names

if TYPE_CHECKING:
    from coalitions.learners.training.engine import Padded

__all__ = ["RemoteLoss", "RemoteSearch", "FederatedSPO", "spo_site", "index_split"]


def _flat(params: dict, names) -> torch.Tensor:
    lead = next(iter(params.values())).shape[0]
    return torch.cat([params[k].reshape(lead, -1) for k in names], dim=1)


def _unflat(flat: torch.Tensor, spec) -> dict:
    out, at = {}, 0
    for k, shape in spec.shapes.items():
        size = int(np.prod(shape))
        out[k] = flat[..., at:at + size].reshape(*flat.shape[:-1], *shape)
        at += size
    return out


class RemoteLoss(torch.autograd.Function):
    """Losses computed at the sites, differentiable in the target parameters sent to them.

    ``RemoteLoss.apply(flat, query)``: ``flat`` (B, P) target models;
    ``query(flat_np, need_grad)`` returns ``(values, grads)`` with ``values`` of
    shape (B, …) and ``grads`` (B, …, P) (``None`` without ``need_grad``).  The
    backward pass is the vector–Jacobian product ``Σ grad_out · ∇_θ``, the
    sites' half of back-propagation through the hypernetwork.
    """

    @staticmethod
    def forward(ctx, flat, query):
        values, grads = query(flat.detach().cpu().numpy(), bool(flat.requires_grad))
        if grads is not None:
            ctx.save_for_backward(torch.as_tensor(grads, dtype=flat.dtype))
        return torch.as_tensor(values, dtype=flat.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        (grads,) = ctx.saved_tensors
        g = grad_out.reshape(*grad_out.shape, 1) * grads
        return g.reshape(grads.shape[0], -1, grads.shape[-1]).sum(1), None


def index_split(sizes) -> Padded:
    """A stand-in for the federation's padded training split that holds sample *indices*, not data.

    :meth:`Padded.sample <coalitions.learners.training.engine.Padded.sample>` run
    on it draws exactly what it draws on the data (same generator calls) and
    returns, in place of features, the indices of the samples drawn (and the
    mask), which the server sends to each site.
    """
    from coalitions.learners.training.engine import Padded

    sizes = np.asarray(sizes, dtype=np.int64)
    n_max = int(sizes.max())
    stub = object.__new__(Padded)
    stub.sizes = sizes
    stub.X = torch.arange(n_max).expand(len(sizes), n_max).clone()
    stub.y = torch.zeros(len(sizes), n_max)
    stub.m = torch.as_tensor((np.arange(n_max)[None, :] < sizes[:, None]).astype(np.float32))
    return stub


class RemoteSearch(DirectionSearch):
    """:class:`DirectionSearch` whose validation losses come from the sites (each row from its target's site)."""

    def __init__(self, remote, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.remote = remote

    def own_loss(self, d: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        params = self.hypernet(d)
        flat = _flat(params, self.spec.shapes)
        tnp = targets.cpu().numpy()
        return RemoteLoss.apply(flat, lambda f, g: self.remote.val_losses(f, tnp, g))


class FederatedSPO(SPO):
    """SPO with the hypernetwork at the server and the data at the sites (module docstring).

    Same parameters as :class:`~coalitions.learners.methods.spo.SPO`, its training
    settings from its ``protocol`` alone (``federate``'s training flags: ``--steps``,
    ``--batch-size``, ``--patience``; one learning rate, no ``lr_grid``).  Instead
    of ``fit(federation)``, :meth:`fit_remote` takes the sites' descriptions and
    ``ask``, a function that sends per-site requests and returns the replies
    (the ServerApp's link).
    """

    # -- the remote calls
    def _ask(self, phase: str, rows: dict, extra: dict) -> dict:
        return self.ask_(phase, rows, extra)

    def _loss_matrix(self, params: dict, X, y, m) -> torch.Tensor:
        """``L[b, j]`` computed at site ``j`` on the minibatch whose indices ``X[j]`` the server drew."""
        flat = _flat(params, self.spec_.shapes)
        idx, mask = X.cpu().numpy(), m.cpu().numpy()

        def query(f, need_grad):
            reqs = {j: {"models": f, "index": idx[j], "mask": mask[j]} for j in range(self.federation_.n)}
            rep = self._ask("train-loss", reqs, {"grad": int(need_grad)})
            values = np.stack([rep[j]["values"] for j in range(self.federation_.n)], axis=1)
            grads = np.stack([rep[j]["grads"] for j in range(self.federation_.n)], axis=1) if need_grad else None
            return values, grads

        return RemoteLoss.apply(flat, query)

    def val_losses(self, flat: np.ndarray, targets: np.ndarray, need_grad: bool):
        """Validation loss of row ``b``'s target client under model ``flat[b]`` (and its gradient)."""
        B, P = flat.shape
        values = np.zeros(B)
        grads = np.zeros((B, P))
        reqs = {int(j): {"models": flat[targets == j]} for j in np.unique(targets)}
        rep = self._ask("val-loss", reqs, {"grad": int(need_grad)})
        for j, r in rep.items():
            values[targets == j] = r["values"]
            if need_grad:
                grads[targets == j] = r["grads"]
        return values, (grads if need_grad else None)

    def _val_loss_matrix(self, params: dict) -> torch.Tensor:
        """``L[b, j]`` measured at site ``j``: every model sent to every site (the convergence record)."""
        flat = _flat(params, self.spec_.shapes).detach().cpu().numpy()
        B, n = flat.shape[0], self.federation_.n
        values, _ = self.val_losses(np.tile(flat, (n, 1)), np.repeat(np.arange(n), B), False)
        return torch.as_tensor(values.reshape(n, B).T)

    def utilities_at(self, D: np.ndarray) -> dict:
        """Each site's metric at its direction (row of ``D``), val and test, measured at the site."""
        names = self.federation_.names
        flat = _flat(self.predict_params_tensor(D), self.spec_.shapes).numpy()
        rep = self._ask("utility", {i: {"models": flat[i:i + 1]} for i in range(len(names))}, {})
        return {part: {names[i]: float(rep[i][part]) for i in range(len(names))} for part in ("val", "test")}

    def predict_params_tensor(self, D) -> dict:
        d = torch.as_tensor(np.atleast_2d(np.asarray(D, dtype=np.float64)), dtype=torch.float32)
        with torch.no_grad():
            return self._hypernet()(d)

    # -- fitting from the server
    def fit_remote(self, sites: list[dict], ask, dataset: str | None, data_options: dict) -> FederatedSPO:
        """Train the hypernetwork through ``ask`` and expose the oracle, directions and utilities (as ``fit``)."""
        import time

        from coalitions.learners.data.metrics import loss_function
        from coalitions.learners.federated.protocol import described_federation
        from coalitions.learners.methods.spo.hypernetwork import ParetoHypernetwork
        from coalitions.learners.training.models import make_model

        self.check_params()
        if self.epo:
            raise InputError("--method-option epo: EPO weighting is not offered over Flower (it needs every "
                             "client's Jacobian with respect to the hypernetwork)")
        self._forget_estimate()
        t0 = time.perf_counter()
        fed = described_federation(sites, dataset, data_options)
        task = fed.task
        self.federation_ = fed
        self.protocol_ = self.protocol_for(fed)
        _refuse_remote(self.variant, self.protocol_.lr_grid)
        refuse_tuning_split(self.protocol_)
        self.ask_ = ask
        self.device_ = torch.device("cpu")
        from coalitions.learners.methods.base import default_model

        self.model_ = self.model or default_model(fed, images="logistic")
        self.spec_ = make_model(self.model_, fed.input_shape, fed.n_outputs)
        self.l2_ = float(self.l2) if self.l2 is not None else (1e-2 if task == "regression" else 1e-3)
        self._decay = decayed_names(self.spec_.shapes)
        self.loss_ = loss_function(task)
        self.train_ = index_split([d["n-train"] for d in sites])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net = ParetoHypernetwork(fed.n, self.spec_, self.hidden, self.embed, self.layers, self.log_eps)
        self.hypernet_ = net
        self.epo_fallbacks_ = 0
        t_train = time.perf_counter()
        self.history_ = self._train(fed)
        t_train = time.perf_counter() - t_train
        return self._conclude(fed, lambda: RemoteSearch(self, self.hypernet_, self.spec_, self.loss_, None,
                                                        self.device_, self.seed, self.search_steps, self.starts,
                                                        self.line_search), t0, t_train)


# --------------------------------------------------------------------------- the site's half
def spo_site(site, cfg: dict, arrays: dict) -> dict:
    """One SPO request at a site: losses (and ``∇_θ``) of the target models sent, or the metrics at one.

    ``cfg["phase"]``: ``"train-loss"`` (mean loss on the minibatch of the
    indices sent, padded entries masked), ``"val-loss"`` (mean loss on the
    whole validation split) or ``"utility"`` (validation and test metric).
    """
    from torch.func import grad_and_value, vmap

    from coalitions.learners.data.metrics import evaluate_batch, loss_function
    from coalitions.learners.training.models import make_model

    c = site.client
    n_outputs = site.n_classes if site.task == "multiclass" else 1
    spec = make_model(str(cfg["model"]), c.train.X.shape[1:], n_outputs)
    flat = torch.as_tensor(np.asarray(arrays["models"], dtype=np.float32))
    if flat.ndim != 2 or flat.shape[1] != spec.n_params:
        raise InputError(f"the server sent target models of shape {tuple(flat.shape)}; this site's {spec.kind} "
                         f"model has {spec.n_params} parameters")
    phase = str(cfg["phase"])
    if phase == "utility":
        out = {}
        params = _unflat(flat[0], spec)
        for part in ("val", "test"):
            split = getattr(c, part)
            with torch.no_grad():
                s = spec.forward(params, torch.tensor(split.X, dtype=torch.float32)).double().numpy()
            out[part] = float(evaluate_batch(site.metric, split.y, s[None])[0])
        return out
    loss = loss_function(site.task)
    if phase == "train-loss":
        idx = np.asarray(arrays["index"], dtype=np.int64)
        m = torch.as_tensor(np.asarray(arrays["mask"], dtype=np.float32))
        idx = np.minimum(idx, len(c.train) - 1)        # padded entries (mask 0) point at a real row
        X = torch.as_tensor(np.array(c.train.X, dtype=np.float32)[idx])
        y = torch.as_tensor(np.array(c.train.y)[idx])
    elif phase == "val-loss":
        X = torch.as_tensor(np.array(c.val.X, dtype=np.float32))
        y = torch.as_tensor(np.array(c.val.y))
        m = torch.ones(len(y))
    else:
        raise InputError(f"unknown SPO request {phase!r}")

    def one(f):
        per = loss(spec.forward(_unflat(f, spec), X), y)
        return (per * m).sum() / m.sum()

    if int(cfg.get("grad", 0)):
        grads, values = vmap(grad_and_value(one))(flat)
        return {"values": values.double().numpy(), "grads": grads.double().numpy()}
    with torch.no_grad():
        values = vmap(one)(flat)
    return {"values": values.double().numpy()}


def spo_params(seed: int, options: dict | None) -> dict:
    """SPO's parameters for ``federate --method spo``: its own defaults, the run's ``seed``, then ``options``.

    Its training settings are not among them: they come from the run's protocol (:func:`check_spo`).
    """
    return {"seed": int(seed), **dict(options or {})}


#: The training flags' protocol fields that are SPO's own parameters instead (the hypernetwork's rate, the
#: target model, its hidden units, its ridge): over Flower they are method options.
_OWN = {"lr": "lr", "model": "model", "hidden": "target_hidden", "weight_decay": "l2"}


def _flag(field: str) -> str:
    return "--mlp-hidden" if field == "hidden" else "--" + field.replace("_", "-")


def check_spo(training: dict, options: dict | None, seed: int = 0) -> None:
    """Refuse bad SPO options before anything starts.

    Over Flower, as in process, SPO's training settings come from the run's training protocol:
    of the training flags (``training``, protocol field -> value) it takes ``--steps``,
    ``--batch-size`` and ``--patience`` (:data:`~coalitions.learners.methods.spo.estimator.PROTOCOL_FIELDS`;
    ``--lr-grid`` is not offered over Flower).  Its own settings (``lr``, ``model``, ...) are
    method options (``--method-option``); a training flag that SPO does not read is refused rather than ignored,
    and so is a ``--method-option`` naming a training setting.
    """
    from coalitions.params import ParameterError

    for field in training:
        if field in _OWN:
            raise InputError(f"{_flag(field)}: --method spo's {_OWN[field]} is its own setting, not the training "
                             f"protocol's; over Flower give it as --method-option {_OWN[field]}=…")
        if field not in PROTOCOL_FIELDS:
            raise InputError(f"{_flag(field)} does not apply to --method spo (of the training flags it takes "
                             "--steps, --batch-size and --patience)")
    if "lr_grid" in training:
        _refuse_remote("ours", training["lr_grid"])
    params = spo_params(seed, options)
    for name in PROTOCOL_FIELDS:
        if name in params:
            raise InputError(f"--method-option {name}: SPO's training settings come from the training flags; "
                             f"give {_flag(name)}")
    unknown = sorted(set(params) - set(SPO.param_names()))
    if unknown:
        raise InputError(f"--method-option {unknown[0]}: --method spo takes no such option "
                         f"(its own: {', '.join(n for n in SPO.param_names() if n not in ('progress', 'device'))})")
    try:
        FederatedSPO(**params).check_params()
    except ParameterError as e:
        raise InputError(f"--method spo: {e}") from None
    if params.get("epo"):
        raise InputError("--method-option epo: EPO weighting is not offered over Flower")
    _refuse_remote(params.get("variant", "ours"), None)


def _refuse_remote(variant, lr_grid) -> None:
    """Over Flower SPO runs our variant with one learning rate: say so instead of silently ignoring."""
    if variant != "ours":
        raise InputError(f"--method-option variant={variant}: only SPO's 'ours' variant is offered over Flower "
                         "(the paper's trains one hypernetwork per target and face)")
    if lr_grid is not None:
        raise InputError("--lr-grid: learning-rate tuning is not offered over Flower for --method spo; give one "
                         "rate (--method-option lr=…)")


def _checked_reply(rep, name: str, phase: str, shape: tuple, need_grad: bool, metric: str) -> dict:
    """A site's SPO reply, checked (:mod:`~coalitions.learners.federated.replies`) before the server uses it.

    ``shape`` is ``(B, P)``, the target models sent; a loss reply holds ``values``
    ``(B,)`` (losses: finite, ``>= 0``) and, when asked, ``grads`` ``(B, P)``; a
    ``utility`` reply the site's validation and test metric.
    """
    from coalitions.learners.federated.replies import BadReply, check_arrays, check_losses, check_metrics, reply_json
    from coalitions.learners.federated.transport import reply_arrays

    if "result" not in rep.content.config_records or "json" not in rep.content["result"]:
        raise BadReply(name, "its reply holds no result record")
    rec = reply_json(rep.content["result"]["json"], name)
    if phase == "utility":
        return {part: float(check_metrics(rec.get(part), metric, name, 1, f"{part} utility")[0])
                for part in ("val", "test")}
    keys = ["values", "grads"] if need_grad else ["values"]
    if rec.get("array-keys") != keys:
        raise BadReply(name, f"its {phase} reply holds {rec.get('array-keys')!r}, expected {keys}")
    B, P = shape
    arrays = check_arrays(reply_arrays(rep, "arrays", name, None), [(B,), (B, P)][:len(keys)], name, phase,
                          dtype=np.float64)
    check_losses(arrays[0], name, f"{phase} values")
    return dict(zip(keys, arrays, strict=True))


def run_spo(grid, settings, log=print):
    """The ServerApp's work for ``--method spo``: discover the sites, fit the hypernetwork through them."""
    import time

    import flwr
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    from coalitions.learners.federated.transport import Link, check_sites

    t0 = time.perf_counter()
    link = Link(grid, settings, log)
    link.discover(settings.sites, time.monotonic() + settings.wait_s)
    sites = check_sites(link.descriptions, link.nodes)
    names = [d["name"] for d in sites]
    params = spo_params(settings.seed, settings.method_options)
    # the run's protocol (the sites' task's default with the training flags given), as every method over Flower
    learner = FederatedSPO(**{**params, "device": "cpu", "protocol": settings.protocol_for(sites[0]["task"])})
    counter = {"exchanges": 0}

    def ask(phase: str, rows: dict, extra: dict) -> dict:
        counter["exchanges"] += 1
        contents = {}
        for j, arrays in rows.items():
            cfg = {**link.data_config(), "method": "spo", "phase": phase, "model": learner.model_, **extra}
            contents[names[j]] = RecordDict({"config": ConfigRecord(cfg),
                                             "arrays": ArrayRecord([np.asarray(a) for a in arrays.values()]),
                                             "keys": ConfigRecord({"keys": list(arrays)})})
        replies = link.ask(contents, "train", f"spo-{counter['exchanges']}")
        return {j: _checked_reply(replies[names[j]], names[j], phase, rows[j]["models"].shape,
                                  bool(extra.get("grad")), sites[0]["metric"]) for j in rows}

    learner.fit_remote(sites, ask, settings.dataset, settings.data_options)
    learner.estimate_    # noqa: B018  (peeling's searches, each a remote exchange, run while the sites are here)
    seconds = time.perf_counter() - t0
    record = {"method": "spo", "sites": [{k: d[k] for k in ("name", "n-train", "n-val", "n-test")} for d in sites],
              "rounds": int(learner.protocol_.steps), "communication_rounds": counter["exchanges"] + 1,
              "bytes_sent": link.sent, "bytes_received": link.received, "messages": link.messages,
              "seconds": seconds, "flower_version": flwr.__version__}
    return learner, record
