"""The server's half of a personalised method: messages, the final evaluation, the learner (docs/federated.md).

The training exchanges are :class:`~coalitions.learners.federated.personal.engine.StepStrategy`'s.
"""

from __future__ import annotations

import json

import numpy as np

from coalitions.learners.federated.personal.learners import initial_state, learner_params
from coalitions.learners.federated.replies import BadReply, check_metrics, reply_json

__all__ = ["PersonalStrategy"]

# --------------------------------------------------------------------------- the server's half
class PersonalStrategy:
    """A personalised learner's server: the messages to its sites, their final evaluation, the learner.

    Parameters
    ----------
    method : str
        A key of :data:`PERSONAL`.
    learner
        :func:`server_learner` of the method.
    sites : list of dict
        The sites' descriptions, in order (site ``i`` is client ``i``).
    data_config : dict
        What every message carries so that a site finds its data (dataset,
        loader options, threads).

    The run (:func:`~.serve.run_personal`) sends the messages through the public transport
    (:class:`~coalitions.learners.federated.transport.Link`), as every server of the package
    does.  Every message to site ``i`` carries ``config`` (the method, the learner's parameters
    as JSON, the round, ``i`` and every site's training-set size) and its arrays; replies carry
    the arrays of the site's half (:func:`~.site.site_train`) and its losses.  After the last
    exchange :meth:`evaluation_contents` asks each site for its utilities (:func:`site_finish`)
    and :meth:`take_evaluation` checks them.
    """

    def __init__(self, method: str, learner, sites: list[dict], data_config: dict, log=print):
        self.method = method
        self.learner = learner
        self.sites = sites
        self.names = [d["name"] for d in sites]
        self.sizes = [int(d["n-train"]) for d in sites]
        self.data_config = dict(data_config)
        self.log = log
        self.rounds = int(learner.rounds_)   # under a protocol: derived from its steps (prepare)
        self.loss_history: list[float] = []
        self.utilities: dict = {"val": {}, "test": {}}
        self.site_extra: dict = {}
        self.state = self.initial_state()

    def initial_state(self) -> dict:
        """The server's state before the first round (the learner's ``init_state``: no data needed)."""
        return initial_state(self.learner, len(self.sites))

    # -- what the step strategy says (:class:`~.engine.StepStrategy`)
    def final_payload(self, i: int) -> dict:
        """What site ``i`` needs to score its final model."""
        return {}

    def exchanges(self) -> int:
        """Training exchanges (messages to every site)."""
        return self.rounds

    def final_extra(self) -> dict:
        """What the final evaluation message carries besides the data settings (nothing by default)."""
        return {}

    def final_results(self, results: list[dict]) -> list[dict]:
        """The sites' evaluation results (site order) the utilities come from (as they are, by default)."""
        return results

    # -- messages
    def content(self, i: int, r: int, arrays: dict, extra: dict | None = None):
        """The message to site ``i`` in round ``r``: its ``config`` record and ``arrays`` (one record each)."""
        from flwr.app import ArrayRecord, ConfigRecord, RecordDict

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
        return content

    def _metrics(self, name: str, rep):
        from coalitions.learners.federated.transport import reply_record

        return reply_record(rep, "metrics", name, rep.metadata.src_node_id, "metric_records")

    # -- the final evaluation
    def evaluation_contents(self) -> dict:
        """``{site: message}``: the final evaluation, each site's model as :meth:`final_payload` gives it."""
        return {name: self.content(i, self.rounds, self.final_payload(i), self.final_extra())
                for i, name in enumerate(self.names)}

    def take_evaluation(self, replies: dict) -> None:
        """The sites' evaluation replies (``{site: reply}``), checked: their utilities and extra fields."""
        metric = self.learner.federation_.metric
        results = []
        for name in self.names:
            rep = replies[name]
            if "result" not in rep.content.config_records or "json" not in rep.content["result"]:
                raise BadReply(name, "its evaluation holds no result record", rep.metadata.src_node_id)
            results.append(reply_json(rep.content["result"]["json"], name))
        for name, res in zip(self.names, self.final_results(results), strict=True):
            for part in ("val", "test"):
                self.utilities[part][name] = float(check_metrics(res.pop(part, None), metric, name, 1,
                                                                 f"{part} utility")[0])
            self.site_extra[name] = self.check_extra(name, res)

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
