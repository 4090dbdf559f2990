"""Functional models (learners/models.py): stacked forward equals the module forward."""

import math

import pytest
import torch

from coalitions.errors import InputError
from coalitions.learners.training.models import make_model, stacked_forward

CASES = [("linear", (6,), 1), ("logistic", (6,), 3), ("mlp", (2, 3), 4), ("cnn", (1, 8, 8), 10),
         ("cnn", (3, 9, 7), 2)]


@pytest.mark.parametrize("kind, shape, k", CASES)
def test_stacked_forward_equals_functional_call(kind, shape, k):
    spec = make_model(kind, shape, k)
    params = spec.init(torch.Generator().manual_seed(1), 3, dtype=torch.float64)
    X = torch.randn(5, *shape, dtype=torch.float64)
    out = stacked_forward(spec, params, X)
    assert out.shape == (3, 5, k)
    assert torch.allclose(out, torch.func.vmap(spec.forward, in_dims=(0, None))(params, X))
    module = spec.module().double()
    for m in range(3):
        single = torch.func.functional_call(module, {n: p[m] for n, p in params.items()}, (X,))
        assert torch.allclose(out[m], single)
    assert spec.n_params == sum(math.prod(s) for s in spec.shapes.values())


def test_linear_is_affine_and_init_is_seeded_and_bounded():
    spec = make_model("linear", (4,), 2)
    a = spec.init(torch.Generator().manual_seed(5), 2)
    b = spec.init(torch.Generator().manual_seed(5), 2)
    c = spec.init(torch.Generator().manual_seed(6), 2)
    assert all(torch.equal(a[n], b[n]) for n in a) and not torch.equal(a["weight"], c["weight"])
    assert a["weight"].abs().max() <= 1 / math.sqrt(4)
    X = torch.randn(3, 4)
    assert torch.allclose(spec.forward({n: p[0] for n, p in a.items()}, X), X @ a["weight"][0] + a["bias"][0])


def test_gradients_are_independent_per_model():
    spec = make_model("mlp", (3,), 1, hidden=5)
    p = {n: t.requires_grad_(True) for n, t in spec.init(torch.Generator().manual_seed(0), 4).items()}
    X = torch.randn(6, 3)
    stacked_forward(spec, p, X)[1].sum().backward()
    for t in p.values():
        assert t.grad[[0, 2, 3]].abs().sum() == 0 and t.grad[1].abs().sum() > 0


@pytest.mark.parametrize("kind, shape", [("cnn", (8,)), ("cnn", (1, 2, 2)), ("transformer", (3,))])
def test_rejects(kind, shape):
    with pytest.raises(InputError):
        make_model(kind, shape, 2)
