"""Metrics (learners/metrics.py) against definitions written out by hand."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coalitions.errors import InputError
from coalitions.learners.data.metrics import evaluate, evaluate_batch, loss_function, sense


def pairwise_auc(y, s):
    """AUC by its definition: P(score of a positive > score of a negative), ties count 1/2."""
    pos, neg = s[y == 1], s[y == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return wins / (len(pos) * len(neg))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.integers(2, 40), st.integers(1, 4))
def test_auc_matches_pairwise_definition(seed, n, levels):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    y[0], y[1] = 0, 1
    s = rng.integers(0, levels + 1, n).astype(float)  # few levels: many ties
    assert evaluate("auc", y, s) == pytest.approx(pairwise_auc(y, s), abs=1e-12)


def test_batch_equals_rows_and_simple_values():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 30)
    S = rng.normal(size=(5, 30))
    for metric in ("auc", "accuracy"):
        batch = evaluate_batch(metric, y, S)
        assert np.allclose(batch, [evaluate(metric, y, s) for s in S])
    assert evaluate("accuracy", [1, 0, 1], [0.3, -1.0, -0.2]) == pytest.approx(2 / 3)
    assert evaluate("mse", [1.0, 2.0, 3.0], [1.0, 2.0, 5.0]) == pytest.approx(4 / 3)


def test_multiclass_accuracy_and_macro_auc():
    y = np.array([0, 1, 2, 2])
    logits = np.array([[3, 0, 0], [0, 2, 1], [0, 3, 1], [0, 0, 5.0]])
    assert evaluate("accuracy", y, logits) == pytest.approx(0.75)
    per_class = [pairwise_auc((y == c).astype(int), logits[:, c]) for c in range(3)]
    assert evaluate("auc", y, logits) == pytest.approx(np.mean(per_class))


def test_undefined_auc_is_nan_and_bad_input():
    assert np.isnan(evaluate("auc", [1, 1, 1], [0.1, 0.2, 0.3]))
    with pytest.raises(InputError, match="metric"):
        evaluate("f1", [1], [1])
    with pytest.raises(InputError, match="match"):
        evaluate_batch("mse", [1.0, 2.0], np.zeros((2, 3)))
    assert sense("mse") == "min" and sense("auc") == "max"


def test_losses_match_torch():
    torch.manual_seed(0)
    out = torch.randn(3, 7, 4, dtype=torch.float64)
    y = torch.randint(0, 4, (7,))
    ce = loss_function("multiclass")(out, y)
    ref = torch.stack([torch.nn.functional.cross_entropy(o, y, reduction="none") for o in out])
    assert torch.allclose(ce, ref)
    yb = torch.randint(0, 2, (7,))
    bce = loss_function("binary")(out[..., :1], yb)
    refb = torch.stack([torch.nn.functional.binary_cross_entropy_with_logits(o[:, 0], yb.double(), reduction="none")
                        for o in out])
    assert torch.allclose(bce, refb)
    yr = torch.randn(7, dtype=torch.float64)
    assert torch.allclose(loss_function("regression")(out[..., :1], yr), (out[..., 0] - yr) ** 2)


def test_docstring_examples():
    import doctest

    import coalitions.learners.data.metrics

    assert doctest.testmod(coalitions.learners.data.metrics).failed == 0
