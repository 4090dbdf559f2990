"""The server's half of a personalised method over Flower: messages, the final evaluation, the learner (docs/federated.md).

The training exchanges are :class:`~coalitions.learners.federated.personal.engine.StepStrategy`'s.
"""

from __future__ import annotations

import json

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.federated.personal.learners import initial_state, learner_params
from coalitions.learners.federated.replies import BadReply, check_metrics, reply_json

__all__ = ["PersonalStrategy"]

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

    # -- what the step strategy says (:class:`~.engine.StepStrategy`)
    def final_payload(self, i: int) -> dict:
        """What site ``i`` needs to score its final model."""
        return {}

    def exchanges(self) -> int:
        """Training exchanges (Flower rounds)."""
        return self.rounds

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

    def _metrics(self, rep):
        from coalitions.learners.federated.transport import reply_record

        return reply_record(rep, "metrics", self._name(rep), rep.metadata.src_node_id, "metric_records")

    # -- Flower's strategy API (training: :class:`~.engine.StepStrategy`)
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
