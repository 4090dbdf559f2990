"""SPO's cheaper arithmetic equals the plain one to float rounding (issue 37).

The direction search folds each client's validation data into the hypernetwork's output layer
(``learners/methods/spo/fold.py``), drops rows whose line search failed, and scores with
``logsumexp``; the personal-head training runs the MLP as batched products; the optimiser is
PyTorch's fused Adam.  Each is the same function as what it replaced: these tests pin that, so the
cheaper path cannot drift from the plain one.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from coalitions.learners.data.datasets import load
from coalitions.learners.data.metrics import loss_function
from coalitions.learners.methods.spo import SPO
from coalitions.learners.methods.spo.fold import fold_pays
from coalitions.learners.methods.spo.heads import HeadsDirectionSearch, personal_loss_matrix
from coalitions.learners.methods.spo.hypernetwork import ParetoHypernetwork
from coalitions.learners.methods.spo.search import DirectionSearch
from coalitions.learners.training.engine import Padded, make_optimizer
from coalitions.learners.training.models import make_model
from coalitions.learners.training.protocol import TrainingProtocol

#: float32 sums of a few thousand terms in another order: relative differences near 1e-6.
RTOL = 1e-5


@pytest.fixture(scope="module")
def digits():
    torch.set_num_threads(1)
    return load("digits", clients=4, seed=1)


def _search(fed, kind: str, heads: str, folded: bool):
    spec = make_model(kind, fed.input_shape, fed.n_outputs, hidden=16)
    torch.manual_seed(0)
    net = ParetoHypernetwork(fed.n, spec, hidden=24, embed=8, layers=2, heads=heads)
    with torch.no_grad():   # an output layer far from its initial scale, so the generated models differ
        net.head.weight.mul_(20)
    for p in net.parameters():
        p.requires_grad_(False)
    cls = HeadsDirectionSearch if heads == "personal" else DirectionSearch
    s = cls(net, spec, loss_function(fed.task), Padded(fed, "val", "cpu"), "cpu", 0, 5, 3, 4)
    if not folded:
        s._fold_decided = True    # decided: not folded
    return s


@pytest.mark.parametrize("kind,heads", [("mlp", "personal"), ("mlp", "shared"), ("logistic", "shared")])
def test_the_folded_search_loss_and_gradient_equal_the_generated_ones(digits, kind, heads):
    fold, plain = _search(digits, kind, heads, True), _search(digits, kind, heads, False)
    assert fold.folded is not None and plain.folded is None
    g = torch.Generator().manual_seed(3)
    d = torch.distributions.Dirichlet(torch.ones(digits.n)).sample((40,))
    d = (d * (torch.rand(40, digits.n, generator=g) > 0.3)).clamp(min=0)   # some rows on faces
    d = (d / d.sum(1, keepdim=True).clamp(min=1e-9)).nan_to_num(0.25).requires_grad_(True)
    targets = torch.randint(0, digits.n, (40,), generator=g)
    la, lb = fold.own_loss(d, targets), plain.own_loss(d, targets)
    ga, = torch.autograd.grad(la.sum(), d)
    gb, = torch.autograd.grad(lb.sum(), d)
    assert float(lb.detach().std()) > 0.05     # the rows' models do differ
    np.testing.assert_allclose(la.detach().numpy(), lb.detach().numpy(), rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(ga.numpy(), gb.numpy(), rtol=0, atol=RTOL * float(gb.abs().max()))


@pytest.mark.parametrize("kind,heads", [("mlp", "personal"), ("logistic", "shared")])
def test_the_folded_search_finds_the_generated_ones_directions(digits, kind, heads):
    """The whole search (starts, projected gradient, line search, dropped rows) on both paths."""
    fold, plain = _search(digits, kind, heads, True), _search(digits, kind, heads, False)
    targets = torch.arange(digits.n)
    face = torch.ones(digits.n, digits.n, dtype=torch.bool)
    da, la = fold(targets, face, ("face", 15))
    db, lb = plain(targets, face, ("face", 15))
    np.testing.assert_allclose(la, lb, rtol=1e-4)
    np.testing.assert_allclose(da, db, atol=1e-3)


def test_fold_pays_where_the_data_is_wide_not_for_a_cnn_or_narrow_data(digits):
    spec = make_model("mlp", (784,), 10, hidden=32)
    net = ParetoHypernetwork(10, spec, hidden=100, heads="personal")
    assert fold_pays(net, spec, 100)              # fashion: 0.64 M against 5 M per direction
    narrow = make_model("logistic", (13,), 1)
    assert not fold_pays(ParetoHypernetwork(4, narrow, hidden=16), narrow, 60)   # heart-like: no gain
    cnn = make_model("cnn", (1, 8, 8), 10)
    assert not fold_pays(ParetoHypernetwork(4, cnn, hidden=16), cnn, 100)


def test_the_batched_personal_mlp_loss_equals_the_vmap_one(digits):
    spec = make_model("mlp", digits.input_shape, digits.n_outputs, hidden=16)
    generic = dataclasses.replace(spec, kind="mlp (through vmap)")   # any other kind takes the vmap path
    tr = Padded(digits, "train", "cpu")
    torch.manual_seed(0)
    body = {k: v.requires_grad_(True) for k, v in spec.init(None, 6).items() if k in spec.body}
    heads = {k: v.requires_grad_(True) for k, v in spec.init(None, digits.n).items() if k in spec.head}
    loss = loss_function(digits.task)
    out = []
    for s in (spec, generic):
        scale: list = [None]
        L = personal_loss_matrix(s, loss, body, heads, tr.X, tr.y, tr.m, scale)
        f = L.sum(1)
        scale[0] = f.detach() * 3     # the heads' gradient rescaled through the hook, on both paths
        out.append((L.detach(), torch.autograd.grad(torch.log(f).mean(), [*body.values(), *heads.values()])))
    (La, ga), (Lb, gb) = out
    np.testing.assert_allclose(La.numpy(), Lb.numpy(), rtol=RTOL)
    for x, y in zip(ga, gb, strict=True):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=0, atol=RTOL * float(y.abs().max()))


def test_the_logsumexp_cross_entropy_equals_log_softmax():
    out = torch.randn(7, 30, 10) * 5
    y = torch.randint(0, 10, (30,))
    a = loss_function("multiclass", logsumexp=True)(out, y)
    b = loss_function("multiclass")(out, y)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)
    for task in ("regression", "binary"):   # only the multiclass loss has a second form
        assert loss_function(task, logsumexp=True).__code__ is loss_function(task).__code__


def test_fused_adam_takes_the_plain_adams_steps():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(8, 300), torch.nn.Linear(8, 300)
    b.load_state_dict(a.state_dict())
    oa, ob = make_optimizer("adam", 0.01, params=a.parameters(), fused=True), torch.optim.Adam(b.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
            pa.grad = torch.randn(pa.shape, generator=g)
            pb.grad = pa.grad.clone()
        oa.step()
        ob.step()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        np.testing.assert_allclose(pa.detach().numpy(), pb.detach().numpy(), atol=1e-6)


def test_spo_with_personal_heads_folds_its_search(digits):
    """A fit on wide data searches through the fold and gives a graph and weights."""
    protocol = TrainingProtocol(model="mlp", hidden=16, steps=20, batch_size=None)
    m = SPO(model="mlp", heads="personal", target_hidden=16, hidden=24, embed=8, layers=2, directions=4,
            search_steps=4, protocol=protocol, device="cpu", seed=0).fit(digits)
    assert m.search_.folded is not None and len(m.search_.folded._folds) == digits.n
    np.testing.assert_allclose(m.weights_.sum(1), 1.0)
