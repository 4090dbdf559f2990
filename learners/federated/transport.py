"""How the servers talk to the sites over a Flower ``Grid``: messages, replies, traffic, who the sites are.

Every server of the project (the exact game's, :mod:`~coalitions.learners.federated.server`; SPO's,
:mod:`~coalitions.learners.federated.spo`; the personalised learners',
:mod:`~coalitions.learners.federated.personal`) reaches its sites through these pieces:

* :class:`Link` — messages to named sites with retries, the discovery of the sites (with a
  consortium manifest, each node only as the site its SuperNode key is registered under) and the
  traffic counters;
* :func:`record_bytes` — the bytes of a message's records, as every traffic figure counts them
  (Flower's own ``count_bytes`` of each array record; keys and config/metric values by their
  encoded size), not the transport's framing;
* :func:`reply_record` and :func:`reply_arrays` — a record of a site's reply, or
  :class:`~coalitions.learners.federated.replies.BadReply` naming the site;
* :func:`check_sites` — the sites in order, agreeing on task, metric, classes and features, or the
  site that differs named;
* :class:`Stopped` — raised when the caller stops a server while it waits.
"""

from __future__ import annotations

import json
import time
from typing import Any

from coalitions.errors import InputError

__all__ = ["Link", "Stopped", "POLL_S", "AGREED", "record_bytes", "reply_record", "reply_arrays", "check_sites"]


class Stopped(Exception):
    """The server was asked to stop (:attr:`~coalitions.learners.federated.server.Settings.stop`); the checkpoint keeps the rounds done."""


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


def record_bytes(content) -> int:
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


class Link:
    """Messages to named sites over a grid, with retries and traffic counters.

    Parameters
    ----------
    grid
        Flower's ``Grid`` (or any object with its ``push_messages``, ``pull_messages``,
        ``get_node_ids`` and ``get_nodes``).
    settings : coalitions.learners.federated.server.Settings
        The run's settings: timeouts, retries, the stop event, exclusions, the manifest.
    log : callable
        Where the link's lines go (one string a call).
    """

    def __init__(self, grid, settings: Any, log):
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

    def data_config(self) -> dict:
        """What every message carries so that a site finds its data: the dataset, its options, the threads."""
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
            self.sent += record_bytes(content)
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
            self.received += record_bytes(rep.content)
            self.messages += 1
            replies[key] = rep
        return replies

    def _send_and_receive(self, messages: list, timeout) -> list:
        """Push, then poll for the replies until all came, ``timeout`` passed, or :attr:`~coalitions.learners.federated.server.Settings.stop` is set."""
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
        Nodes and names excluded earlier (:attr:`~coalitions.learners.federated.server.Settings.excluded`) are ignored.
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
                msgs = {n: (n, RecordDict({"config": ConfigRecord(self.data_config())})) for n in ask}
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

    def ask(self, contents: dict, message_type: str, group: str, *, retries: int | None = None,
            resumable: bool = True) -> dict:
        """Send ``{site: RecordDict}`` to the named sites; retry the silent ones; ``{site: reply}``.

        Each attempt lasts up to the round timeout: a site whose SuperNode is
        gone (stopped, restarting) is waited for until then before the next
        attempt is spent on it.  ``retries`` overrides the settings' (0 for a message a
        site must not run twice: a personalised method's site keeps state between
        messages); ``resumable``: whether the error may point to ``--checkpoint``.
        """
        s = self.settings
        retries = s.retries if retries is None else int(retries)
        replies: dict = {}
        for attempt in range(retries + 1):
            pending = {name: c for name, c in contents.items() if name not in replies}
            if not pending:
                break
            if attempt:
                self.log(f"{message_type} {group}: no reply from {', '.join(sorted(pending))}; "
                         f"asking again ({attempt}/{retries})")
                self.discover()
            end = None if s.round_timeout_s is None else time.monotonic() + s.round_timeout_s
            msgs = {name: (self.nodes[name], c) for name, c in pending.items()}
            replies.update(self._exchange(msgs, message_type, group, s.round_timeout_s))
            missing = [name for name in pending if name not in replies]
            if missing and attempt < retries:
                self._await_return(missing, end)
        missing = sorted(set(contents) - set(replies))
        if missing:
            from coalitions.learners.federated.replies import Silent

            why = "; ".join(f"{m}: {self.errors[m]}" for m in missing if self.errors.get(m))
            raise Silent(missing[0], f"site(s) {', '.join(missing)} did not answer {message_type} {group} after "
                                     f"{retries + 1} attempt(s)" + (f" ({why})" if why else "")
                         + ("; rerun with the same --checkpoint to resume" if resumable else ""),
                         self.nodes.get(missing[0]))
        return replies


def reply_record(rep, key: str, name: str, node, kind: str = "array_records"):
    """Record ``key`` of a site's reply, or :class:`BadReply` naming the site."""
    from coalitions.learners.federated.replies import BadReply

    records = getattr(rep.content, kind)
    if key not in records:
        raise BadReply(name, f"its reply holds no {key!r} record", node)
    return records[key]


def reply_arrays(rep, key: str, name: str, node) -> list:
    """The arrays of record ``key`` of a site's reply (decoded), or :class:`BadReply` naming the site."""
    from coalitions.learners.federated.replies import BadReply

    try:
        return reply_record(rep, key, name, node).to_numpy_ndarrays()
    except BadReply:
        raise
    except Exception as e:   # undecodable bytes: the site's fault, not a traceback
        raise BadReply(name, f"its {key} could not be decoded ({type(e).__name__})", node) from None


#: What every site must report alike (a manifest's ``shared`` may fix them; else the majority decides).
AGREED = ("task", "metric", "n-classes", "input-shape", "features")


def check_sites(descriptions: dict, nodes: dict | None = None) -> list[dict]:
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
