"""scikit-learn's estimator conventions for every estimator of the learners, without importing scikit-learn.

:class:`EstimatorMixin` gives an estimator whose ``__init__`` stores each of its
explicitly named parameters under its own name (and does nothing else) the parameter
API of :class:`sklearn.base.BaseEstimator`, with the same semantics:

* :meth:`~EstimatorMixin.get_params` ``(deep=True)``: every constructor parameter and its
  value; with ``deep`` also each parameter's own parameters as ``name__sub``;
* :meth:`~EstimatorMixin.set_params`: changes parameters, ``name__sub`` keys included,
  refusing a name the constructor does not take; returns the estimator;
* ``repr``: the class and the parameters that differ from the constructor's defaults.

So ``sklearn.base.clone`` rebuilds an unfitted copy, and a parameter search can set
``protocol__lr``.  scikit-learn is an optional dependency of this package (the ``data``
extra), which is why the conventions are implemented here rather than inherited from it;
``tests/test_sklearn_conventions.py`` checks them against scikit-learn's own ``clone`` and
estimator checks.

A parameter has parameters of its own ("nested") when it has ``get_params`` (another
estimator, as in scikit-learn), or when it is a dataclass instance, as the
:class:`~coalitions.learners.training.protocol.TrainingProtocol` is: its fields are its
parameters.  ``set_params(protocol__lr=0.1)`` changes a nested estimator in place (through
its ``set_params``, as scikit-learn does) and replaces a dataclass with a copy
(:func:`dataclasses.replace`, validated like its constructor): a frozen protocol is shared
between the columns of a comparison and is never changed in place.

Examples
--------
>>> from coalitions.learners.training.protocol import TrainingProtocol
>>> class Toy(EstimatorMixin):
...     def __init__(self, alpha=1.0, protocol=None):
...         self.alpha, self.protocol = alpha, protocol
>>> toy = Toy(protocol=TrainingProtocol()).set_params(alpha=2.0, protocol__lr=0.1)
>>> toy.protocol.lr, toy.get_params()["protocol__lr"], repr(Toy(alpha=3))
(0.1, 0.1, 'Toy(alpha=3)')
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any, TypeVar, dataclass_transform

from coalitions.errors import InputError

__all__ = ["EstimatorMixin", "DeclaredEstimator"]

_Estimator = TypeVar("_Estimator", bound="EstimatorMixin")


def _sub_params(value: Any) -> dict[str, Any] | None:
    """The parameters of a parameter's value, or ``None`` when it has none (module docstring)."""
    if isinstance(value, type):
        return None
    if hasattr(value, "get_params"):
        return dict(value.get_params())
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
    return None


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _changed(value: Any, default: Any) -> bool:
    """Does ``value`` differ from the constructor's ``default`` (scikit-learn's test: by ``repr``, NaN equal to NaN)?"""
    if default is inspect.Parameter.empty:
        return True
    return repr(value) != repr(default) and not (_is_nan(value) and _is_nan(default))


class EstimatorMixin:
    """scikit-learn's parameter API and ``repr`` for an estimator configured in its constructor (module docstring).

    The subclass names every parameter in ``__init__`` (no ``*args`` or ``**kwargs``) and
    stores each, unchanged, under its own name; learned attributes end in ``_``.
    """

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        """The constructor's parameters, in order (read off ``__init__``'s signature).

        Raises
        ------
        TypeError
            ``__init__`` takes ``*args`` or ``**kwargs``.
        """
        if cls.__init__ is object.__init__:
            return ()
        params = inspect.signature(cls.__init__).parameters.values()
        bad = [p.name for p in params if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if bad:
            raise TypeError(f"{cls.__name__}.__init__ must name its parameters explicitly, not *{bad[0]}")
        return tuple(p.name for p in params if p.name != "self")

    def _store(self, values: dict) -> None:
        """Keep every constructor argument under its own name (``values``: the caller's ``locals()``)."""
        for name in self.param_names():
            setattr(self, name, values[name])

    def _owner(self) -> str:
        """How errors name this estimator: its method name where it has one, else its class."""
        return getattr(self, "method", "") or type(self).__name__

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Every constructor parameter and its current value.

        Parameters
        ----------
        deep : bool
            Also each nested parameter (module docstring) as ``name__sub``.

        Returns
        -------
        dict
            ``{name: value}``, the constructor's parameters first, in its order.
        """
        out = {name: getattr(self, name) for name in self.param_names()}
        if deep:
            for name, value in list(out.items()):
                for sub, v in (_sub_params(value) or {}).items():
                    out[f"{name}__{sub}"] = v
        return out

    def set_params(self: _Estimator, **params: Any) -> _Estimator:
        """Change parameters, ``name__sub`` keys included (module docstring); returns the estimator.

        Nothing is validated here but the names (values are checked by ``fit``).  The
        parameters named directly are set first, then the nested ones, on the new values.

        Raises
        ------
        coalitions.errors.InputError
            A name the constructor does not take, or ``name__sub`` where the value of
            ``name`` has no parameter ``sub`` (a :class:`ValueError`, as scikit-learn's).
        """
        names = self.param_names()
        nested: dict[str, dict[str, Any]] = {}
        for key, value in params.items():
            name, nest, sub = key.partition("__")
            if name not in names:
                raise InputError(f"{self._owner()}: unknown parameter {name!r} (its parameters: {', '.join(names)})")
            if nest:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
        for name, changes in nested.items():
            self._set_nested(name, changes)
        return self

    def _set_nested(self, name: str, changes: dict[str, Any]) -> None:
        """Apply ``name__sub`` changes to the value of parameter ``name`` (module docstring)."""
        value = getattr(self, name)
        subs = _sub_params(value)
        if subs is None:
            raise InputError(f"{self._owner()}: unknown parameter {name + '__' + next(iter(changes))!r}: {name} is "
                             f"{'None' if value is None else type(value).__name__}, which has no parameters of its own")
        if hasattr(value, "set_params"):
            value.set_params(**changes)
            return
        unknown = [k for k in changes if k not in subs]
        if unknown:
            raise InputError(f"{self._owner()}: unknown parameter {name + '__' + unknown[0]!r} "
                             f"({name}'s parameters: {', '.join(subs)})")
        setattr(self, name, dataclasses.replace(value, **changes))

    def __sklearn_tags__(self):
        """scikit-learn's tags (``sklearn.utils.get_tags``): an estimator that fits a federation, not ``(X, y)``.

        Only scikit-learn (>= 1.6) calls this, so it imports scikit-learn here, not at module level.
        """
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False),
                    input_tags=InputTags(two_d_array=False))

    def __repr__(self) -> str:
        defaults = {n: p.default for n, p in inspect.signature(type(self).__init__).parameters.items()}
        shown = [f"{k}={v!r}" for k, v in self.get_params(deep=False).items()
                 if _changed(v, defaults.get(k, inspect.Parameter.empty))]
        return f"{type(self).__name__}({', '.join(shown)})"


@dataclass_transform(eq_default=False)
class DeclaredEstimator(EstimatorMixin):
    """An estimator whose parameters are declared once, as the fields of a dataclass.

    A subclass lists its own parameters in its body as annotated class attributes with their
    defaults (``alpha: float = 1.0``) and writes no ``__init__``: the constructor is generated by
    ``dataclasses.dataclass`` (without ``__eq__`` and ``__repr__``: estimators compare by
    identity and print as :class:`EstimatorMixin` does).  It takes the inherited parameters
    first, the class's own after them, and the keyword-only ones (those after a
    ``dataclasses.KW_ONLY`` marker, anywhere in the hierarchy) last; it stores each under its
    own name and does nothing else.  So a base class declares the parameters every subclass
    shares, once, and each subclass only its own; type checkers read the same constructor
    (``typing.dataclass_transform``).

    What ``fit`` sets (names ending in ``_``) and class-level settings are not parameters: declare
    the first outside the class's body (a mixin of annotations) and the second unannotated or as
    ``typing.ClassVar``.

    Raises
    ------
    TypeError
        A subclass defines ``__init__`` (its parameters would be declared twice), or declares a
        parameter without a default after one with a default.

    Examples
    --------
    >>> import dataclasses
    >>> class Base(DeclaredEstimator):
    ...     _: dataclasses.KW_ONLY
    ...     seed: int = 0
    >>> class Toy(Base):
    ...     alpha: float = 1.0
    >>> Toy.param_names(), Toy(2.0, seed=3)
    (('alpha', 'seed'), Toy(alpha=2.0, seed=3))
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            raise TypeError(f"{cls.__name__} declares its parameters as annotated class attributes; it must not "
                            "define __init__ (DeclaredEstimator)")
        dataclasses.dataclass(cls, eq=False, repr=False)
