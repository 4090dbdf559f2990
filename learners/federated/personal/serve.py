"""The ServerApp's run of a personalised method over Flower: discover the sites, run the method's server.

The server comes from :data:`~coalitions.learners.federated.personal.engine.STRATEGIES`: the
generic :class:`~coalitions.learners.federated.personal.engine.StepStrategy` for every method,
each written as site steps and server steps (one pair per phase of its round).  Its messages go
through :class:`~coalitions.learners.federated.transport.Link`, as the exact game's and SPO's do:
one transport, with its discovery, timeouts, traffic counters and errors naming the site.  A
training message is never sent twice (a site keeps state between messages); the final evaluation
is asked again of a silent site, up to ``--retries`` times.
"""

from __future__ import annotations

import time

from coalitions.errors import InputError
from coalitions.learners.federated.personal.engine import STRATEGIES
from coalitions.learners.federated.personal.learners import method_params, server_learner

__all__ = ["run_personal"]


def run_personal(grid, settings, method: str, params: dict | None = None, log=print):
    """The ServerApp's work for a personalised ``method``: discover the sites, run the strategy, build the learner.

    ``params``: the learner's parameters; ``None``: :func:`~.learners.method_params` of the run's
    protocol for the sites' task (known once they have described themselves), its seed and
    ``settings.method_options``.

    Returns ``(learner, record)``: the server's learner, fitted as far as the
    server can fit it (its :attr:`estimate_` is the estimate), and the run
    record (sites, traffic, seconds).
    """
    import flwr

    from coalitions.learners.federated.transport import Link, check_sites

    t0 = time.perf_counter()
    if params is not None and params.get("refit"):
        raise InputError(f"--method {method}: refit trains the method again on every set peeling asks about; "
                         "it is not offered over Flower")
    link = Link(grid, settings, log)
    link.discover(settings.sites, time.monotonic() + settings.wait_s)
    sites = check_sites(link.descriptions, link.nodes)
    if params is None:
        params = method_params(settings.protocol_for(sites[0]["task"]), settings.seed, settings.method_options)
    learner = server_learner(method, params, sites, settings.dataset, settings.data_options)
    strategy = STRATEGIES[method](method, learner, sites, link.data_config(), log=log)
    strategy.summary()
    for x in range(strategy.exchanges()):
        contents = strategy.train_contents(x)
        if contents is None:        # early stopping stopped: the remaining exchanges send nothing
            break
        # a site keeps state between messages, so a training message is never sent twice
        strategy.take_train(x, link.ask(contents, "train", strategy.group(x), retries=0, resumable=False))
    # the final evaluation changes nothing at a site: a silent one is asked again (--retries)
    strategy.take_evaluation(link.ask(strategy.evaluation_contents(), "evaluate", "of the final models",
                                      resumable=False))
    seconds = time.perf_counter() - t0
    learner = strategy.finish(seconds)
    record = {"method": method, "sites": [{k: d[k] for k in ("name", "n-train", "n-val", "n-test")} for d in sites],
              "rounds": learner.rounds_, "communication_rounds": strategy.exchanges() + 2,
              "bytes_sent": link.sent, "bytes_received": link.received,
              "messages": link.messages, "seconds": seconds, "flower_version": flwr.__version__}
    return learner, record
