"""The exhaustive subset oracle (learners/oracle.py) against independent references."""

import json

import cvxpy as cp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import coalitions as co
from coalitions.cli import main
from coalitions.errors import InputError
from coalitions.learners.data.datasets import load
from coalitions.learners.data.federation import Client, Federation, Split
from coalitions.learners.data.metrics import evaluate
from coalitions.learners.exact import (
    ExhaustiveOracle,
    closed_form_mse,
    closed_form_weights,
    membership,
    subset_sums,
    train_subsets,
)
from coalitions.learners.training.engine import resolve_device
from coalitions.learners.training.models import make_model
from coalitions.learners.training.protocol import TrainingProtocol, protocol_with


def members(mask, n):
    return [i for i in range(n) if mask >> i & 1]


def union(fed, mask, part="train"):
    idx = members(mask, fed.n)
    X = np.concatenate([getattr(fed.clients[i], part).X for i in idx]).astype(np.float64)
    y = np.concatenate([getattr(fed.clients[i], part).y for i in idx])
    return X.reshape(len(X), -1), y


def toy_binary(n_clients=3, n=40, d=4, seed=0):
    rng = np.random.default_rng(seed)
    clients = []
    for i in range(n_clients):
        w = rng.normal(size=d) * (1 if i < 2 else -1)
        X = rng.normal(size=(n + 20, d))
        y = (X @ w + 0.5 * rng.normal(size=n + 20) > 0).astype(np.int64)
        y[:2] = [0, 1]
        y[n:n + 2] = [0, 1]
        clients.append(Client(str(i), Split(X[:n], y[:n]), Split(X[n:n + 10], y[n:n + 10]),
                              Split(X[n + 10:], y[n + 10:])))
    return Federation("toy", "binary", "auc", tuple(clients), 2, None, {"seed": seed})


# ---------------------------------------------------------------------------- bitmask helpers
@settings(max_examples=30, deadline=None)
@given(st.integers(1, 7), st.integers(0, 2**31))
def test_subset_sums_and_membership(n, seed):
    a = np.random.default_rng(seed).normal(size=(n, 2, 3))
    s = subset_sums(a)
    W = membership(np.arange(1 << n), n)
    for mask in range(1 << n):
        assert np.allclose(s[mask], sum((a[i] for i in members(mask, n)), np.zeros((2, 3))))
        assert W[mask].tolist() == [bool(mask >> i & 1) for i in range(n)]


# ---------------------------------------------------------------------------- closed form
@pytest.mark.parametrize("samples", [40, 8])  # well-determined, and under-determined alone (8 < 21)
def test_closed_form_equals_per_subset_lstsq(samples):
    fed = load("synthetic", clients=4, samples=samples, rho=0.1, val=30, test=30, seed=5)
    W = closed_form_weights(fed)
    val = closed_form_mse(fed, W, "val")
    for mask in range(1, 16):
        X, y = union(fed, mask)
        w = np.linalg.lstsq(np.hstack([X, np.ones((len(X), 1))]), y.astype(np.float64), rcond=None)[0]
        for i in members(mask, 4):
            Xv, yv = fed.clients[i].val.X.astype(np.float64), fed.clients[i].val.y
            ref = evaluate("mse", yv, Xv @ w[:-1] + w[-1])
            # alone with 8 < 21 unknowns: the tiny ridge approaches lstsq's minimum-norm fit
            assert val[i, mask] == pytest.approx(ref, rel=1e-5, abs=1e-10)
        if len(y) > 21:
            assert np.allclose(W[mask], w, atol=1e-6)
    assert np.isnan(val[0, 0b1110]) and np.isnan(val[1, 0b0001])


def test_oracle_game_sense_provenance_and_round_trip(tmp_path):
    fed = load("synthetic", clients=3, val=20, test=20)
    o = ExhaustiveOracle().fit(fed)
    assert o.method_ == "closed-form" and o.game_.sense == "min"
    assert np.allclose(o.game_.raw_values(), o.values_val_, equal_nan=True)
    assert np.allclose(-o.game_.values, o.values_val_, equal_nan=True)
    prov = o.game_.provenance
    assert prov["dataset"] == "synthetic" and prov["metric"] == "mse" and prov["split"] == "val"
    assert prov["options"]["samples"] == 10 and prov["model"]["model"] == "linear" and prov["version"]
    assert prov["sizes"] == fed.sizes("train").tolist() == [10, 10, 10]  # the weights of `welfare --weights sizes`
    from coalitions.welfare import resolve_weights
    assert resolve_weights(o.game_, "sizes").tolist() == [10, 10, 10]
    for path in (tmp_path / "g.json", tmp_path / "g.npz"):
        co.write_game(o.game_, path)
        back = co.read_game(path)
        assert np.allclose(back.values, o.game_.values, equal_nan=True)
        assert back.provenance["options"] == json.loads(json.dumps(prov["options"]))
    assert o.test_game_.provenance["split"] == "test"
    assert prov["backend"] == o.backend_ == {"name": "local", "workers": 1}
    # the closed form runs in this process whatever backend was asked for: the record says so
    asked = ExhaustiveOracle(backend="ray").fit(fed)
    assert asked.game_.provenance["backend"] == {"name": "local", "workers": 1, "requested": "ray"}
    assert co.read_game(tmp_path / "g.json").provenance["backend"] == prov["backend"]
    bg = o.benefit_graph(0b111)
    assert set(bg.edges) == set(co.ExactOracle(o.game_).benefit_graph(0b111).edges)


# ---------------------------------------------------------------------------- the paper's two regimes
COLLAB = dict(samples=10, rho=0.01)     # few samples (< dim), clients alike
ALONE = dict(samples=1000, rho=1.0)     # many samples, clients far apart


@pytest.mark.parametrize("seed", range(5))
def test_synthetic_regimes_of_table_1(seed):
    eq = co.solve(ExhaustiveOracle().fit(load("synthetic", seed=seed, **COLLAB)).game_)
    assert sorted(eq.blocks()) == [["0", "1", "2"], ["3", "4", "5"]]
    assert eq.certificate.holds
    g = ExhaustiveOracle().fit(load("synthetic", seed=seed, **ALONE)).game_
    assert co.solve(g).blocks() == [[str(i)] for i in range(6)]
    assert co.ExactOracle(g).benefit_graph(g.grand).edges == ()


# ---------------------------------------------------------------------------- batched training
def reference_loop(fed, kind, masks, epochs, lr, l2, seed, **kw):
    """One plain torch model per subset on the concatenated member data (no vmap)."""
    spec = make_model(kind, fed.input_shape, fed.n_outputs, **kw)
    init = spec.init(torch.Generator().manual_seed(seed), 1, dtype=torch.float64)
    out = {}
    for mask in masks:
        X, y = union(fed, mask)
        X = torch.tensor(X).reshape((-1,) + fed.input_shape)
        module = spec.module().double()
        with torch.no_grad():
            for name, p in module.named_parameters():
                p.copy_(init[name][0])
        opt = torch.optim.Adam(module.parameters(), lr=lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
        for _ in range(epochs):
            pred = module(X)
            if fed.task == "regression":
                loss = torch.nn.functional.mse_loss(pred[:, 0], torch.tensor(y, dtype=torch.float64))
            elif fed.task == "binary":
                loss = torch.nn.functional.binary_cross_entropy_with_logits(pred[:, 0], torch.tensor(y).double())
            else:
                loss = torch.nn.functional.cross_entropy(pred, torch.tensor(y))
            loss = loss + 0.5 * l2 * sum(p.pow(2).sum() for p in module.parameters() if p.dim() >= 2)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        out[mask] = {n: p.detach().clone() for n, p in module.named_parameters()}
    return spec, out


@pytest.mark.parametrize("kind, data", [("mlp", "regression"), ("logistic", "binary")])
def test_batched_trainer_equals_per_subset_loop(kind, data):
    fed = load("synthetic", clients=3, samples=15, dim=4, rho=0.5, val=20, test=20) if data == "regression" \
        else toy_binary()
    masks = list(range(1, 8))
    spec, ref = reference_loop(fed, kind, masks, epochs=40, lr=0.02, l2=1e-3, seed=2, hidden=6)
    p = TrainingProtocol(model=kind, steps=40, lr=0.02, weight_decay=1e-3, hidden=6)   # full batch: 40 epochs
    o = ExhaustiveOracle(protocol=p, dtype="float64", seed=2, chunk_size=3, device="cpu").fit(fed)
    assert o.chunks_trained_ == 3
    for mask in masks:
        for i in members(mask, 3):
            Xv = torch.tensor(fed.clients[i].val.X, dtype=torch.float64)
            scores = spec.forward(ref[mask], Xv).numpy()
            expect = evaluate(fed.metric, fed.clients[i].val.y, scores[:, 0])
            assert o.values_val_[i, mask] == pytest.approx(expect, rel=1e-6, abs=1e-9)


def test_logistic_subsets_reach_the_convex_optimum():
    fed = toy_binary()
    l2 = 0.05
    spec = make_model("logistic", fed.input_shape, 1)
    X = torch.tensor(np.concatenate([c.train.X for c in fed.clients]), dtype=torch.float64)
    y = torch.tensor(np.concatenate([c.train.y for c in fed.clients]))
    owner = torch.repeat_interleave(torch.arange(3), 40)
    init = {k: v[0] for k, v in spec.init(torch.Generator().manual_seed(0), 1, dtype=torch.float64).items()}
    params = train_subsets(spec, "binary", X, y, owner, list(range(1, 8)), 3, init, epochs=300, lr=0.1, l2=l2)
    for mask in range(1, 8):
        Xs, ys = union(fed, mask)
        w, b = cp.Variable(Xs.shape[1]), cp.Variable()
        z = Xs @ w + b
        objective = cp.sum(cp.logistic(z) - cp.multiply(ys, z)) / len(ys) + l2 / 2 * cp.sum_squares(w)
        best = cp.Problem(cp.Minimize(objective)).solve()
        wt, bt = params["weight"][mask - 1][:, 0].numpy(), params["bias"][mask - 1][0].item()
        zt = Xs @ wt + bt
        reached = np.mean(np.logaddexp(0, zt) - ys * zt) + l2 / 2 * wt @ wt
        assert reached - best < 1e-7
        assert np.allclose(wt, w.value, atol=1e-3) and abs(bt - b.value) < 1e-3


def test_checkpoint_resume_gives_the_same_game(tmp_path):
    fed = toy_binary()
    kw = dict(protocol=TrainingProtocol(model="mlp", hidden=4, steps=15, lr=0.05), chunk_size=2, seed=1, device="cpu")
    whole = ExhaustiveOracle(**kw).fit(fed)
    ckpt = tmp_path / "run.ckpt.npz"
    calls = []

    def stop_after_two_chunks(done, total):
        calls.append(done)
        if done >= 2 * 2 * 15:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ExhaustiveOracle(checkpoint=ckpt, progress=stop_after_two_chunks, **kw).fit(fed)
    assert ckpt.exists()
    resumed = ExhaustiveOracle(checkpoint=ckpt, **kw).fit(fed)
    assert resumed.chunks_resumed_ == 1 and resumed.chunks_trained_ == 3
    assert np.array_equal(resumed.values_val_, whole.values_val_, equal_nan=True)
    assert np.array_equal(resumed.values_test_, whole.values_test_, equal_nan=True)
    again = ExhaustiveOracle(checkpoint=ckpt, **kw).fit(fed)
    assert again.chunks_trained_ == 0 and again.chunks_resumed_ == 4
    with pytest.raises(InputError, match="different run"):
        ExhaustiveOracle(checkpoint=ckpt, **{**kw, "seed": 2}).fit(fed)


def test_chunking_does_not_change_the_result():
    fed = toy_binary()
    kw = dict(protocol=TrainingProtocol(model="logistic", steps=30), dtype="float64", device="cpu")
    a = ExhaustiveOracle(chunk_size=7, **kw).fit(fed).values_val_
    b = ExhaustiveOracle(chunk_size=1, **kw).fit(fed).values_val_
    assert np.allclose(a, b, equal_nan=True, atol=1e-9)


def test_minibatch_and_multiclass_cnn_run():
    fed = load("synthetic", clients=2, samples=12, dim=3, val=10, test=10)
    images = _images()
    # 24 training samples: 5 steps of 5 per epoch (2 epochs), 6 steps of 4 (3 epochs)
    o = ExhaustiveOracle(protocol=TrainingProtocol(model="cnn", lr=0.005, batch_size=5, steps=10),
                         device="cpu").fit(images)
    assert o.config_["epochs"] == 2 and o.config_["batch_size"] == 5
    assert o.values_val_.shape == (2, 4) and np.all((o.values_val_[:, 3] >= 0) & (o.values_val_[:, 3] <= 1))
    o = ExhaustiveOracle(protocol=TrainingProtocol(model="mlp", lr=0.01, batch_size=4, steps=18, hidden=3)).fit(fed)
    assert o.config_["epochs"] == 3 and o.config_["hidden"] == 3
    assert np.isfinite(o.values_val_[0, 1])


def test_rejects_bad_configuration():
    fed = toy_binary()
    with pytest.raises(InputError, match="^model linear fits regression; dataset 'toy' is binary") as err:
        ExhaustiveOracle(protocol=TrainingProtocol(model="linear")).fit(fed)
    assert err.value.param == "model" and "the protocol's model" in str(err.value)
    with pytest.raises(InputError, match="^protocol must be a TrainingProtocol or None, got dict"):
        ExhaustiveOracle(protocol={"model": "logistic"}).fit(fed)
    with pytest.raises(InputError, match="^protocol must be a TrainingProtocol or None, got str"):
        ExhaustiveOracle("logistic").config(fed)      # the old first positional parameter, model
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="cuda"):
            resolve_device("cuda")
    assert str(resolve_device("auto")) in ("cpu", "cuda")
    with pytest.raises(InputError, match="^threads must be an integer"):
        ExhaustiveOracle(threads=0).fit(fed)
    with pytest.raises(InputError, match="^memory_mb must be"):
        ExhaustiveOracle(memory_mb=0).fit(fed)


@pytest.mark.parametrize("name, value", [("model", "logistic"), ("epochs", 10), ("lr", 0.1), ("l2", 1e-3),
                                         ("ridge", 1e-10), ("batch_size", 8), ("hidden", 16)])
def test_training_settings_are_the_protocols_only(name, value):
    """The oracle keeps no training setting of its own: the old keywords are gone, not ignored."""
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
        ExhaustiveOracle(**{name: value})
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
        ExhaustiveOracle(protocol=TrainingProtocol(), **{name: value})
    with pytest.raises(TypeError):   # every other parameter is keyword-only: none binds by the old order
        ExhaustiveOracle(None, 4)


def _images(n_clients=2, n=12):
    return Federation("img", "multiclass", "accuracy", tuple(
        Client(str(i), *(Split(np.random.default_rng(i * 3 + k).normal(size=(n, 1, 6, 6)),
                               np.arange(n) % 3) for k in range(3))) for i in range(n_clients)), 3)


@pytest.mark.parametrize("data, kind, solver", [("regression", "linear", "closed-form"),
                                                ("binary", "logistic", "batched-adam"),
                                                ("images", "cnn", "batched-adam")])
def test_without_a_protocol_the_oracle_trains_the_tasks_default(data, kind, solver):
    """``protocol=None`` is ``protocol_with(task, input_shape)``: resolved in fit, recorded, the same game."""
    fed = {"regression": lambda: load("synthetic", clients=3, val=20, test=20), "binary": toy_binary,
           "images": _images}[data]()
    default = protocol_with(fed.task, tuple(fed.input_shape))
    assert default.model == kind
    o = ExhaustiveOracle(device="cpu").fit(fed)
    assert o.protocol is None and o.protocol_ == default
    model = o.game_.provenance["model"]
    assert model["model"] == kind and model["solver"] == solver and model["protocol"] == default.to_json()
    assert o.config(fed) == o.config_
    given = ExhaustiveOracle(protocol=default, device="cpu").fit(fed)
    assert given.game_.provenance == o.game_.provenance
    assert np.array_equal(given.values_val_, o.values_val_, equal_nan=True)
    if data == "regression":   # the closed form's ridge: the default protocol's weight decay, 1e-10
        assert model["ridge"] == default.weight_decay == 1e-10
    else:
        assert model["epochs"] == default.epochs_for(int(fed.sizes("train").sum()))
        assert model["lr"] == default.lr and model["l2"] == default.weight_decay


def test_threads_option_is_restored():
    before = torch.get_num_threads()
    fed = toy_binary()
    p = TrainingProtocol(model="logistic", steps=5)
    a = ExhaustiveOracle(protocol=p, threads=1, dtype="float64").fit(fed)
    assert torch.get_num_threads() == before
    b = ExhaustiveOracle(protocol=p, dtype="float64").fit(fed)
    assert np.allclose(a.values_val_, b.values_val_, equal_nan=True)


# ---------------------------------------------------------------------------- command line
def test_cli_oracle_writes_a_game(tmp_path, capsys):
    out = tmp_path / "g.json"
    assert main(["oracle", "synthetic", "--clients", "4", "--seed", "2", "-o", str(out)]) == 0
    g = co.read_game(out)
    assert g.n == 4 and g.sense == "min" and g.provenance["options"]["seed"] == 2
    assert main(["oracle", "synthetic", "--partition", "dirichlet", "-o", str(out)]) == 2
    assert "--partition" in capsys.readouterr().err


def test_cli_oracle_without_training_flags_is_the_oracle_without_a_protocol(tmp_path):
    out = tmp_path / "g.json"
    assert main(["oracle", "heart", "--seed", "1", "--device", "cpu", "-o", str(out)]) == 0
    o = ExhaustiveOracle(device="cpu", seed=1).fit(load("heart", seed=1))
    got = co.read_game(out)
    assert got.provenance["model"] == json.loads(json.dumps(o.game_.provenance["model"]))
    assert np.allclose(got.values, o.game_.values, equal_nan=True)
    npz = tmp_path / "h.npz"
    assert main(["oracle", "synthetic", "--clients", "3", "--model", "mlp", "--steps", "2", "-o", str(npz)]) == 0
    assert co.read_game(npz).provenance["model"]["model"] == "mlp"
