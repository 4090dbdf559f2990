"""The body/head split of every model and the one-body, many-heads model (training/models.py)."""

from __future__ import annotations

import pytest
import torch

from coalitions.learners.training.models import KINDS, make_model, merge_params, split_params, with_heads

SHAPES = {"linear": (5,), "logistic": (5,), "mlp": (5,), "cnn": (1, 8, 8)}


@pytest.mark.parametrize("kind", KINDS)
def test_head_is_the_output_layer_and_body_the_rest(kind):
    spec = make_model(kind, SHAPES[kind], 3, hidden=4)
    assert set(spec.head) | set(spec.body) == set(spec.shapes) and not set(spec.head) & set(spec.body)
    # the head is the last layer: its outputs are the model's outputs
    assert all(spec.shapes[k][-1] == 3 for k in spec.head)
    p = spec.init(torch.Generator().manual_seed(0), 2)
    body, head = split_params(spec, p)
    assert list(merge_params(spec, body, head)) == list(spec.shapes)
    # changing the head alone changes the output only through the last layer: a zero head gives zero outputs
    zero = merge_params(spec, body, {k: torch.zeros_like(v) for k, v in head.items()})
    X = torch.randn(4, *SHAPES[kind])
    assert torch.equal(spec.forward({k: v[0] for k, v in zero.items()}, X), torch.zeros(4, 3))
    if kind in ("linear", "logistic"):
        assert spec.body == ()


@pytest.mark.parametrize("kind", ["mlp", "cnn", "logistic"])
def test_one_body_many_heads_is_the_base_model_per_head(kind):
    spec = make_model(kind, SHAPES[kind], 3, hidden=4)
    multi = with_heads(spec, 4)
    p = multi.init(torch.Generator().manual_seed(1), 2)
    assert all(p[k].shape == (2, 4, *spec.shapes[k]) for k in spec.head)
    assert all(p[k].shape == (2, *spec.shapes[k]) for k in spec.body)
    X = torch.randn(5, *SHAPES[kind])
    one = {k: v[1] for k, v in p.items()}
    outs = [multi.forward_head(one, X, j) for j in range(4)]
    for j in range(4):
        base = {k: (one[k][j] if k in spec.head else one[k]) for k in spec.shapes}
        assert torch.equal(outs[j], spec.forward(base, X))
    assert not torch.allclose(outs[0], outs[1])
    # the summed loss of two members reaches the body through both heads, each head through its member only
    q = {k: v.clone().requires_grad_(True) for k, v in one.items()}
    (multi.forward_head(q, X, 0).sum() + multi.forward_head(q, X, 2).sum()).backward()
    h = spec.head[0]
    assert q[h].grad[0].abs().sum() > 0 and q[h].grad[2].abs().sum() > 0
    assert q[h].grad[1].abs().sum() == 0 and q[h].grad[3].abs().sum() == 0


def test_many_head_models_train_batched_on_the_engine():
    """A subset's loss — each member's data through its own head, one body — batched equals one at a time."""
    from coalitions.learners.training.engine import Engine

    spec = make_model("cnn", (1, 8, 8), 3)
    multi = with_heads(spec, 3)
    p = multi.init(torch.Generator().manual_seed(2), 4)          # four subset models
    X = torch.randn(4, 3, 5, 1, 8, 8)                            # model, member, samples, image
    y = torch.randint(0, 3, (4, 3, 5))

    def loss(q, X, y):
        return sum(torch.nn.functional.cross_entropy(multi.forward_head(q, X[j], j), y[j]) for j in range(3))

    gb, vb = Engine("cpu", "batched").value_and_grad(loss, p, (X, y))
    gs, vs = Engine("cpu", "sequential").value_and_grad(loss, p, (X, y))
    assert torch.allclose(vb, vs, atol=1e-5)
    assert all(torch.allclose(gb[k], gs[k], atol=1e-5) for k in p)
    assert all(gb[k].abs().sum() > 0 for k in p)
