"""Bootstrap replicates recorded by the exhaustive oracle (learners/exact.py), against direct re-scoring.

Every replicate value must equal the metric of the same subset model, trained once, on the
resampled validation rows: in closed form against an explicit least-squares fit, in the batched
trainer against a per-subset training loop (tests/test_oracle.py's reference).
"""

import numpy as np
import pytest
import torch
from test_fashion import DEBIAN
from test_oracle import members, reference_loop, toy_binary, union

import coalitions as co
from coalitions.errors import InputError
from coalitions.learners.data.datasets import load
from coalitions.learners.data.metrics import evaluate
from coalitions.learners.exact import ExhaustiveOracle, bootstrap_draws, rescore
from coalitions.learners.training.protocol import TrainingProtocol


def test_closed_form_replicates_equal_direct_rescoring():
    fed = load("synthetic", clients=4, samples=30, rho=0.1, val=25, test=20, seed=2)
    o = ExhaustiveOracle(replicates=6, seed=9).fit(fed)   # the regression default: the closed form
    assert o.method_ == "closed-form"
    draws = bootstrap_draws(fed, 6, 9)
    raw = o.replicates_.raw_values()
    for mask in range(1, 16):
        X, y = union(fed, mask)
        A = np.hstack([X, np.ones((len(X), 1))])
        w = np.linalg.lstsq(A, y.astype(np.float64), rcond=None)[0]
        for i in members(mask, 4):
            v = fed.clients[i].val
            for b in range(6):
                rows = draws[i][b]
                Xb = np.hstack([v.X[rows].reshape(len(rows), -1), np.ones((len(rows), 1))])
                mse = np.mean((Xb @ w - v.y[rows]) ** 2)
                assert raw[b, i, mask] == pytest.approx(mse, rel=1e-6)
    assert np.array_equal(o.game_.values, ExhaustiveOracle(seed=9).fit(fed).game_.values, equal_nan=True)


def test_batched_replicates_equal_per_subset_models():
    fed = toy_binary()
    kw = dict(epochs=30, lr=0.02, l2=1e-3, seed=2)
    spec, ref = reference_loop(fed, "logistic", list(range(1, 8)), hidden=6, **kw)
    p = TrainingProtocol(model="logistic", steps=kw["epochs"], lr=kw["lr"], weight_decay=kw["l2"])  # full batch
    o = ExhaustiveOracle(protocol=p, seed=kw["seed"], dtype="float64", chunk_size=3, device="cpu",
                         replicates=5).fit(fed)
    draws = bootstrap_draws(fed, 5, 2)
    raw = o.replicates_.raw_values()
    for mask in range(1, 8):
        for i in members(mask, 3):
            v = fed.clients[i].val
            scores = spec.forward(ref[mask], torch.tensor(v.X, dtype=torch.float64)).numpy()[:, 0]
            for b in range(5):
                rows = draws[i][b]
                assert raw[b, i, mask] == pytest.approx(evaluate("auc", v.y[rows], scores[rows]), rel=1e-6, abs=1e-9)


def test_draws_are_seeded_stratified_and_independent_of_chunking():
    fed = toy_binary()
    a, b = bootstrap_draws(fed, 4, 1), bootstrap_draws(fed, 4, 1)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, bootstrap_draws(fed, 4, 2), strict=True))
    for c, d in zip(fed.clients, a, strict=True):
        for rows in d:  # every class keeps its count
            assert np.array_equal(np.bincount(c.val.y[rows], minlength=2), np.bincount(c.val.y, minlength=2))
    kw = dict(protocol=TrainingProtocol(model="logistic", steps=20), dtype="float64", device="cpu", replicates=3)
    one = ExhaustiveOracle(chunk_size=1, **kw).fit(fed).replicates_.values
    all_ = ExhaustiveOracle(chunk_size=7, **kw).fit(fed).replicates_.values
    assert np.allclose(one, all_, equal_nan=True, atol=1e-9)


def test_regression_draws_resample_rows_with_replacement():
    fed = load("synthetic", clients=2, val=40)
    d = bootstrap_draws(fed, 200, 0)
    for c, rows in zip(fed.clients, d, strict=True):
        assert rows.shape == (200, len(c.val.y)) and rows.min() >= 0 and rows.max() < len(c.val.y)
        assert any(len(np.unique(r)) < len(r) for r in rows)  # some row drawn twice


def test_accuracy_draws_are_not_stratified_so_a_rare_class_row_varies():
    """A stratified resample keeps the only row of a class in every replicate: a difference in it
    would get a standard error of 0.  For accuracy the resample is of all rows."""
    if not DEBIAN.is_dir():
        pytest.skip("Debian package dataset-fashion-mnist not installed")
    fed = load("fashion", clients=4, samples=60, partition="dirichlet", alpha=0.1, seed=0)
    assert fed.metric == "accuracy"
    d = bootstrap_draws(fed, 300, 0)
    seen = False
    for c, rows in zip(fed.clients, d, strict=True):
        y = c.val.y
        counts = np.stack([np.bincount(y[r], minlength=10) for r in rows])
        assert not np.all(counts == np.bincount(y, minlength=10))          # class counts vary
        for k in np.flatnonzero(np.bincount(y, minlength=10) == 1):        # a class of one row
            seen = True
            assert len(np.unique(counts[:, k])) > 1                         # drawn 0, 1, 2 ... times
    assert seen, "the federation should hold a client with a one-row class"


def test_rescore_is_the_metric_on_each_resample():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=12)
    scores = rng.normal(size=(4, 12, 3))
    draws = rng.integers(0, 12, size=(5, 12))
    out = rescore("accuracy", y, scores, draws)
    assert out.shape == (5, 4)
    for b in range(5):
        for m in range(4):
            assert out[b, m] == evaluate("accuracy", y[draws[b]], scores[m, draws[b]])


def test_checkpoint_resume_keeps_the_replicates(tmp_path):
    fed = toy_binary()
    kw = dict(protocol=TrainingProtocol(model="mlp", hidden=4, steps=10, lr=0.05), chunk_size=2, seed=1, device="cpu",
              replicates=4)
    whole = ExhaustiveOracle(**kw).fit(fed)
    ckpt = tmp_path / "run.ckpt.npz"

    def stop(done, total):
        if done >= 2 * 2 * 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ExhaustiveOracle(checkpoint=ckpt, progress=stop, **kw).fit(fed)
    resumed = ExhaustiveOracle(checkpoint=ckpt, **kw).fit(fed)
    assert resumed.chunks_resumed_ == 1
    assert np.array_equal(resumed.replicates_.values, whole.replicates_.values, equal_nan=True)
    with pytest.raises(InputError, match="different run"):
        ExhaustiveOracle(checkpoint=ckpt, **{**kw, "replicates": 5}).fit(fed)


def test_bad_replicate_counts():
    fed = load("synthetic", clients=2)
    with pytest.raises(InputError, match="replicates"):
        ExhaustiveOracle(replicates=-1).fit(fed)
    with pytest.raises(InputError, match="replicates 200000"):
        ExhaustiveOracle(replicates=200_000).fit(fed)
    assert ExhaustiveOracle(replicates=0).fit(fed).replicates_ is None
    assert ExhaustiveOracle(replicates=0).fit(fed).game_.uncertainty is None


def test_the_measured_game_carries_its_replicates_by_default():
    """The default oracle scores 200 replicates, and its game carries them: solved at z = 1.96."""
    fed = load("synthetic", clients=2)
    o = ExhaustiveOracle().fit(fed)
    assert o.replicates_.b == 200
    assert o.game_.uncertainty.replicates is o.replicates_
    assert co.solve(o.game_).z == 1.96 and co.solve(o.game_, z=0).z == 0
