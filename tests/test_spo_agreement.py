"""The perfect Pareto front of linear least squares and the agreement benchmark's statistics.

:class:`ExactParetoFront` is the yardstick of ``benchmarks/spo_agreement.py`` and of
``docs/learners-spo.md`` ("Agreement with the exact benefit graph"): it must be the
model SPO's training asks the hypernetwork for, and it must agree with the exhaustive
oracle's subset models where the two problems coincide.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from coalitions.errors import InputError  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.data.metrics import loss_function  # noqa: E402
from coalitions.learners.exact import closed_form_weights  # noqa: E402
from coalitions.learners.methods.spo import DirectionSearch  # noqa: E402
from coalitions.learners.methods.spo.exact_front import ExactParetoFront  # noqa: E402
from coalitions.learners.training.engine import Padded  # noqa: E402
from coalitions.learners.training.models import make_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("spo_agreement", ROOT / "benchmarks" / "spo_agreement.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def fed():
    return load("synthetic", samples=10, rho=0.1, seed=3)


def test_barycentre_of_a_determined_face_is_the_exhaustive_oracles_subset_model(fed):
    # {0,1,2}: 30 samples for 21 unknowns, so least squares is unique; equal sizes make the
    # barycentre the pooled (sample-weighted) objective, i.e. the exhaustive oracle's model.
    front = ExactParetoFront(fed, l2=0.0)
    d = torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0, 0, 0]], dtype=torch.float64)
    p = front(d)
    w = np.concatenate([p["weight"][0, :, 0].numpy(), p["bias"][0].numpy()])
    # (a vanishing ridge: with none, the all-subsets solve fails on the faces of fewer than 21 samples)
    ref = closed_form_weights(fed, ridge=1e-12)[0b000111]
    np.testing.assert_allclose(w, ref, rtol=1e-6, atol=1e-8)


def test_front_is_stationary_for_the_scalarised_ridge_objective(fed):
    # SPO trains h(d) to minimise sum_j d_j L_j + l2/2 ||W||^2 (bias not decayed): at h*(d)
    # the gradient of that objective with respect to the model is zero.
    l2 = 0.01
    front = ExactParetoFront(fed, l2=l2)
    rng = np.random.default_rng(0)
    d = torch.tensor(rng.dirichlet(np.full(fed.n, 0.5), size=3))
    p = front(d)
    for b in range(3):
        W = p["weight"][b].clone().requires_grad_(True)
        c = p["bias"][b].clone().requires_grad_(True)
        f = 0.5 * l2 * (W ** 2).sum()
        for j, cl in enumerate(fed.clients):
            X = torch.tensor(cl.train.X, dtype=torch.float64)
            y = torch.tensor(cl.train.y, dtype=torch.float64)
            f = f + d[b, j] * ((X @ W[:, 0] + c[0] - y) ** 2).mean()
        gW, gc = torch.autograd.grad(f, (W, c))
        assert float(gW.abs().max()) < 1e-8 and float(gc.abs().max()) < 1e-8


def test_ridge_changes_the_front_and_search_runs_on_it(fed):
    d = torch.full((1, fed.n), 1 / fed.n, dtype=torch.float64)
    a, b = ExactParetoFront(fed, 0.0)(d), ExactParetoFront(fed, 1.0)(d)
    assert float(b["weight"].norm()) < float(a["weight"].norm())  # the ridge shrinks the weights
    # the direction search runs unchanged on the perfect front, and never ends above its barycentre start
    front = ExactParetoFront(fed, 0.01)
    spec = make_model("linear", fed.input_shape, fed.n_outputs)
    val = Padded(fed, "val", torch.device("cpu"))
    search = DirectionSearch(front, spec, loss_function("regression"), val, torch.device("cpu"), 0, 20, 2, 8)
    face = torch.zeros((3, fed.n), dtype=torch.bool)
    face[:, :3] = True
    dbest, lbest = search(torch.tensor([0, 1, 2]), face, seed_key=("t",))
    bary = search.own_loss(torch.full((3, fed.n), 0.0).index_fill_(1, torch.tensor([0, 1, 2]), 1 / 3).float(),
                           torch.tensor([0, 1, 2]))
    assert np.all(lbest <= bary.numpy() + 1e-7)
    assert np.allclose(dbest.sum(1), 1) and np.all(dbest[:, 3:] == 0)


def test_front_rejects_classification_and_negative_ridge(fed):
    with pytest.raises(InputError, match="regression"):
        ExactParetoFront(load("heart"), 0.01)
    with pytest.raises(InputError, match="l2"):
        ExactParetoFront(fed, -1.0)


def test_wilson_and_mcnemar():
    b = _bench()
    lo, hi = b.wilson(0, 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-3)   # the textbook value for 0/20
    lo, hi = b.wilson(15, 20)
    assert lo == pytest.approx(0.5313, abs=1e-3) and hi == pytest.approx(0.8881, abs=1e-3)
    assert b.mcnemar([1, 1, 0], [1, 1, 0]) == "no discordant seed"
    assert "5 seeds only A, 0 only B" in b.mcnemar([1] * 5 + [0], [0] * 6)
    assert "p = 0.0625" in b.mcnemar([1] * 5 + [0], [0] * 6)
    assert b.parse_seeds("0-3,7") == [0, 1, 2, 3, 7]


def test_own_loss_per_target_batches_match_a_per_row_evaluation(fed):
    # DirectionSearch.own_loss groups rows by target client (no copy of the validation set per
    # row); rows in any order, targets interleaved, must give each row its own client's loss.
    front = ExactParetoFront(fed, 0.01)
    spec = make_model("linear", fed.input_shape, fed.n_outputs)
    val = Padded(fed, "val", torch.device("cpu"))
    search = DirectionSearch(front, spec, loss_function("regression"), val, torch.device("cpu"), 0, 1, 2, 2)
    rng = np.random.default_rng(1)
    d = torch.tensor(rng.dirichlet(np.ones(fed.n), size=13), dtype=torch.float32)
    targets = torch.tensor(rng.integers(0, fed.n, size=13))
    got = search.own_loss(d, targets)
    p = front(d)
    for r in range(13):
        c = fed.clients[int(targets[r])].val
        pred = c.X @ p["weight"][r, :, 0].double().numpy() + float(p["bias"][r, 0])
        assert float(got[r]) == pytest.approx(float(np.mean((pred - c.y) ** 2)), rel=1e-4)


def test_benchmark_quick_run_writes_json_that_combine_reads(tmp_path, capsys):
    b = _bench()
    out = tmp_path / "q.json"
    assert b.main(["--quick", "--controls", "--json", str(out)]) == 0
    first = capsys.readouterr().out
    assert "paper ratio" in first and "perfect front, pooled d_S, l2 -> 0" in first
    assert b.main(["--combine", str(out)]) == 0
    assert "agreement with the exact game over seeds 0..0 (1; " in capsys.readouterr().out
    assert b.main(["--variants", "theirs"]) == 2
    assert b.main(["--combine", str(tmp_path / "missing.json")]) == 2
    assert "--combine" in capsys.readouterr().err



def test_personal_head_search_gives_each_row_its_clients_body_and_head():
    # HeadsDirectionSearch uses the base class's grouped evaluation: row r is h(d[r]) with client
    # targets[r]'s own head, scored on that client's validation data (rows interleaved, heads all different)
    from coalitions.learners.methods.spo.heads import HeadsDirectionSearch
    from coalitions.learners.methods.spo.hypernetwork import ParetoHypernetwork

    fed = load("digits", clients=4, seed=1)
    spec = make_model("mlp", fed.input_shape, fed.n_outputs, hidden=8)
    torch.manual_seed(0)
    net = ParetoHypernetwork(fed.n, spec, hidden=16, embed=8, heads="personal")
    with torch.no_grad():
        for v in net.client_heads.values():
            v.add_(torch.randn_like(v))
    val = Padded(fed, "val", torch.device("cpu"))
    loss = loss_function(fed.task)
    search = HeadsDirectionSearch(net, spec, loss, val, torch.device("cpu"), 0, 1, 2, 2)
    rng = np.random.default_rng(4)
    d = torch.tensor(rng.dirichlet(np.ones(fed.n), size=11), dtype=torch.float32)
    targets = torch.tensor(rng.integers(0, fed.n, size=11))
    with torch.no_grad():
        got = search.own_loss(d, targets)
        body = net(d)
        for r in range(11):
            c = int(targets[r])
            one = {k: (net.client_heads[k][c] if k in spec.head else body[k][r]) for k in spec.shapes}
            n = int(val.sizes[c])
            want = loss(spec.forward(one, val.X[c, :n]), val.y[c, :n]).mean()
            assert float(got[r]) == pytest.approx(float(want), rel=1e-5)
