"""Per-FedAvg (learners/methods/perfedavg.py): the meta-gradient against finite differences, alpha = 0 is FedAvg."""

from __future__ import annotations

import torch
from learner_fixtures import blobs, sgd_protocol
from torch.func import grad

from coalitions.learners.methods.baselines import FedAvg
from coalitions.learners.methods.perfedavg import PerFedAvg
from coalitions.learners.training.engine import Engine, flatten

SIZES = (10, 13, 7, 12)
KW = dict(protocol=sgd_protocol(3, SIZES, model="mlp", batch_size=4), seed=0, engine="batched")


def _model_and_data(alpha):
    """An untrained model (the state a fit starts from) and client 0's training data, in double precision."""
    fed = blobs(sizes=(10, 12), dim=3)
    m = PerFedAvg(alpha=alpha, protocol=sgd_protocol(1, (10, 12), model="mlp", hidden=4), seed=1)
    dev = torch.device("cpu")
    m.prepare(fed, dev)
    state = m.init_state(fed, torch.Generator().manual_seed(1), dev)
    p = {k: v[0].double() for k, v in state["global"].items()}
    c = fed.clients[0].train
    X, y = torch.tensor(c.X).double(), torch.tensor(c.y)
    return m, p, X, y, torch.ones(len(y), dtype=torch.float64)


def test_meta_gradient_matches_finite_differences_of_the_one_step_objective():
    alpha = 0.3
    m, p, X, y, mk = _model_and_data(alpha)

    def one_step(q):  # F(w − α∇F(w)) with one batch for D, D', D''
        g = grad(m._task_loss)(q, X, y, mk)
        return m._task_loss({k: q[k] - alpha * g[k] for k in q}, X, y, mk)

    got = grad(m.meta_loss)(p, X, y, mk, X, y, mk, X, y, mk)
    assert torch.allclose(m.meta_loss(p, X, y, mk, X, y, mk, X, y, mk), one_step(p))
    eps = 1e-6
    for k in p:
        flat = p[k].reshape(-1)
        for i in range(0, flat.numel(), max(1, flat.numel() // 7)):
            e = torch.zeros_like(flat)
            e[i] = eps
            up = dict(p, **{k: (flat + e).reshape(p[k].shape)})
            down = dict(p, **{k: (flat - e).reshape(p[k].shape)})
            fd = (one_step(up) - one_step(down)) / (2 * eps)
            assert abs(got[k].reshape(-1)[i].item() - fd.item()) < 1e-6
    # the Hessian term matters: the plain gradient at w̃ (first-order MAML) differs
    g = grad(m._task_loss)(p, X, y, mk)
    fo = grad(m._task_loss)({k: p[k] - alpha * g[k] for k in p}, X, y, mk)
    assert not torch.allclose(flatten({k: fo[k][None] for k in p}), flatten({k: got[k][None] for k in p}),
                              atol=1e-6)


def test_meta_gradient_runs_batched_on_the_engine_like_one_model_at_a_time():
    m, p, X, y, mk = _model_and_data(0.2)
    P = {k: torch.stack([v, 1.1 * v]).float() for k, v in p.items()}
    args = tuple(t.float() if t.is_floating_point() else t for t in (X, y, mk))
    batch = tuple(torch.stack([t, t]) for t in args * 3)
    gb, vb = Engine("cpu", "batched").value_and_grad(m.meta_loss, P, batch)
    gs, vs = Engine("cpu", "sequential").value_and_grad(m.meta_loss, P, batch)
    assert torch.allclose(vb, vs, atol=1e-6)
    assert all(torch.allclose(gb[k], gs[k], atol=1e-5) for k in P)


def test_alpha_zero_is_fedavg_and_personalisation_is_one_step_on_local_data():
    fed = blobs(sizes=SIZES)
    zero = PerFedAvg(alpha=0.0, **KW).fit(fed)
    avg = FedAvg(**KW).fit(fed)
    assert torch.allclose(flatten(zero.global_), flatten(avg.global_), atol=1e-5)
    m = PerFedAvg(alpha=0.1, **KW).fit(fed)
    assert not torch.allclose(flatten(m.global_), flatten(avg.global_), atol=1e-4)
    for i, c in enumerate(fed.clients):
        w = {k: v[0].clone() for k, v in m.global_.items()}
        g = grad(m._task_loss)(w, torch.tensor(c.train.X), torch.tensor(c.train.y), torch.ones(len(c.train)))
        assert all(torch.allclose(m.params_[k][i], w[k] - 0.1 * g[k], atol=1e-6) for k in w)
    assert m.estimate_.blocks() == [list(fed.names)]
