"""The server's half of a personalised method: Flower strategies over the sites (docs/federated.md).
"""

from __future__ import annotations

import json

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.federated.personal.learners import (
    as_numpy,
    as_tensors,
    initial_state,
    learner_params,
)
from coalitions.learners.federated.personal.randomness import epoch_steps
from coalitions.learners.federated.replies import BadReply, check_losses, check_metrics, check_number, reply_json

__all__ = ["PersonalStrategy", "FedeRiCoStrategy",
           "METHOD_STRATEGIES"]

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
    half (:func:`~.site.site_train`) and its loss.  After the last round
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
        self.rounds = int(learner.rounds_)   # under a protocol: derived from its steps (prepare)
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

    def admit(self, r: int, reps: list) -> bool:
        """Whether round ``r``'s replies count (all do, but under early stopping: :class:`~.engine.StepStrategy`)."""
        return True

    def final_extra(self) -> dict:
        """What the final evaluation message carries besides the data settings (nothing by default)."""
        return {}

    def final_results(self, results: list[dict]) -> list[dict]:
        """The sites' evaluation results (site order) the utilities come from (as they are, by default)."""
        return results

    # -- messages
    def _message(self, i: int, kind: str, r: int, arrays: dict, grid, extra: dict | None = None):
        from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

        from coalitions.learners.federated.transport import record_bytes

        cfg = {**self.data_config, "method": self.method, "params": json.dumps(learner_params(self.learner)),
               "round": int(r), "site-index": int(i), "sizes": [int(s) for s in self.sizes],
               "rounds": self.rounds, **(extra or {})}
        full = list(self.learner.spec_.shapes)
        partial = {key: list(arr) for key, arr in arrays.items() if list(arr) != full}
        if partial:     # records holding some of the parameters (FedPer's shared body) name them
            cfg["record-names"] = json.dumps(partial)
        content = RecordDict({"config": ConfigRecord(cfg)})
        for key, arr in arrays.items():
            content[key] = ArrayRecord([np.asarray(v) for v in arr.values()])
        self.sent += record_bytes(content)
        self.messages += 1
        return Message(content, dst_node_id=self.nodes[self.names[i]], message_type=kind)

    def _replies(self, replies, kind: str) -> list:
        from coalitions.learners.federated.transport import record_bytes

        by_node = {}
        for rep in replies:
            src = rep.metadata.src_node_id
            site = next((n for n, node in self.nodes.items() if node == src), str(src))
            if rep.has_error():
                reason = str(rep.error.reason).strip().splitlines()[-1] if rep.error.reason else ""
                raise InputError(f"site {site}: {kind} failed ({reason})")
            self.received += record_bytes(rep.content)
            self.messages += 1
            by_node[src] = rep
        missing = [n for n in self.names if self.nodes[n] not in by_node]
        if missing:
            raise InputError(f"site(s) {', '.join(missing)} did not answer {kind}")
        return [by_node[self.nodes[n]] for n in self.names]

    def _name(self, rep) -> str:
        src = rep.metadata.src_node_id
        return next((n for n, node in self.nodes.items() if node == src), str(src))

    def _arrays(self, rep, key: str, rows: int = 1, names=None) -> dict:
        """Record ``key`` of a reply as ``{parameter: (rows, ...)}``, checked (:func:`~.replies.check_arrays`).

        ``names``: the parameters the record holds (default: all of the model's).
        """
        from coalitions.learners.federated.replies import check_arrays
        from coalitions.learners.federated.transport import reply_arrays

        shapes = self.learner.spec_.shapes
        names = list(shapes) if names is None else list(names)
        name = self._name(rep)
        arrays = check_arrays(reply_arrays(rep, key, name, rep.metadata.src_node_id),
                              [(rows, *shapes[n]) for n in names], name, key)
        return dict(zip(names, arrays, strict=True))

    def _metrics(self, rep):
        from coalitions.learners.federated.transport import reply_record

        return reply_record(rep, "metrics", self._name(rep), rep.metadata.src_node_id, "metric_records")

    # -- Flower's strategy API
    def configure_train(self, server_round, arrays, config, grid):
        r = int(server_round) - 1
        return [self._message(i, "train", r, self.payload(r, i), grid) for i in range(len(self.names))]

    def aggregate_train(self, server_round, replies):
        from flwr.app import MetricRecord

        r = int(server_round) - 1
        reps = self._replies(replies, f"train round {server_round}")
        if not self.admit(r, reps):     # the round does not count (early stopping decided before it)
            return None, None
        n_losses = self.rounds if self.exchanges() == 1 else 1
        losses = np.array([check_losses(self._metrics(rep).get("losses", []), self._name(rep), n=n_losses)
                           for rep in reps], dtype=np.float64)
        self.loss_history += [float(x) for x in losses.mean(axis=0)]   # in process: the mean over clients
        self.absorb(r, [{k: self._arrays(rep, k, names=self.reply_names(k)) for k in rep.content.array_records}
                        for rep in reps])
        self.log(f"{self.method}: exchange {server_round}/{self.exchanges()}, mean loss {self.loss_history[-1]:.4f}")
        return None, MetricRecord({"loss": self.loss_history[-1]})

    def configure_evaluate(self, server_round, arrays, config, grid):
        if int(server_round) < self.exchanges():
            return []
        return [self._message(i, "evaluate", int(server_round), self.final_payload(i), grid, self.final_extra())
                for i in range(len(self.names))]

    def aggregate_evaluate(self, server_round, replies):
        from flwr.app import MetricRecord

        replies = list(replies)
        if int(server_round) < self.exchanges() and not replies:
            return None
        reps = self._replies(replies, "evaluate")
        metric = self.learner.federation_.metric
        results = []
        for name, rep in zip(self.names, reps, strict=True):
            if "result" not in rep.content.config_records or "json" not in rep.content["result"]:
                raise BadReply(name, "its evaluation holds no result record", rep.metadata.src_node_id)
            results.append(reply_json(rep.content["result"]["json"], name))
        for name, res in zip(self.names, self.final_results(results), strict=True):
            for part in ("val", "test"):
                self.utilities[part][name] = float(check_metrics(res.pop(part, None), metric, name, 1,
                                                                 f"{part} utility")[0])
            self.site_extra[name] = self.check_extra(name, res)
        return MetricRecord({"val-mean": float(np.mean(list(self.utilities["val"].values())))})

    def reply_names(self, key: str):
        """The parameters record ``key`` of a site's reply holds (``None``: all of the model's)."""
        return None

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
        # Without early stopping the validation loss per round is not collected over Flower (a site
        # would have to score every round's model on its validation split); the estimate says so by
        # empty series.  With it, StepStrategy.finish records the sites' losses (.stopping).
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
        lr = self.learner   # its batch and epochs per round: its own, or its protocol's (as in process)
        steps = epoch_steps(self.sizes, lr.minibatch_size(), 0)[0]
        epochs = int(lr.epochs_per_round(lr.federation_))
        self.schedule = []
        for r in range(self.rounds):
            self.schedule.append(("sample", r, 0, 0))
            self.schedule += [("step", r, e, s) for e in range(epochs) for s in range(steps)]
        self.k = min(int(self.learner.neighbours), n - 1)
        self.nb = np.zeros((n, self.k), dtype=np.int64)
        self.w_history: list = []
        self.ema_history: list = []
        self.nb_history: list = []
        self._total, self._count = 0.0, 0

    def initial_state(self):
        import torch

        lr = self.learner
        phi = lr.init_params(torch.Generator().manual_seed(int(lr.seed)), torch.device("cpu"), len(self.sites))
        self.opt = lr.make_optimizer()
        return {"phi": phi, "opt": self.opt.init(phi)}

    def exchanges(self) -> int:
        return len(self.schedule)

    def configure_train(self, server_round, arrays, config, grid):
        phase, r, e, s = self.schedule[int(server_round) - 1]
        out = []
        for i in range(len(self.names)):
            extra = {"phase": phase, "epoch": e, "step": s, "neighbours": [int(j) for j in self.nb[i]]}
            payload = {} if phase == "sample" else {"models": as_numpy(
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
        grads = {k: torch.cat([as_tensors(self._arrays(rep, "grads", self.k + 1))[k] for rep in reps]) for k in names}
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
        out: dict[str, float | list[float]] = {
            "active": check_number(m.get("active"), name, "active", 0, 1),
            "own-loss": check_number(m.get("own-loss"), name, "its own loss", 0.0)}
        if first:
            w = check_losses(m.get("w", []), name, "posterior row", n)
            if any(x > 1.0 for x in w) or abs(sum(w) - 1.0) > 1e-4:
                raise BadReply(name, "its posterior row is not a probability vector")
            out.update({"w": w, "ema": check_losses(m.get("ema", []), name, "tracked losses", n)})
        return out

    def final_payload(self, i):
        return {"models": as_numpy(self.state["phi"])}

    def finish_weights(self):
        self.learner.finish({"phi": self.state["phi"], "w": self.w_history[-1], "ema": self.ema_history[-1],
                             "history": self.w_history, "ema_history": self.ema_history,
                             "neighbours": self.nb_history})


#: The per-method servers of the methods not yet written as a site step and a server step
#: (:data:`coalitions.learners.federated.personal.engine.STRATEGIES` is the table in use).
METHOD_STRATEGIES = {"federico": FedeRiCoStrategy}
