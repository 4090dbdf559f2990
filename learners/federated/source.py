"""The federated exact game measured on demand: one federated game per batch of coalitions asked.

:class:`FederatedSource` is a :class:`coalitions.lazy.ValueSource`: asked for a list of coalitions
(bitmasks), it runs one federated exact game over exactly those coalitions
(:mod:`coalitions.learners.federated.protocol`: FedOpt within every coalition, the data staying at
the sites) and returns each member's validation metric with its sites' bootstrap replicates.  A
coalition's model does not depend on which other coalitions are trained beside it (the same initial
parameters, its members' minibatch orders drawn from the seed, round and site, its own optimiser
state and early stop), and each site's resamples depend only on the seed and the site
(:func:`~coalitions.learners.game.bootstrap.site_draws`), so the replicates are paired across
batches and

``FederatedSource(...).measure(masks)`` equals the columns ``masks`` of the federated game over all
coalitions (``coalitions federate --method exact``), whatever the batches.

Backends, the same values (``tests/test_federated.py``):

``"simulation"``
    Flower's Simulation Runtime on this machine (:func:`~coalitions.learners.federated.run.federate_simulation`
    with the run config's ``masks``): one virtual SuperNode per client; each batch starts a private
    SuperLink (some 20 s of start-up per batch besides the training).
``"superlink"``
    A running SuperLink whose SuperNodes are the sites (:func:`~coalitions.learners.federated.run.federate_superlink`);
    the ServerApp writes each batch's values where this process reads them (the SuperLink on this machine).
``"in-process"``
    :func:`~coalitions.learners.federated.protocol.inprocess_game` over the masks: the reference, no network.

Every Flower batch goes through :func:`~coalitions.learners.federated.server.measure_game`: the same
messages and the same checks of the sites' replies as the game over all coalitions.
"""

from __future__ import annotations

import tempfile

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.game.bootstrap import DEFAULT_REPLICATES

__all__ = ["FederatedSource", "BACKENDS"]

#: Where a :class:`FederatedSource` runs its games.
BACKENDS = ("simulation", "superlink", "in-process")


class FederatedSource:
    """The federated exact game of ``dataset``, one federated game per :meth:`measure` call.

    Parameters
    ----------
    dataset : str
        A loader's name (each site loads its client of it: the simulation's partition ids, or the
        SuperNodes' ``partition-id`` node config on a SuperLink).
    data_options : dict, optional
        The loader's options.
    training : dict, optional
        The training flags (:class:`~coalitions.learners.training.protocol.TrainingProtocol` field ->
        value), as ``coalitions federate`` takes them: the sites' task's default protocol with these
        changed (:func:`~coalitions.learners.federated.protocol.federated_protocol`).
    seed : int
        The initial models, the sites' minibatch orders and their bootstrap resamples.
    replicates : int
        Bootstrap replicates of each site's validation rows (0: point values).
    backend : {"simulation", "superlink", "in-process"}
    superlink : str, optional
        ``backend="superlink"``: the SuperLink's Control API address (HOST:PORT).
    threads : int
        PyTorch threads of a site (and of the in-process game).
    wait_s, timeout_s, insecure, root_certificates, log
        As :func:`~coalitions.learners.federated.run.federate_superlink` (and ``wait_s``, ``log`` as
        :func:`~coalitions.learners.federated.run.federate_simulation`).
    progress : callable, optional
        ``progress(round, rounds)`` after each training round of a batch's game in the simulation engine
        (default: not reported, nor logged: ``sample-ce`` counts coalitions, not rounds).

    Attributes
    ----------
    clients : tuple of str
    sense : {"max", "min"}
        The federation's metric's.
    provenance : dict
        What determines the values: data set, options, task, metric, protocol, seed, replicates (not
        the backend, which does not change them).
    games_ : int
        Federated games run so far (one per non-empty :meth:`measure`).
    trained_ : int
        Coalition models trained so far.
    last_ : dict
        The last game's record (backend, seconds; over Flower: rounds and bytes exchanged).
    """

    def __init__(self, dataset: str, data_options: dict | None = None, training: dict | None = None, *,
                 seed: int = 0, replicates: int = DEFAULT_REPLICATES, backend: str = "simulation",
                 superlink: str | None = None, threads: int = 1, wait_s: float = 120.0,
                 timeout_s: float | None = None, insecure: bool = False, root_certificates=None, log=None,
                 progress=None):
        from coalitions.lazy import MAX_LAZY_CLIENTS
        from coalitions.learners.data.datasets import load
        from coalitions.learners.federated.protocol import federated_protocol
        from coalitions.learners.federated.run import check_replicates

        if backend not in BACKENDS:
            raise InputError(f"backend {backend!r}: choose {', '.join(BACKENDS)}")
        if (backend == "superlink") != (superlink is not None):
            raise InputError("a SuperLink address goes with the superlink backend, and only with it")
        if dataset == "csv":
            raise InputError("dataset csv: a federated source loads its sites with a loader; measure CSV sites' "
                             "whole game with coalitions federate csv")
        self.dataset, self.data_options = dataset, dict(data_options or {})
        self.training = dict(training or {})
        self.replicates = check_replicates(replicates)
        self.federation = fed = load(dataset, **self.data_options)
        if fed.n > MAX_LAZY_CLIENTS:
            raise InputError(f"{fed.n} clients: a lazy game holds at most {MAX_LAZY_CLIENTS} (64-bit bitmasks)")
        self.protocol = federated_protocol(fed.task, self.training)
        self.seed, self.backend, self.superlink = int(seed), backend, superlink
        self.threads, self.wait_s, self.timeout_s = int(threads), float(wait_s), timeout_s
        self.insecure, self.root_certificates, self.log = insecure, root_certificates, log
        self.progress = progress
        self.clients = tuple(fed.names)
        self.sense = fed.sense
        self.provenance = {"source": "the federated exact game (FedOpt within each coalition, measured per batch "
                                     "of coalitions; docs/federated.md)",
                           "dataset": dataset, "options": dict(self.data_options), "task": fed.task,
                           "metric": fed.metric,
                           "protocol": {**self.protocol.to_json(), "seed": self.seed,
                                        "aggregation": "fedopt-within-coalition"},
                           "replicates": self.replicates, "lazy": True}
        self.games_ = 0
        self.trained_ = 0
        self.last_: dict = {}

    def measure(self, masks):
        """One federated game over the coalitions ``masks``: a :class:`coalitions.lazy.Measurement`."""
        import time

        from coalitions.lazy import Measurement, check_masks

        n = len(self.clients)
        ms = check_masks(masks, n)
        reps = None
        if ms.size == 0:
            if self.replicates:
                reps = np.zeros((self.replicates, n, 0))
            return Measurement(ms, np.zeros((n, 0)), reps, None)
        t0 = time.perf_counter()
        if self.backend == "in-process":
            from coalitions.learners.federated.protocol import inprocess_game

            res = inprocess_game(self.federation, self.protocol, self.seed, self.threads, self.replicates, masks=ms)
            record: dict = {}
        else:
            res, record = self._over_flower(ms)
        val = np.asarray(res["val"], dtype=np.float64)
        if val.shape != (n, ms.size) or not np.array_equal(np.asarray(res["masks"], dtype=np.int64), ms):
            raise InputError(f"the federated game answered other coalitions than the {ms.size} asked")
        if self.replicates:
            reps = np.asarray(res["val_replicates"], dtype=np.float64)
        self.games_ += 1
        self.trained_ += int(ms.size)
        self.last_ = {"backend": self.backend, "coalitions": int(ms.size),
                      "seconds": round(time.perf_counter() - t0, 3),
                      **{k: record[k] for k in ("rounds", "bytes_sent", "bytes_received") if k in record}}
        return Measurement(ms, val, reps, None)

    def _over_flower(self, ms: np.ndarray) -> tuple[dict, dict]:
        from coalitions.learners.federated.outputs import read_measurement
        from coalitions.learners.federated.run import federate_simulation, federate_superlink

        with tempfile.TemporaryDirectory(prefix="coalitions-federated-batch-") as out:
            if self.backend == "simulation":
                federate_simulation(self.dataset, self.data_options, self.training, out, seed=self.seed,
                                    threads=self.threads, log=self.log, wait_s=self.wait_s,
                                    progress=self.progress or (lambda done, total: None),
                                    replicates=self.replicates, masks=ms)
            else:
                assert self.superlink is not None
                federate_superlink(self.superlink, len(self.clients), self.training, out, seed=self.seed,
                                   dataset=self.dataset, data_options=self.data_options, threads=self.threads,
                                   wait_s=self.wait_s, timeout_s=self.timeout_s, insecure=self.insecure,
                                   root_certificates=self.root_certificates, replicates=self.replicates, masks=ms)
            arrays, record = read_measurement(out)
        if tuple(record.get("names", ())) != self.clients:
            raise InputError(f"the sites ({', '.join(record.get('names', ()))}) are not the clients of "
                             f"{self.dataset} ({', '.join(self.clients)})")
        return arrays, record

    def __repr__(self) -> str:
        return (f"FederatedSource({self.dataset!r}, {len(self.clients)} clients, backend={self.backend!r}, "
                f"games={self.games_}, trained={self.trained_})")
