"""One training protocol (issue 9): the exact game's singletons are Local, FedAvg is what its docs say.

Tolerances: on heart (accuracy) the metrics agree exactly.  On synthetic regression
the exact game scores a subset model by a float64 quadratic form while Local predicts
in float32 and scores the predictions, so the MSEs (about 1e-4 in regime II) agree to
about 1e-9 absolute (float32 residuals: 1e-5 relative), not to the bit; 1e-8 absolute is
asserted.  Trained by the protocol's optimiser (not in closed form) the two sum the same
float32 per-sample gradients in different orders (a matrix product per client against a masked
sum), and the MSEs agree to 1e-6 relative (2e-7 measured after 60 Adam steps).
"""

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.exact import ExhaustiveOracle  # noqa: E402
from coalitions.learners.methods.baselines import FedAvg, Local  # noqa: E402
from coalitions.learners.training.protocol import (  # noqa: E402
    DEFAULT_PROTOCOLS,
    TrainingProtocol,
    default_protocol,
    lr_factor,
)
from coalitions.params import ParameterError  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def _singletons(values, n):
    return np.array([values[i, 1 << i] for i in range(n)])


def client_utilities(learner, part, names):
    return np.array([learner.utilities_[part][c] for c in names])


# ---------------------------------------------------------------------------- the object
def test_protocol_is_immutable_and_validated():
    p = TrainingProtocol(model="logistic", steps=10)
    with pytest.raises(AttributeError):
        p.steps = 20  # frozen
    for bad in (dict(steps=0), dict(lr=0), dict(optimizer="rmsprop"), dict(schedule="step"),
                dict(batch_size=0), dict(momentum=1.0), dict(weight_decay=-1), dict(model="tree")):
        with pytest.raises(ParameterError) as e:
            TrainingProtocol(**bad)
        assert e.value.param == next(iter(bad))
    with pytest.raises(ParameterError, match="closed_form"):
        TrainingProtocol(model="logistic", closed_form=True)
    assert TrainingProtocol.from_json(p.to_json()) == p
    with pytest.raises(ParameterError, match="unknown field"):
        TrainingProtocol.from_json({"epochs": 3})


def test_round_and_tuning_fields_are_validated_and_recorded_only_when_set():
    p = TrainingProtocol(local_steps=5, patience=3, lr_grid=[0.1, 0.01])
    assert p.lr_grid == (0.1, 0.01) and TrainingProtocol.from_json(p.to_json()) == p
    assert p.to_json()["lr_grid"] == [0.1, 0.01]
    plain = TrainingProtocol().to_json()
    assert not {"local_steps", "patience", "lr_grid"} & set(plain)  # earlier provenance unchanged
    for bad in (dict(local_steps=0), dict(patience=0), dict(lr_grid=[]), dict(lr_grid=[0.1, 0.1]),
                dict(lr_grid="0.1"), dict(lr_grid=[0.0]), dict(lr_grid=[float("nan")])):
        with pytest.raises(ParameterError) as e:
            TrainingProtocol(**bad)
        assert e.value.param == next(iter(bad))


def test_budget_conversions():
    full = TrainingProtocol(steps=300)
    assert full.steps_per_epoch(1000) == 1 and full.epochs_for(1000) == 300 and full.rounds_for(1000) == 300
    mini = TrainingProtocol(steps=300, batch_size=32)
    assert mini.steps_per_epoch(100) == 4            # 32 + 32 + 32 + 4
    assert mini.epochs_for(100) == 75                # 75 epochs x 4 batches = 300 steps
    assert mini.rounds_for(100, local_epochs=3) == 25
    assert mini.rounds_for(100, steps_per_round=7) == 43  # ceil(300 / 7)
    assert lr_factor("cosine", 0, 10) == 1.0 and abs(lr_factor("cosine", 10, 10)) < 1e-12
    assert lr_factor("constant", 7, 10) == 1.0


def test_defaults_cover_the_tasks():
    assert default_protocol("regression", "linear").closed_form
    assert default_protocol("binary", "logistic") is DEFAULT_PROTOCOLS[("binary", "logistic")]
    with pytest.raises(ParameterError):
        default_protocol("binary", "forest")


# ---------------------------------------------------------------------------- Local = the singletons
@pytest.mark.parametrize("closed_form", [True, False])
def test_local_is_the_exact_games_singleton_on_synthetic(closed_form):
    fed = load("synthetic", seed=0, samples=200, rho=1.0)
    p = TrainingProtocol(model="linear", steps=60, weight_decay=1e-10 if closed_form else 1e-3,
                         closed_form=closed_form)
    oracle = ExhaustiveOracle(protocol=p, seed=3, device="cpu").fit(fed)
    local = Local(protocol=p, seed=3, device="cpu").fit(fed)
    assert oracle.method_ == ("closed-form" if closed_form else "batched")
    assert local.rounds_ == (0 if closed_form else 60)
    for part, values in (("val", oracle.values_val_), ("test", oracle.values_test_)):
        exact = _singletons(values, fed.n)
        tol = dict(rtol=0, atol=1e-8) if closed_form else dict(rtol=1e-6, atol=0)
        np.testing.assert_allclose(client_utilities(local, part, fed.names), exact, **tol)


def test_local_is_the_exact_games_singleton_on_heart():
    fed = load("heart", seed=0)
    p = TrainingProtocol(model="logistic", lr=0.05, steps=40, weight_decay=1e-3)
    oracle = ExhaustiveOracle(protocol=p, seed=1, device="cpu").fit(fed)
    local = Local(protocol=p, seed=1, device="cpu").fit(fed)
    for part, values in (("val", oracle.values_val_), ("test", oracle.values_test_)):
        assert np.array_equal(client_utilities(local, part, fed.names), _singletons(values, fed.n))
    # and the all-alone CE's per-client values are Local's (the game's CE uses the same models)
    assert oracle.config(fed)["protocol"] == p.to_json()


@pytest.mark.parametrize("name,options", [("heart", {}), ("synthetic", {"samples": 50, "rho": 1.0})])
def test_without_a_protocol_both_columns_train_the_tasks_default(name, options):
    """The defect the one protocol removes (issue 9, issue 18): the oracle and Local once had defaults of their own
    (Adam 500 epochs against SGD 0.1, batch 32, 50 rounds), so the same all-alone partition scored differently in
    the two columns.  Now neither has a training setting of its own: both train the task's default."""
    from coalitions.learners.training.protocol import protocol_with

    fed = load(name, seed=0, **options)
    oracle = ExhaustiveOracle(seed=1, device="cpu").fit(fed)
    local = Local(seed=1, device="cpu").fit(fed)
    want = protocol_with(fed.task, fed.input_shape)
    assert oracle.protocol_ == local.protocol_ == want
    for part, values in (("val", oracle.values_val_), ("test", oracle.values_test_)):
        # the closed form (synthetic) scores float32 models against float64 ones: 1e-9 apart
        np.testing.assert_allclose(client_utilities(local, part, fed.names), _singletons(values, fed.n), rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------------- FedAvg
@pytest.mark.parametrize("name,options", [("heart", {}), ("synthetic", {"samples": 50, "rho": 1.0})])
def test_fedavg_with_one_sgd_step_per_round_is_the_grand_coalitions_model(name, options):
    fed = load(name, seed=0, **options)
    p = TrainingProtocol(optimizer="sgd", lr=0.1, steps=30)
    oracle = ExhaustiveOracle(protocol=p, seed=0, device="cpu").fit(fed)
    fedavg = FedAvg(protocol=p, seed=0, device="cpu").fit(fed)
    grand = (1 << fed.n) - 1
    np.testing.assert_allclose(client_utilities(fedavg, "val", fed.names), oracle.values_val_[:, grand], rtol=1e-6)


@pytest.mark.parametrize("name,options", [("heart", {}), ("synthetic", {"samples": 50, "rho": 1.0})])
def test_fedavg_restricted_to_a_coalition_is_that_coalitions_model(name, options):
    """FedAvg run by the members of S alone reaches the exact game's shared model of S (issue 18 item 5)."""
    fed = load(name, seed=0, **options)
    p = TrainingProtocol(optimizer="sgd", lr=0.1, steps=30)
    oracle = ExhaustiveOracle(protocol=p, seed=0, device="cpu").fit(fed)
    members = (0, 2)
    sub = dataclasses.replace(fed, clients=tuple(fed.clients[i] for i in members), planted_groups=None)
    fedavg = FedAvg(protocol=p, seed=0, device="cpu").fit(sub)
    mask = sum(1 << i for i in members)
    np.testing.assert_allclose(client_utilities(fedavg, "val", sub.names), oracle.values_val_[list(members), mask],
                               rtol=1e-6)
    np.testing.assert_allclose(client_utilities(fedavg, "test", sub.names), oracle.values_test_[list(members), mask],
                               rtol=1e-6)


def test_fedavg_with_several_local_steps_is_not_the_pooled_model():
    fed = load("synthetic", seed=0, samples=50, rho=1.0)
    p = TrainingProtocol(optimizer="sgd", lr=0.1, steps=30, batch_size=10)  # 5 local steps per round
    oracle = ExhaustiveOracle(protocol=p.with_(batch_size=None), seed=0, device="cpu").fit(fed)
    fedavg = FedAvg(protocol=p, seed=0, device="cpu").fit(fed)
    assert fedavg.rounds_ == 6
    grand = (1 << fed.n) - 1
    gap = np.abs(client_utilities(fedavg, "val", fed.names) - oracle.values_val_[:, grand]).max()
    assert gap > 1e-3


# ---------------------------------------------------------------------------- convergence records
def test_every_round_records_the_validation_loss():
    fed = load("heart", seed=0)
    local = Local(protocol=TrainingProtocol(model="logistic", steps=12), seed=0, device="cpu").fit(fed)
    extra = local.estimate_.extra["val_loss_history"]
    assert len(extra["mean"]) == 12 and set(extra["clients"]) == set(fed.names)
    assert all(len(v) == 12 for v in extra["clients"].values())
    first = np.array([v[0] for v in extra["clients"].values()])
    assert extra["mean"][0] == pytest.approx(first.mean())
    assert extra["mean"][-1] < extra["mean"][0]          # training lowers the validation loss here


# ---------------------------------------------------------------------------- reproduce: budget, figure, CE (ours)
class _Est:
    def __init__(self, extra, blocks=()):
        self.extra = extra
        self._blocks = blocks

    def blocks(self):
        return self._blocks


def test_convergence_series_puts_rounds_and_spo_steps_on_one_axis():
    from coalitions.learners.experiments.figures import convergence_series

    reg = {"runs": [{"seed": 0, "methods": {
        "fedavg": {"_estimate": _Est({"val_loss_history": {"mean": [3.0, 2.0, 1.0, 0.5], "clients": {}}})},
        "fedamp": {"_estimate": _Est({"val_loss_history": {"mean": [2.0, 1.0], "clients": {}}})},
        "local": {"_estimate": _Est({"val_loss_history": {"mean": [], "clients": {}}})},     # closed form
        "spo": {"_estimate": _Est({"val_loss_history": {"steps": [50, 100], "mean": [4.0, 3.0], "clients": {}}})},
    }}]}
    s = convergence_series(reg, steps_per_client=100)
    assert s["FedAvg"] == ([25.0, 50.0, 75.0, 100.0], [3.0, 2.0, 1.0, 0.5])
    assert s["FedAMP"][0] == [50.0, 100.0]                   # 2 rounds of 50 local steps
    assert s["SPO (16 fixed directions)"] == ([50, 100], [4.0, 3.0])
    assert "Local" not in s
    assert convergence_series(reg)["FedAvg"][0] == [1, 2, 3, 4]   # no budget: rounds


def test_ce_ours_is_spos_utilities_in_its_own_ce_and_a_summary_column():
    from coalitions.learners.experiments.runner import ce_ours, summarize

    est = _Est({"ce_utilities": {"val": {"a": 0.5, "b": 0.25}, "test": {"a": 0.4, "b": 0.2}}}, (("a", "b"),))
    row = ce_ours(est)
    assert row == {"partition": [["a", "b"]], "val": {"a": 0.5, "b": 0.25}, "test": {"a": 0.4, "b": 0.2}}
    assert ce_ours(_Est({})) is None
    run = {"methods": {"spo": {"test": {"a": 0.3, "b": 0.1}, "ce_ours": row}},
           "exact": {"test": {"ce": {"a": 0.1, "b": 0.1}}, "partition": [["a", "b"]]}}
    s = summarize({"runs": [run], "clients": ["a", "b"]}, ["spo"])
    assert s["columns"] == ["SPO", "CE (ours)", "CE"]
    assert s["test"]["CE (ours)"]["a"]["mean"] == 0.4


def test_quick_synthetic_budget_is_matched():
    """Every learner takes the experiment's protocol itself and derives its rounds from its budget."""
    from coalitions.learners.experiments.catalogue import EXPERIMENTS, VARIANTS, budget_record
    from coalitions.learners.methods.fedamp import FedAMP
    from coalitions.learners.methods.federico import FedeRiCo

    exp = EXPERIMENTS["synthetic"]
    rec = budget_record(exp, True, exp.methods, [10] * 6)
    steps = rec["steps_per_client"]
    assert rec["protocol"]["closed_form"] and exp.protocol_for(True).steps == steps
    # SPO included; a variant column (FedeRiCo's two scales) adds the option it fixes
    assert all(rec["methods"][m] == {"protocol": "the protocol", **(VARIANTS[m].options if m in VARIANTS else {})}
               for m in exp.methods)
    p = exp.protocol_for(True).with_(steps=20)
    fed = load("synthetic", seed=0)
    federico = FedeRiCo(protocol=p, device="cpu").fit(fed)
    fedamp = FedAMP(protocol=p, device="cpu").fit(fed)
    assert federico.rounds_ == 20 and federico.stopped_at_ == 20          # one full-batch step per round
    assert fedamp.rounds_ * 5 == 20 and fedamp.stopped_at_ == 20         # FedAMP's floor: five local steps a round
    assert federico.lr_ == p.lr and federico.estimate_.config["protocol"] == p.to_json()


def test_a_training_setting_has_one_place_the_protocol():
    from coalitions.learners.methods.fedprox import FedProx

    fed = load("synthetic", seed=0)
    with pytest.raises(TypeError, match="lr"):
        FedProx(protocol=TrainingProtocol(steps=2), lr=0.5, device="cpu")
    with pytest.raises(ParameterError, match="protocol must be a TrainingProtocol"):
        FedProx(protocol={"lr": 0.1}, device="cpu").fit(fed)


def test_personal_head_singletons_are_local_under_the_protocol():
    """With personal heads (reproduce fashion) the singleton {i} — a body and i's head — is Local's model of i."""
    fed = load("digits", seed=0, clients=3, samples=40)
    p = TrainingProtocol(model="mlp", hidden=8, lr=0.01, steps=30)
    oracle = ExhaustiveOracle(protocol=p, heads="personal", seed=1, device="cpu").fit(fed)
    local = Local(protocol=p, seed=1, device="cpu").fit(fed)
    assert oracle.config(fed)["heads"] == "personal"
    for part, values in (("val", oracle.values_val_), ("test", oracle.values_test_)):
        np.testing.assert_allclose(client_utilities(local, part, fed.names), _singletons(values, fed.n), rtol=0, atol=1e-9)
    # the rest of the game is not the singletons': personal heads on a shared body do change v_i(S)
    assert not np.array_equal(values[0, 0b011], values[0, 0b001])


def test_the_exact_game_tunes_every_subset_models_rate_on_validation():
    """Each subset model keeps the grid's rate whose model has the lowest pooled validation loss (brute force)."""
    fed = load("heart", seed=0)
    p = DEFAULT_PROTOCOLS[("binary", "logistic")].with_(steps=20)
    grid = (0.015, 0.05, 0.15)
    tuned = ExhaustiveOracle(protocol=p.with_(lr_grid=grid), loss_game=True, device="cpu").fit(fed)
    single = {r: ExhaustiveOracle(protocol=p.with_(lr=r), loss_game=True, device="cpu").fit(fed) for r in grid}
    n_val = fed.sizes("val").astype(float)
    for m in range(1, 1 << fed.n):
        members = [i for i in range(fed.n) if m >> i & 1]
        pooled = {r: sum(n_val[i] * o.loss_game_.raw_values()[i, m] for i in members) / n_val[members].sum()
                  for r, o in single.items()}
        best = min(grid, key=lambda r: (pooled[r], grid.index(r)))
        assert tuned.lr_chosen_[m] == best
        np.testing.assert_array_equal(tuned.values_val_[members, m], single[best].values_val_[members, m])
        np.testing.assert_array_equal(tuned.values_test_[members, m], single[best].values_test_[members, m])
    assert sum(tuned.config_["lr_chosen"].values()) == (1 << fed.n) - 1
    assert len(set(tuned.lr_chosen_[1:])) > 1          # the choice really varies across subsets here
    with pytest.raises(TypeError, match="unexpected keyword argument 'epochs'"):   # the protocol's alone
        ExhaustiveOracle(protocol=p, epochs=5, device="cpu")


def test_subset_outputs_of_a_tuned_game_are_its_models_at_their_chosen_rates():
    from coalitions.learners.data.metrics import evaluate

    fed = load("heart", seed=1)
    p = DEFAULT_PROTOCOLS[("binary", "logistic")].with_(steps=15, lr_grid=(0.015, 0.15))
    oracle = ExhaustiveOracle(protocol=p, device="cpu")
    tuned = oracle.fit(fed)
    masks = [0b0001, 0b0110, 0b1111]
    for m, row in zip(masks, oracle.subset_outputs(fed, masks, "test"), strict=True):
        for i, out in enumerate(row):
            if m >> i & 1:
                assert evaluate(fed.metric, fed.clients[i].test.y, out) == pytest.approx(tuned.values_test_[i, m],
                                                                                         abs=1e-12)


@pytest.mark.parametrize("heads", ["shared", "personal"])
def test_subset_outputs_of_a_stopped_game_are_its_models_where_they_stopped(heads):
    """Under patience every model stops on its own pooled validation loss; its outputs are those of that model.

    (Before, ``subset_outputs`` trained the whole budget: the reports' CE intervals came from other
    models than the ones the game scored, ``outputs_check`` 0.13 on heart.)
    """
    from coalitions.learners.data.metrics import evaluate

    fed = load("heart", seed=1)
    p = DEFAULT_PROTOCOLS[("binary", "logistic")].with_(steps=8, lr=1.5, patience=2, lr_grid=(0.15, 1.5))
    kw = {"protocol": p, "device": "cpu", **({"heads": "personal"} if heads == "personal" else {})}
    game = ExhaustiveOracle(**kw).fit(fed)
    stopped = np.asarray(game.stopped_at_)[1:]
    assert (stopped < p.steps).any() and (stopped == p.steps).any()   # both kinds of model are checked
    masks = [0b0001, 0b0010, 0b0110, 0b1011, 0b1111]
    for part, values in (("val", game.values_val_), ("test", game.values_test_)):
        for m, row in zip(masks, ExhaustiveOracle(**kw).subset_outputs(fed, masks, part), strict=True):
            for i, out in enumerate(row):
                if m >> i & 1:
                    assert evaluate(fed.metric, getattr(fed.clients[i], part).y, out) == \
                        pytest.approx(values[i, m], abs=1e-12)


@pytest.mark.parametrize("method", ["local", "fedavg", "fedprox", "ditto", "fedper", "lg-fedavg", "qffl", "afl",
                                    "per-fedavg", "pfedme", "pfedhn", "fedamp", "fedamp-heuristic", "federico",
                                    "superfed-mm", "superfed-lm"])
def test_every_learner_trains_under_the_protocol(method):
    """Each of the sixteen takes the protocol: its rounds from the budget, its rate, its patience, on record."""
    from learner_fixtures import blobs

    from coalitions.learners.methods.registry import create

    fed = blobs()
    p = TrainingProtocol(model="mlp", hidden=4, lr=0.01, steps=6, patience=2, weight_decay=1e-3)
    learner = create(method, {"inner_steps": 3} if method == "pfedme" else {}, device="cpu", seed=0)
    learner.set_params(protocol=p).fit(fed)
    per_round = learner.steps_per_round_
    assert learner.rounds_ == -(-p.steps // per_round) and learner.lr_ == p.lr
    assert learner.stopped_at_ == learner.rounds_run_ * per_round <= learner.rounds_ * per_round
    assert learner.hit_max_ == (learner.rounds_run_ == learner.rounds_)
    e = learner.estimate_
    assert e.config["protocol"] == p.to_json() and "lr" not in e.config and "rounds" not in e.config
    assert e.extra["patience"] == 2 and e.extra["lr"] == p.lr


def test_every_subset_model_of_the_exact_game_stops_on_its_own_validation_loss():
    """Per-subset early stopping: each model keeps its best evaluation; the chunking changes nothing."""
    fed = load("heart", seed=0)
    p = DEFAULT_PROTOCOLS[("binary", "logistic")].with_(steps=200, schedule="constant", patience=4)
    game = ExhaustiveOracle(protocol=p, device="cpu", loss_game=True).fit(fed)
    chunked = ExhaustiveOracle(protocol=p, device="cpu", loss_game=True, chunk_size=3).fit(fed)
    np.testing.assert_array_equal(game.stopped_at_, chunked.stopped_at_)
    np.testing.assert_array_equal(np.nan_to_num(game.values_val_), np.nan_to_num(chunked.values_val_))
    stopped = game.stopped_at_[1:]
    assert stopped.max() < p.steps and len(set(stopped)) > 1      # they stop, each at its own step
    assert game.config_["stopping"]["hit_max"] == 0
    for m in (1, 6, 15):
        members = [i for i in range(fed.n) if m >> i & 1]
        # the kept model is the model after its best evaluation: with a constant rate, full batch, that is
        # the same subset trained for best = stopped - patience steps (one evaluation per step)
        best = int(game.stopped_at_[m]) - p.patience
        short = ExhaustiveOracle(protocol=p.with_(steps=best, patience=None), device="cpu").fit(fed)
        np.testing.assert_array_equal(game.values_val_[members, m], short.values_val_[members, m])


@pytest.mark.parametrize("method", ["local", "fedavg", "fedprox", "fedavgm", "ditto", "fedper", "lg-fedavg", "qffl",
                                    "afl", "per-fedavg", "pfedme", "pfedhn", "fedamp", "fedamp-heuristic", "superfed-mm",
                                    "superfed-lm"])
def test_the_weight_decay_reaches_every_weight_a_learner_trains(method, monkeypatch):
    """The protocol's decay is on the weights of every model a site trains (issue 32): Ditto trains its global and
    personal models, SuPerFed its federated and local ones, in one dict of prefixed names, which the decay once
    missed (no decay at all on Ditto, none in SuPerFed's phase II)."""
    from learner_fixtures import blobs

    import coalitions.learners.methods.base as base
    from coalitions.learners.methods.registry import create

    p = TrainingProtocol(model="mlp", hidden=4, lr=0.01, steps=6, weight_decay=1e-3)
    options = {"inner_steps": 3} if method == "pfedme" else {"start": 0.5} if method.startswith("superfed") else {}
    learner = create(method, options, device="cpu", seed=0).set_params(protocol=p)
    seen, missed, biases = set(), set(), set()
    real = base.decay_penalty

    def spy(params, names, weight_decay, stacked=0):
        shapes = learner.spec_.shapes
        for k in params:
            own = k if k in shapes else k.partition(".")[2]   # a prefixed model's parameter: its own name
            assert own in shapes, f"{k} is no parameter of the model"
            (seen if len(shapes[own]) >= 2 else biases).add(k)
        missed.update(seen - set(names))
        assert not set(names) & biases, "a bias is decayed"
        return real(params, names, weight_decay, stacked)

    monkeypatch.setattr(base, "decay_penalty", spy)
    learner.fit(blobs())
    assert seen and not missed
    if method.startswith("superfed"):   # both phases ran: the plain names, then the prefixed ones
        assert {k[:2] for k in seen} >= {"f.", "l."} and any("." not in k for k in seen)
