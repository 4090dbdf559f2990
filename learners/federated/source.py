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
from pathlib import Path

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
        SuperNodes' ``partition-id`` node config on a SuperLink), or ``"csv"``: sites that read
        their own CSV file through a schema (:mod:`~coalitions.learners.federated.sites`).  In the
        simulation engine and in process the schemas are ``data_options={"schemas": [path, ...]}``
        (a rehearsal: this machine reads them); on a SuperLink each SuperNode names its own
        (``--node-config "site-schema='...'"``), nothing is read here, and ``manifest`` says who the
        sites are and what they measure.
    data_options : dict, optional
        The loader's options (``{"schemas": [...]}`` for ``"csv"`` off a SuperLink).
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
    manifest : path or Manifest, optional
        ``backend="superlink"``: the consortium manifest
        (:func:`~coalitions.learners.federated.manifest.read_manifest`), each site's name bound to its
        SuperNode key and its signed training size (as ``coalitions federate --manifest``).  Required
        for ``"csv"`` there, with the ``task`` and ``metric`` of its ``shared`` part: the run needs
        the sites' names (the server orders them by name) and the game's sense before it asks
        a coalition, and the server holds every site to them.
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
                 superlink: str | None = None, manifest=None, threads: int = 1, wait_s: float = 120.0,
                 timeout_s: float | None = None, insecure: bool = False, root_certificates=None, log=None,
                 progress=None):
        from coalitions.lazy import MAX_LAZY_CLIENTS
        from coalitions.learners.data.datasets import load
        from coalitions.learners.data.federation import METRIC_SENSE
        from coalitions.learners.federated.manifest import Manifest, read_manifest
        from coalitions.learners.federated.protocol import federated_protocol
        from coalitions.learners.federated.run import check_replicates
        from coalitions.learners.federated.sites import from_schema

        if backend not in BACKENDS:
            raise InputError(f"backend {backend!r}: choose {', '.join(BACKENDS)}")
        if (backend == "superlink") != (superlink is not None):
            raise InputError("a SuperLink address goes with the superlink backend, and only with it")
        if manifest is not None and backend != "superlink":
            raise InputError("a consortium manifest is for the superlink backend (a site's identity is its "
                             "SuperNode key)")
        if manifest is not None and not isinstance(manifest, Manifest):
            manifest = read_manifest(manifest)
        unsigned = [site.name for site in manifest.sites if site.n_train is None] if manifest is not None else []
        if unsigned:                     # each site's signed n-train weighs it in its coalitions: before anything starts
            raise InputError(f"{manifest.source}: site(s) {', '.join(unsigned)} declare only n-train-max; the "
                             "coalitions' averages need each site's n-train")
        self.manifest = manifest
        self.dataset, self.data_options = dataset, dict(data_options or {})
        self.training = dict(training or {})
        self.replicates = check_replicates(replicates)
        if dataset == "csv":
            self.federation, names, task, metric = _csv_sites(self.data_options, backend, manifest)
            if self.federation is not None:      # the schema files in the clients' order, whatever the order given
                paths = {from_schema(p).name: str(Path(p).resolve()) for p in self.data_options["schemas"]}
                self.data_options = {"schemas": [paths[name] for name in names]}
        else:
            self.federation = fed = load(dataset, **self.data_options)
            names, task, metric = tuple(fed.names), fed.task, fed.metric
        if len(names) > MAX_LAZY_CLIENTS:
            raise InputError(f"{len(names)} clients: a lazy game holds at most {MAX_LAZY_CLIENTS} (64-bit bitmasks)")
        self.protocol = federated_protocol(task, self.training)
        self.seed, self.backend, self.superlink = int(seed), backend, superlink
        self.threads, self.wait_s, self.timeout_s = int(threads), float(wait_s), timeout_s
        self.insecure, self.root_certificates, self.log = insecure, root_certificates, log
        self.progress = progress
        self.clients = tuple(names)
        self.task, self.metric, self.sense = task, metric, METRIC_SENSE[metric]
        options = dict(self.data_options)
        if dataset == "csv" and self.federation is None:      # the sites read their own files: who they are
            options = {"manifest": manifest.to_json()}
        self.provenance = {"source": "the federated exact game (FedOpt within each coalition, measured per batch "
                                     "of coalitions; docs/federated.md)",
                           "dataset": dataset, "options": options, "task": task,
                           "metric": metric,
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
                                   root_certificates=self.root_certificates, replicates=self.replicates, masks=ms,
                                   manifest=self.manifest)
            arrays, record = read_measurement(out)
        if tuple(record.get("names", ())) != self.clients:
            raise InputError(f"the sites ({', '.join(map(str, record.get('names', ())))}) are not the clients of "
                             f"{self.dataset} ({', '.join(self.clients)})")
        if (record.get("task"), record.get("metric")) != (self.task, self.metric):
            raise InputError(f"the sites measured {record.get('task')}/{record.get('metric')}, not the "
                             f"{self.task}/{self.metric} of {self.dataset}")
        return arrays, record

    def __repr__(self) -> str:
        return (f"FederatedSource({self.dataset!r}, {len(self.clients)} clients, backend={self.backend!r}, "
                f"games={self.games_}, trained={self.trained_})")


def _csv_sites(options: dict, backend: str, manifest) -> tuple:
    """CSV sites: ``(federation or None, names, task, metric)``, the names in the server's order (by name).

    Off a SuperLink this machine reads the schemas (``options["schemas"]``) and builds the
    federation; on a SuperLink nothing is read, and the manifest says who the sites are and what
    they measure.  Every fault is one :class:`InputError` naming the file or the option.
    """
    from coalitions.learners.data.federation import METRIC_SENSE, TASKS, Federation

    if backend == "superlink":
        if options:
            raise InputError("dataset csv on a SuperLink: each SuperNode names its own site schema "
                             "(--node-config \"site-schema='...'\"); give no --site-schema here")
        if manifest is None:
            raise InputError("dataset csv on a SuperLink needs the consortium manifest (--manifest): the sites' "
                             "names and the game's metric are known before the first coalition is asked")
        shared = manifest.shared
        task, metric = shared.get("task"), shared.get("metric")
        if task not in TASKS or metric not in METRIC_SENSE:
            raise InputError(f"{manifest.source}: dataset csv on a SuperLink needs the manifest's shared task "
                             f"({', '.join(TASKS)}) and metric ({', '.join(METRIC_SENSE)}), which every site "
                             "is held to")
        return None, tuple(sorted(site.name for site in manifest.sites)), task, metric
    from coalitions.learners.federated.sites import from_schema

    schemas = options.get("schemas")
    if set(options) != {"schemas"} or not isinstance(schemas, (list, tuple)) or not schemas:
        raise InputError("dataset csv needs its sites' schema files (--site-schema, once per site) and no "
                         "loader options")
    sites = [from_schema(p) for p in schemas]           # each file checked, naming it
    names = [s.name for s in sites]
    if len(set(names)) != len(names):
        raise InputError(f"--site-schema: two schema files name the same site ({', '.join(names)})")
    for key in ("task", "metric", "n_classes", "features"):
        told = {str(getattr(s, key)) for s in sites}
        if len(told) > 1:
            raise InputError(f"--site-schema: the sites' schemas disagree on {key} "
                             f"({', '.join(f'{s.name}: {getattr(s, key)}' for s in sites)})")
    shapes = {tuple(s.client.train.X.shape[1:]) for s in sites}
    if len(shapes) > 1:
        raise InputError(f"--site-schema: the sites' feature counts differ "
                         f"({', '.join(f'{s.name}: {s.client.train.X.shape[1]}' for s in sites)})")
    sites.sort(key=lambda s: s.name)                    # the server orders CSV sites by name
    first = sites[0]
    fed = Federation("csv", first.task, first.metric, tuple(s.client for s in sites), first.n_classes, None, {})
    return fed, tuple(s.name for s in sites), first.task, first.metric
