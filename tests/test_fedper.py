"""FedPer and LG-FedAvg (learners/methods/fedper.py): personal parts stay personal, shared parts are weighted averages."""

from __future__ import annotations

import pytest
import torch
from learner_fixtures import blobs

from coalitions.learners.methods.baselines import FedAvg, Local, weighted_average
from coalitions.learners.methods.fedper import FedPer, LGFedAvg
from coalitions.learners.training.engine import flatten

KW = dict(model="mlp", batch_size=4, seed=0, engine="batched")


@pytest.mark.parametrize("cls, shared, personal", [(FedPer, ("w1", "b1"), ("w2", "b2")),
                                                   (LGFedAvg, ("w2", "b2"), ("w1", "b1"))])
def test_one_round_averages_the_shared_part_by_size_and_keeps_the_personal_part(cls, shared, personal):
    fed = blobs(sizes=(4, 16, 9, 12))
    m = cls(rounds=1, **KW).fit(fed)
    assert m.shared_ == shared
    # a first round trains every client from the common start exactly as Local's first round does
    alone = Local(rounds=1, **KW).fit(fed).params_
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
    fed = blobs(sizes=(10, 13, 7, 12))
    m = cls(rounds=3, **KW).fit(fed)
    for k in m.params_:
        same = all(torch.equal(m.params_[k][i], m.params_[k][0]) for i in range(fed.n))
        assert same == (k not in personal)
    # changing one client's data changes its personal part, and through the shared part everyone
    other = blobs(sizes=(10, 13, 7, 12), seed=5)
    mixed = type(fed)(fed.name, fed.task, fed.metric, fed.clients[:3] + other.clients[3:], fed.n_classes,
                      fed.planted_groups, fed.options)
    b = cls(rounds=3, **KW).fit(mixed)
    assert not torch.allclose(flatten(m.params_)[0], flatten(b.params_)[0])
    assert m.estimate_.blocks() == [list(fed.names)] and m.estimate_.weights is None


def test_affine_models_have_no_body_fedper_is_local_and_lg_is_fedavg():
    fed = blobs(sizes=(10, 13, 7))
    kw = dict(KW, model="logistic", rounds=2)
    assert torch.allclose(flatten(FedPer(**kw).fit(fed).params_), flatten(Local(**kw).fit(fed).params_))
    assert torch.allclose(flatten(LGFedAvg(**kw).fit(fed).params_), flatten(FedAvg(**kw).fit(fed).params_),
                          atol=1e-6)
