"""Learned graphs that can say both "alone" and "together" (docs/concepts.md §5).

Every weight-based learner at its default rule: a federation whose clients are
best alone (synthetic, 1000 samples each, ρ = 1) gives no edge; the planted
groups of synthetic at ρ = 0.01 (labels of clients 3, 4, 5 negated) are read
back exactly.  Plus the defects of the former rules, on hand-made models.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learner_fixtures import sgd_protocol

from coalitions.learners.data.datasets import load
from coalitions.learners.methods.fedamp import FedAMP, FedAMPHeuristic, affinity_heuristic, affinity_plain
from coalitions.learners.methods.federico import FedeRiCo
from coalitions.oracles import WeightOracle

ALL = 0b111111
#: small, fast settings: 20 rounds; full batch, 5 local steps a round for FedAMP (SGD 0.1, momentum 0.9);
#: FedeRiCo at Adam 0.05, an epoch of batches of 100 a round; each takes the federation it will fit
AMP = sgd_protocol(20, batch_size=None, local_epochs=5)
LEARNERS = {
    "fedamp": lambda fed: FedAMP(protocol=AMP, seed=0, engine="batched"),
    "fedamp-heuristic": lambda fed: FedAMPHeuristic(protocol=AMP, seed=0, engine="batched"),
    "federico": lambda fed: FedeRiCo(protocol=sgd_protocol(20, fed.sizes("train"), batch_size=100, optimizer="adam",
                                                           lr=0.05), seed=0, engine="batched"),
}


@pytest.fixture(scope="module")
def alone():
    return load("synthetic", samples=1000, rho=1.0, val=100, test=100, seed=0)


@pytest.fixture(scope="module")
def groups():
    return load("synthetic", samples=100, rho=0.01, val=100, test=100, seed=0)


#: FedeRiCo on clients best alone draws one spurious pair under either likelihood (the mean: 3-4; the sum, whose
#: posterior is one-hot within a round: 1-2): each client starts from its own model, and a client whose posterior
#: leans on another's early keeps training it.  Kept visible as a known behaviour: strict, so that a change to it
#: shows here.  (With identical starting models, as before, every model stayed identical and the posterior uniform.)
ALONE = [*(n for n in LEARNERS if n != "federico"),
         pytest.param("federico", marks=pytest.mark.xfail(strict=True, reason="the mean posterior links 3 and 4")),
         pytest.param("federico-sum", marks=pytest.mark.xfail(strict=True, reason="the sum posterior links 1 and 2"))]


@pytest.mark.parametrize("name", ALONE)
def test_clients_best_alone_get_no_edge(name, alone):
    make = LEARNERS.get(name) or (lambda fed: LEARNERS["federico"](fed).set_params(likelihood="sum"))
    m = make(alone).fit(alone)
    assert m.estimate_.benefit_graph.edges == ()
    assert m.estimate_.blocks() == [[c] for c in alone.names]


@pytest.mark.parametrize("name", LEARNERS)
def test_planted_groups_are_read_back(name, groups):
    m = LEARNERS[name](groups).fit(groups)
    assert sorted(m.estimate_.blocks()) == [["0", "1", "2"], ["3", "4", "5"]]
    bg = m.estimate_.benefit_graph
    assert len(bg.edges) == 12  # every ordered pair inside each group, none across


def test_plain_fedamp_links_below_twenty_clients():
    """ξ_ij ≤ α_k/σ = 0.05 < 0.7·ξ_ii: the relative rule on ξ never links 3 clients; the affinity does."""
    W = torch.tensor([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0]])
    aff = affinity_plain(W, 10.0)
    assert WeightOracle("abc", aff).benefit_graph(0b111).edges == ((0, 1), (1, 0))
    xi = FedAMP(sigma=10.0)._attention(W)  # the attention itself, at the defaults
    assert WeightOracle("abc", xi.numpy()).benefit_graph(0b111).edges == ()


def test_heuristic_two_opposite_clients_are_not_linked():
    W = torch.tensor([[1.0, 2.0, -1.0], [-1.0, -2.0, 1.0]])
    aff = affinity_heuristic(W, 200.0)
    assert WeightOracle("ab", aff).benefit_graph(0b11).edges == ()
    xi = FedAMPHeuristic(sigma=200.0)._attention(W).numpy()  # ξ_12 = 1 − ξ_ii whatever the models
    assert WeightOracle("ab", xi).benefit_graph(0b11).edges == ((0, 1), (1, 0))
    same = affinity_heuristic(torch.tensor([[1.0, 2.0], [1.0, 2.0]]), 200.0)
    assert WeightOracle("ab", same).benefit_graph(0b11).edges == ((0, 1), (1, 0))


def test_affinity_is_the_kernel_relative_to_an_identical_peer():
    rng = np.random.default_rng(0)
    W = torch.as_tensor(rng.normal(size=(5, 4)))
    d2 = ((W[:, None] - W[None]) ** 2).sum(-1).numpy()
    a = affinity_plain(W, 3.0)
    assert np.allclose(a.sum(axis=1), 1)
    assert np.allclose(a / np.diag(a)[:, None], np.exp(-d2 / 3.0))
    U = (W / W.norm(dim=1, keepdim=True)).numpy()
    h = affinity_heuristic(W, 7.0)
    assert np.allclose(h / np.diag(h)[:, None], np.exp(7.0 * (U @ U.T - 1)))


def test_federico_default_rule_ignores_vanishing_weights():
    """The former "mass" rule took any positive off-diagonal weight (1e-265 counts)."""
    w = np.array([[1 - 1e-265, 1e-265], [0.0, 1.0]])
    assert WeightOracle("ab", w, rule="mass").benefit_graph(0b11).edges == ((1, 0),)
    assert FedeRiCo().rule == "relative"
    assert WeightOracle("ab", w, rule=FedeRiCo().rule).benefit_graph(0b11).edges == ()


@pytest.mark.parametrize("name", LEARNERS)
def test_the_estimate_says_what_the_rule_read(name, groups):
    m = LEARNERS[name](groups)
    m.set_params(protocol=m.protocol.with_(steps=m.protocol.steps // 10)).fit(groups)   # two rounds
    e = m.estimate_
    assert e.config["restricted"] == "renormalise" and e.config["restriction_is_noop"] is True
    if name.startswith("fedamp"):
        assert e.config["graph"] == "affinity"
        assert np.allclose(e.extra["rule_weights"], m.affinity_)
        assert np.allclose(e.weights, m.weights_)  # the estimate's weights stay ξ
    else:
        assert e.config["graph"] == "weights" and "rule_weights" not in e.extra


def test_the_uniform_rule_runs_in_a_learner_and_the_estimate_says_restriction_matters(groups):
    m = FedAMPHeuristic(protocol=AMP, seed=0, engine="batched", rule="uniform").fit(groups)
    e = m.estimate_
    assert e.config["restriction_is_noop"] is False and e.config["threshold_used"] == 1.5
    assert sorted(e.blocks()) == [["0", "1", "2"], ["3", "4", "5"]]  # 1/3 each within a group ≥ 1.5/6
