"""The exhaustive oracle's subset models measured on demand (coalitions.learners.game.source), and the
federations the scale runs use (synthetic with G conflicting groups, more than 26 clients)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coalitions.errors import InputError
from coalitions.learners.data.datasets import load
from coalitions.learners.exact import ExhaustiveOracle
from coalitions.learners.game.source import SubsetSource
from coalitions.learners.training.protocol import protocol_with
from coalitions.params import ParameterError


# ---------------------------------------------------------------------------- synthetic with G groups
def test_two_groups_are_the_flipped_construction_bit_for_bit():
    """--groups 2 plants the same data as the default flipped half (groups 0 and 1 are the paper's)."""
    a, b = load("synthetic", seed=4), load("synthetic", seed=4, groups=2)
    for x, y in zip(a.clients, b.clients, strict=True):
        for part in ("train", "val", "test"):
            assert np.array_equal(getattr(x, part).X, getattr(y, part).X)
            assert np.array_equal(getattr(x, part).y, getattr(y, part).y)
    assert a.planted_groups == b.planted_groups == (("0", "1", "2"), ("3", "4", "5"))
    assert "groups" not in a.options and b.options["groups"] == 2


def test_groups_plant_conflicting_tasks_of_any_count():
    fed = load("synthetic", clients=50, groups=5, samples=30, seed=1)
    assert fed.n == 50 and len(fed.planted_groups) == 5
    assert fed.planted_groups[3] == tuple(str(m) for m in range(30, 40))
    # the least-squares weights of two clients agree within a group and disagree across groups
    def fit(c):
        X = np.hstack([c.train.X, np.ones((len(c.train.X), 1))]).astype(float)
        return np.linalg.lstsq(X, c.train.y.astype(float), rcond=None)[0][:-1]
    w = np.array([fit(fed.clients[m]) for m in (20, 21, 30, 40)])
    assert np.linalg.norm(w[0] - w[1]) < 0.5 * min(np.linalg.norm(w[0] - w[2]), np.linalg.norm(w[0] - w[3]))


def test_groups_and_flipped_are_one_or_the_other():
    with pytest.raises(ParameterError, match="groups"):
        load("synthetic", groups=3, flipped="1,2")
    with pytest.raises(ParameterError, match="groups"):
        load("synthetic", clients=4, groups=5)


# ---------------------------------------------------------------------------- the lazy subset models
@pytest.fixture(scope="module")
def heart():
    fed = load("heart", seed=0)
    p = protocol_with(fed.task, tuple(fed.input_shape)).with_(steps=40, patience=4, lr_grid=(0.01, 0.03),
                                                              tune_split=0.2)
    exact = ExhaustiveOracle(p, replicates=12, loss_game=True).fit(fed)
    return fed, p, exact


@pytest.mark.parametrize("game", ["metric", "loss"])
def test_lazy_subset_models_are_the_exhaustive_games_columns(heart, game):
    """Any masks, in any order and grouping: the exhaustive game's values and replicates.

    The same models (same initial parameters, same batch order); float32 scores evaluated in
    batches sized by the chunk can differ in their last bits, so losses agree to float32 precision.
    """
    fed, p, exact = heart
    src = SubsetSource(fed, ExhaustiveOracle(p, replicates=12), game=game)
    full = exact.game_ if game == "metric" else exact.loss_game_
    reps = exact.replicates_ if game == "metric" else exact.loss_replicates_
    sign = 1.0 if src.sense == "max" else -1.0       # Replicates hold "min" games negated
    assert src.sense == full.sense and src.clients == tuple(fed.names)
    seen = []
    for ms in ([15, 1], [6], [9, 3, 12]):
        m = src.measure(np.array(ms))
        assert np.array_equal(m.masks, ms)
        np.testing.assert_allclose(m.values, full.raw_values()[:, ms], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(sign * m.replicates, reps.values[:, :, ms], rtol=1e-5, atol=1e-7)
        seen += ms
    assert src.trained_ == len(seen)


def test_lazy_closed_form_equals_the_exhaustive_game():
    fed = load("synthetic", seed=3)
    exact = ExhaustiveOracle(replicates=16).fit(fed)
    src = SubsetSource(fed, ExhaustiveOracle(replicates=16))
    ms = np.array([63, 5, 1, 12, 40])
    m = src.measure(ms)
    np.testing.assert_allclose(m.values, exact.game_.raw_values()[:, ms], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(-m.replicates, exact.replicates_.values[:, :, ms], rtol=1e-9, atol=1e-12)
    personal = SubsetSource(fed, ExhaustiveOracle(replicates=0, heads="personal")).measure(ms)
    full = ExhaustiveOracle(replicates=0, heads="personal").fit(fed).game_.raw_values()
    np.testing.assert_allclose(personal.values, full[:, ms], rtol=1e-9)


def test_a_fifty_client_federation_is_measured_without_two_to_the_fifty():
    fed = load("synthetic", clients=50, groups=5, samples=10, val=200, test=10, seed=0)
    src = SubsetSource(fed, ExhaustiveOracle(replicates=8))
    group = sum(1 << m for m in range(10, 20))
    mixed = (1 << 10) | (1 << 11) | (1 << 30)
    m = src.measure(np.array([1 << 10, group, mixed, (1 << 50) - 1]))
    assert m.values.shape == (50, 4) and m.replicates.shape == (8, 50, 4)
    alone, grouped, crossed = m.values[10, :3]
    assert grouped < alone and grouped < crossed          # MSE: its own group helps, another hurts


def test_bad_requests_and_settings_are_named():
    fed = load("synthetic", seed=0)
    src = SubsetSource(fed)
    with pytest.raises(InputError, match="not a non-empty coalition"):
        src.measure(np.array([0]))
    with pytest.raises(InputError, match="twice"):
        src.measure(np.array([3, 3]))
    with pytest.raises(ParameterError, match="game"):
        SubsetSource(fed, game="loss")
    with pytest.raises(ParameterError, match="oracle"):
        SubsetSource(fed, oracle="exhaustive")


# ---------------------------------------------------------------------------- coalitions sample-ce DATASET
def test_sample_ce_on_a_dataset_is_the_sample_ce_of_its_exhaustive_game(capsys, tmp_path):
    """The coalitions trained on demand are the oracle's: the same search, the same partition and certificate."""
    from conftest import run

    data = ["--clients", "9", "--groups", "3", "--seed", "2", "--replicates", "0"]
    game = tmp_path / "g.json"
    assert run(capsys, "oracle", "synthetic", *data, "-o", game)[0] == 0
    ask = ["--budget", "250", "--epsilon", "0.05", "--format", "json"]
    rc, lazy, err = run(capsys, "sample-ce", "synthetic", *data, *ask)
    assert rc == 0, err
    rc, full, _ = run(capsys, "sample-ce", game, "--seed", "2", *ask)
    assert rc == 0
    a, b = json.loads(lazy), json.loads(full)
    assert a["partition"] == b["partition"] == [["0", "1", "2"], ["3", "4", "5"], ["6", "7", "8"]]
    assert a["certificate"]["epsilon"] == b["certificate"]["epsilon"]


def test_sample_ce_on_a_dataset_resumes_from_its_cache(capsys, tmp_path):
    from conftest import run

    cache = tmp_path / "cache.npz"
    args = ["sample-ce", "synthetic", "--clients", "6", "--replicates", "8", "--budget", "120", "--epsilon", "0.1",
            "--resume", cache, "--format", "json"]
    rc, first, _ = run(capsys, *args)
    rc2, again, err = run(capsys, *args)
    assert rc == rc2 and first == again and "measured already" in err
    rc, _, err = run(capsys, *args[:3], "8", *args[4:])          # other data: another source, refused
    assert rc == 2 and "cache" in err.lower()


def test_sample_ce_federated_in_process_is_the_sample_ce_of_the_whole_federated_game(capsys, tmp_path):
    """--federated: one federated game per batch gives the whole federated game's values and replicates, so the
    same search, partition and certificate as sample-ce of that game's file."""
    from conftest import run

    import coalitions as co
    from coalitions.learners.federated.protocol import federated_protocol, inprocess_game
    from coalitions.noise import Uncertainty
    from coalitions.replicates import Replicates

    data = ["--clients", "5", "--groups", "2", "--seed", "1", "--steps", "3", "--local-steps", "2"]
    fed = load("synthetic", clients=5, groups=2, seed=1)
    whole = inprocess_game(fed, federated_protocol(fed.task, {"steps": 3, "local_steps": 2}), seed=1, replicates=20)
    reps = Replicates.from_array(whole["val_replicates"], fed.names, fed.sense)
    game = co.Game.from_array(whole["val"], fed.names, fed.sense).with_uncertainty(Uncertainty.from_replicates(reps))
    co.write_game(game, tmp_path / "g.json", reps)
    ask = ["--budget", "60", "--epsilon", "0.2", "--format", "json"]
    rc, lazy, err = run(capsys, "sample-ce", "synthetic", *data, "--replicates", "20", "--federated", "in-process", *ask)
    assert rc in (0, 1), err
    rc2, full, _ = run(capsys, "sample-ce", tmp_path / "g.json", "--seed", "1", *ask)
    a, b = json.loads(lazy), json.loads(full)
    assert rc == rc2 and a["partition"] == b["partition"]
    assert a["certificate"]["epsilon"] == b["certificate"]["epsilon"]


@pytest.mark.parametrize("args,names", [
    (["planted", "--groups", "3,3", "--replicates", "5"], "--replicates is an option of a dataset source"),
    (["planted", "--groups", "3,3", "--clients", "5"], "--clients is an option of a dataset source"),
    (["synthetic", "--sizes", "1,2"], "--sizes is an option of a generated source"),
    (["synthetic", "--groups", "2,2"], "--groups '2,2': a dataset takes one number of groups"),
    (["synthetic", "--game", "loss"], "--game"),
    (["synthetic", "--local-steps", "2"], "--local-steps"),
    (["planted", "--groups", "3,3", "--federated", "simulation"], "--federated is an option of a dataset source"),
    (["synthetic", "--federated", "in-process", "--heads", "personal"],
     "--heads is a setting of the oracle's subset models, not of --federated in-process"),
    (["synthetic", "--federated", "superlink"], "--federated superlink needs --superlink ADDR"),
    (["synthetic", "--superlink", "127.0.0.1:9"], "--superlink goes with --federated superlink"),
    (["synthetic", "--federated", "simulation", "--insecure"], "--insecure is for --federated superlink"),
    (["synthetic", "--federated", "in-process", "--model", "cnn"], "--model cnn: the sites ship flat features"),
    (["synthetic", "--federated", "in-process", "--replicates", "1"], "--replicates 1: standard errors need"),
])
def test_sample_ce_options_of_another_kind_of_source_exit_2(capsys, args, names):
    from conftest import one_line, run

    rc, out, err = run(capsys, "sample-ce", *args, "--budget", "500")
    assert rc == 2 and out == "" and names in one_line(err)
