"""FedProx and Ditto (learners/methods/fedprox.py, ditto.py): live regularisers, weighted averages, limits."""

from __future__ import annotations

import torch
from learner_fixtures import blobs, sgd_protocol

from coalitions.learners.methods.baselines import FedAvg, Local
from coalitions.learners.methods.ditto import Ditto
from coalitions.learners.methods.fedprox import FedProx
from coalitions.learners.training.engine import Engine, flatten

SIZES = (10, 13, 7, 12)   # the training sizes of the federation most tests build
KW = dict(protocol=sgd_protocol(3, SIZES, model="mlp", batch_size=4), seed=0, engine="batched")


def initial(learner, fed):
    """The state ``learner`` starts its first round from on ``fed`` (a protocol trains one round at least)."""
    dev = torch.device("cpu")
    learner.prepare(fed, dev)
    return learner.init_state(fed, torch.Generator().manual_seed(int(learner.seed)), dev)


def test_fedprox_proximal_term_has_its_gradient_on_the_engine():
    fed = blobs(sizes=SIZES)
    m = FedProx(mu=0.7, **KW).fit(fed)
    p = {k: v.clone() for k, v in m.params_.items()}
    g = {k: torch.zeros_like(v) for k, v in p.items()}
    X = torch.randn(p["w1"].shape[0], 3, 5)
    y = torch.zeros(X.shape[:2], dtype=torch.int64)
    mask = torch.ones(X.shape[:2])
    eng = Engine("cpu", "batched")
    with_prox, _ = eng.value_and_grad(m._loss, p, (X, y, mask, g))
    task, _ = eng.value_and_grad(lambda q, X, y, mk, g: m._task_loss(q, X, y, mk), p, (X, y, mask, g))
    for k in p:  # ∇ = ∇F + μ (w − w^t), not ∇F alone (a detached term would give ∇F)
        assert torch.allclose(with_prox[k] - task[k], 0.7 * (p[k] - g[k]), atol=1e-5)


def test_fedprox_mu_zero_is_fedavg_and_mu_changes_the_model():
    fed = blobs(sizes=SIZES)
    avg = FedAvg(**KW).fit(fed)
    zero = FedProx(mu=0.0, **KW).fit(fed)
    assert torch.allclose(flatten(zero.global_), flatten(avg.global_), atol=1e-6)
    prox = FedProx(mu=1.0, **{**KW, "protocol": sgd_protocol(3, SIZES, model="mlp", batch_size=4, local_epochs=2)}
                   ).fit(fed)
    assert not torch.allclose(flatten(prox.global_), flatten(avg.global_), atol=1e-4)
    assert prox.estimate_.blocks() == [list(fed.names)] and prox.estimate_.weights is None


def test_fedprox_server_average_is_weighted_by_sample_counts():
    fed = blobs(sizes=(4, 16))
    p = sgd_protocol(1, model="logistic", batch_size=None)
    one = FedProx(mu=0.5, protocol=p, seed=2, engine="sequential")
    one.fit(fed)
    assert one.rounds_ == 1
    init = initial(FedProx(protocol=p, seed=2), fed)["global"]
    # hand computation: each client's one full-batch step from w^0 (prox gradient zero there), then 4:16
    steps = []
    for c in fed.clients:
        w = {k: v[0].clone().requires_grad_(True) for k, v in init.items()}
        X, y = torch.tensor(c.train.X), torch.tensor(c.train.y)
        torch.nn.functional.cross_entropy(one.spec_.forward(w, X), y).backward()
        steps.append({k: w[k].detach() - 0.1 * w[k].grad for k in w})
    for k in init:
        want = (4 * steps[0][k] + 16 * steps[1][k]) / 20
        assert torch.allclose(one.global_[k][0], want, atol=1e-6)
        assert not torch.allclose(one.global_[k][0], (steps[0][k] + steps[1][k]) / 2, atol=1e-4)


def test_ditto_regulariser_has_a_gradient_and_lambda_moves_personal_models():
    fed = blobs(sizes=SIZES)
    m = Ditto(lam=2.0, **KW).fit(fed)
    p = {**{"w." + k: v.clone() for k, v in m.params_.items()}, **{"v." + k: v.clone() for k, v in m.params_.items()}}
    g = {k: torch.zeros_like(v) for k, v in m.params_.items()}
    X = torch.randn(fed.n, 3, 5)
    y = torch.zeros(X.shape[:2], dtype=torch.int64)
    mask = torch.ones(X.shape[:2])
    eng = Engine("cpu", "batched")
    grads, _ = eng.value_and_grad(m._loss, p, (X, y, mask, g))
    for k in g:  # the personal part feels λ(v − w^t), the global part does not
        assert torch.allclose(grads["v." + k] - grads["w." + k], 2.0 * m.params_[k], atol=1e-5)
    # λ = 0: personal models are Local's; the global model is FedAvg's
    free = Ditto(lam=0.0, **KW).fit(fed)
    assert torch.allclose(flatten(free.params_), flatten(Local(**KW).fit(fed).params_), atol=1e-5)
    assert torch.allclose(flatten(free.global_), flatten(FedAvg(**KW).fit(fed).global_), atol=1e-5)
    # larger λ: personal models closer to the global one (plain SGD, a step λ·lr well below 1)
    def spread(lam):
        plain = sgd_protocol(3, SIZES, model="mlp", batch_size=4, momentum=0.0, lr=0.05)
        d = Ditto(lam=lam, **{**KW, "protocol": plain}).fit(fed)
        return (flatten(d.params_) - flatten(d.global_)).norm().item()
    assert spread(5.0) < spread(2.0) < spread(0.5) < spread(0.0)


def test_fedprox_differs_from_fedavg_only_with_several_local_steps_per_round():
    """Issue 33: the proximal gradient μ(w − w^t) is zero where a round starts, so with one full-batch local step
    per round FedProx *is* FedAvg whatever μ; with ``local_steps`` > 1 under the same protocol it is not."""
    from coalitions.learners.training.protocol import TrainingProtocol

    fed = blobs(sizes=SIZES)
    for local_steps, same in ((1, True), (5, False)):
        p = TrainingProtocol(model="mlp", hidden=8, optimizer="sgd", lr=0.1, steps=20, local_steps=local_steps)
        avg = FedAvg(protocol=p, seed=0, engine="batched").fit(fed)
        prox = FedProx(mu=1.0, protocol=p, seed=0, engine="batched").fit(fed)
        assert prox.steps_per_round_ == local_steps
        gap = float((flatten(prox.global_) - flatten(avg.global_)).abs().max())
        assert (gap < 1e-6) if same else (gap > 1e-3), (local_steps, gap)


def test_under_the_reports_protocol_fedprox_is_not_fedavg():
    """Heart's and Adult's columns take ``LOCAL_STEPS`` (> 1) local steps a round, so FedProx's proximal term acts in
    the committed reproductions (it did not with one full-batch step: FedProx equalled FedAvg on every seed)."""
    from coalitions.learners.data.datasets import load
    from coalitions.learners.experiments.catalogue import EXPERIMENTS, LOCAL_STEPS, budgeted_options

    assert LOCAL_STEPS > 1
    fed = load("heart", seed=0)
    for name in ("heart", "adult"):
        exp = EXPERIMENTS[name]
        assert exp.protocol.local_steps == LOCAL_STEPS
        protocol = budgeted_options(exp, False, "fedprox", fed.sizes("train"))["protocol"].with_(lr_grid=None,
                                                                                               steps=20)
        avg = FedAvg(protocol=protocol, seed=0).fit(fed)
        prox = FedProx(mu=1.0, protocol=protocol, seed=0).fit(fed)
        assert prox.steps_per_round_ == LOCAL_STEPS
        assert float((flatten(prox.global_) - flatten(avg.global_)).abs().max()) > 1e-4, name
