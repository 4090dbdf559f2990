"""The collaboration game measured where the data lives: a Flower app (docs/federated.md).

Sites that cannot share data each run a Flower ClientApp holding their own
data; a ServerApp, which never sees a row, trains the model of every
coalition ``S`` among ``S``'s members only (local steps at the sites, the
run's training protocol's optimiser at the server: FedOpt), collects
each member's validation metric ``v_i(S)``, and writes the exact game
(``coalitions/game@1``), its collaboration equilibrium and its certificate
(Cui et al. 2022, §6: an impartial third party learns the benefit graph
without access to the data).

Modules
-------
:mod:`~coalitions.learners.federated.protocol`
    FedOpt within each coalition under the run's ``TrainingProtocol``, and
    :func:`inprocess_game`, the same protocol in one process (the reference
    the federated game must equal).
    Needs PyTorch only.
:mod:`~coalitions.learners.federated.sites`
    A site's data: a loader and a partition id, or a CSV with a schema file.
:mod:`~coalitions.learners.federated.server`
    The server's protocol over a Flower ``Grid`` (needs ``flwr``).
:mod:`~coalitions.learners.federated.apps`
    ``client_app`` and ``server_app``, the ``flwr run`` components.
:mod:`~coalitions.learners.federated.app_folder`
    The Flower app folder (``flwr new``'s shape) that ``flwr run`` reads.
:mod:`~coalitions.learners.federated.run`
    ``coalitions federate``: ``flwr run`` of that app in Flower's Simulation
    Runtime or on a SuperLink; output files.
:mod:`~coalitions.learners.federated.source`
    ``FederatedSource``: the lazy game of ``coalitions sample-ce --federated``,
    one federated game per batch of coalitions asked (the run config's
    ``masks``), over the Simulation Runtime, a SuperLink or in process.
:mod:`~coalitions.learners.federated.personal`
    ``federate --method local|fedavg|fedamp|federico|superfed|…``: the
    personalised learners' server steps and their sites' halves (the learner's
    own steps on the site's data), over the one transport; an estimate equal to
    ``coalitions learn``'s.
:mod:`~coalitions.learners.federated.spo`
    ``federate --method spo``: the Pareto hypernetwork at the server, the
    sites' losses and gradients with respect to the target models (pFedHN's
    protocol) feeding the library's SPO training and direction search.

Flower is optional: ``pip install 'collaboration-equilibrium[flower]'``.
"""
