"""Data roles (issue 31 item 4): the rows that choose a rate and a stopping step never score the game.

Under a protocol's ``tune_split`` every column holds the same share of each client's training rows
out for tuning (``coalitions.learners.data.roles``); the learning-rate grid, early stopping and
SuPerFed's ``λ`` read only those rows, the game's values and the learners' utilities only the
validation rows.  The tests perturb one set of rows and watch which choices move.
"""

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from learner_fixtures import binary, blobs, regression  # noqa: E402

from coalitions.errors import InputError  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.data.federation import Client, Federation, Split  # noqa: E402
from coalitions.learners.data.roles import carve_tuning, data_roles, tuning_rows, with_roles  # noqa: E402
from coalitions.learners.exact import ExhaustiveOracle  # noqa: E402
from coalitions.learners.training.protocol import DEFAULT_PROTOCOLS, TrainingProtocol  # noqa: E402
from coalitions.params import ParameterError  # noqa: E402

LOGISTIC = DEFAULT_PROTOCOLS[("binary", "logistic")]


pytestmark = pytest.mark.usefixtures("one_thread")


def _tagged(fed: Federation) -> Federation:
    """``fed`` with each training row's first feature replaced by its index, so rows can be followed."""
    clients = []
    for c in fed.clients:
        X = np.array(c.train.X)
        X.reshape(len(X), -1)[:, 0] = np.arange(len(X))
        clients.append(Client(c.name, Split(X, c.train.y), c.val, c.test))
    return dataclasses.replace(fed, clients=tuple(clients))


def _with_rows(fed: Federation, part: str, change) -> Federation:
    """``fed`` with every client's ``part`` split replaced by ``change(split)`` (the ``tuning`` record kept)."""
    clients = [dataclasses.replace(c, **{part: change(getattr(c, part))}) for c in fed.clients]
    return dataclasses.replace(fed, clients=tuple(clients))


def _flip(split: Split) -> Split:
    """The same rows with every binary label flipped: a loss measured on them moves."""
    return Split(split.X, 1 - split.y)


# ---------------------------------------------------------------------------- the split
@pytest.mark.parametrize("make", [lambda: load("heart", seed=3), lambda: regression((10, 14, 9)),
                                  lambda: blobs((12, 20, 7, 16))])
def test_tuning_rows_are_held_out_of_training_and_disjoint_from_scoring_rows(make):
    fed = _tagged(make())
    carved = carve_tuning(fed, 0.25)
    for before, after in zip(fed.clients, carved.clients, strict=True):
        kept = after.train.X.reshape(len(after.train), -1)[:, 0].astype(int)
        held = after.tune.X.reshape(len(after.tune), -1)[:, 0].astype(int)
        assert not set(kept) & set(held)                                   # disjoint
        assert sorted([*kept, *held]) == list(range(len(before.train)))    # together: the training rows
        assert list(kept) == sorted(kept)                                   # training keeps its order
        assert 1 <= len(held) < len(before.train)
        assert after.val is before.val and after.test is before.test       # scoring and test rows untouched
        assert after.tuning is after.tune
        if fed.task != "regression":                                        # stratified, every class still trains
            assert set(np.unique(after.train.y)) == set(np.unique(before.train.y))
            for k in np.unique(before.train.y):
                share = (after.tune.y == k).sum() / (before.train.y == k).sum()
                assert share == pytest.approx(0.25, abs=0.5 / (before.train.y == k).sum() + 1e-9) or share == 0
    assert carved.tuning == {"fraction": 0.25, "seed": int(fed.options.get("seed", 0) or 0)}


def test_the_split_is_reproducible_and_each_clients_rows_are_its_own():
    fed = load("heart", seed=3)
    a, b = carve_tuning(fed, 0.2), carve_tuning(fed, 0.2)
    for x, y in zip(a.clients, b.clients, strict=True):
        assert np.array_equal(x.tune.X, y.tune.X) and np.array_equal(x.train.X, y.train.X)
    # a client's rows depend on the split seed and its name, not on the clients beside it
    alone = carve_tuning(dataclasses.replace(fed, clients=fed.clients[2:]), 0.2)
    assert np.array_equal(alone.clients[0].tune.X, a.clients[2].tune.X)
    other = carve_tuning(fed, 0.2, seed=4)
    assert any(not np.array_equal(x.tune.X, y.tune.X) for x, y in zip(a.clients, other.clients, strict=True))
    assert a.tuning["seed"] == fed.options["seed"] == 3


def test_tuning_rows_edge_cases():
    rng = np.random.default_rng(0)
    assert len(tuning_rows(np.zeros(3, np.float32), 0.1, rng, False)) == 1           # at least one row
    assert list(tuning_rows(np.array([0, 0, 1]), 0.5, rng, True)) in ([0], [1])      # never a class's last row
    with pytest.raises(InputError, match="none to hold out"):
        tuning_rows(np.zeros(1, np.float32), 0.5, rng, False)


def test_with_roles_is_idempotent_and_refuses_two_different_splits():
    fed = load("heart", seed=0)
    assert with_roles(fed, LOGISTIC) is fed                                   # today's behaviour: nothing held out
    carved = with_roles(fed, LOGISTIC.with_(tune_split=0.2))
    assert with_roles(carved, LOGISTIC.with_(tune_split=0.2)) is carved       # every column: the same rows
    with pytest.raises(InputError, match="tuning rows of share 0.2"):
        with_roles(carved, LOGISTIC.with_(tune_split=0.3))
    with pytest.raises(InputError, match="tuning rows of share 0.2"):
        with_roles(carved, LOGISTIC)
    with pytest.raises(InputError, match="either every client has tuning rows"):
        Federation("x", "binary", "accuracy", (carved.clients[0], fed.clients[1]), 2)


def test_tune_split_is_a_validated_protocol_field_recorded_only_when_set():
    for bad in (0, 1, -0.1, 1.5, "0.2", True):
        with pytest.raises(ParameterError) as e:
            TrainingProtocol(tune_split=bad)
        assert e.value.param == "tune_split"
    p = TrainingProtocol(tune_split=0.2)
    assert "tune_split" not in TrainingProtocol().to_json() and p.to_json()["tune_split"] == 0.2
    assert TrainingProtocol.from_json(p.to_json()) == p


def test_data_roles_record():
    fed = load("heart", seed=0)
    plain = data_roles(fed)
    assert plain["tune"] == plain["score"] == "validation" and "seed" not in plain
    assert all(r["tune"] == r["score"] for r in plain["rows"].values())
    carved = data_roles(carve_tuning(fed, 0.2))
    assert carved["tune"] == "train holdout 20%" and carved["score"] == "validation" and carved["seed"] == 0
    for c in fed.clients:
        r = carved["rows"][c.name]
        assert r["train"] + r["tune"] == len(c.train) and r["score"] == len(c.val) and r["test"] == len(c.test)


# ---------------------------------------------------------------------------- the exact game
def _game(fed, p, **kw):
    return ExhaustiveOracle(protocol=p, device="cpu", **kw).fit(fed)


def test_the_exact_game_chooses_rate_and_stop_on_tuning_rows_only():
    fed = load("heart", seed=0)
    p = LOGISTIC.with_(steps=30, lr=1.5, schedule="constant", patience=2, lr_grid=(0.15, 1.5), tune_split=0.2)
    base = _game(fed, p)
    assert (base.stopped_at_[1:] < p.steps).any() and len(set(base.lr_chosen_[1:])) > 1
    # perturbed validation rows: the same choices (and the same models: test values equal), other game values
    noisy_val = _game(_with_rows(fed, "val", _flip), p)
    np.testing.assert_array_equal(noisy_val.lr_chosen_, base.lr_chosen_)
    np.testing.assert_array_equal(noisy_val.stopped_at_, base.stopped_at_)
    np.testing.assert_array_equal(noisy_val.values_test_, base.values_test_)
    assert not np.array_equal(np.nan_to_num(noisy_val.values_val_), np.nan_to_num(base.values_val_))
    # perturbed tuning rows: the choices move
    carved = with_roles(fed, p)
    noisy_tune = _game(_with_rows(carved, "tune", _flip), p)
    assert not (np.array_equal(noisy_tune.lr_chosen_, base.lr_chosen_)
                and np.array_equal(noisy_tune.stopped_at_, base.stopped_at_))
    # the subset models trained on the remaining training rows: the oracle's federation is the carved one
    assert np.array_equal(base.federation_.sizes("train"), carved.sizes("train"))
    roles = base.game_.provenance["data_roles"]
    assert roles == data_roles(carved) and base.test_game_.provenance["data_roles"] == roles
    assert base.game_.provenance["sizes"] == carved.sizes("train").tolist()
    assert base.config_["protocol"]["tune_split"] == 0.2


def test_without_a_tuning_split_the_validation_rows_still_tune():
    """Today's behaviour, kept as the default: perturbing the validation rows moves the choices."""
    fed = load("heart", seed=0)
    p = LOGISTIC.with_(steps=30, lr=1.5, schedule="constant", patience=2, lr_grid=(0.15, 1.5))
    base = _game(fed, p)
    noisy = _game(_with_rows(fed, "val", _flip), p)
    assert not (np.array_equal(noisy.lr_chosen_, base.lr_chosen_) and np.array_equal(noisy.stopped_at_,
                                                                                       base.stopped_at_))
    assert base.game_.provenance["data_roles"]["tune"] == "validation"


@pytest.mark.parametrize("heads", ["shared", "personal"])
def test_subset_outputs_under_a_tuning_split_are_the_games_models(heads):
    from coalitions.learners.data.metrics import evaluate

    fed = load("heart", seed=1)
    p = LOGISTIC.with_(steps=8, lr=1.5, patience=2, lr_grid=(0.15, 1.5), tune_split=0.2)
    kw = {"protocol": p, "device": "cpu", **({"heads": "personal"} if heads == "personal" else {})}
    game = ExhaustiveOracle(**kw).fit(fed)
    masks = [0b0001, 0b0110, 0b1111]
    for m, row in zip(masks, ExhaustiveOracle(**kw).subset_outputs(fed, masks, "val"), strict=True):
        for i, out in enumerate(row):
            if m >> i & 1:
                assert evaluate(fed.metric, fed.clients[i].val.y, out) == pytest.approx(game.values_val_[i, m],
                                                                                        abs=1e-12)


# ---------------------------------------------------------------------------- the learner columns
def _learner(method, fed, p, **options):
    from coalitions.learners.methods.registry import create

    if method == "spo":
        from coalitions.learners.methods.spo import SPO

        return SPO(device="cpu", seed=0, protocol=p, **options).fit(fed)
    return create(method, options, device="cpu", seed=0).set_params(protocol=p).fit(fed)


@pytest.mark.parametrize("method", ["fedavg", "local", "superfed-mm"])
def test_a_learner_stops_on_tuning_rows_only(method):
    fed = binary((30, 24, 28))
    p = TrainingProtocol(model="logistic", lr=0.5, steps=40, patience=2, schedule="constant", tune_split=0.3)
    base = _learner(method, fed, p)
    noisy_val = _learner(method, _with_rows(fed, "val", _flip), p)
    assert noisy_val.val_loss_history_ == base.val_loss_history_       # the rows it stops (and is tuned) on
    assert noisy_val.stopped_at_ == base.stopped_at_
    assert noisy_val.utilities_["test"] == base.utilities_["test"]     # the same models
    assert noisy_val.utilities_["val"] != base.utilities_["val"]       # scored on the validation rows
    if method == "superfed-mm":
        np.testing.assert_array_equal(noisy_val.lambda_, base.lambda_)
    noisy_tune = _learner(method, _with_rows(with_roles(fed, p), "tune", _flip), p)
    assert noisy_tune.val_loss_history_ != base.val_loss_history_
    assert base.estimate_.config["data_roles"] == data_roles(with_roles(fed, p))
    assert base.federation_.tuning == {"fraction": 0.3, "seed": 0}


def test_a_learner_columns_rate_is_chosen_on_tuning_rows_only():
    """``compute_piece`` (a report's column) tunes on the grid by the history the tuning rows alone make."""
    from coalitions.learners.experiments.columns import compute_piece

    fed = binary((30, 24, 28))
    p = TrainingProtocol(model="logistic", lr=0.5, steps=20, patience=2, schedule="constant", tune_split=0.3,
                         lr_grid=(0.05, 0.5, 5.0))

    def column(f):
        return compute_piece(f, None, "fedavg", {"protocol": p}, 0, "cpu")

    base = column(fed)
    noisy_val = column(_with_rows(fed, "val", _flip))
    assert noisy_val.extra["lr_tuning"] == base.extra["lr_tuning"]
    assert noisy_val.extra["stopping"] == base.extra["stopping"]
    assert noisy_val.utilities["val"] != base.utilities["val"]
    noisy_tune = column(_with_rows(with_roles(fed, p), "tune", _flip))
    assert noisy_tune.extra["lr_tuning"]["val_loss"] != base.extra["lr_tuning"]["val_loss"]
    assert base.config["data_roles"]["tune"] == "train holdout 30%"


def test_spo_stops_and_tunes_on_tuning_rows_only():
    from coalitions.learners.methods.spo.estimator import EVAL_EVERY

    fed = binary((30, 24, 28))
    p = TrainingProtocol(steps=3 * EVAL_EVERY, patience=1, lr_grid=(0.001, 0.05), tune_split=0.3)
    kw = {"directions": 4, "starts": 2, "search_steps": 5, "hidden": 16, "embed": 8}
    base = _learner("spo", fed, p, **kw)
    noisy_val = _learner("spo", _with_rows(fed, "val", _flip), p, **kw)
    assert noisy_val.val_loss_clients_ == base.val_loss_clients_
    assert noisy_val.lr_losses_ == base.lr_losses_ and noisy_val.lr_ == base.lr_
    assert noisy_val.stopped_at_ == base.stopped_at_
    noisy_tune = _learner("spo", _with_rows(with_roles(fed, p), "tune", _flip), p, **kw)
    assert noisy_tune.lr_losses_ != base.lr_losses_
    assert base.estimate_.config["data_roles"] == data_roles(with_roles(fed, p))


def test_every_column_trains_and_tunes_on_the_same_rows():
    fed = load("heart", seed=2)
    p = LOGISTIC.with_(steps=6, patience=2, tune_split=0.2)
    game = _game(fed, p)
    local = _learner("local", fed, p)
    fedavg = _learner("fedavg", fed, p)
    spo = _learner("spo", fed, p, directions=4, starts=2, search_steps=5, hidden=16, embed=8)
    feds = [game.federation_, local.federation_, fedavg.federation_, spo.federation_]
    for other in feds[1:]:
        for a, b in zip(feds[0].clients, other.clients, strict=True):
            for part in ("train", "tune", "val", "test"):
                assert np.array_equal(getattr(a, part).X, getattr(b, part).X)
                assert np.array_equal(getattr(a, part).y, getattr(b, part).y)
    roles = game.game_.provenance["data_roles"]
    assert roles["tune"] == "train holdout 20%"
    assert local.estimate_.config["data_roles"] == fedavg.estimate_.config["data_roles"] == roles
    assert spo.estimate_.config["data_roles"] == roles
    # Local's model of client i is still the game's model of {i}, both on the remaining training rows
    for i, c in enumerate(fed.names):
        assert local.utilities_["val"][c] == game.values_val_[i, 1 << i]


# ---------------------------------------------------------------------------- where it is refused
def test_an_experiments_oracle_cannot_tune_on_other_rows():
    from coalitions.learners.experiments.catalogue import get_experiment

    exp = dataclasses.replace(get_experiment("heart"), oracle={"tune_split": 0.2})
    with pytest.raises(ParameterError, match="tune_split"):
        exp.oracle_options(quick=True)


def test_federated_runs_refuse_a_tuning_split():
    from coalitions.learners.federated.protocol import check_training, inprocess_game

    with pytest.raises(InputError, match="tune_split"):
        check_training({"tune_split": 0.2})
    with pytest.raises(InputError, match="tune_split"):
        inprocess_game(binary(), LOGISTIC.with_(tune_split=0.2))


def test_a_subset_model_that_kept_no_rate_gives_the_first_rates_outputs(monkeypatch):
    """A model whose pooled loss is NaN or +inf at every rate records no rate (NaN) and keeps the first rate's
    model; ``subset_outputs`` returned zeros for it (its rate matched no rate of the grid)."""
    from coalitions.learners.game.chunks import ChunkTrainer

    fed = load("heart", seed=1)
    p = LOGISTIC.with_(steps=8, lr=1.5, patience=2, lr_grid=(0.15, 1.5), tune_split=0.2)
    masks = [0b0001, 0b0110]
    first = ExhaustiveOracle(protocol=p.with_(lr=0.15, lr_grid=None), device="cpu").subset_outputs(fed, masks, "val")
    real = ChunkTrainer.__call__
    monkeypatch.setattr(ChunkTrainer, "__call__", lambda self, ms, progress=None: {
        **real(self, ms, progress), "lr": np.full(len(ms), np.nan)})
    got = ExhaustiveOracle(protocol=p, device="cpu").subset_outputs(fed, masks, "val")
    for row, want in zip(got, first, strict=True):
        for out, ref in zip(row, want, strict=True):
            if ref is not None:
                np.testing.assert_allclose(out, ref, atol=1e-6)
                assert np.abs(out).max() > 0
