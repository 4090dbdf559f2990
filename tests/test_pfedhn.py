"""pFedHN (learners/methods/pfedhn.py): per-client models generated from embeddings, the server's direction."""

from __future__ import annotations

import torch
from learner_fixtures import blobs, sgd_protocol

from coalitions.learners.methods.base import unflatten
from coalitions.learners.methods.pfedhn import PFedHN, generate, hypernet_surrogate
from coalitions.learners.training.engine import Padded, flatten


def kw(rounds, sizes):
    """``rounds`` rounds of one epoch, batch 4, of an MLP on a federation of training sizes ``sizes``."""
    return dict(protocol=sgd_protocol(rounds, sizes, model="mlp", batch_size=4), seed=0, engine="batched")


def untrained(learner, fed):
    """``learner`` set up on ``fed`` at the state its first round starts from, and that state's utilities.

    What a fit of no rounds gave (a protocol trains one round at least).
    """
    dev = torch.device("cpu")
    learner.prepare(fed, dev)
    learner.train_data_ = Padded(fed, "train", dev)
    learner.finish(learner.init_state(fed, torch.Generator().manual_seed(int(learner.seed)), dev))
    learner.utilities_ = learner.client_utilities(fed, dev)
    return learner


def test_each_clients_model_is_the_hypernetwork_of_its_embedding():
    fed = blobs(sizes=(10, 13, 7, 12))
    m = PFedHN(**kw(4, (10, 13, 7, 12))).fit(fed)
    phi = m.hypernet_
    assert phi["emb"].shape == (fed.n, 8)
    for i in range(fed.n):
        h = torch.relu(phi["emb"][i] @ phi["w1"] + phi["b1"])
        h = torch.relu(h @ phi["w2"] + phi["b2"])
        want = unflatten((h @ phi["wo"] + phi["bo"])[None], {k: v[:1] for k, v in m.params_.items()})
        assert all(torch.allclose(m.params_[k][i], want[k][0], atol=1e-5) for k in want)
    flat = flatten(m.params_)
    assert not torch.allclose(flat[0], flat[1], atol=1e-4)           # personalised: one model per client
    # swapping two embeddings swaps the two clients' models
    swapped = dict(phi, emb=phi["emb"][[1, 0, 2, 3]])
    g = generate(swapped)
    assert torch.allclose(g[0], generate(phi)[1]) and torch.allclose(g[1], generate(phi)[0])
    assert m.estimate_.blocks() == [list(fed.names)] and m.estimate_.weights is None


def test_server_direction_is_the_jacobian_transpose_of_the_clients_updates():
    gen = torch.Generator().manual_seed(0)
    phi = {"emb": torch.randn(3, 2, generator=gen, dtype=torch.float64),
           "w1": torch.randn(2, 4, generator=gen, dtype=torch.float64), "b1": torch.zeros(4, dtype=torch.float64),
           "w2": torch.randn(4, 4, generator=gen, dtype=torch.float64), "b2": torch.zeros(4, dtype=torch.float64),
           "wo": torch.randn(4, 5, generator=gen, dtype=torch.float64), "bo": torch.zeros(5, dtype=torch.float64)}
    delta = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    delta[2] = 0.0                                                    # client 2 did not move
    live = {k: v.clone().requires_grad_(True) for k, v in phi.items()}
    hypernet_surrogate(live, delta).backward()
    # embeddings: (∂θ_k/∂v_k)ᵀ Δθ_k / N, and zero for the client whose update is zero
    for k in range(3):
        J = torch.autograd.functional.jacobian(lambda v, k=k: generate(dict(phi, emb=torch.cat(
            [phi["emb"][:k], v[None], phi["emb"][k + 1:]])))[k], phi["emb"][k])
        assert torch.allclose(live["emb"].grad[k], J.T @ delta[k] / 3)
    assert torch.equal(live["emb"].grad[2], torch.zeros(2, dtype=torch.float64))
    # the output bias collects the mean update
    assert torch.allclose(live["bo"].grad, delta.sum(0) / 3)


def test_training_moves_the_embeddings_and_fits_the_clients():
    sizes = (20, 24, 18, 22)
    fed = blobs(sizes=sizes, separation=4.0)
    start = untrained(PFedHN(**kw(15, sizes)), fed)
    m = PFedHN(**kw(15, sizes)).fit(fed)
    assert m.rounds_ == 15
    assert not torch.allclose(m.hypernet_["emb"], start.hypernet_["emb"])
    before = sum(start.utilities_["val"].values())
    after = sum(m.utilities_["val"].values())
    assert after > before


def test_the_inner_loop_starts_afresh_every_round_with_the_schedule_running_on():
    """pFedHN's local descent estimates Δθ at the freshly generated θ_k: no optimiser state carried over."""
    from coalitions.learners.training.protocol import TrainingProtocol

    fed = blobs()
    p = TrainingProtocol(model="mlp", hidden=4, steps=4, lr=0.01)
    m = PFedHN(protocol=p, device="cpu", seed=0).fit(fed)
    assert "site_opt" not in m.state_                       # nothing kept from the round's inner loop
    fresh = m._fresh_inner_state({k: v[:1] for k, v in m.params_.items()}, 3)["site_opt"]
    assert int(fresh["schedule_step"]) == 3 * m.steps_per_round_ and float(fresh["m"]["w1"].abs().sum()) == 0.0
