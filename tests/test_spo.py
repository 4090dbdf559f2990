"""SPO: simplex projection, EPO's linear program, the hypernetwork estimator (learners/spo.py)."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import coalitions as co
from coalitions.compare import compare
from coalitions.errors import InputError
from coalitions.estimate import estimate_from_json, estimate_to_json
from coalitions.learners.data.datasets import load
from coalitions.learners.data.federation import Client, Federation, Split
from coalitions.learners.exact import ExhaustiveOracle
from coalitions.learners.methods.spo import SPO, SPOOracle, epo_lp, project_simplex, sample_directions
from coalitions.learners.training.protocol import TrainingProtocol, protocol_with

cp = pytest.importorskip("cvxpy")


def budget(steps: int, batch_size: int | None = 256, **fields) -> TrainingProtocol:
    """SPO's training settings as a protocol (256 samples per client and step: SPO's former default batch)."""
    return TrainingProtocol(steps=steps, batch_size=batch_size, **fields)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread avoids contention on a busy 2-core machine (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------- projection
def cvxpy_projection(v, face):
    w = cp.Variable(v.size)
    cons = [w >= 0, cp.sum(w) == 1]
    if (~face).any():
        cons.append(w[np.flatnonzero(~face)] == 0)
    cp.Problem(cp.Minimize(cp.sum_squares(w - v)), cons).solve(solver=cp.CLARABEL)
    return w.value


def test_projection_matches_cvxpy():
    rng = np.random.default_rng(0)
    for _ in range(40):
        n = int(rng.integers(1, 8))
        v = rng.normal(0, 2, n)
        face = rng.random(n) < 0.7
        face[rng.integers(n)] = True
        got = project_simplex(torch.tensor(v), torch.tensor(face)).numpy()
        np.testing.assert_allclose(got, cvxpy_projection(v, face), atol=1e-6)


def test_projection_batched_over_leading_dimensions():
    v = torch.randn(3, 5, 6, dtype=torch.float64)
    face = torch.rand(3, 5, 6) < 0.6
    face[..., 0] = True
    out = project_simplex(v, face)
    for i in range(3):
        for j in range(5):
            np.testing.assert_allclose(out[i, j].numpy(), project_simplex(v[i, j], face[i, j]).numpy(), atol=0)


def test_projection_known_values():
    p = project_simplex(torch.tensor([0.5, 0.5, 0.5], dtype=torch.float64)).numpy()
    np.testing.assert_allclose(p, [1 / 3] * 3)
    p = project_simplex(torch.tensor([2.0, 0.0, -1.0], dtype=torch.float64)).numpy()
    np.testing.assert_allclose(p, [1.0, 0.0, 0.0])
    p = project_simplex(torch.tensor([0.3, 0.9, 0.2], dtype=torch.float64),
                        torch.tensor([True, False, True])).numpy()
    np.testing.assert_allclose(p, [0.55, 0.0, 0.45])


vectors = st.integers(1, 7).flatmap(lambda n: st.tuples(
    st.lists(st.floats(-5, 5, allow_nan=False), min_size=n, max_size=n),
    st.lists(st.booleans(), min_size=n, max_size=n),
    st.lists(st.floats(0, 1), min_size=n, max_size=n)))


@settings(max_examples=150, deadline=None)
@given(vectors)
def test_projection_properties(data):
    v, face, q = (np.array(x) for x in data)
    face = face.astype(bool)
    face[int(np.argmax(v))] = True
    p = project_simplex(torch.tensor(v), torch.tensor(face)).numpy()
    assert (p >= 0).all() and abs(p.sum() - 1) < 1e-12 and (p[~face] == 0).all()     # on the face
    p2 = project_simplex(torch.tensor(p), torch.tensor(face)).numpy()
    np.testing.assert_allclose(p2, p, atol=1e-12)                                      # idempotent
    q = np.where(face, q, 0.0)
    if q.sum() > 0:                                                                    # nearest point
        q = q / q.sum()
        assert np.linalg.norm(p - v) <= np.linalg.norm(q - v) + 1e-9


# --------------------------------------------------------------------------- EPO linear program
def _linprog_reference(l, C, r, eps=1e-4):
    """The same LP written for scipy's HiGHS: returns (mode, optimal objective)."""
    from scipy.optimize import linprog

    m = l.size
    rl = r * l
    lh = rl / rl.sum()
    mu = float(np.sum(lh[lh > eps] * np.log(lh[lh > eps] * m)))
    a = r * (np.log(lh * m) - mu)
    Ca = C @ a
    A_eq, b_eq = np.ones((1, m)), [1.0]
    if mu > eps:
        rows, rhs = [], []
        J = Ca > 0
        star = rl == rl.max()
        for j in range(m):
            if J.any() and star[j]:
                rows.append(C[j]), rhs.append(0.0)
            elif not J.any():
                rows.append(C[j]), rhs.append(0.0)
            elif not J[j]:
                rows.append(C[j]), rhs.append(Ca[j])
        res = linprog(-Ca, A_ub=-np.array(rows), b_ub=-np.array(rhs), A_eq=A_eq, b_eq=b_eq, bounds=(0, None))
        return "balance", -res.fun, res.x
    A_ub = np.vstack([-Ca[None], -C])
    b_ub = np.concatenate([[-min(Ca.max(), 0.0)], np.zeros(m)])
    res = linprog(-C.sum(axis=0), A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=(0, None))
    return "descent", -res.fun, res.x


@pytest.mark.parametrize("case", range(6))
def test_epo_lp_solves_tiny_cases(case):
    rng = np.random.default_rng(case)
    m = 3
    G = rng.normal(size=(m, 5))
    C = G @ G.T
    l = rng.uniform(0.5, 2.0, m)
    r = rng.dirichlet(np.ones(m))
    if case >= 4:  # losses exactly balanced against the preference: descent mode
        l = 1.0 / r
    alpha = epo_lp(l, C, r)
    assert alpha is not None and (alpha >= -1e-9).all() and abs(alpha.sum() - 1) < 1e-6
    mode, best, _ = _linprog_reference(l, C, r)
    assert mode == ("descent" if case >= 4 else "balance")
    rl = r * l
    lh = rl / rl.sum()
    a = r * (np.log(lh * m) - np.sum(lh * np.log(lh * m)))
    obj = (C @ a) @ alpha if mode == "balance" else (C @ alpha).sum()
    assert obj == pytest.approx(best, rel=1e-5, abs=1e-6)


def test_epo_lp_pushes_the_objective_furthest_behind_its_preference():
    # orthogonal unit gradients, equal preferences: all weight on the largest loss
    alpha = epo_lp(np.array([1.0, 3.0, 2.0]), np.eye(3), np.full(3, 1 / 3))
    np.testing.assert_allclose(alpha, [0.0, 1.0, 0.0], atol=1e-6)


# --------------------------------------------------------------------------- the estimator
def test_direction_sampler_draws_simplex_points_and_faces():
    rng = np.random.default_rng(0)
    d = sample_directions(rng, 5, 4000, 0.5, 0.5)
    assert (d >= 0).all() and np.allclose(d.sum(1), 1)
    support = (d > 0).sum(1)
    assert (support == 1).mean() > 0.05 and (support == 5).mean() > 0.4
    d = sample_directions(rng, 5, 100, 1.0, 0.0)
    assert (d > 0).all()


@pytest.fixture(scope="module")
def easy():
    """Four clients, two planted groups of two (clients 2, 3 flipped), and SPO fitted on it."""
    fed = load("synthetic", clients=4, flipped="2,3", samples=10, rho=0.01, val=200, test=200, seed=0)
    model = SPO(protocol=budget(800), device="cpu", seed=0).fit(fed)
    return fed, model


PLANTED_EDGES = ((0, 1), (1, 0), (2, 3), (3, 2))


def test_spo_recovers_the_planted_graph_and_the_exact_one(easy):
    fed, m = easy
    e = m.estimate_
    assert e.benefit_graph.edges == PLANTED_EDGES
    game = ExhaustiveOracle().fit(fed).game_
    assert co.ExactOracle(game, z=0).benefit_graph(game.grand).edges == PLANTED_EDGES
    # at the measured game's default level an edge may be within its validation noise, never outside the plant
    assert set(co.ExactOracle(game).benefit_graph(game.grand).edges) <= set(PLANTED_EDGES)
    assert sorted(e.masks) == [0b0011, 0b1100]
    assert e.planted_groups == (("0", "1"), ("2", "3"))
    r = compare(e, game, z=0)
    assert r["edge_f1"] == 1.0 and r["ari"] == 1.0 and max(r["regret"].values()) == 0.0


def test_learned_attributes(easy):
    fed, m = easy
    assert m.weights_.shape == (4, 4) and np.allclose(m.weights_.sum(1), 1) and (m.weights_ >= 0).all()
    # each client leans on its own group only
    assert m.weights_[:2, 2:].max() < 0.05 and m.weights_[2:, :2].max() < 0.05
    for part in ("val", "test"):
        assert set(m.utilities_[part]) == set(fed.names)
        assert all(0 <= x < 0.1 for x in m.utilities_[part].values())   # MSE in collaboration
    assert m.history_[-1] < m.history_[0]


def test_ratio_rule_is_consistent_with_elimination(easy):
    fed, m = easy
    ratio = SPOOracle(fed.names, m.search_, "ratio", m.threshold, m.tol, m.min_weight)
    ratio._best = m.oracle_._best        # same searches, other rule
    elim = dict(m.oracle_.benefit_graph(15).collaborators)
    groups = {0: 0b0011, 1: 0b0011, 2: 0b1100, 3: 0b1100}
    for i, c in ratio.benefit_graph(15).collaborators:
        assert c & ~elim[i] == 0           # every ratio collaborator is kept by elimination
        assert c & ~groups[i] == 0         # and neither crosses the planted groups


def test_the_papers_ratio_rule_is_reported_beside_elimination(easy):
    fed, m = easy
    e = m.estimate_
    assert e.config["rules_reported"] == ["elimination", "ratio"]
    rules = e.extra["rules"]
    assert rules["elimination"]["used"] and not rules["ratio"]["used"]
    assert "ratio rule" in rules["ratio"]["label"] and "d_j/d_i >= 0.7" in rules["ratio"]["label"]
    assert rules["elimination"]["partition"] == e.blocks()
    ratio = SPOOracle(fed.names, m.search_, "ratio", m.threshold, m.tol, m.min_weight)
    ratio._best = m.oracle_._best
    assert rules["ratio"]["edges"] == [[fed.names[j], fed.names[i]] for j, i in ratio.benefit_graph(15).edges]
    from coalitions.bitmask import members
    from coalitions.partition import canonical
    from coalitions.peeling import peel_oracle

    want = [[fed.names[i] for i in members(k)] for k in canonical(peel_oracle(ratio).partition)]
    assert rules["ratio"]["partition"] == want
    rule, used, rows = m.sensitivity([0.7, 0.0])
    assert rule == "ratio" and used == 0.7 and [r.threshold for r in rows] == [0.0, 0.7]
    assert rows[1].blocks(fed.names) == want


def test_oracle_answers_any_remaining_set_without_retraining(easy):
    fed, m = easy
    before = [p.clone() for p in m.hypernet_.parameters()]
    o = m.oracle_
    g = o.benefit_graph(0b0101)            # {0, 2}: one from each group
    assert dict(g.collaborators) == {0: 0, 2: 0}
    g3 = o.benefit_graph(0b0111)           # {0, 1, 2}
    assert dict(g3.collaborators) == {0: 0b0010, 1: 0b0001, 2: 0}
    assert o.benefit_graph(0b0111) is g3   # cached
    for p, q in zip(before, m.hypernet_.parameters(), strict=True):
        assert torch.equal(p, q)
    D, L = o.best_directions(0b0101)
    assert (D[[1, 3]] == 0).all() and np.isnan(L[[1, 3]]).all()
    assert (D[0, [1, 3]] == 0).all() and abs(D[0].sum() - 1) < 1e-6


def test_estimate_round_trips(easy):
    _, m = easy
    data = estimate_to_json(m.estimate_)
    import json

    back = estimate_from_json(json.loads(json.dumps(data)))
    assert back.benefit_graph.edges == m.estimate_.benefit_graph.edges
    assert back.config["method"] == "spo" and back.config["rule"] == "elimination"
    np.testing.assert_allclose(back.weights, m.weights_)


def test_same_seed_same_result_other_seed_differs():
    fed = load("synthetic", clients=3, flipped="2", samples=10, val=50, test=50, seed=1)
    kw = dict(protocol=budget(40), search_steps=5, device="cpu", hidden=32, embed=8, layers=1, directions=8)
    a = SPO(seed=3, **kw).fit(fed)
    b = SPO(seed=3, **kw).fit(fed)
    c = SPO(seed=4, **kw).fit(fed)
    np.testing.assert_array_equal(a.weights_, b.weights_)
    assert a.history_ == b.history_ and a.history_ != c.history_


def test_epo_training_and_logistic_target():
    rng = np.random.default_rng(0)

    def split(n, flip):
        X = rng.normal(size=(n, 3)).astype(np.float32)
        y = ((X[:, 0] > 0) ^ flip).astype(np.int64)
        return Split(X, y)

    clients = tuple(Client(str(k), split(40, k == 2), split(30, k == 2), split(30, k == 2)) for k in range(3))
    fed = Federation("toy", "binary", "auc", clients, 2, None, {})
    m = SPO(protocol=budget(6), epo=True, search_steps=3, device="cpu", hidden=16, embed=8, layers=1, directions=4).fit(fed)
    assert m.spec_.kind == "logistic" and m.epo_fallbacks_ == 0
    assert all(0 <= x <= 1 for x in m.utilities_["test"].values())
    assert m.estimate_.metric == "auc" and m.estimate_.sense == "max"


@pytest.mark.parametrize("kw, words", [
    (dict(rule="majority"), "^rule must be one of"),
    (dict(protocol={"steps": 5}), "^protocol must be a TrainingProtocol or None, got dict"),
    (dict(starts=1), "^starts must be an integer in \\[2, 1e\\+09\\]"),
    (dict(lr=0.0), "^lr must be a number > 0"),
    (dict(threshold=math.nan), "^threshold must be a number"),
    (dict(device="tpu"), "^device must be one of"),
    (dict(model="rnn"), "^model must be one of linear, logistic, mlp, cnn"),
])
def test_bad_options_are_input_errors(kw, words):
    fed = load("synthetic", clients=2, flipped="1", samples=5, val=5, test=5)
    with pytest.raises(InputError, match=words):
        SPO(**{"protocol": budget(1), **kw}).fit(fed)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_cuda_without_gpu_is_an_input_error():
    fed = load("synthetic", clients=2, flipped="1", samples=5, val=5, test=5)
    with pytest.raises(InputError, match="no CUDA device"):
        SPO(protocol=budget(1), device="cuda").fit(fed)


def test_learn_command(tmp_path, capsys):
    from coalitions.cli import main
    from coalitions.estimate import read_estimate

    out = tmp_path / "e.json"
    args = ["learn", "synthetic", "--method", "spo", "--clients", "3", "--flipped", "2", "--samples", "10",
            "--steps", "20", "--search-steps", "3", "--hypernet-hidden", "16", "--embed", "8", "--layers", "1",
            "--rule", "ratio", "--device", "cpu", "--seed", "2", "-o", str(out)]
    assert main(args) == 0
    e = read_estimate(out)
    assert e.method == "spo" and e.config["rule"] == "ratio" and e.config["protocol"]["steps"] == 20
    assert e.extra["training"]["max_steps"] == 20 and e.extra["training"]["stopped_at"] == 20
    assert "steps" not in e.config and "batch_size" not in e.config
    assert e.config["seed"] == 2 and e.config["data_options"]["seed"] == 2
    assert main(args[:-2] + ["--threshold", "-1", "-o", str(out)]) == 2
    assert "--threshold" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(args[:-4] + ["--device", "cuda", "-o", str(out)]) == 2
        assert "no CUDA device" in capsys.readouterr().err


# --------------------------------------------------------------------------- one place for the training settings
@pytest.mark.parametrize("name, value", [("steps", 10), ("batch_size", 32), ("patience", 2), ("lr_grid", (0.01,))])
def test_training_settings_are_not_spos_parameters(name, value):
    """Issue 18: the budget, batch, patience and rate grid live in the protocol only."""
    with pytest.raises(TypeError, match=name):
        SPO(**{name: value})
    assert name not in SPO.param_names() and name in SPO.protocol_fields


def test_without_a_protocol_spo_trains_the_datas_default_protocol():
    """``protocol=None``: the default protocol of the task and input shape, resolved at fit time and recorded."""
    fed = load("synthetic", clients=3, flipped="2", samples=10, val=20, test=20, seed=1)
    default = protocol_with(fed.task, tuple(fed.input_shape))
    m = SPO(search_steps=3, device="cpu", hidden=16, embed=8, layers=1, directions=4).fit(fed)
    assert m.protocol is None and m.protocol_ == default
    assert m.stopped_at_ == m.val_loss_steps_[-1] == default.steps and m.hit_max_
    e = m.estimate_
    assert e.config["protocol"] == default.to_json() and e.extra["training"]["max_steps"] == default.steps
    # the same settings given explicitly train the same hypernetwork
    same = SPO(protocol=default, search_steps=3, device="cpu", hidden=16, embed=8, layers=1, directions=4).fit(fed)
    assert same.history_ == m.history_ and same.estimate_.config == e.config


def test_the_protocol_sets_batch_and_patience():
    fed = load("synthetic", clients=3, flipped="2", samples=30, val=20, test=20, seed=1)
    kw = dict(search_steps=3, device="cpu", hidden=16, embed=8, layers=1, directions=4, seed=0)
    full = SPO(protocol=budget(100, None), **kw).fit(fed)
    small = SPO(protocol=budget(100, 4), **kw).fit(fed)
    assert full.history_ != small.history_           # the protocol's batch is the one trained with
    stopped = SPO(protocol=budget(2000, None, patience=1), lr=0.5, **kw).fit(fed)
    assert not stopped.hit_max_ and stopped.stopped_at_ < 2000
    assert stopped.estimate_.extra["training"]["patience"] == 1


def test_learn_builds_spos_protocol_from_the_training_flags(tmp_path, capsys):
    from coalitions.cli import main
    from coalitions.estimate import read_estimate

    out = tmp_path / "e.json"
    args = ["learn", "heart", "--method", "spo", "--steps", "5", "--batch-size", "16", "--search-steps", "2",
            "--hypernet-hidden", "8", "--embed", "4", "--layers", "1", "--directions", "4", "--lr", "0.02",
            "--device", "cpu", "-o", str(out)]
    assert main(args) == 0
    e = read_estimate(out)
    fed = load("heart")
    want = protocol_with(fed.task, tuple(fed.input_shape), {"steps": 5, "batch_size": 16})
    assert e.config["protocol"] == want.to_json() and e.extra["training"]["max_steps"] == 5
    assert e.config["lr"] == 0.02 == e.extra["training"]["lr"]     # --lr: the hypernetwork's own rate
    capsys.readouterr()
    assert main(args[:-2] + ["--optimizer", "sgd", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--optimizer does not apply to --method spo" in err[0] and "--steps" in err[0]
