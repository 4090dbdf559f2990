"""Local and FedAvg (learners/baselines.py)."""

from __future__ import annotations

import numpy as np
import torch
from learner_fixtures import binary, blobs, regression, sgd_protocol

from coalitions.learners.methods.baselines import FedAvg, Local, weighted_average
from coalitions.learners.training.engine import Padded, flatten

KW = dict(protocol=sgd_protocol(3, (10, 13, 7, 12), model="mlp", batch_size=4), seed=0, engine="batched")


def test_local_clients_do_not_influence_each_other():
    fed = blobs(sizes=(10, 13, 7, 12))
    a = Local(**KW).fit(fed)
    # change client 3's data: clients 0..2 end exactly where they did
    other = blobs(sizes=(10, 13, 7, 12), seed=9)
    mixed = type(fed)(fed.name, fed.task, fed.metric, fed.clients[:3] + other.clients[3:], fed.n_classes,
                      fed.planted_groups, fed.options)
    b = Local(**KW).fit(mixed)
    fa, fb = flatten(a.params_), flatten(b.params_)
    assert torch.equal(fa[:3], fb[:3]) and not torch.allclose(fa[3], fb[3])
    assert a.estimate_.blocks() == [[c] for c in fed.names] and a.estimate_.weights is None


def test_fedavg_averages_by_sample_count_and_shares_one_model():
    fed = blobs(sizes=(10, 13, 7, 12))
    m = FedAvg(**KW).fit(fed)
    p = flatten(m.params_)
    assert torch.equal(p, p[:1].expand_as(p))
    assert m.estimate_.blocks() == [list(fed.names)]
    params = {"w": torch.tensor([[1.0], [3.0]])}
    assert torch.allclose(weighted_average(params, [1, 3])["w"], torch.tensor([[2.5]]))


def test_fedavg_one_round_one_step_equals_a_step_on_the_average_gradient():
    fed = blobs(sizes=(8, 8, 8))
    full = FedAvg(protocol=sgd_protocol(1, model="logistic", batch_size=None, momentum=0.0, lr=0.5), seed=1,
                  engine="sequential").fit(fed)
    spec = full.spec_
    init = spec.init(torch.Generator().manual_seed(1), 1)   # every client's start (the learner's seed)
    w = {k: v[0].clone().requires_grad_(True) for k, v in init.items()}
    X = torch.cat([torch.tensor(c.train.X) for c in fed.clients])
    y = torch.cat([torch.tensor(c.train.y) for c in fed.clients])
    torch.nn.functional.cross_entropy(spec.forward(w, X), y).backward()  # equal sizes: mean of client means
    for k in w:
        assert torch.allclose(full.global_[k][0], w[k].detach() - 0.5 * w[k].grad, atol=1e-6)


def test_regression_and_binary_tasks_are_scored_with_their_metrics():
    r = Local(protocol=sgd_protocol(5, (10, 14, 9), model="linear", lr=0.05), seed=0).fit(regression())
    assert r.estimate_.metric == "mse" and r.estimate_.sense == "min"
    assert all(np.isfinite(v) and v >= 0 for v in r.utilities_["test"].values())
    b = FedAvg(protocol=sgd_protocol(3, (15, 11, 13), model="logistic"), seed=0).fit(binary())
    assert b.estimate_.metric == "auc"
    assert all(0 <= v <= 1 for v in b.utilities_["val"].values())


def test_scores_are_each_clients_own_model_on_its_own_data():
    fed = blobs(sizes=(6, 9))
    m = Local(**KW).fit(fed)
    data = Padded(fed, "test", torch.device("cpu"))
    s = m.client_scores(data)
    for i in range(fed.n):
        own = m.spec_.forward({k: v[i] for k, v in m.params_.items()}, data.X[i])
        assert torch.allclose(s[i], own)
