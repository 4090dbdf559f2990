"""pFedMe (learners/methods/pfedme.py): the inner problem solved to tolerance, the envelope's gradient, lambda acts."""

from __future__ import annotations

import numpy as np
import torch
from learner_fixtures import blobs, sgd_protocol
from torch.func import grad

from coalitions.learners.methods.pfedme import PFedMe
from coalitions.learners.training.engine import flatten


def kw(rounds, sizes, model="mlp"):
    """pFedMe's former defaults (SGD at η = 0.01, momentum 0.9), batch 4: ``rounds`` rounds on ``sizes``."""
    return dict(protocol=sgd_protocol(rounds, sizes, model=model, batch_size=4, lr=0.01), seed=0, engine="batched")


SIZES = (10, 13, 7, 12)
KW = kw(3, SIZES)


def test_inner_problem_is_solved_to_tolerance():
    fed = blobs(sizes=SIZES)
    # a smooth loss (softmax regression): h_k is λ-strongly convex and smooth, descent reaches any tolerance
    m = PFedMe(inner_tol=1e-4, inner_steps=500, **kw(3, SIZES, model="logistic")).fit(fed)
    assert m.inner_residual_ <= 1e-4 and m.final_residual_ <= 1e-4 and m.inner_iterations_ > 1
    # the personalised models are stationary points of h_k(θ; w) on each client's whole training split
    for i, c in enumerate(fed.clients):
        theta = {k: v[i].clone() for k, v in m.params_.items()}
        w = {k: v[0] for k, v in m.global_.items()}
        X, y, mk = torch.tensor(c.train.X), torch.tensor(c.train.y), torch.ones(len(c.train))
        g = grad(m._inner_loss)(theta, X, y, mk, w)
        assert torch.sqrt(sum((v.double() ** 2).sum() for v in g.values())) <= 1e-4 + 1e-6
        # and θ̂ differs from w by exactly the proximal balance: λ(θ − w) = −∇f(θ)
        gf = grad(m._task_loss)(theta, X, y, mk)
        assert all(torch.allclose(15.0 * (theta[k] - w[k]), -gf[k], atol=2e-4) for k in w)
    # too few inner steps: the residual says so
    rough = PFedMe(inner_tol=1e-8, inner_steps=2, **KW).fit(fed)
    assert rough.inner_residual_ > 1e-8 and rough.inner_iterations_ == 2


def test_the_proximal_term_has_its_gradient_and_lambda_changes_the_model():
    """20 inner steps, not the default 100: neither λ's inner problem reaches its tolerance in 100 (both
    fits ran out), and the effect of λ is already clear at 20 (gaps 0.16 and 0.52; 4.6e-2 apart)."""
    fed = blobs(sizes=SIZES)
    m = PFedMe(lam=3.0, inner_steps=20, **KW).fit(fed)
    theta = {k: v[0].clone() for k, v in m.params_.items()}
    w = {k: torch.zeros_like(v) for k, v in theta.items()}
    X, y, mk = torch.randn(3, 5), torch.zeros(3, dtype=torch.int64), torch.ones(3)
    full = grad(m._inner_loss)(theta, X, y, mk, w)
    task = grad(m._task_loss)(theta, X, y, mk)
    assert all(torch.allclose(full[k] - task[k], 3.0 * theta[k], atol=1e-5) for k in w)
    other = PFedMe(lam=12.0, inner_steps=20, **KW).fit(fed)
    assert not torch.allclose(flatten(m.params_), flatten(other.params_), atol=1e-3)
    # larger λ keeps the personalised models nearer the global one
    gap = lambda e: (flatten(e.params_) - flatten(e.global_)).norm().item()  # noqa: E731
    assert gap(other) < gap(m)


def test_beta_mixes_the_old_global_model_with_the_weighted_average():
    fed = blobs(sizes=(4, 16, 9))
    one = kw(1, (4, 16, 9))
    full = PFedMe(beta=1.0, **one).fit(fed).global_
    half = PFedMe(beta=0.5, **one).fit(fed).global_
    start = PFedMe(**one)       # the global model before the round: the state a fit starts from
    start.prepare(fed, torch.device("cpu"))
    init = start.init_state(fed, torch.Generator().manual_seed(int(start.seed)), torch.device("cpu"))["global"]
    for k in full:
        assert torch.allclose(half[k], 0.5 * init[k] + 0.5 * full[k], atol=1e-6)
    assert np.isfinite(PFedMe(**one).fit(fed).estimate_.extra["inner_residual"])
