"""The one checked number conversion of every reader, and the overflow guard of every sum and product.

A file may hold numbers that Python parses but a float cannot hold: JSON
integers of any length (``1`` followed by 400 digits), ``.npz`` arrays of long
doubles (``1e400`` is finite in ``float128``), or float64 values so close to the
largest float (``1.8e308``) that their difference, sum or product overflows.
``float(10**400)`` raises :class:`OverflowError` (a traceback), ``np.float64``
of a long double silently becomes ``inf``, and ``1.7e308 - (-1.7e308)`` is
``inf`` with a ``RuntimeWarning`` on standard error.  The docs/cli.md contract
wants exit 2 and one line naming the field instead, or the exact answer.

:func:`to_float` converts one value read from a file, :func:`to_int` one count,
:func:`float_array` a whole array (long doubles included) and
:func:`finite` runs an arithmetic step with numpy's warnings silenced and
refuses any result that is not finite, naming what overflowed.

Examples
--------
>>> to_float(3, "weight of client 'a'")
3.0
>>> to_float(10 ** 400, "weight of client 'a'")
Traceback (most recent call last):
...
coalitions.errors.InputError: weight of client 'a' is 1000...000 (401 digits), too large for a float (largest 1.8e+308)
>>> import numpy as np
>>> finite(lambda: np.array([1.7e308]) * 2, "welfare of coalition 'a'")
Traceback (most recent call last):
...
coalitions.numbers.NumberOverflow: welfare of coalition 'a' overflows a float (|x| > 1.8e+308); rescale the values
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .errors import InputError

__all__ = ["to_float", "to_int", "float_array", "to_array", "finite", "LARGEST", "NumberOverflow"]

#: The largest finite float64.
LARGEST = sys.float_info.max
T = TypeVar("T")


class NumberOverflow(InputError):
    """A computed quantity overflowed; the command line prefixes the input file's name (its values are at fault)."""


def _show(x: Any) -> str:
    """A number for a one-line message: long integers abbreviated to their digit count."""
    if isinstance(x, int) and not isinstance(x, bool):
        digits = str(abs(x)) if x.bit_length() < 4000 else None  # str() of a huge int is itself refused
        if digits is None:
            return f"an integer of about {int(x.bit_length() * 0.30103):,} digits"
        if len(digits) > 20:
            return f"{'-' if x < 0 else ''}{digits[:4]}...{digits[-3:]} ({len(digits)} digits)"
        return str(x)
    return repr(x)


def to_float(x: Any, what: str, *, allow_none: bool = False) -> float:
    """``x`` as a finite float, or :class:`InputError` starting with ``what``.

    Parameters
    ----------
    x : int, float or numpy number
        A value read from a file or an option; ``bool`` is refused (JSON
        ``true`` is not a number).
    what : str
        The field, in the message (``"value of client 'a' for coalition 'a,b'"``).
    allow_none : bool
        Return NaN for ``None`` or NaN (a JSON ``null`` where the format allows a gap).
    """
    if x is None and allow_none:
        return math.nan
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise InputError(f"{what} is not a number: {x!r}")
    if isinstance(x, np.floating) and np.finfo(x.dtype).bits > 64:  # long double: float() would round to inf
        if not np.isfinite(x):
            raise InputError(f"{what} is not finite ({x})")
        if abs(x) > LARGEST:
            raise InputError(f"{what} is {str(x)}, too large for a float (largest {LARGEST:.2g})")
    try:
        y = float(x)
    except OverflowError:
        raise InputError(f"{what} is {_show(x)}, too large for a float (largest {LARGEST:.2g})") from None
    if not math.isfinite(y) and not (allow_none and math.isnan(y)):
        raise InputError(f"{what} is not finite ({y})")
    return y


def to_int(x: Any, what: str, low: int | None = None, high: int | None = None) -> int:
    """``x`` as an ``int`` in ``[low, high]`` (a float must be integral), or :class:`InputError`."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise InputError(f"{what} is not an integer: {x!r}")
    if isinstance(x, (float, np.floating)):
        y = to_float(x, what)
        if not y.is_integer():
            raise InputError(f"{what} is not an integer: {x!r}")
        x = int(y)
    x = int(x)
    if (low is not None and x < low) or (high is not None and x > high):
        rng = f"[{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
        raise InputError(f"{what} is {_show(x)}, outside {rng}")
    return x


def float_array(a: np.ndarray, what: str, dtype: Any = np.float64, exact: bool = False) -> np.ndarray:
    """A numeric array as ``dtype`` (float64 or float32), refusing values that would become ``inf``.

    NaN stays NaN (the caller decides where NaN is allowed); a finite value
    too large for ``dtype`` -- a long double ``1e400``, an int64 beyond
    float32 -- is an error naming ``what`` and the first such entry.  With
    ``exact`` (the file readers), a value that ``dtype`` would round -- a long
    double ``1 + 2^-60``, an integer beyond ``2^53`` -- is refused too: a gain
    rounded away can change the answer.
    """
    a = np.asarray(a)
    if a.dtype.kind not in "fiu":
        raise InputError(f"{what} must be numeric, got dtype {a.dtype}")
    with np.errstate(all="ignore"):
        out = a.astype(dtype)
        grew = np.isinf(out) & ~np.isinf(a) if a.dtype.kind == "f" else np.isinf(out)
    if grew.any():
        where = tuple(int(i) for i in np.argwhere(grew)[0])
        raise InputError(f"{what}: entry {where} is {str(a[where])}, too large for {np.dtype(dtype).name} "
                         f"(largest {np.finfo(dtype).max:.2g})")
    if exact and a.dtype != out.dtype:
        with np.errstate(all="ignore"):
            back = out.astype(a.dtype)
            rounded = (back != a) & ~np.isnan(out)
        if rounded.any():
            where = tuple(int(i) for i in np.argwhere(rounded)[0])
            kind = "a long double" if a.dtype.kind == "f" else f"an {a.dtype.name} integer"
            raise InputError(f"{what}: entry {where} is {kind} ({str(a[where])}) that {np.dtype(dtype).name} "
                             f"cannot hold exactly; reading it would round it to {str(out[where])} and could change "
                             f"the answer (store the values as {np.dtype(dtype).name})")
    return out


def to_array(x: Any, what: str) -> np.ndarray:
    """Nested JSON lists of finite numbers as a float64 array, or :class:`InputError` naming ``what``."""
    try:
        a = np.asarray(x, dtype=np.float64)
    except OverflowError:
        raise InputError(f"{what} holds an integer too large for a float (largest {LARGEST:.2g})") from None
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a (nested) list of numbers of one shape") from None
    if not np.isfinite(a).all():
        raise InputError(f"{what} holds a value that is not finite ({a[~np.isfinite(a)].flat[0]})")
    return a


def finite(step: Callable[[], T], what: str | Callable[[Any], str]) -> T:
    """Run ``step`` (numpy arithmetic) without warnings; its result must be finite where its inputs were.

    Parameters
    ----------
    step : callable
        Computes an array or number; NaN in the result is allowed (it marks a
        gap, as in a game's layout), ``±inf`` is not.
    what : str or callable
        What overflowed, for the message; a callable gets the index of the
        first infinite entry and returns the name.

    Raises
    ------
    InputError
        ``"<what> overflows a float (|x| > 1.8e+308); rescale the values"``.
    """
    with np.errstate(all="ignore"):
        out = step()
    arr = np.asarray(out, dtype=float) if not isinstance(out, np.ndarray) else out
    bad = np.isinf(arr)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0]) if arr.ndim else ()
        name = what(where) if callable(what) else what
        raise NumberOverflow(f"{name} overflows a float (|x| > {LARGEST:.2g}); rescale the values")
    return out
