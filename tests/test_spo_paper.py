"""SPO as the paper's public code runs it (``variant="paper"``, :mod:`coalitions.learners.methods.spo.paper`).

The pieces: the clamped direction, the 5/1 alternation, one hypernetwork per searched
(client, face), EPO's programs solved in one batch, the ratio rule on the result; and the
perfect front read at each coalition's pooled direction, which is the exact game.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import coalitions as co  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.data.metrics import loss_function  # noqa: E402
from coalitions.learners.exact import ExhaustiveOracle  # noqa: E402
from coalitions.learners.methods.spo import SPO, epo_lp  # noqa: E402
from coalitions.learners.methods.spo.epo import epo_lp_batch  # noqa: E402
from coalitions.learners.methods.spo.exact_front import pooled_directions, pooled_front_game  # noqa: E402
from coalitions.learners.methods.spo.paper import PaperSearch, alternation, clamp_direction  # noqa: E402
from coalitions.learners.training.engine import Padded  # noqa: E402
from coalitions.learners.training.models import make_model  # noqa: E402
from coalitions.learners.training.protocol import TrainingProtocol  # noqa: E402
from coalitions.params import ParameterError  # noqa: E402


@pytest.fixture(scope="module")
def fed():
    return load("synthetic", samples=10, rho=0.1, seed=3)


def _search(fed, **kw):
    spec = make_model("linear", fed.input_shape, fed.n_outputs)
    dev = torch.device("cpu")
    return PaperSearch(spec, loss_function(fed.task), Padded(fed, "train", dev), Padded(fed, "val", dev), dev, 0,
                       **{"rounds": 3, "hidden": 8, **kw})


# --------------------------------------------------------------------------- clamping
def test_clamp_known_values():
    face = torch.tensor([[True, True, True, False]])
    # k = 3: clamp to [1/9, 8/9] -> (8/9, 1/9, 1/9), renormalised by 10/9
    got = clamp_direction(torch.tensor([[1.0, 0.0, -0.5, 0.7]]), face)
    np.testing.assert_allclose(got.numpy(), [[0.8, 0.1, 0.1, 0.0]], atol=1e-6)
    # a singleton face is its vertex
    np.testing.assert_allclose(clamp_direction(torch.tensor([[0.3, 0.2]]), torch.tensor([[False, True]])).numpy(),
                               [[0.0, 1.0]])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-2, 2), min_size=6, max_size=6), st.integers(1, 63))
def test_clamp_stays_on_the_face_and_away_from_its_edges(values, mask):
    face = torch.tensor([[bool(mask >> j & 1) for j in range(6)]])
    k = int(face.sum())
    d = clamp_direction(torch.tensor([values], dtype=torch.float64), face)[0].numpy()
    assert d.sum() == pytest.approx(1.0)
    assert np.all(d[~face[0].numpy()] == 0)
    on = d[face[0].numpy()]
    # after clamping to [1/(3k), 1 - 1/(3k)] the sum is at most k - 1/3... so no weight falls below 1/(3k) / (k - 1/3)
    assert np.all(on >= 1 / (3 * k) / max(1.0, k - 1 / 3) - 1e-12)
    if k > 1:
        assert np.all(on > 0) and np.all(on < 1)


# --------------------------------------------------------------------------- the schedule
def test_alternation_is_five_front_steps_then_one_direction_step():
    assert alternation(2, 5, 1) == ["front"] * 5 + ["direction"] + ["front"] * 5 + ["direction"]
    assert alternation(0, 5, 1) == []


def test_the_search_runs_the_alternation(fed, monkeypatch):
    s = _search(fed, rounds=3, front_steps=5, direction_steps=1)
    calls = []
    front = s._epo_weights
    monkeypatch.setattr(s, "_epo_weights", lambda *a: calls.append("front") or front(*a))
    s.progress = lambda done, total: calls.append("round")
    face = torch.ones((2, fed.n), dtype=torch.bool)
    d, loss = s(torch.tensor([0, 4]), face, ("t",))
    assert calls == (["front"] * 5 + ["round"]) * 3
    assert s.last_directions_.shape == (3, 2, fed.n)   # one direction step per round moved each row
    assert np.allclose(d.sum(1), 1) and np.all(d > 0) and loss.shape == (2,)


def test_without_direction_steps_the_direction_stays_at_the_barycentre(fed):
    s = _search(fed, rounds=2, direction_steps=0)
    face = torch.zeros((1, fed.n), dtype=torch.bool)
    face[0, [0, 2, 5]] = True
    d, _ = s(torch.tensor([2]), face, ("t",))
    np.testing.assert_allclose(d[0], [1 / 3, 0, 1 / 3, 0, 0, 1 / 3], atol=1e-6)


# --------------------------------------------------------------------------- one network per row
def test_every_row_trains_its_own_network_independent_of_the_batch(fed):
    face = torch.ones((3, fed.n), dtype=torch.bool)
    s = _search(fed, rounds=4)
    d3, l3 = s(torch.tensor([0, 3, 5]), face, ("t",))
    assert set(s.trained_) == {(0, 63), (3, 63), (5, 63)}
    w0, w3 = s.trained_[(0, 63)][0]["w0"], s.trained_[(3, 63)][0]["w0"]
    assert not torch.equal(w0, w3)   # separate networks, not one shared front
    alone = _search(fed, rounds=4)
    d1, l1 = alone(torch.tensor([3]), face[:1], ("other key",))
    np.testing.assert_allclose(d1[0], d3[1], atol=1e-5)   # row (3, all) alone = inside the batch
    assert l1[0] == pytest.approx(l3[1], rel=1e-4)


def test_direction_step_lowers_the_targets_validation_loss(fed):
    # with the front frozen (no front step can change the network), direction steps are plain
    # gradient descent on the target's validation loss, followed by the clamp
    s = _search(fed, rounds=1, front_steps=1, direction_steps=0, lr=0.0, momentum=0.0)
    face = torch.ones((1, fed.n), dtype=torch.bool)
    _, before = s(torch.tensor([1]), face, ("t",))
    s = _search(fed, rounds=1, front_steps=1, direction_steps=20, lr=0.0, momentum=0.0, direction_lr=0.05)
    _, after = s(torch.tensor([1]), face, ("t",))
    assert after[0] < before[0]


# --------------------------------------------------------------------------- EPO in one batch
def test_batched_epo_programs_match_one_at_a_time():
    rng = np.random.default_rng(0)
    cases = []
    for m in (2, 3, 5, 3):
        G = rng.normal(size=(m, 7))
        r = rng.dirichlet(np.ones(m))
        cases.append((rng.uniform(0.5, 2.0, m), G @ G.T, r))
    cases.append((1.0 / cases[1][2], cases[1][1], cases[1][2]))   # balanced: descent mode
    got = epo_lp_batch(*zip(*cases, strict=True))
    for (l, C, r), a in zip(cases, got, strict=True):
        ref = epo_lp(l, C, r)
        assert a is not None and ref is not None and a.sum() == pytest.approx(1.0)
        # same optimal value (the optimum need not be unique)
        from coalitions.learners.methods.spo.epo import epo_program
        c, _, _ = epo_program(l, C, r)
        assert c @ a == pytest.approx(c @ ref, rel=1e-5, abs=1e-7)


# --------------------------------------------------------------------------- the estimator and the ratio rule
def test_paper_variant_reads_the_ratio_rule_off_clamped_directions(fed):
    spo = SPO(variant="paper", protocol=TrainingProtocol(steps=10), hidden=8, layers=2, rule="ratio", seed=1).fit(fed)
    W = spo.weights_
    assert np.all(W > 0) and np.allclose(W.sum(1), 1)   # the clamp keeps every client in
    graph = spo.oracle_.benefit_graph((1 << fed.n) - 1)
    for i, c in graph.collaborators:
        want = {j for j in range(fed.n) if j != i and W[i, j] >= 0.7 * W[i, i]}
        assert {j for j in range(fed.n) if c >> j & 1} == want
    assert set(spo.utilities_["val"]) == set(fed.names)
    est = spo.estimate_
    # the peeling ran on per-target networks: a partition of every client, each block's directions on its face
    assert sum(est.masks) == (1 << fed.n) - 1 and len(set(est.masks)) == len(est.masks)
    for k in est.masks:
        for i in (j for j in range(fed.n) if k >> j & 1):
            assert (i, k) in spo.search_.trained_
    with pytest.raises(co.errors.InputError, match="one per searched"):
        spo.predict_params(W[0])


@pytest.mark.parametrize("kw,words", [
    (dict(variant="bogus"), "variant"),
    (dict(variant="paper", epo=True), "epo"),
    (dict(variant="paper", front_steps=0), "front_steps"),
    (dict(variant="paper", direction_lr=0.0), "direction_lr"),
])
def test_bad_paper_options(kw, words, fed):
    with pytest.raises(ParameterError, match=words):
        SPO(**kw).fit(fed)


# --------------------------------------------------------------------------- the decisive control
def test_pooled_directions_weigh_by_sample_counts(fed):
    D = pooled_directions(fed)
    n = fed.sizes("train")
    S = 0b101001
    np.testing.assert_allclose(D[S], np.where([S >> j & 1 for j in range(fed.n)], n, 0) / n[[0, 3, 5]].sum())
    assert np.all(D[0] == 0)


def test_front_at_pooled_directions_is_the_exact_game_as_the_ridge_vanishes(fed):
    oracle = ExhaustiveOracle().fit(fed)   # the regression default: closed form, ridge 1e-10
    assert oracle.method_ == "closed-form"
    ridge = oracle.protocol_.weight_decay
    exact = oracle.game_.raw_values()
    limit = pooled_front_game(fed, 2 * ridge, bias_decay=True).raw_values()
    np.testing.assert_allclose(limit, exact, rtol=1e-5)
    assert co.solve(pooled_front_game(fed, 2 * ridge, bias_decay=True)).masks == \
        co.solve(oracle.game_).masks
    # SPO's ridge makes a different game
    assert not np.allclose(pooled_front_game(fed, 0.01).raw_values(), exact, rtol=1e-3, equal_nan=True)


# --------------------------------------------------------------------------- one protocol: budget, patience, rate grid
TINY = dict(directions=8, hidden=16, embed=8, layers=1, search_steps=3, starts=2, line_search=3)


def tiny(**fields) -> dict:
    """A small SPO's options: 300 steps of 256 samples per client (SPO's former default batch), ``fields`` added."""
    return dict(TINY, protocol=TrainingProtocol(steps=300, batch_size=256, **fields))


def test_early_stopping_keeps_the_best_evaluation(fed):
    from coalitions.learners.methods.spo.estimator import EVAL_EVERY

    spo = SPO(lr=0.5, seed=0, **tiny(patience=2)).fit(fed)   # a rate this high stops improving soon
    assert not spo.hit_max_ and spo.stopped_at_ < spo.protocol_.steps
    assert spo.stopped_at_ - spo.best_step_ == 2 * EVAL_EVERY
    means = [float(np.mean(v)) for v in spo.val_loss_clients_]
    k = spo.val_loss_steps_.index(spo.best_step_)
    assert means[k] == min(means) == spo.best_val_
    assert spo.estimate_.extra["training"]["stopped_at"] == spo.stopped_at_
    full = SPO(lr=0.5, seed=0, **tiny()).fit(fed)
    assert full.hit_max_ and full.stopped_at_ == full.protocol_.steps == full.best_step_


def test_rate_grid_keeps_the_lowest_validation_loss_and_equals_a_plain_fit(fed):
    tuned = SPO(seed=0, **tiny(lr_grid=(1e-4, 0.02))).fit(fed)
    assert set(tuned.lr_losses_) == {1e-4, 0.02}
    assert tuned.lr_ == min(tuned.lr_losses_, key=tuned.lr_losses_.get)
    plain = SPO(lr=tuned.lr_, seed=0, **tiny()).fit(fed)
    np.testing.assert_allclose(tuned.weights_, plain.weights_)
    assert tuned.estimate_.extra["training"]["lr"] == tuned.lr_


@pytest.mark.parametrize("fields", [dict(patience=3), dict(lr_grid=(0.01, 0.1))])
def test_the_paper_variant_refuses_a_protocol_with_patience_or_a_grid(fields, fed):
    spo = SPO(variant="paper", protocol=TrainingProtocol(steps=10, **fields))
    with pytest.raises(ParameterError, match="^variant paper runs the code's fixed schedule"):
        spo.check_params()
    with pytest.raises(ParameterError, match="^variant paper"):
        spo.fit(fed)


def test_learn_command_runs_the_paper_variant(tmp_path, capsys):
    from coalitions.cli import main
    from coalitions.estimate import read_estimate

    out = tmp_path / "e.json"
    args = ["learn", "synthetic", "--method", "spo", "--clients", "3", "--flipped", "2", "--samples", "10",
            "--variant", "paper", "--steps", "10", "--hypernet-hidden", "8", "--layers", "2", "--rule", "ratio",
            "--device", "cpu", "--seed", "2", "-o", str(out)]
    assert main(args) == 0
    e = read_estimate(out)
    assert e.config["variant"] == "paper" and e.config["front_steps"] == 5 and e.extra["training"]["variant"] == "paper"
    assert main(args[:-2] + ["--variant", "theirs", "-o", str(out)]) == 2
    assert "--variant" in capsys.readouterr().err


def test_variant_paper_alone_takes_the_authors_settings_and_given_flags_win(capsys, tmp_path):
    """Issue 33 item 8: ``learn --method spo --variant paper`` ran a 200×3 network under elimination (and, with no
    training flag, was refused for the patience the other defaults add); it now runs the code's settings."""
    from conftest import run

    from coalitions.learners.methods.learning import Learning
    from coalitions.learners.methods.spo.paper import PAPER_PROTOCOL, PAPER_SETTINGS

    alone = Learning("spo", {"variant": "paper"}, {})
    p = alone.estimator.get_params()
    assert {k: p[k] for k in PAPER_SETTINGS} == PAPER_SETTINGS
    assert alone._fields == PAPER_PROTOCOL and alone.defaulted
    mine = Learning("spo", {"variant": "paper", "layers": 3, "rule": "elimination"}, {"steps": 20})
    p = mine.estimator.get_params()
    assert (p["layers"], p["rule"], p["hidden"]) == (3, "elimination", 100)
    assert mine._fields == {"steps": 20, "batch_size": None}
    assert Learning("spo", {}, {}).paper_defaults == {}   # ours keeps its own defaults
    rc, _, err = run(capsys, "learn", "synthetic", "--samples", "10", "--seed", "0", "--method", "spo",
                     "--variant", "paper", "--steps", "10", "-o", tmp_path / "p.json")
    assert rc == 0 and "--variant paper: the authors' settings where not given: --hypernet-hidden 100" in err
    assert "--steps" not in err.splitlines()[-1] and "no training flags" not in err


# --------------------------------------------------------------------------- the README's procedure
def test_rays_drawn_on_faces_are_directions_of_the_face():
    from coalitions.learners.methods.spo.paper import _dirichlet_on_faces

    rng = np.random.default_rng(0)
    faces = rng.random((500, 6)) < 0.5
    faces[:, 0] = True
    d = _dirichlet_on_faces(rng, faces)
    assert np.allclose(d.sum(1), 1) and np.all(d[~faces] == 0) and np.all(d >= 0)
    # Dir(1/k) is sparse: a draw's largest share has median 0.69 here, against 0.44 under Dir(1) on 5 clients
    assert np.median(d.max(1)[faces.sum(1) >= 4]) > 0.6


def test_the_readme_procedure_weighs_by_sampled_rays_then_searches_from_the_last(fed, monkeypatch):
    """``variant="readme"``: front steps by linear scalarisation at a ray drawn each step (no EPO program),
    then the direction steps, starting from the last ray drawn (the code overwrites its input ray)."""
    import coalitions.learners.methods.spo.paper as paper

    s = _search(fed, rounds=1, front_steps=4, direction_steps=0, solver="linear", sample_rays=True)
    monkeypatch.setattr(s, "_epo_weights", lambda *a: pytest.fail("the linear solver solved an EPO program"))
    drawn = []
    real = paper._dirichlet_on_faces
    monkeypatch.setattr(paper, "_dirichlet_on_faces", lambda rng, f: drawn.append(real(rng, f)) or drawn[-1])
    face = torch.ones((2, fed.n), dtype=torch.bool)
    d, _ = s(torch.tensor([0, 4]), face, ("t",))
    assert len(drawn) == 4
    np.testing.assert_allclose(d, drawn[-1], atol=1e-6)   # no direction step: where the last ray left it
    with pytest.raises(ValueError, match="solver"):
        _search(fed, solver="mgda")


def test_variant_readme_runs_on_the_readme_settings(capsys, tmp_path):
    from conftest import run

    from coalitions.learners.methods.learning import Learning
    from coalitions.learners.methods.spo.paper import README_PROTOCOL, README_SETTINGS

    r = Learning("spo", {"variant": "readme"}, {})
    p = r.estimator.get_params()
    assert {k: p[k] for k in README_SETTINGS} == README_SETTINGS and r._fields == README_PROTOCOL
    rc, _, err = run(capsys, "learn", "synthetic", "--samples", "10", "--seed", "0", "--method", "spo",
                     "--variant", "readme", "--steps", "20", "--direction-steps", "3", "-o", tmp_path / "r.json")
    assert rc == 0
    assert "--variant readme: the authors' settings where not given: --hypernet-hidden 100 --layers 1" in err
    e = co.read_estimate(tmp_path / "r.json")
    assert e.extra["training"] == {"variant": "readme"}
