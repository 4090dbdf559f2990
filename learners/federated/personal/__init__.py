"""The personalised learners over Flower: every method's own site step and server step (docs/federated.md).

``coalitions learn DATASET --method M`` trains a personalised learner
(:mod:`coalitions.learners.methods`) in one process holding every client's
data.  Here the same learner runs over Flower: each site runs the method's
*site step* on its own data, and one generic Flower :class:`Strategy` on the
ServerApp runs its *server step*; the server never sees a row.  Both steps
are the method's own code
(:meth:`~coalitions.learners.methods.base.PersonalizedLearner.site_step`,
:meth:`~coalitions.learners.methods.base.PersonalizedLearner.server_step`),
written on stacked tensors and called on different objects:

* a **site** builds the learner (same class, same parameters, every site's
  training-set size) over a one-client federation holding only its own data
  (:func:`site_learner`), merges the server's message (its row of the
  method's ``down`` keys) into what it kept (the ``kept`` keys and its
  optimiser states, in Flower's ``Context.state``), runs ``site_step`` on that
  one-row state and replies with the ``up`` keys
  (:func:`~.engine.step_site`); at the end the learner's ``finish`` and its
  utilities on its validation and test splits;
* the **server** (:class:`~.engine.StepStrategy`) stacks the replies' rows,
  runs ``server_step`` on its state (what the in-process learner keeps for
  everyone: the global model, AFL's ``λ``, pFedHN's hypernetwork, FedAMP's
  ``ξ``) and sends each site its row; at the end the weights of a method that
  has them, the benefit oracle and the estimate (:attr:`Learner.estimate_
  <coalitions.learners.methods.base.Learner.estimate_>`, i.e.
  :func:`coalitions.estimate.build_estimate`, as ``coalitions learn``).

A method whose round is several exchanges says so by its ``phases``
(:mod:`coalitions.learners.methods.phases`): FedeRiCo's round is its neighbour draw, then one
exchange per minibatch step, in which the server sends each site its own model and its
neighbours' and sums the sites' gradients per model.  The same strategy sends one message per
phase; the site runs that phase's step.

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

What leaves a site: its split sizes, its ``up`` keys each round, its mean
training loss per round (with early stopping, its mean validation loss too:
:mod:`.stopping`) and, at the end, its validation and test metric
(docs/federated.md has the table per method).  Unlike the exact game, these
runs are not checkpointed: an interrupted run starts again.  The server's messages go through
:class:`~coalitions.learners.federated.transport.Link`, as every server's do; a training
message is never sent twice (a site keeps state between messages).

References
----------
Huang et al. (2021), *Personalized cross-silo federated learning on non-IID data* (FedAMP), AAAI.
Hahn, Jeong, Lee (2022), *Connecting low-loss subspace for personalized federated learning* (SuPerFed), KDD.
McMahan et al. (2017), *Communication-efficient learning of deep networks from decentralized data*, AISTATS.

The package splits the two halves: :mod:`.learners` (the method's learner at a site and at the
server, its parameters), :mod:`.randomness` (a site's row of the in-process draws), :mod:`.site`
(the ClientApp's half), :mod:`.engine` (the generic strategy and site step), :mod:`.stopping`
(early stopping split between the sites and the server), :mod:`.strategies` (the server's
messages, final evaluation and learner) and :mod:`.serve` (the ServerApp's run of a method).
"""

import importlib

#: Where each public name lives: the package imports a submodule when one of its names is first
#: asked for (PEP 562), so that ``coalitions federate`` checks its options (``PERSONAL``,
#: ``check_method``) before PyTorch and Flower load.
_HOMES = {
    "engine": ("STRATEGIES", "StepStrategy", "SuPerFedStrategy", "step_site"),
    "learners": ("PERSONAL", "check_method", "initial_state", "learner_params", "method_params", "server_learner",
                 "site_learner"),
    "randomness": ("SiteGenerator",),
    "serve": ("run_personal",),
    "site": ("site_finish", "site_train"),
    "strategies": ("PersonalStrategy",),
}
_WHERE = {name: module for module, names in _HOMES.items() for name in names}

__all__ = ["PERSONAL", "method_params", "check_method", "SiteGenerator", "site_learner", "server_learner",
           "learner_params", "initial_state", "site_train", "site_finish", "PersonalStrategy",
           "SuPerFedStrategy", "STRATEGIES", "StepStrategy", "step_site", "run_personal"]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *__all__})
