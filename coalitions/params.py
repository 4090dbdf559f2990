"""Checking a constructor's parameters: one helper, errors that name the parameter.

Every estimator of the toolkit (the learners, the exhaustive oracle, the weight oracle)
validates its settings with :func:`check_param`.  A value outside its domain raises
:class:`ParameterError`, an :class:`~coalitions.errors.InputError` that names the
*parameter* (``batch_size``), not a command-line flag: the library does not know how a
caller spells it.  The command line translates it with :meth:`ParameterError.phrase`
into the flag the user typed (``--client-batch``).

Examples
--------
>>> check_param("lr", 0.1, "number", low=0, low_open=True)
>>> try:
...     check_param("batch_size", 0, "int", low=1)
... except ParameterError as e:
...     print(e); print(e.phrase("--client-batch"))
batch_size must be an integer >= 1, got 0
--client-batch must be an integer >= 1, got 0
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from coalitions.errors import InputError

__all__ = ["ParameterError", "check_param", "KINDS", "MAX_STEPS"]

#: What :func:`check_param` can check.
KINDS = ("int", "number", "bool", "choice", "callable")

#: The largest step count (a training budget, a round length, a patience) any parameter takes: a billion.
#: Beyond it a run is refused before anything is read or trained (at this project's 10^2–10^4 steps a second it
#: would take days to years; ``--steps 1e20`` printed an ETA of 10^14 hours instead of an error).
MAX_STEPS = 10**9


class ParameterError(InputError):
    """A parameter outside its domain.

    Attributes
    ----------
    param : str
        The parameter's name in the library (a constructor keyword).
    template : str
        The message with ``{name}`` where the parameter's name goes.
    """

    def __init__(self, param: str, template: str):
        self.param = param
        self.template = template
        super().__init__(self.phrase(param))

    def phrase(self, name: str) -> str:
        """The message with ``name`` (e.g. a command-line flag) in place of the parameter."""
        return self.template.format(name=name)


def _g(x) -> str:
    return f"{x:g}" if isinstance(x, (int, float, np.integer, np.floating)) else str(x)


def _requirement(kind: str, low, high, low_open: bool, high_open: bool, choices: Sequence) -> str:
    if kind == "choice":
        return "one of " + ", ".join(str(c) for c in choices)
    if kind == "bool":
        return "true or false"
    if kind == "callable":
        return "callable"
    what = "an integer" if kind == "int" else "a number"
    if low is not None and high is not None:
        return f"{what} in {'(' if low_open else '['}{_g(low)}, {_g(high)}{')' if high_open else ']'}"
    if low is not None:
        return f"{what} {'>' if low_open else '>='} {_g(low)}"
    if high is not None:
        return f"{what} {'<' if high_open else '<='} {_g(high)}"
    return what


def check_param(name: str, value, kind: str = "number", *, low=None, high=None, low_open: bool = False,
                high_open: bool = False, choices: Sequence = (), allow_none: bool = False) -> None:
    """Raise :class:`ParameterError` unless ``value`` is a valid ``kind`` within the bounds.

    Parameters
    ----------
    name : str
        The parameter's name, used in the message.
    value : object
    kind : {"int", "number", "bool", "choice", "callable"}
        ``"int"``: an integer (not a bool); ``"number"``: a finite real (not a bool, never
        NaN); ``"bool"``; ``"choice"``: one of ``choices``; ``"callable"``.
    low, high : number, optional
        Bounds of ``int`` and ``number`` values, closed unless ``low_open`` / ``high_open``.
    choices : sequence
        The allowed values of a ``choice``.
    allow_none : bool
        ``None`` is valid too (a default worked out later).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown parameter kind {kind!r}")
    if allow_none and value is None:
        return
    if kind == "int":
        ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    elif kind == "number":
        ok = (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
              and math.isfinite(value))
    elif kind == "bool":
        ok = isinstance(value, (bool, np.bool_))
    elif kind == "choice":
        ok = any(value == c and type(value) is type(c) for c in choices)
    else:
        ok = callable(value)
    if ok and kind in ("int", "number"):
        if low is not None and (value < low or (low_open and value == low)):
            ok = False
        if high is not None and (value > high or (high_open and value == high)):
            ok = False
    if not ok:
        got = repr(value).replace("{", "{{").replace("}", "}}")
        req = _requirement(kind, low, high, low_open, high_open, choices)
        raise ParameterError(name, f"{{name}} must be {req}, got {got}")
