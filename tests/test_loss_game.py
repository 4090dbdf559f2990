"""The validation-loss game: the exact game's subset models scored by mean cross-entropy (learners/exact.py)."""

import numpy as np
import pytest
import torch

from coalitions.learners.data.datasets import load
from coalitions.learners.data.metrics import loss_function, mean_loss_batch
from coalitions.learners.exact import ExhaustiveOracle
from coalitions.learners.training.protocol import TrainingProtocol


@pytest.mark.parametrize("task,shape", [("multiclass", (3, 7, 4)), ("binary", (3, 7)), ("regression", (3, 7))])
def test_mean_loss_is_the_training_loss(task, shape):
    rng = np.random.default_rng(0)
    s = rng.normal(size=shape)
    y = rng.integers(0, shape[2] if len(shape) == 3 else 2, shape[1])
    out = torch.as_tensor(s if len(shape) == 3 else s[..., None])
    target = torch.as_tensor(y.astype(np.float64) if task == "regression" else y)
    ref = loss_function(task)(out, target).mean(dim=-1).numpy()
    assert mean_loss_batch(task, y, s) == pytest.approx(ref, rel=1e-12)


def test_loss_game_scores_the_same_models_as_the_accuracy_game():
    fed = load("digits", clients=3, partition="pathological", seed=0)
    p = TrainingProtocol(model="mlp", hidden=8, lr=0.01, steps=5)
    o = ExhaustiveOracle(protocol=p, heads="personal", loss_game=True, replicates=4, seed=1, device="cpu").fit(fed)
    plain = ExhaustiveOracle(protocol=p, heads="personal", seed=1, device="cpu").fit(fed)
    assert np.array_equal(o.values_val_, plain.values_val_, equal_nan=True)  # scoring twice changes no model
    assert plain.loss_game_ is None and "loss_game" not in plain.config(fed)
    g = o.loss_game_
    assert g.sense == "min" and g.provenance["metric"] == "loss" and o.loss_replicates_ is not None
    masks = [1, 3, 7]
    outs = o.subset_outputs(fed, masks, "val")
    raw = g.raw_values()
    for k, m in enumerate(masks):
        for i, c in enumerate(fed.clients):
            if (m >> i) & 1:
                want = mean_loss_batch("multiclass", c.val.y, outs[k][i][None])[0]
                assert raw[i, m] == pytest.approx(want, rel=1e-5)
