"""The estimator contract every learner follows (coalitions/learners/methods/base.py)."""

import inspect

import numpy as np
import pytest
from learner_fixtures import blobs

from coalitions.estimate import build_estimate
from coalitions.learners.methods.base import Learner, PersonalizedLearner
from coalitions.learners.methods.registry import METHODS
from coalitions.learners.training.protocol import TrainingProtocol
from coalitions.oracles import StructuralOracle, WeightOracle
from coalitions.params import ParameterError
from coalitions.peeling import peel_oracle

CLASSES = {name: m.estimator_class() for name, m in METHODS.items()}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_parameters_are_named_in_the_signature_and_round_trip(name):
    cls = CLASSES[name]
    assert issubclass(cls, Learner) and cls.method == name
    params = inspect.signature(cls.__init__).parameters.values()
    assert all(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
    est = cls()
    got = est.get_params()
    assert tuple(got) == cls.param_names() == tuple(p.name for p in params if p.name != "self")
    assert {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self"} == got
    assert type(est)(**got).get_params() == got
    # every registered option is a parameter of the estimator
    assert {o.arg for o in METHODS[name].options} <= set(got)


def test_set_params_and_unknown_parameters():
    m = CLASSES["fedamp"]().set_params(alpha_k=0.1)
    assert m.alpha_k == 0.1
    with pytest.raises(ValueError, match="unknown parameter 'nope'"):
        m.set_params(nope=1)
    with pytest.raises(TypeError):
        CLASSES["fedamp"](nope=1)


def test_the_bases_are_abstract():
    with pytest.raises(TypeError):
        Learner()
    with pytest.raises(TypeError):
        PersonalizedLearner()


def test_the_constructor_never_validates_fit_does():
    m = CLASSES["local"](seed=-1, rule="magic")
    assert m.seed == -1
    with pytest.raises(ParameterError) as info:
        m.fit(blobs())
    assert info.value.param == "seed"


@pytest.mark.parametrize("name, oracle", [("local", StructuralOracle), ("fedavg", StructuralOracle),
                                          ("fedamp", WeightOracle), ("federico", WeightOracle)])
def test_fit_exposes_what_was_learned_and_the_estimate_is_built_from_it(name, oracle):
    fed = blobs(sizes=(6, 8, 7, 9))
    m = CLASSES[name](protocol=TrainingProtocol(steps=2), seed=1, device="cpu").fit(fed)
    assert isinstance(m.oracle_, oracle) and "_estimate" not in m.__dict__   # fit builds no estimate
    e = m.estimate_
    assert m.estimate_ is e                                                  # built once
    want = build_estimate(m.oracle_, method=m.method, config=m.estimate_config(), utilities=m.utilities_,
                          metric=fed.metric, sense=fed.sense, weights=m.weights_,
                          planted_groups=fed.planted_groups, extra=m.estimate_extra(peel_oracle(m.oracle_)))
    assert e.masks == want.masks and e.rounds == want.rounds
    assert e.benefit_graph.collaborators == want.benefit_graph.collaborators
    assert (e.weights is None) == (m.weights_ is None)
    if m.weights_ is not None:
        assert np.array_equal(e.weights, m.weights_)
    assert e.utilities == m.utilities_ and e.config["method"] == name


def test_refitting_forgets_the_old_estimate():
    fed = blobs(sizes=(6, 8, 7, 9))
    m = CLASSES["fedavg"](protocol=TrainingProtocol(steps=1), device="cpu").fit(fed)
    first = m.estimate_
    m.set_params(protocol=TrainingProtocol(steps=2)).fit(fed)
    assert m.estimate_ is not first and m.estimate_.config["protocol"]["steps"] == 2 and m.rounds_ == 2


def test_an_unfitted_learner_has_no_estimate():
    with pytest.raises(AttributeError, match="not fitted"):
        _ = CLASSES["local"]().estimate_
