"""The batched training engine (learners/engine.py): plans, optimisers, paths, the path rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from learner_fixtures import blobs, sgd_protocol

from coalitions.errors import InputError
from coalitions.learners.methods.baselines import Local
from coalitions.learners.training.decay import decay_gradient, with_decay
from coalitions.learners.training.engine import (
    SGD,
    Adam,
    Engine,
    Padded,
    epoch_plan,
    flatten,
    masked_mean,
    resolve_device,
    train_epochs,
)
from coalitions.learners.training.models import make_model
from coalitions.learners.training.paths import CONV_PIXELS, choose


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=6), st.one_of(st.none(), st.integers(1, 16)),
       st.integers(0, 2**31))
def test_epoch_plan_visits_every_sample_once(sizes, batch, seed):
    idx, mask, active = epoch_plan(np.array(sizes), batch, np.random.default_rng(seed))
    b = max(sizes) if batch is None else min(batch, max(sizes))
    assert idx.shape == mask.shape and idx.shape[1:] == (len(sizes), b)
    for i, n in enumerate(sizes):
        seen = idx[:, i][mask[:, i] > 0]
        assert sorted(seen.tolist()) == list(range(n))          # a permutation of the client's samples
        assert active[:, i].sum() == -(-n // b)                   # ceil(n / B) steps
        assert (mask[~active[:, i], i] == 0).all()                # nothing real after the epoch ends


def test_masked_mean_ignores_padding():
    per = torch.tensor([1.0, 3.0, 100.0])
    assert masked_mean(per, torch.tensor([1.0, 1.0, 0.0])).item() == 2.0
    assert masked_mean(per, torch.zeros(3)).item() == 0.0


def test_optimisers_match_torch_and_respect_inactive():
    torch.manual_seed(0)
    p0 = {"w": torch.randn(2, 3), "b": torch.randn(2)}
    # PyTorch's coupled weight decay on every parameter is the decay's gradient added to the loss's
    for ours, wd, make in ((SGD(0.1, momentum=0.9), 0.01,
                            lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01)),
                           (Adam(0.01), 0.0, lambda ps: torch.optim.Adam(ps, lr=0.01))):
        params, state = {k: v.clone() for k, v in p0.items()}, None
        state = ours.init(params)
        ref = [torch.nn.Parameter(p0[k][0].clone()) for k in ("w", "b")]
        opt = make(ref)
        for step in range(4):
            g = {"w": torch.randn(2, 3), "b": torch.randn(2)}
            active = torch.tensor([True, step % 2 == 0])
            frozen = {k: v[1].clone() for k, v in params.items()}
            params, state = ours.step(params, with_decay(g, decay_gradient(params, ("w", "b"), wd)), state, active)
            ref[0].grad, ref[1].grad = g["w"][0].clone(), g["b"][0].clone()
            opt.step()
            if step % 2 == 1:   # model 1 inactive: untouched
                assert all(torch.equal(params[k][1], frozen[k]) for k in params)
        assert torch.allclose(params["w"][0], ref[0].detach(), atol=1e-6)
        assert torch.allclose(params["b"][0], ref[1].detach(), atol=1e-6)


def _per_client_reference(fed, epochs, batch, seed_rng, lr=0.1, momentum=0.9):
    """Independent reference: one client at a time, torch.optim.SGD on an nn.Module, same batch plan."""
    spec = make_model("mlp", fed.input_shape, fed.n_outputs, hidden=8)
    init = spec.init(torch.Generator().manual_seed(3), 1)
    plans = [epoch_plan(fed.sizes("train"), batch, np.random.default_rng([seed_rng, e])) for e in range(epochs)]
    out = []
    for i, c in enumerate(fed.clients):
        module = spec.module()
        with torch.no_grad():
            for k, p in module.named_parameters():
                p.copy_(init[k][0])
        opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=momentum)
        X, y = torch.tensor(c.train.X), torch.tensor(c.train.y)
        for idx, mask, active in plans:
            for s in range(idx.shape[0]):
                if not active[s, i]:
                    continue
                take = torch.as_tensor(idx[s, i][mask[s, i] > 0])
                loss = torch.nn.functional.cross_entropy(module(X[take]), y[take])
                opt.zero_grad()
                loss.backward()
                opt.step()
        out.append(torch.cat([p.detach().reshape(-1) for p in module.parameters()]))
    return torch.stack(out), spec, init


@pytest.mark.parametrize("path", ["batched", "sequential"])
def test_engine_equals_independent_per_client_training(path):
    fed = blobs(sizes=(9, 17, 5))
    ref, spec, init = _per_client_reference(fed, epochs=2, batch=4, seed_rng=7)
    eng = Engine("cpu", path=path)
    data = Padded(fed, "train", torch.device("cpu"))
    params = {k: v.expand(fed.n, *v.shape[1:]).clone() for k, v in init.items()}
    loss = lambda p, X, y, m: masked_mean(torch.nn.functional.cross_entropy(spec.forward(p, X), y, reduction="none"), m)
    opt = SGD(0.1, momentum=0.9)
    state = opt.init(params)
    for e in range(2):  # one epoch per call, with the reference's plans
        params, state, _ = train_epochs(eng, loss, params, opt, state, data, 1, 4, np.random.default_rng([7, e]))
    assert torch.allclose(flatten(params), ref, atol=1e-5)


@pytest.mark.parametrize("model,image", [("cnn", True), ("mlp", False), ("logistic", False)])
def test_batched_and_sequential_give_the_same_parameters(model, image):
    fed = blobs(sizes=(11, 6, 19, 8), image=image)
    protocol = sgd_protocol(3, (11, 6, 19, 8), model=model, batch_size=4)
    runs = [Local(protocol=protocol, engine=path, seed=1).fit(fed) for path in ("batched", "sequential")]
    a, b = (flatten(r.params_) for r in runs)
    assert torch.allclose(a, b, atol=1e-5)
    start = runs[0].spec_.init(torch.Generator().manual_seed(1), 1)   # every client's initial model
    assert not torch.allclose(a, flatten(start).expand_as(a))  # it trained


def test_chunked_vmap_equals_unchunked():
    fed = blobs(sizes=(5, 8, 6, 7, 9))
    protocol = sgd_protocol(2, (5, 8, 6, 7, 9), model="mlp")
    a = Local(protocol=protocol, engine="batched", chunk=2, seed=0).fit(fed)
    b = Local(protocol=protocol, engine="batched", seed=0).fit(fed)
    assert torch.allclose(flatten(a.params_), flatten(b.params_), atol=1e-6)


def test_auto_engine_follows_the_rule_and_records_its_choice():
    fed = blobs(sizes=(6, 6, 6, 6, 6, 6, 6, 6, 6, 6))
    protocol = sgd_protocol(1, (6,), model="mlp")
    m = Local(protocol=protocol, engine="auto", device="cpu", seed=0).fit(fed)
    assert m.engine_.choice_ == ("batched", None)
    assert m.estimate_.config["engine_used"] == m.engine_.label == "batched"
    # the rule's choice is the run: pinning it reproduces the run bit for bit
    again = Local(protocol=protocol, engine="batched", device="cpu", seed=0).fit(fed)
    assert torch.equal(flatten(m.params_), flatten(again.params_))
    # an explicit chunk is kept on the batched path the rule picks
    eng = Engine("cpu", path="auto", chunk=3)
    eng.value_and_grad(lambda q, x: (q["w"] * x).sum(), {"w": torch.zeros(8, 3)}, (torch.ones(8, 3),))
    assert eng.choice_ == ("batched", 3)


def test_auto_engine_never_times(monkeypatch):
    """The path comes from shapes alone: a clock that jumps (a loaded machine) changes nothing."""
    import time

    clock = iter(range(0, 10**9, 7919))
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock) * 1e-3)
    monkeypatch.setattr(time, "time", lambda: next(clock) * 1e-3)
    for kind, side, want in (("cnn", 28, "sequential"), ("cnn", 8, "batched"), ("mlp", 28, "batched"),
                             ("logistic", 28, "batched")):
        spec = make_model(kind, (1, side, side), 3)
        p = spec.init(torch.Generator().manual_seed(0), 4)
        X = torch.zeros(4, 5, 1, side, side)
        eng = Engine("cpu", path="auto")
        eng.map(spec.forward, p, (X,))
        assert eng.choice_ == (want, None), (kind, side)


@pytest.mark.parametrize("side", [4, 11, 12, 13, 16, 28])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_path_rule_table(side, device):
    spec = make_model("cnn", (2, side, side), 3)
    p = spec.init(torch.Generator().manual_seed(0), 2)
    args = (torch.zeros(2, 3, 2, side, side), torch.zeros(2, 3))
    want = "sequential" if device == "cpu" and side * side > CONV_PIXELS else "batched"
    assert choose(torch.device(device), p, args) == (want, None)
    # no convolution: batched whatever the input
    q = make_model("mlp", (2, side, side), 3).init(torch.Generator().manual_seed(0), 2)
    assert choose(torch.device(device), q, args) == ("batched", None)


def test_value_and_grad_dict_args_and_shared():
    eng = Engine("cpu", path="sequential")
    p = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
    u = {"w": torch.zeros(2, 2)}
    fn = lambda q, uu, s: ((q["w"] - uu["w"]) ** 2).sum() * s
    g, v = eng.value_and_grad(fn, p, (u,), (torch.tensor(2.0),))
    assert torch.allclose(g["w"], 4 * p["w"]) and torch.allclose(v, torch.tensor([10.0, 50.0]))
    g2, v2 = Engine("cpu", path="batched").value_and_grad(fn, p, (u,), (torch.tensor(2.0),))
    assert torch.allclose(g2["w"], g["w"]) and torch.allclose(v2, v)


def test_bad_engine_options_are_input_errors():
    with pytest.raises(InputError, match="^path must be one of"):
        Engine("cpu", path="fast")
    with pytest.raises(InputError, match="^chunk must be an integer"):
        Engine("cpu", chunk=0)
    with pytest.raises(InputError, match="^device must be one of"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no CUDA"):
            resolve_device("cuda")
