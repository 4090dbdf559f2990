"""The exhaustive game: every client's value for every coalition that holds it.

docs/concepts.md §1.  A game over clients ``0..N-1`` knows ``v_i(S)`` for every coalition
``S ∋ i``: ``N·2^(N-1)`` numbers, stored as one float64 array ``values`` of shape
``(N, 2^N)`` with entry ``[i, mask]`` and NaN where bit ``i`` is not in ``mask``
(or a float32 array, on request, for games near the memory limit: see
:mod:`coalitions.precision`).
Values are stored *higher is better*: a game given with ``sense="min"`` (a loss)
is negated on input, and ``sense`` is kept so that files round-trip.

A :class:`Game` is immutable and validated completely when built; every
constructor raises :class:`~coalitions.errors.InputError` with one line naming
the client or coalition at fault.

Examples
--------
>>> g = Game.from_mapping(["a", "b"], {"a": {"a": 1, "a,b": 2}, "b": {"b": 1, "a,b": 0}})
>>> g.n, g.value("a", "a,b"), g.value("b", ["a", "b"])
(2, 2.0, 0.0)
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from .bitmask import all_masks, contains, members
from .errors import InputError
from .numbers import float_array, to_float
from .resources import check_memory, game_bytes

__all__ = ["Game", "MAX_CLIENTS", "SENSES", "coalition_key", "parse_coalition", "check_client_names",
           "check_size"]

#: Largest game held exhaustively: ``N·2^N`` float64 values (26 clients = 14 GiB).
MAX_CLIENTS = 26
SENSES = ("max", "min")


#: Code points that print as nothing: Unicode's ``Default_Ignorable_Code_Point`` property
#: (DerivedCoreProperties.txt, Unicode 15: fillers, joiners, variation selectors, tags) besides the
#: format characters (``Cf``) refused by category.  ``unicodedata`` does not expose the property.
_IGNORABLE = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
              (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
              (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
              (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
#: Blank glyphs outside that property: the Braille blank (category So).
_BLANK = frozenset({0x2800})


def _invisible(ch: str, cat: str) -> bool:
    """True for a character that prints as nothing or as a blank other than the ASCII space."""
    o = ord(ch)
    if cat == "Zs":
        return ch != " "  # no-break, ideographic, em, figure spaces: they print like a space and are not one
    return o in _BLANK or any(lo <= o <= hi for lo, hi in _IGNORABLE)


def _name_fault(name: str) -> str | None:
    """Why ``name`` cannot be a client name, or None.

    A name is shown in text tables, partitions (``"A,B|C"``) and files, so it
    must be valid Unicode (no lone surrogate: a ``"\\ud800"`` escape in JSON, or
    an undecodable byte on the command line), hold no control character (a
    newline or NUL would split a table line or a C string) and no line or
    paragraph separator, no invisible format character (category ``Cf``: a
    zero-width space, a bidi override that makes ``"ab"`` print as ``"ba"``),
    no other invisible character (Unicode's default-ignorable code points: the
    Hangul fillers, the combining grapheme joiner, variation selectors, tags;
    the Braille blank; a space separator other than the ASCII space), so that
    two names that print alike are never two clients, and not contain the
    separators ``,`` and ``|``.
    """
    for ch in name:
        cat = unicodedata.category(ch)
        if cat == "Cs":
            return "is not valid Unicode (it holds a lone surrogate, e.g. from an undecodable byte)"
        if cat == "Cc":
            return "may not contain control characters (newline, tab, NUL, ...)"
        if cat in ("Zl", "Zp"):
            return "may not contain line or paragraph separators"
        if cat == "Cf":
            return (f"may not contain invisible format characters (it holds U+{ord(ch):04X} "
                    f"{unicodedata.name(ch, 'a format character')}: zero-width, bidi controls, ...)")
        if _invisible(ch, cat):
            return (f"may not contain invisible characters (it holds U+{ord(ch):04X} "
                    f"{unicodedata.name(ch, 'an invisible character')}: fillers, joiners, variation selectors, "
                    "blanks, spaces other than ' ')")
    if "," in name or "|" in name or name != name.strip():
        return "may not contain ',' or '|' or surrounding spaces"
    return None


def check_client_names(clients: Sequence[object], where: str = "'clients'", prefix: str = "") -> tuple[str, ...]:
    """Distinct non-empty names that are valid Unicode, without control characters, ``,`` or ``|``.

    The one check of client names: every reader (JSON, ``.npz``, estimates),
    every generator and the command line's ``--names`` call it.  ``where``
    names the list in the empty-list message, ``prefix`` starts the others.
    Names are shown with ``repr`` in messages, so a hostile name never breaks
    the one-line error.  Two names equal after Unicode NFKC normalisation
    (``"é"`` precomposed and ``"e"`` + combining acute; ``"ﬁ"`` and ``"fi"``)
    print alike and are refused as the same name.
    """
    if isinstance(clients, (str, bytes)) or not isinstance(clients, Sequence) or len(clients) == 0:
        raise InputError(f"{where} must be a non-empty list of names")
    seen: set[str] = set()
    normal: dict[str, str] = {}
    for name in clients:
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"{prefix}client name {name!r} must be a non-empty string")
        fault = _name_fault(name)
        if fault is not None:
            shown = ascii(name) if "invisible" in fault else repr(name)  # an invisible character, escaped
            raise InputError(f"{prefix}client name {shown} {fault}")
        if name in seen:
            raise InputError(f"{prefix}client {name!r} is listed twice")
        key = unicodedata.normalize("NFKC", name)
        if key in normal:
            raise InputError(f"{prefix}client names {ascii(normal[key])} and {ascii(name)} are the same after "
                             "Unicode normalisation (NFKC); they would print alike")
        seen.add(name)
        normal[key] = name
    return tuple(name for name in clients if isinstance(name, str))  # all of them (checked above)


def check_size(n: int, what: str = "", itemsize: int = 8) -> int:
    """``n`` if an exhaustive game of ``n`` clients can be held, else :class:`InputError`.

    The one size limit (:data:`MAX_CLIENTS`), used by the readers before they
    read values and by the generators before they allocate ``N·2^N`` floats;
    it also checks the job's peak memory (:func:`coalitions.resources.game_bytes`
    of ``itemsize``-byte values) against what the machine will give
    (:func:`coalitions.resources.check_memory`); ``itemsize=0`` skips that
    check, for a game already in memory.
    """
    if n > MAX_CLIENTS:
        need = f"{n * 8 * 2 ** n / 2 ** 30:,.0f} GiB" if n < 64 else "more memory than exists"
        raise InputError(f"{what}{n} clients: exhaustive games hold at most {MAX_CLIENTS} "
                         f"({n}·2^{n} values would need {need})")
    check_memory(game_bytes(n, itemsize), f"{what}a game of {n} clients")
    return n


def _check_names(clients: Sequence[object]) -> tuple[str, ...]:
    clients = check_client_names(clients)
    check_size(len(clients), itemsize=0)  # the memory: checked by whoever allocates the values (readers, generators)
    return clients


def parse_coalition(key: str | Iterable[str], index: Mapping[str, int]) -> int:
    """Bitmask of a coalition given as ``"A,B"`` or a list of names or indices.

    Raises :class:`InputError` for an empty key, an unknown name or a name given twice.
    """
    names = [s.strip() for s in key.split(",")] if isinstance(key, str) else list(key)
    if not names or any(isinstance(n, str) and not n for n in names):
        raise InputError(f"coalition {key!r} has an empty member name")
    mask = 0
    n_clients = len(index)
    for n in names:
        if isinstance(n, (int, np.integer)) and not isinstance(n, bool):
            if not 0 <= n < n_clients:
                raise InputError(f"coalition {key!r} names unknown client index {n}")
            n = list(index)[n]
        if n not in index:
            raise InputError(f"coalition {key!r} names unknown client {n!r}")
        bit = 1 << index[n]
        if mask & bit:
            raise InputError(f"coalition {key!r} names client {n!r} twice")
        mask |= bit
    return mask


def _same_numbers(a: np.ndarray, b: np.ndarray) -> bool:
    """Do two arrays hold the same numbers (NaN matching NaN), row by row?"""
    return all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b, strict=True))


def coalition_key(mask: int, clients: Sequence[str]) -> str:
    """``"A,B"``: the member names of ``mask`` in client order."""
    return ",".join(clients[i] for i in members(mask))


@dataclass(frozen=True, eq=False)
class Game:
    """An exhaustive game (docs/concepts.md §1), validated and read-only.

    Parameters
    ----------
    clients : tuple of str
        Client names, index ``i`` is client ``i``.
    values : ndarray of shape (N, 2**N)
        ``values[i, mask] = v_i(mask)``, higher is better, NaN where ``i ∉ mask``;
        float64, or float32 when given as a float32 array (the values are then
        those float32 numbers; every comparison still upcasts them to float64).
    sense : {"max", "min"}
        The sense the values were given in; ``"min"`` values were negated.
    provenance : dict
        Free-form description of where the values came from (written to files).
    uncertainty : Uncertainty, optional
        How precisely each value is known (:mod:`coalitions.noise`): bootstrap
        replicates or one standard error per value.  ``None`` (the default) for an
        exact game; a game that carries one is solved at a significance level
        (docs/concepts.md, "Measurement noise").

    Use the ``from_*`` constructors or :func:`coalitions.io.read_game` rather
    than the raw constructor; they validate their input.
    """

    clients: tuple[str, ...]
    values: np.ndarray
    sense: str = "max"
    provenance: Mapping = field(default_factory=dict)
    uncertainty: Any = None  # a coalitions.noise.Uncertainty (not imported: noise depends on this module)

    def __post_init__(self):
        clients = _check_names(self.clients)
        object.__setattr__(self, "clients", clients)
        if self.sense not in SENSES:
            raise InputError(f"'sense' must be 'max' or 'min', got {self.sense!r}")
        dtype = np.float32 if getattr(self.values, "dtype", None) == np.float32 else np.float64
        v = np.array(self.values, dtype=dtype, copy=True)
        n = len(clients)
        if v.shape != (n, 1 << n):
            raise InputError(f"values must have shape ({n}, {1 << n}) for {n} clients, got {v.shape}")
        masks = all_masks(n)
        for i in range(n):
            inside = contains(masks, i)
            bad = inside & ~np.isfinite(v[i])
            if bad.any():
                m = int(masks[bad][0])
                what = "missing (NaN)" if np.isnan(v[i, m]) else f"not finite ({v[i, m]})"
                raise InputError(
                    f"value of client {clients[i]!r} for coalition {coalition_key(m, clients)!r} is {what}"
                )
            v[i, ~inside] = np.nan
        v.setflags(write=False)
        object.__setattr__(self, "values", v)
        object.__setattr__(self, "provenance", dict(self.provenance))
        if self.uncertainty is not None:
            self.uncertainty.check_matches(self)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_array(cls, values, clients: Sequence[str] | None = None, sense: str = "max",
                   provenance: Mapping | None = None, dtype: str = "float64") -> Game:
        """Build from a dense ``(N, 2**N)`` array given in ``sense`` (NaN outside ``i ∈ mask``).

        ``dtype="float32"`` stores the values in float32; they must be float32
        numbers already (see :func:`coalitions.precision.to_float32` to round a
        float64 game where the tolerance allows).
        """
        if dtype not in ("float64", "float32"):
            raise InputError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
        given = np.asarray(values)
        if given.dtype.kind not in "fiu":
            given = np.asarray(values, dtype=np.float64)
        arr = float_array(given, "values", dtype)
        if arr.dtype != given.dtype and dtype == "float32" and not _same_numbers(arr, given):
            raise InputError("values are not all float32 numbers; round them with "
                             "coalitions.precision.to_float32(game, tol), which checks that no answer changes")
        if arr.ndim != 2 or arr.shape[1] != 1 << arr.shape[0]:
            raise InputError(f"values must have shape (N, 2**N), got {arr.shape}")
        n = arr.shape[0]
        if clients is None:
            clients = [str(i) for i in range(n)]
        if sense not in SENSES:
            raise InputError(f"'sense' must be 'max' or 'min', got {sense!r}")
        internal = arr if sense == "max" else -arr
        return cls(tuple(clients), internal, sense, provenance or {})

    @classmethod
    def from_mapping(cls, clients: Sequence[str], values: Mapping[str, Mapping[str, float]],
                     sense: str = "max", provenance: Mapping | None = None) -> Game:
        """Build from ``{client: {"A,B": value, ...}}`` as in ``coalitions/game@1`` (docs/formats.md).

        Every coalition containing a client must be present under that client.
        """
        clients = _check_names(clients)
        if sense not in SENSES:
            raise InputError(f"'sense' must be 'max' or 'min', got {sense!r}")
        if not isinstance(values, Mapping):
            raise InputError("'values' must be a mapping from client to {coalition: value}")
        index = {c: i for i, c in enumerate(clients)}
        n = len(clients)
        arr = np.full((n, 1 << n), np.nan)
        for name, table in values.items():
            if name not in index:
                raise InputError(f"values given for unknown client {name!r}")
            if not isinstance(table, Mapping):
                raise InputError(f"values of client {name!r} must be a mapping from coalition to number")
            i = index[name]
            for key, x in table.items():
                if not isinstance(key, str):
                    raise InputError(f"coalition key {key!r} of client {name!r} must be a string")
                m = parse_coalition(key, index)
                if not (m >> i) & 1:
                    raise InputError(f"coalition {key!r} listed under client {name!r} does not contain {name!r}")
                if not np.isnan(arr[i, m]):
                    raise InputError(f"coalition {key!r} of client {name!r} is given twice")
                arr[i, m] = to_float(x, f"value of client {name!r} for coalition {key!r}")
        missing = [c for c in clients if c not in values]
        if missing:
            raise InputError(f"no values given for client {missing[0]!r}")
        return cls.from_array(arr, clients, sense, provenance)

    @classmethod
    def from_callable(cls, clients: int | Sequence[str], v: Callable[[int, frozenset], float],
                      sense: str = "max", provenance: Mapping | None = None) -> Game:
        """Build from ``v(i, coalition)`` called once per client and coalition ``∋ i``.

        ``coalition`` is a ``frozenset`` of client indices.  Meant for small games;
        vectorised generators should build the array and use :meth:`from_array`.
        """
        names = [str(i) for i in range(check_size(clients))] if isinstance(clients, int) else list(clients)
        n = len(_check_names(names))
        arr = np.full((n, 1 << n), np.nan)
        for m in range(1, 1 << n):
            s = frozenset(members(m))
            for i in s:
                x = v(i, s)
                try:
                    arr[i, m] = float(x)
                except (TypeError, ValueError):
                    raise InputError(
                        f"value of client {names[i]!r} for coalition {coalition_key(m, names)!r} "
                        f"is not a number: {x!r}") from None
        return cls.from_array(arr, names, sense, provenance)

    # ------------------------------------------------------------------ access
    @property
    def n(self) -> int:
        """Number of clients ``N``."""
        return len(self.clients)

    @property
    def grand(self) -> int:
        """Bitmask of the grand coalition."""
        return (1 << self.n) - 1

    @cached_property
    def index(self) -> dict[str, int]:
        """Client name → index."""
        return {c: i for i, c in enumerate(self.clients)}

    def coalition(self, key: str | Iterable[str] | int) -> int:
        """Bitmask of a coalition given as ``"A,B"``, a list of names, or a bitmask."""
        if isinstance(key, (int, np.integer)):
            if not 0 < int(key) <= self.grand:
                raise InputError(f"coalition bitmask {key} is not a non-empty subset of {self.n} clients")
            return int(key)
        return parse_coalition(key, self.index)

    def names(self, mask: int) -> list[str]:
        """Member names of a coalition bitmask, in client order."""
        return [self.clients[i] for i in members(mask)]

    def key(self, mask: int) -> str:
        """``"A,B"`` for a coalition bitmask."""
        return coalition_key(mask, self.clients)

    def value(self, client: str | int, coalition) -> float:
        """``v_i(S)`` in the internal, higher-is-better units."""
        i = self.index[client] if isinstance(client, str) else int(client)
        m = self.coalition(coalition)
        if not (m >> i) & 1:
            raise InputError(f"coalition {self.key(m)!r} does not contain client {self.clients[i]!r}")
        return float(self.values[i, m])

    def raw_values(self) -> np.ndarray:
        """Values in the sense they were given (``-values`` for a ``min`` game)."""
        return np.array(self.values if self.sense == "max" else -self.values)

    def with_uncertainty(self, uncertainty: Any) -> Game:
        """The same game carrying ``uncertainty`` (or none: the point values alone)."""
        return Game(self.clients, self.values, self.sense, self.provenance, uncertainty)

    def __repr__(self) -> str:
        extra = "" if self.uncertainty is None else f", uncertainty={self.uncertainty!r}"
        return f"Game(clients={list(self.clients)!r}, sense={self.sense!r}{extra})"
