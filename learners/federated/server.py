"""The server's side: measure the exact game over a Flower ``Grid``, never seeing data.

:func:`measure_game` drives the protocol of :mod:`coalitions.learners.federated.protocol`
with three message types (Flower's Message API):

``query``
    Each site describes itself (:func:`coalitions.learners.federated.sites.describe`:
    name, task, metric, feature shape, split sizes).  The server checks that
    all sites agree and orders them (by partition id, then name).
``train`` (one per site per round)
    The site receives the current models of the ``2^{N-1}`` coalitions it
    belongs to (one stacked ``ArrayRecord``) and returns them after its local
    steps (:func:`~coalitions.learners.federated.protocol.local_round`); under
    patience it first scores the models it received on its validation data
    (``val-loss``).  All coalitions of a round train concurrently: every site
    gets its message at once, and each site trains its coalitions' models
    together.  The server then averages each coalition's models over its
    members and applies the training protocol's optimiser to the average
    change (:class:`~coalitions.learners.federated.protocol.GameServer`).
``evaluate``
    Each site scores the final models of its coalitions on its validation and
    test splits and returns the ``3 · 2^{N-1}`` numbers (metric on both splits,
    validation loss); under patience a first ``evaluate`` scores the last
    step's models, then the best ones are scored.

With :attr:`Settings.masks` the game trains only those coalitions (``sample-ce --federated``: one
game per batch of coalitions asked); each site gets the models of the asked coalitions it belongs
to, and a site in none of them is only described.

After every round the coalition models, the optimiser's state, the early stop's
record and the traffic counters are written to a checkpoint; a server started again with the same sites and settings
resumes after the last finished round.  A site that does not answer (lost,
restarting) is asked again, up to ``retries`` times, each time after looking
for new SuperNodes that announce the site's name (a restarted SuperNode may
come back under a new node id); sites are stateless between rounds, so a
restarted site simply serves the next message.  If a site stays away, the
run stops with an error naming it, and the checkpoint keeps the rounds done.

Traffic is reported as the bytes of the records sent and received (Flower's
own ``count_bytes`` of each record: parameters, configuration and metrics,
not the transport's framing).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.federated.protocol import GameServer, federated_protocol, game_masks
from coalitions.learners.federated.replies import check_arrays, check_metrics
from coalitions.learners.federated.transport import Link, Stopped, check_sites, reply_arrays, reply_record

if TYPE_CHECKING:
    from coalitions.learners.federated.manifest import Manifest

__all__ = ["Settings", "Stopped", "measure_game", "round_line"]


@dataclass
class Settings:
    """What the server needs besides the sites.

    Parameters
    ----------
    training : dict
        The training flags given: :class:`~coalitions.learners.training.protocol.TrainingProtocol`
        field -> value.  The run trains under the sites' task's default protocol with these
        changed (:meth:`protocol_for`), as ``learn`` and ``oracle`` do.
    seed : int
        Draws the initial parameters and every site's minibatch order.
    sites : int
        SuperNodes to wait for (one per site).
    dataset : str or None
        Loader the sites use with their partition id (rehearsal); ``None``
        when every site reads its own CSV (``site-schema`` node config).
    data_options : dict
        The loader's options (sent to the sites with every message).
    checkpoint : str or None
        Where the server saves its state after every round.
    wait_s : float
        How long to wait for the SuperNodes to connect.
    round_timeout_s : float or None
        How long one attempt of a round waits for replies (``None``: no limit).
    retries : int
        Further attempts for the sites that did not reply.
    threads : int
        PyTorch threads a site uses for training.
    stop : threading.Event or None
        Set by the caller to stop the server while it waits for replies (an
        interrupted simulation); the server then raises :class:`Stopped`.
    method : str
        ``"exact"`` (this module: the game, FedOpt within every coalition) or a
        personalised learner (:data:`coalitions.learners.federated.personal.PERSONAL`).
    method_options : dict
        A personalised learner's own parameters (e.g. ``{"alpha_k": 0.5}``);
        it trains under :meth:`protocol_for` (``learn``'s rule).
    exclude_bad_sites : bool
        A site whose reply fails its check (:mod:`~coalitions.learners.federated.replies`)
        is left out and the run starts again without it (``False``: the run
        stops with an error naming the site).
    replicates : int
        Bootstrap replicates of each site's validation rows for the game's standard errors
        (``exact`` only; 0: none).
    masks : list of int or None
        ``exact``: the coalitions to train (distinct non-empty bitmasks of the ordered sites, at most 62
        sites); ``None``: all ``2^N − 1`` (at most 12 sites).  A site in none of them is described but
        never asked to train or evaluate.
    excluded : dict
        The sites left out so far: site name (or ``"node ID"`` when the site's
        description itself was refused) -> the reason; recorded in the outputs.
    described : dict
        Node id -> the description (JSON text) it sent in this run: a start
        again after an exclusion checks it anew but does not ask the node again
        (a node's data, and so its description, stays what it was; a restarted
        SuperNode comes back under a new id and is asked).
    manifest : Manifest or None
        The consortium manifest (:mod:`~coalitions.learners.federated.manifest`): each node is
        accepted only as the site its registered SuperNode key belongs to, its claimed sizes
        and shared fields are checked against it, and the game's weights come from it.
        ``None``: names and sizes are what the sites declare.
    equal_weights : bool
        Weigh every site equally in the coalitions' averages (FedAvg) and in the pooled
        validation loss, instead of by the training (validation) sizes.
    """

    training: dict = field(default_factory=dict)
    seed: int = 0
    sites: int = 1
    dataset: str | None = None
    data_options: dict = field(default_factory=dict)
    checkpoint: str | None = None
    wait_s: float = 120.0
    round_timeout_s: float | None = 600.0
    retries: int = 2
    threads: int = 1
    stop: threading.Event | None = None
    method: str = "exact"
    method_options: dict = field(default_factory=dict)
    exclude_bad_sites: bool = False
    excluded: dict = field(default_factory=dict)
    excluded_nodes: set = field(default_factory=set)
    described: dict = field(default_factory=dict)
    replicates: int = 0
    masks: list | None = None
    manifest: Manifest | None = None
    equal_weights: bool = False

    def protocol_for(self, task: str):
        """The run's :class:`~coalitions.learners.training.protocol.TrainingProtocol` for the sites' ``task``."""
        return federated_protocol(task, self.training)

    def exclude(self, fault) -> None:
        """Leave out the site of ``fault`` (a :class:`~coalitions.learners.federated.replies.BadReply`).

        The run then expects one site fewer, unless a consortium manifest is
        given and the fault is a node that holds none of its keys: such a
        stranger was never one of the manifest's :attr:`sites`, so the whole
        consortium is still expected beside it.
        """
        key = fault.site if isinstance(fault.site, str) else f"node {fault.site}"
        self.excluded[key] = str(fault)
        if fault.node is not None:
            self.excluded_nodes.add(fault.node)
        if self.manifest is not None and self.manifest.by_name(key) is None:
            return
        self.sites -= 1
        if self.sites < 1:
            raise InputError(f"no site is left after excluding {', '.join(self.excluded)} ({fault})")


def site_weights(settings: Settings, sites: list[dict], key: str) -> list:
    """The sites' weights in the coalitions' averages: ``key`` (``"n-train"`` or ``"n-val"``) as the
    consortium manifest declares it, ones with :attr:`Settings.equal_weights`, else as the sites report it."""
    if settings.equal_weights:
        return [1] * len(sites)
    if settings.manifest is not None:
        declared = settings.manifest.weights(key)
        return [declared[d["name"]] for d in sites]
    return [d[key] for d in sites]


def round_line(done: int, total: int, seconds: float, sent: int, received: int) -> str:
    """The line the server logs after every round: its time and its traffic.

    >>> round_line(3, 50, 0.2134, 7168, 7311)
    'round 3/50: 0.21 s, 7,168 bytes sent, 7,311 received'
    """
    return f"round {done}/{total}: {seconds:.2f} s, {int(sent):,} bytes sent, {int(received):,} received"


def _site_config(link, protocol, seed: int, task: str, mine, **extra) -> dict:
    """The configuration of one site's message: the data, the protocol (JSON), its coalitions."""
    return {**link.data_config(), "protocol": json.dumps(protocol.to_json(), sort_keys=True), "seed": int(seed),
            "masks": [int(m) for m in mine], "task": task, **extra}


def _columns(server: GameServer, i: int, every: bool) -> np.ndarray:
    """The columns of site ``i``'s coalitions in the game's arrays: the coalitions themselves (all of
    them, ``(N, 2^N)``) or their rows (some, ``(N, k)``)."""
    rows = server.site_rows(i)
    return server.masks[rows] if every else rows


def _evaluate(link, names, server: GameServer, params: dict, protocol, seed: int, task: str, metric: str,
              group: str, replicates: int = 0, every: bool = True) -> dict:
    """One ``evaluate`` exchange of ``params``: ``val``, ``test`` and ``val_loss`` ``(N, 2^N)`` arrays
    (``every``: the game of all coalitions), else ``(N, k)``, column ``j`` = ``server.masks[j]``.

    With ``replicates`` ``B > 0`` each site also re-scores its models on ``B`` resamples of its
    validation rows (:func:`~coalitions.learners.game.bootstrap.site_draws`): ``val_replicates``
    ``(B, N, 2^N)`` or ``(B, N, k)``.  A site in none of the coalitions is not asked.
    """
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    from coalitions.learners.federated.replies import check_losses

    n = len(names)
    width = 1 << n if every else len(server.masks)
    contents = {}
    extra = {"replicates": int(replicates)} if replicates else {}
    asked = [i for i in range(n) if len(server.site_rows(i))]
    for i in asked:
        mine, rows = server.site_masks(i), server.site_rows(i)
        contents[names[i]] = RecordDict({"models": ArrayRecord([v[rows] for v in params.values()]),
                                         "config": ConfigRecord(_site_config(link, protocol, seed, task, mine,
                                                                             metric=metric, **extra,
                                                                             **{"site-index": i}))})
    replies = link.ask(contents, "evaluate", group)
    out = {key: np.full((n, width), np.nan) for key in ("val", "test", "val_loss")}
    if replicates:
        out["val_replicates"] = np.full((replicates, n, width), np.nan)
    for i in asked:
        name = names[i]
        mine = _columns(server, i, every)
        rec = reply_record(replies[name], "metrics", name, link.nodes[name], "metric_records")
        out["val"][i, mine] = check_metrics(rec.get("val", []), metric, name, len(mine), "validation values")
        out["test"][i, mine] = check_metrics(rec.get("test", []), metric, name, len(mine), "test values")
        out["val_loss"][i, mine] = np.array(check_losses(rec.get("val-loss", []), name, "validation losses", len(mine)))
        if replicates:
            reps = check_metrics(rec.get("val-replicates", []), metric, name, replicates * len(mine),
                                 f"{replicates} bootstrap replicates of its validation values")
            out["val_replicates"][:, i, mine] = reps.reshape(replicates, len(mine))
    return out


def measure_game(grid, settings: Settings, log=print, progress=None) -> dict:
    """Run the whole game on ``grid``; returns the game's values and the run's record.

    Returns
    -------
    dict
        ``names``, ``task``, ``metric``, ``val``, ``test`` and ``val_loss`` ``(N, 2^N)``
        arrays, ``val_replicates`` ``(B, N, 2^N)`` with :attr:`Settings.replicates` (with
        :attr:`Settings.masks`: ``(N, k)`` and ``(B, N, k)``, column ``j`` = ``masks[j]``, and ``masks``), ``sites`` (their descriptions), ``protocol`` (the training protocol, JSON),
        ``rounds`` (server steps run), ``stopped_at`` (per coalition under patience),
        ``communication_rounds`` (with the describe and evaluate exchanges),
        ``bytes_sent``, ``bytes_received``, ``messages``, ``resumed_from``, ``seconds``.
    """
    import flwr
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    from coalitions.learners.federated.replies import check_losses
    from coalitions.learners.training.checkpoint import fingerprint, load_state, save_state
    from coalitions.learners.training.models import make_model

    t0 = time.perf_counter()
    link = Link(grid, settings, log)
    link.discover(settings.sites, time.monotonic() + settings.wait_s)
    if len(link.descriptions) != settings.sites:
        raise InputError(f"{len(link.descriptions)} sites connected ({', '.join(sorted(link.descriptions))}), "
                         f"expected {settings.sites}")
    sites = check_sites(link.descriptions, link.nodes)
    names = [d["name"] for d in sites]
    n = len(sites)
    masks = game_masks(n, settings.masks)        # all of them: at most 12 sites
    log("sites: " + ", ".join(f"{d['name']} ({d['n-train']} train)" for d in sites))
    first = sites[0]
    task, metric = first["task"], first["metric"]
    n_classes = first["n-classes"]
    n_outputs = n_classes if task == "multiclass" else 1
    p, seed = settings.protocol_for(task), int(settings.seed)
    spec = make_model(p.model, tuple(first["input-shape"]), n_outputs, hidden=p.hidden)
    every = settings.masks is None
    weights = site_weights(settings, sites, "n-train")
    val_weights = site_weights(settings, sites, "n-val") if p.patience else [d["n-val"] for d in sites]
    server = GameServer(spec, p, n, weights, val_weights, seed, masks=None if every else masks)
    asked = [i for i in range(n) if len(server.site_rows(i))]     # a site in none of the coalitions trains nothing
    start = 0
    key = fingerprint({"protocol": p.to_json(), "seed": seed, "sites": sites, "dataset": settings.dataset,
                       "data_options": settings.data_options, "model": spec.kind, "game": "fedopt",
                       **({"weights": [weights, val_weights]} if settings.equal_weights or settings.manifest else {}),
                       **({} if every else {"masks": [int(m) for m in masks]})})
    if settings.checkpoint:
        loaded = load_state(settings.checkpoint, key, "cpu")
        if loaded is not None:
            start, state, meta = loaded
            server.load(start, state)
            link.sent, link.received, link.messages = meta["sent"], meta["received"], meta["messages"]
            log(f"resuming after round {start} of {server.rounds} from {settings.checkpoint}")
    exchanges = 0
    while not server.finished:
        r = server.round
        began, sent, received = time.perf_counter(), link.sent, link.received
        scoring = server.scores_losses
        contents = {}
        for i in asked:
            name, mine = names[i], server.site_masks(i)
            cfg = _site_config(link, p, seed, task, mine, round=r, **{"site-index": i, "score-val": scoring})
            arrays = ArrayRecord(list(server.site_params(i).values()))
            contents[name] = RecordDict({"models": arrays, "config": ConfigRecord(cfg)})
        replies = link.ask(contents, "train", f"round-{r + 1}")
        exchanges += 1
        updates, losses = {}, {}
        for i in asked:
            name, mine = names[i], server.site_masks(i)
            out = check_arrays(reply_arrays(replies[name], "models", name, link.nodes[name]),
                               [(len(mine), *v.shape[1:]) for v in server.params.values()], name,
                               f"round-{r + 1} models")
            for j, m in enumerate(mine):
                updates[(int(m), i)] = {k: o[j] for k, o in zip(server.params, out, strict=True)}
            if scoring:
                rec = reply_record(replies[name], "metrics", name, link.nodes[name], "metric_records")
                losses[i] = np.array(check_losses(rec.get("val-loss", []), name, f"round-{r + 1} validation losses", len(mine)))
        if scoring:
            server.record_losses(losses)    # the models of step r: the round the sites ran is discarded on a stop
            if server.finished:
                log(f"round {r + 1}: every coalition has stopped (patience {p.patience})")
                break
        server.apply(updates)
        if settings.checkpoint:
            save_state(settings.checkpoint, key, server.round, server.state_dict(),
                       {"sent": link.sent, "received": link.received, "messages": link.messages})
        log(round_line(server.round, server.rounds, time.perf_counter() - began, link.sent - sent,
                       link.received - received))
        if progress is not None:
            progress(server.round, server.rounds)
    if server.stop is not None and server.active.any():    # the last step's models, scored as every step's
        last = _evaluate(link, names, server, server.params, p, seed, task, metric, "last", every=every)
        exchanges += 1
        server.record_losses({i: last["val_loss"][i, _columns(server, i, every)] for i in asked})
    result = _evaluate(link, names, server, server.final_params(), p, seed, task, metric, "final",
                       settings.replicates, every)
    if not every:
        result["masks"] = masks
    return {"names": names, "task": task, "metric": metric, **result, "sites": sites,
            "protocol": p.to_json(), "seed": seed, "rounds": server.round, "stopped_at": server.stopped_at(),
            "communication_rounds": exchanges + 2, "bytes_sent": int(link.sent),
            "bytes_received": int(link.received), "messages": int(link.messages), "resumed_from": start,
            "seconds": time.perf_counter() - t0, "flower_version": flwr.__version__, "model": spec.kind,
            "n_params": spec.n_params, "n_classes": n_classes or None}
