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

The package splits the two halves: :mod:`.learners` (the method's learner at a site and at the
server, its parameters), :mod:`.randomness` (a site's row of the in-process draws), :mod:`.site`
(the ClientApp's half) and :mod:`.strategies` (the ServerApp's half, Flower strategies).
"""

from coalitions.learners.federated.personal.engine import STRATEGIES, StepStrategy, SuPerFedStrategy, step_site
from coalitions.learners.federated.personal.learners import (
    PERSONAL,
    check_method,
    initial_state,
    learner_params,
    method_params,
    server_learner,
    site_learner,
)
from coalitions.learners.federated.personal.randomness import SiteGenerator
from coalitions.learners.federated.personal.site import federico_site, site_finish, site_train
from coalitions.learners.federated.personal.strategies import (
    FedeRiCoStrategy,
    PersonalStrategy,
    run_personal,
)

__all__ = ["PERSONAL", "method_params", "check_method", "SiteGenerator", "site_learner", "server_learner",
           "learner_params", "initial_state", "site_train", "site_finish", "PersonalStrategy",
           "SuPerFedStrategy", "FedeRiCoStrategy", "STRATEGIES",
           "StepStrategy", "step_site", "federico_site", "run_personal"]
