"""scikit-learn's estimator conventions hold for every estimator (learners/estimator.py, issue 32 item 6).

Every estimator: the seventeen registered learners and SPO (:data:`METHODS`), SPO's Flower twin
:class:`FederatedSPO` (not fitted here: it fits through Flower), and :class:`ExhaustiveOracle`.

Which of scikit-learn's checks apply, and why the others do not
---------------------------------------------------------------
These estimators fit a :class:`~coalitions.learners.data.federation.Federation` (clients, each
with train, validation and test splits), not ``(X, y)`` arrays, and they neither predict nor
transform: they expose a benefit oracle, utilities and an estimate.  So
``sklearn.utils.estimator_checks.check_estimator`` as a whole cannot run; it stops at the first
check that calls ``fit(X, y)``.

Run as they are, unchanged (:data:`API_CHECKS`; they never call ``fit``):
``check_estimator_cloneable``, ``check_estimator_repr``, ``check_get_params_invariance``,
``check_set_params``, ``check_parameters_default_constructible``,
``check_no_attributes_set_in_init``, ``check_do_not_raise_errors_in_init_or_set_params``,
``check_estimator_tags_renamed``, ``check_valid_tag_types`` and ``check_mixin_order`` (the
last trivially: no scikit-learn mixin), each on a default estimator and on one with a
protocol (a nested parameter) and a seed.

Adapted to a federation (the same assertions, on a tiny federation instead of random arrays):
``check_estimators_fit_returns_self``, ``check_estimators_overwrite_params`` (no parameter
changes in value, by ``joblib.hash``, during ``fit``), ``check_dont_overwrite_parameters``
(``fit`` adds no public attribute that does not end in ``_`` and rebinds none),
``check_fit_check_is_fitted`` (``sklearn.utils.validation.check_is_fitted`` raises before
``fit``, not after), and a clone round trip: ``clone`` of a fitted estimator is unfitted, has
the same parameters, and fits to the same numbers.

Do not apply: every check that feeds ``(X, y)``, about input validation (dtypes, NaN/inf,
sparse input, empty data, complex data, 1-d/2-d shapes, read-only memmaps, pandas),
``n_features_in_``/``feature_names_in_``, sample weights, ``predict``/``transform``/``score``
and their consistency (pipelines, ``fit_score_takes_y``, ``fit2d_predict1d``,
``estimators_unfitted``' calls to ``predict``), classifier/regressor/cluster behaviour and
multi-output: a federation is neither an array nor a data frame, and these estimators have no
prediction method.  Pickling is not part of the contract tested here.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import KW_ONLY, is_dataclass
from typing import ClassVar

import numpy as np
import pytest
from learner_fixtures import blobs

from coalitions.errors import InputError
from coalitions.learners.estimator import DeclaredEstimator, EstimatorMixin
from coalitions.learners.exact import ExhaustiveOracle
from coalitions.learners.federated.spo import FederatedSPO
from coalitions.learners.methods.base import COMMON_PARAMS, PersonalizedLearner
from coalitions.learners.methods.fedamp import FedAMP
from coalitions.learners.methods.registry import METHODS
from coalitions.learners.methods.spo import SPO
from coalitions.learners.training.protocol import TrainingProtocol

CLASSES = {**{name: m.estimator_class() for name, m in METHODS.items()}, "exhaustive": ExhaustiveOracle,
           "federated-spo": FederatedSPO}
#: What each fitted estimator is fitted with: a tiny budget, on the CPU.
FIT = {"spo": dict(protocol=TrainingProtocol(steps=4), hidden=8, embed=4, layers=1, directions=4, search_steps=2,
                   starts=2, line_search=2, device="cpu", seed=1),
       "exhaustive": dict(protocol=TrainingProtocol(steps=2), device="cpu", seed=1)}
FITTED = sorted(n for n in CLASSES if n != "federated-spo")
API_CHECKS = ("check_estimator_cloneable", "check_estimator_repr", "check_get_params_invariance", "check_set_params",
              "check_parameters_default_constructible", "check_no_attributes_set_in_init",
              "check_do_not_raise_errors_in_init_or_set_params", "check_estimator_tags_renamed",
              "check_valid_tag_types", "check_mixin_order")


def _fit_params(name: str) -> dict:
    return FIT.get(name, dict(protocol=TrainingProtocol(steps=2), device="cpu", seed=1))


def _numbers(est) -> list:
    """What a fit produced, to compare two fits: the game's values, or the utilities and weights."""
    if isinstance(est, ExhaustiveOracle):
        return [est.values_val_, est.values_test_]
    return [est.utilities_, est.weights_]


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b, equal_nan=True)
    return a == b


@pytest.fixture(scope="module")
def fed():
    return blobs(sizes=(6, 8, 7, 9))


# --------------------------------------------------------------------------- one implementation
@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_estimator_takes_the_conventions_from_the_one_mixin(name):
    cls = CLASSES[name]
    assert issubclass(cls, EstimatorMixin)
    before = cls.__mro__[:cls.__mro__.index(EstimatorMixin)]
    for attr in ("param_names", "get_params", "set_params", "__repr__", "__sklearn_tags__"):
        assert [k.__name__ for k in before if attr in vars(k)] == [], f"{cls.__name__} overrides {attr}"


# --------------------------------------------------------------------------- scikit-learn's own checks
@pytest.mark.parametrize("check", API_CHECKS)
@pytest.mark.parametrize("name", sorted(CLASSES))
def test_scikit_learns_api_checks_pass(name, check):
    checks = pytest.importorskip("sklearn.utils.estimator_checks")
    cls = CLASSES[name]
    for est in (cls(), cls(protocol=TrainingProtocol(lr=0.2, lr_grid=(0.1, 0.2)), seed=3)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # check_set_params warns when set_params validates: ours never does
            getattr(checks, check)(cls.__name__, est)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_clone_copies_the_parameters_nested_ones_included(name):
    base = pytest.importorskip("sklearn.base")
    protocol = TrainingProtocol(lr=0.2, lr_grid=(0.1, 0.2))
    est = CLASSES[name](protocol=protocol, seed=3)
    copy = base.clone(est)
    assert type(copy) is type(est) and copy is not est
    assert copy.get_params() == est.get_params() and copy.get_params()["protocol__lr"] == 0.2
    assert copy.protocol == protocol and copy.protocol is not protocol   # a deep copy, as scikit-learn makes


def test_the_issues_example_clones():
    base = pytest.importorskip("sklearn.base")
    assert repr(base.clone(FedAMP())) == "FedAMP()"
    assert repr(base.clone(ExhaustiveOracle(heads="personal"))) == "ExhaustiveOracle(heads='personal')"


def test_a_parameter_grid_sets_the_protocols_rate_through_the_nested_key():
    pytest.importorskip("sklearn")
    from sklearn.base import clone
    from sklearn.model_selection import ParameterGrid

    shared = TrainingProtocol(steps=2)
    est = SPO(protocol=shared)
    got = [clone(est).set_params(**p) for p in ParameterGrid({"protocol__lr": [0.01, 0.1], "hidden": [8]})]
    assert [(e.protocol.lr, e.hidden) for e in got] == [(0.01, 8), (0.1, 8)]
    assert est.protocol is shared and shared.lr == TrainingProtocol().lr


# --------------------------------------------------------------------------- adapted to a federation
@pytest.mark.parametrize("name", FITTED)
def test_fit_returns_self_keeps_its_parameters_and_adds_only_learned_attributes(name, fed):
    joblib = pytest.importorskip("joblib")
    validation = pytest.importorskip("sklearn.utils.validation")
    est = CLASSES[name](**_fit_params(name))
    with pytest.raises(validation.NotFittedError):
        validation.check_is_fitted(est)
    params = est.get_params()
    hashes = {k: joblib.hash(v) for k, v in params.items()}
    before = dict(vars(est))
    assert est.fit(fed) is est                                            # check_estimators_fit_returns_self
    validation.check_is_fitted(est)                                       # check_fit_check_is_fitted
    after = est.get_params()
    assert set(after) == set(params)                                      # check_estimators_overwrite_params
    assert {k: joblib.hash(v) for k, v in after.items()} == hashes
    public = [k for k in vars(est) if not k.startswith("_")]              # check_dont_overwrite_parameters
    assert [k for k in public if k not in before and not k.endswith("_")] == []
    assert [k for k in public if k in before and vars(est)[k] is not before[k]] == []


@pytest.mark.parametrize("name", FITTED)
def test_a_clone_of_a_fitted_estimator_is_unfitted_and_fits_to_the_same_numbers(name, fed):
    base = pytest.importorskip("sklearn.base")
    est = CLASSES[name](**_fit_params(name)).fit(fed)
    copy = base.clone(est)
    assert [k for k in vars(copy) if k.endswith("_")] == []
    assert copy.get_params(deep=False).keys() == est.get_params(deep=False).keys()
    assert all(copy.get_params()[k] == v for k, v in est.get_params().items())
    for a, b in zip(_numbers(copy.fit(fed)), _numbers(est), strict=True):
        assert _same(a, b)


def test_what_a_learner_records_has_no_nested_keys(fed):
    """The estimate's config and the checkpoint's fingerprint read the shallow parameters: the numbers stay."""
    est = FedAMP(protocol=TrainingProtocol(steps=2), device="cpu").fit(fed)
    assert "protocol__lr" in est.get_params()
    assert not any("__" in k for k in est.config()) and not any("__" in k for k in est.estimate_.config)


# --------------------------------------------------------------------------- the semantics, without scikit-learn
def test_get_params_deep_adds_the_protocols_fields_and_shallow_does_not():
    protocol = TrainingProtocol(lr=0.2)
    est = FedAMP(protocol=protocol)
    shallow, deep = est.get_params(deep=False), est.get_params()
    assert tuple(shallow) == FedAMP.param_names() and shallow["protocol"] is protocol
    assert {k: v for k, v in deep.items() if "__" in k} == {f"protocol__{k}": v for k, v in vars(protocol).items()}
    assert FedAMP().get_params() == FedAMP().get_params(deep=False)     # no protocol, nothing nested


def test_set_params_replaces_a_shared_protocol_by_a_validated_copy():
    shared = TrainingProtocol(steps=3)
    a, b = FedAMP(protocol=shared), FedAMP(protocol=shared)
    assert a.set_params(protocol__lr=0.3, protocol__steps=7, alpha_k=0.1) is a
    assert (a.protocol.lr, a.protocol.steps, a.alpha_k) == (0.3, 7, 0.1)
    assert b.protocol is shared and shared.steps == 3
    with pytest.raises(ValueError, match="steps"):
        a.set_params(protocol__steps=0)
    # the parameters named directly first, then the nested ones on the new values
    a.set_params(protocol__lr=0.5, protocol=TrainingProtocol(steps=9))
    assert (a.protocol.lr, a.protocol.steps) == (0.5, 9)


def test_set_params_changes_a_nested_estimator_in_place():
    class Meta(EstimatorMixin):
        """A meta-estimator holding a learner, as a scikit-learn pipeline would."""

        def __init__(self, learner=None, k=1):
            self.learner, self.k = learner, k

    inner = FedAMP()
    meta = Meta(learner=inner).set_params(learner__alpha_k=0.1, learner__protocol=TrainingProtocol(steps=2))
    assert meta.learner is inner and inner.alpha_k == 0.1
    assert meta.get_params()["learner__protocol__steps"] == 2
    assert repr(meta) == f"Meta(learner={inner!r})"


@pytest.mark.parametrize("key, message", [
    ("nope", "unknown parameter 'nope'"),
    ("nope__x", "unknown parameter 'nope'"),
    ("protocol__nope", "unknown parameter 'protocol__nope'"),
])
def test_set_params_refuses_a_name_the_estimator_does_not_take(key, message):
    est = FedAMP(protocol=TrainingProtocol())
    with pytest.raises(InputError, match=message):
        est.set_params(**{key: 1})
    assert isinstance(InputError(""), ValueError)   # scikit-learn raises ValueError
    with pytest.raises(InputError, match="protocol is None, which has no parameters"):
        FedAMP().set_params(protocol__lr=0.1)
    with pytest.raises(InputError, match="ExhaustiveOracle: unknown parameter 'nope'"):
        ExhaustiveOracle().set_params(nope=1)


@pytest.mark.parametrize("est, want", [
    (FedAMP(), "FedAMP()"),
    (FedAMP(alpha_k=0.1, seed=2), "FedAMP(alpha_k=0.1, seed=2)"),
    (FedAMP(threshold=float("nan")), "FedAMP(threshold=nan)"),
    (SPO(hidden=8), "SPO(hidden=8)"),
    (ExhaustiveOracle(TrainingProtocol(steps=2), dtype="float64"),
     f"ExhaustiveOracle(protocol={TrainingProtocol(steps=2)!r}, dtype='float64')"),
])
def test_the_repr_shows_the_parameters_changed_from_their_defaults(est, want):
    assert repr(est) == want


def test_param_names_refuses_a_constructor_without_named_parameters():
    class Loose(EstimatorMixin):
        """Takes ``**kwargs``."""

        def __init__(self, **kwargs):
            pass

    class Bare(EstimatorMixin):
        """No constructor of its own."""

    with pytest.raises(TypeError, match="explicitly"):
        Loose.param_names()
    assert Bare().get_params() == {} and repr(Bare()) == "Bare()"
    assert inspect.signature(EstimatorMixin.get_params).parameters["deep"].default is True


PERSONAL = {name: cls for name, cls in CLASSES.items() if issubclass(cls, PersonalizedLearner)}


@pytest.mark.parametrize("name", sorted(PERSONAL))
def test_a_personalised_learner_declares_only_its_own_parameters_and_takes_the_common_ones_last(name):
    cls = PERSONAL[name]
    params = inspect.signature(cls.__init__).parameters
    names = [p for p in params if p != "self"]
    own, common = names[:len(names) - len(COMMON_PARAMS)], names[len(names) - len(COMMON_PARAMS):]
    assert tuple(common) == COMMON_PARAMS
    assert all(params[p].kind is inspect.Parameter.KEYWORD_ONLY for p in common)
    assert all(params[p].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in own)
    assert is_dataclass(cls)   # its constructor is generated from the declared fields
    # each common parameter has the one default PersonalizedLearner declares, and nothing fit() sets is one
    base = inspect.signature(PersonalizedLearner.__init__).parameters
    assert all(params[p].default == base[p].default for p in common)
    assert not any(p.endswith("_") or p.startswith("_") for p in names)


def test_a_declared_estimator_refuses_an_init_of_its_own_and_a_required_parameter_after_a_default():
    class Base(DeclaredEstimator):
        """Common keyword-only parameters."""

        _: KW_ONLY
        seed: int = 0

    class Toy(Base):
        """One parameter of its own."""

        alpha: float = 1.0
        method: ClassVar[str] = "toy"   # a class-level setting, not a parameter

    toy = Toy(2.0, seed=3)
    assert Toy.param_names() == ("alpha", "seed") and toy.get_params() == {"alpha": 2.0, "seed": 3}
    assert repr(toy) == "Toy(alpha=2.0, seed=3)" and toy != Toy(2.0, seed=3)   # identity, as an estimator
    with pytest.raises(TypeError, match="must not define __init__"):
        class Explicit(Base):
            """Declares its parameters twice."""

            def __init__(self, alpha=1.0, *, seed=0):
                self.alpha, self.seed = alpha, seed
    with pytest.raises(TypeError, match="non-default argument"):
        class Required(Toy):
            """A parameter without a default after one with a default."""

            beta: float
