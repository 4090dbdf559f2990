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
        """Leave out the site of ``fault`` (a :class:`~coalitions.learners.federated.replies.BadReply`)."""
        key = fault.site if isinstance(fault.site, str) else f"node {fault.site}"
        self.excluded[key] = str(fault)
        if fault.node is not None:
            self.excluded_nodes.add(fault.node)
        self.sites -= 1
        if self.sites < 1:
            raise InputError(f"no site is left after excluding {', '.join(self.excluded)} ({fault})")


class Stopped(Exception):
    """The server was asked to stop (:attr:`Settings.stop`); the checkpoint keeps the rounds done."""


#: Seconds between two polls for replies.
POLL_S = 0.1


def _value_bytes(v) -> int:
    if isinstance(v, list):
        return sum(_value_bytes(x) for x in v)
    if isinstance(v, str):
        return len(v.encode())
    if isinstance(v, bytes):
        return len(v)
    return 1 if isinstance(v, bool) else 8


def _bytes(content) -> int:
    """Bytes of a message's records: array data (Flower's ``count_bytes``), keys and config/metric values
    (strings by length, numbers 8 bytes as in Flower's protobuf encoding)."""
    from flwr.app import ArrayRecord

    total = 0
    for rec in content.values():
        if isinstance(rec, ArrayRecord):
            total += rec.count_bytes()
        else:
            total += sum(len(k) + _value_bytes(v) for k, v in rec.items())
    return int(total)


class _Link:
    """Messages to named sites over a grid, with retries and traffic counters."""

    def __init__(self, grid, settings: Settings, log):
        self.grid = grid
        self.settings = settings
        self.log = log
        self.sent = 0
        self.received = 0
        self.messages = 0
        self.nodes: dict[str, int] = {}   # site name -> node id
        self.descriptions: dict[str, dict] = {}
        self.errors: dict = {}            # site name or node id -> the last error reason it replied
        self.ignored: set = set()         # nodes serving an excluded site
        self.gone: set = set()            # nodes the last push found not connected

    def _data_config(self) -> dict:
        s = self.settings
        return {"dataset": s.dataset or "", "data-options": json.dumps(s.data_options, sort_keys=True),
                "threads": int(s.threads)}

    def _exchange(self, messages: dict, message_type: str, group: str, timeout):
        """Send ``{key: (node_id, RecordDict)}``; returns ``{key: reply}`` for the successful replies.

        A key whose node the SuperLink refused (not connected: a SuperNode that
        stopped or restarts under a new id) lands in :attr:`gone`.
        """
        from flwr.app import Message

        out = {}
        for key, (node, content) in messages.items():
            out[key] = Message(content, dst_node_id=node, message_type=message_type, group_id=group)
            self.sent += _bytes(content)
            self.messages += 1
        replies = {}
        for rep in self._send_and_receive(list(out.values()), timeout):
            key = next((k for k, m in out.items() if m.metadata.dst_node_id == rep.metadata.src_node_id), None)
            if key is None:
                continue
            if rep.has_error():
                self.errors[key] = str(rep.error.reason).strip().splitlines()[-1] if rep.error.reason else ""
                self.log(f"site {key}: error {rep.error.code}: {self.errors[key]}")
                continue
            self.received += _bytes(rep.content)
            self.messages += 1
            replies[key] = rep
        return replies

    def _send_and_receive(self, messages: list, timeout) -> list:
        """Push, then poll for the replies until all came, ``timeout`` passed, or :attr:`Settings.stop` is set."""
        ids = list(self.grid.push_messages(messages))
        self.gone = {m.metadata.dst_node_id for m, i in zip(messages, ids, strict=False) if i is None}
        pending = {i for i in ids if i is not None}
        end = None if timeout is None else time.monotonic() + timeout
        got: list = []
        while pending:
            new = list(self.grid.pull_messages(pending))
            got += new
            pending -= {m.metadata.reply_to_message_id for m in new}
            if not pending or (end is not None and time.monotonic() > end):
                break
            if self.settings.stop is not None and self.settings.stop.is_set():
                raise Stopped("the server was stopped while waiting for replies")
            time.sleep(POLL_S)
        return got

    def discover(self, expected: int | None = None, deadline: float | None = None) -> None:
        """Ask every node not yet known who it is (``query``) and map site names to node ids.

        Each description is checked (:func:`~coalitions.learners.federated.replies.check_description`)
        as it arrives: a bad name or field stops the run here, before any
        round, naming the node (:class:`~coalitions.learners.federated.replies.BadReply`).
        Nodes and names excluded earlier (:attr:`Settings.excluded`) are ignored.
        """
        from flwr.app import ConfigRecord, RecordDict

        from coalitions.learners.federated.replies import BadReply, check_against_manifest, check_description

        s = self.settings
        while True:
            known = set(self.nodes.values()) | self.ignored | s.excluded_nodes
            new = [n for n in self.grid.get_node_ids() if n not in known]
            owners = self._owners(new)
            for node, who in owners.items():
                if who in s.excluded:      # an excluded site is not asked again
                    self.ignored.add(node)
                    new.remove(node)
            ask = [n for n in new if n not in s.described]     # the others told this run already
            if ask:
                msgs = {n: (n, RecordDict({"config": ConfigRecord(self._data_config())})) for n in ask}
                replies = self._exchange(msgs, "query", "describe", s.round_timeout_s)
                failed = {n: self.errors.pop(n) for n in ask if n in self.errors}
                if failed:
                    why = "; ".join(f"node {k}: {v}" for k, v in failed.items())
                    raise InputError(f"a site could not describe itself ({why})")
                for node, rep in replies.items():
                    if "site" not in rep.content.config_records or "json" not in rep.content["site"]:
                        s.described[node] = None
                    else:
                        s.described[node] = str(rep.content["site"]["json"])
            for node in new:
                if node not in s.described:             # no reply yet: asked again on the next pass
                    continue
                who = owners.get(node, node)            # with a manifest: the site its key belongs to
                if who in s.excluded:
                    self.ignored.add(node)
                    self.log(f"node {node}: serves the excluded site {who!r}; ignored")
                    continue
                if s.described[node] is None:
                    raise BadReply(who, "its description holds no site record", node)
                d = check_description(s.described[node], who)
                if s.manifest is not None:
                    check_against_manifest(d, s.manifest, who, node)
                name = d["name"]
                if name in s.excluded:
                    self.ignored.add(node)
                    self.log(f"node {node}: serves the excluded site {name!r}; ignored")
                    continue
                if name in self.nodes and self.nodes[name] in self.grid.get_node_ids() \
                        and self.nodes[name] != node:
                    raise InputError(f"two SuperNodes (ids {self.nodes[name]} and {node}) both claim to be site "
                                     f"{name!r}; without a consortium manifest (--manifest) names are "
                                     "self-declared and the server cannot tell which one is")
                self.nodes[name] = node
                self.descriptions[name] = d
            if expected is None or len(self.descriptions) >= expected:
                return
            if deadline is not None and time.monotonic() > deadline:
                absent = ""
                if s.manifest is not None:
                    away = [m.name for m in s.manifest.sites if m.name not in self.descriptions
                            and m.name not in s.excluded]
                    absent = f"; not connected or silent: {', '.join(away)}" if away else ""
                raise InputError(f"only {len(self.descriptions)} of {expected} sites connected within "
                                 f"{s.wait_s:g} s ({', '.join(sorted(self.descriptions)) or 'none'}){absent}")
            time.sleep(0.5)

    def _owners(self, nodes: list) -> dict:
        """With a manifest: node id -> the manifest's name for its registered key; a node whose key
        is not in the manifest is refused (:class:`~coalitions.learners.federated.replies.BadReply`
        naming the node), and so is a SuperLink that reports no keys."""
        from coalitions.learners.federated.replies import BadReply

        manifest = self.settings.manifest
        if manifest is None or not nodes:
            return {}
        keys = {int(info.node_id): bytes(info.public_key) for info in self.grid.get_nodes()}
        owners = {}
        for node in nodes:
            key = keys.get(int(node), b"")
            if not key:
                raise InputError(f"--manifest: the SuperLink reports no public key for node {node}; a site's "
                                 "identity is its SuperNode key (run the SuperNodes with "
                                 "--auth-supernode-private-key and the SuperLink with --enable-supernode-auth)")
            entry = manifest.site_of_key(key)
            if entry is None:
                raise BadReply(node, f"its SuperNode key is not one of the {len(manifest.sites)} keys of "
                                     f"{manifest.source}")
            owners[node] = entry.name
        return owners

    def _await_return(self, names, deadline: float | None) -> None:
        """Wait, until ``deadline``, for the sites ``names`` whose SuperNode left to come back under a new id.

        A restarted SuperNode reconnects under a new node id after some
        seconds; asking again at once would spend a retry on a node that is
        gone.  Returns as soon as every one of them is served by a connected
        node again (or at once when none of them left, e.g. a slow reply).
        """
        if deadline is None:
            deadline = time.monotonic() + self.settings.wait_s
        gone = set(self.gone)
        while True:
            connected = set(self.grid.get_node_ids())
            away = [n for n in names if self.nodes[n] not in connected or self.nodes[n] in gone]
            if not away or time.monotonic() > deadline:
                return
            if self.settings.stop is not None and self.settings.stop.is_set():
                raise Stopped("the server was stopped while waiting for a site to come back")
            self.discover()       # a node announcing the site's name replaces the one that left
            time.sleep(0.5)

    def ask(self, contents: dict, message_type: str, group: str) -> dict:
        """Send ``{site: RecordDict}`` to the named sites; retry the silent ones; ``{site: reply}``.

        Each attempt lasts up to the round timeout: a site whose SuperNode is
        gone (stopped, restarting) is waited for until then before the next
        attempt is spent on it.
        """
        s = self.settings
        replies: dict = {}
        for attempt in range(s.retries + 1):
            pending = {name: c for name, c in contents.items() if name not in replies}
            if not pending:
                break
            if attempt:
                self.log(f"{message_type} {group}: no reply from {', '.join(sorted(pending))}; "
                         f"asking again ({attempt}/{s.retries})")
                self.discover()
            end = None if s.round_timeout_s is None else time.monotonic() + s.round_timeout_s
            msgs = {name: (self.nodes[name], c) for name, c in pending.items()}
            replies.update(self._exchange(msgs, message_type, group, s.round_timeout_s))
            missing = [name for name in pending if name not in replies]
            if missing and attempt < s.retries:
                self._await_return(missing, end)
        missing = sorted(set(contents) - set(replies))
        if missing:
            from coalitions.learners.federated.replies import Silent

            why = "; ".join(f"{m}: {self.errors[m]}" for m in missing if self.errors.get(m))
            raise Silent(missing[0], f"site(s) {', '.join(missing)} did not answer {message_type} {group} after "
                                     f"{s.retries + 1} attempt(s)" + (f" ({why})" if why else "")
                         + "; rerun with the same --checkpoint to resume", self.nodes.get(missing[0]))
        return replies


def _record(rep, key: str, name: str, node, kind: str = "array_records"):
    """Record ``key`` of a site's reply, or :class:`BadReply` naming the site."""
    from coalitions.learners.federated.replies import BadReply

    records = getattr(rep.content, kind)
    if key not in records:
        raise BadReply(name, f"its reply holds no {key!r} record", node)
    return records[key]


def _arrays(rep, key: str, name: str, node) -> list:
    """The arrays of record ``key`` of a site's reply (decoded), or :class:`BadReply` naming the site."""
    from coalitions.learners.federated.replies import BadReply

    try:
        return _record(rep, key, name, node).to_numpy_ndarrays()
    except BadReply:
        raise
    except Exception as e:   # undecodable bytes: the site's fault, not a traceback
        raise BadReply(name, f"its {key} could not be decoded ({type(e).__name__})", node) from None


#: What every site must report alike (a manifest's ``shared`` may fix them; else the majority decides).
AGREED = ("task", "metric", "n-classes", "input-shape", "features")


def _check_sites(descriptions: dict, nodes: dict | None = None) -> list[dict]:
    """The sites in order; all must share task, metric, classes, feature shape and feature names.

    A site that differs from the others is at fault when the others agree on
    one value it lacks: the strict majority (a consortium manifest's ``shared``
    value was checked at discovery).  The first such site raises
    :class:`~coalitions.learners.federated.replies.BadReply` naming it (so
    ``--exclude-bad-sites`` can leave it out); with no strict majority the
    run stops naming every group, since no site can be blamed.  A site that
    names no features (a loader's) is not compared on them.
    """
    from collections import Counter

    from coalitions.learners.federated.replies import BadReply

    sites = sorted(descriptions.values(), key=lambda d: (d["order"] if d["order"] >= 0 else 1 << 30, d["name"]))
    nodes = nodes or {}
    for key in AGREED:
        told = [d for d in sites if not (key == "features" and not d.get(key))]
        counts = Counter(json.dumps(d.get(key)) for d in told)
        if len(counts) < 2:
            continue
        (top, k), (_, second) = counts.most_common(2)
        if k == second:
            groups = "; ".join(f"{', '.join(d['name'] for d in told if json.dumps(d.get(key)) == v)}: {v}"
                               for v in counts)
            raise InputError(f"the sites disagree on {key} and no majority says which is right ({groups}); "
                             f"a consortium manifest's shared {key} decides")
        bad = next(d for d in told if json.dumps(d.get(key)) != top)
        raise BadReply(bad["name"], f"{key} {bad.get(key)!r} differs from the {k} other sites' {json.loads(top)!r}",
                       nodes.get(bad["name"]))
    return sites


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
    return {**link._data_config(), "protocol": json.dumps(protocol.to_json(), sort_keys=True), "seed": int(seed),
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
        rec = _record(replies[name], "metrics", name, link.nodes[name], "metric_records")
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
    link = _Link(grid, settings, log)
    link.discover(settings.sites, time.monotonic() + settings.wait_s)
    if len(link.descriptions) != settings.sites:
        raise InputError(f"{len(link.descriptions)} sites connected ({', '.join(sorted(link.descriptions))}), "
                         f"expected {settings.sites}")
    sites = _check_sites(link.descriptions, link.nodes)
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
            out = check_arrays(_arrays(replies[name], "models", name, link.nodes[name]),
                               [(len(mine), *v.shape[1:]) for v in server.params.values()], name,
                               f"round-{r + 1} models")
            for j, m in enumerate(mine):
                updates[(int(m), i)] = {k: o[j] for k, o in zip(server.params, out, strict=True)}
            if scoring:
                rec = _record(replies[name], "metrics", name, link.nodes[name], "metric_records")
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
