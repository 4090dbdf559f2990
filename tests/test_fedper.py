"""FedPer and LG-FedAvg (learners/methods/fedper.py): personal parts stay personal, shared parts are weighted averages."""

from __future__ import annotations

import pytest
import torch
from learner_fixtures import blobs, sgd_protocol

from coalitions.learners.methods.baselines import FedAvg, Local, weighted_average
from coalitions.learners.methods.fedper import FedPer, LGFedAvg
from coalitions.learners.training.engine import flatten


def kw(rounds, sizes, model="mlp"):
    """``rounds`` rounds of one epoch, batch 4, on a federation of training sizes ``sizes``."""
    return dict(protocol=sgd_protocol(rounds, sizes, model=model, batch_size=4), seed=0, engine="batched")


@pytest.mark.parametrize("cls, shared, personal", [(FedPer, ("w1", "b1"), ("w2", "b2")),
                                                   (LGFedAvg, ("w2", "b2"), ("w1", "b1"))])
def test_one_round_averages_the_shared_part_by_size_and_keeps_the_personal_part(cls, shared, personal):
    sizes = (4, 16, 9, 12)
    fed = blobs(sizes=sizes)
    m = cls(**kw(1, sizes)).fit(fed)
    assert m.shared_ == shared and m.rounds_ == 1
    # a first round trains every client from the common start exactly as Local's first round does
    alone = Local(**kw(1, sizes)).fit(fed).params_
    sizes = [len(c.train) for c in fed.clients]
    for k in shared:
        want = weighted_average({k: alone[k]}, sizes)[k][0]
        assert all(torch.allclose(m.params_[k][i], want, atol=1e-6) for i in range(fed.n))
        unweighted = alone[k].mean(0)
        assert not torch.allclose(m.params_[k][0], unweighted, atol=1e-4)
    for k in personal:
        assert torch.equal(m.params_[k], alone[k])


@pytest.mark.parametrize("cls, personal", [(FedPer, ("w2", "b2")), (LGFedAvg, ("w1", "b1"))])
def test_personal_parts_are_never_averaged(cls, personal):
    sizes = (10, 13, 7, 12)
    fed = blobs(sizes=sizes)
    m = cls(**kw(3, sizes)).fit(fed)
    for k in m.params_:
        same = all(torch.equal(m.params_[k][i], m.params_[k][0]) for i in range(fed.n))
        assert same == (k not in personal)
    # changing one client's data changes its personal part, and through the shared part everyone
    other = blobs(sizes=(10, 13, 7, 12), seed=5)
    mixed = type(fed)(fed.name, fed.task, fed.metric, fed.clients[:3] + other.clients[3:], fed.n_classes,
                      fed.planted_groups, fed.options)
    b = cls(**kw(3, sizes)).fit(mixed)
    assert not torch.allclose(flatten(m.params_)[0], flatten(b.params_)[0])
    assert m.estimate_.blocks() == [list(fed.names)] and m.estimate_.weights is None


def test_affine_models_have_no_body_fedper_is_local_and_lg_is_fedavg():
    fed = blobs(sizes=(10, 13, 7))
    two = kw(2, (10, 13, 7), model="logistic")
    assert torch.allclose(flatten(FedPer(**two).fit(fed).params_), flatten(Local(**two).fit(fed).params_))
    assert torch.allclose(flatten(LGFedAvg(**two).fit(fed).params_), flatten(FedAvg(**two).fit(fed).params_),
                          atol=1e-6)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_fedper_on_all_clients_is_the_exact_grand_coalition_with_personal_heads(momentum):
    """Issue 18 item 5: one full-batch SGD step per round, the same protocol and seed.

    The average of the sites' body steps is the pooled step and each head takes its own client's
    step, which is how the exact personal-head game trains a subset (learners/game/personal.py);
    with momentum the average of the sites' buffers is the pooled buffer.  Adam's per-site moments
    are not the pooled gradient's: there the two differ (checked too, so the test can tell).
    """
    import numpy as np

    from coalitions.learners.data.datasets import load
    from coalitions.learners.exact import ExhaustiveOracle
    from coalitions.learners.training.protocol import TrainingProtocol

    fed = load("digits", seed=0, clients=3, samples=40)
    full = (1 << fed.n) - 1

    def both(p):
        o = ExhaustiveOracle(protocol=p, heads="personal", seed=2, device="cpu", loss_game=True).fit(fed)
        f = FedPer(protocol=p, seed=2, device="cpu", engine="batched").fit(fed)
        return o.loss_game_.raw_values()[:, full], np.array(f.val_loss_clients_[-1]), o, f

    p = TrainingProtocol(model="mlp", hidden=8, optimizer="sgd", momentum=momentum, lr=0.05, batch_size=None,
                         steps=25, weight_decay=1e-3)
    exact, fedper, o, f = both(p)
    np.testing.assert_allclose(fedper, exact, rtol=1e-5)
    assert [f.utilities_["val"][n] for n in fed.names] == list(o.values_val_[:, full])
    if momentum == 0.0:
        exact, fedper, _, _ = both(p.with_(optimizer="adam"))
        assert np.max(np.abs(fedper - exact)) > 1e-3
