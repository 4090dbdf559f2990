"""Reading and writing the file formats of docs/formats.md.

* ``coalitions/game@1`` JSON and the equivalent ``.npz`` (arrays ``values``,
  ``clients``, ``sense``), each with optional bootstrap ``replicates``
  (:mod:`coalitions.replicates`) — :func:`read_game`, :func:`read_game_replicates`,
  :func:`write_game`.  ``values``
  is float64, or float32 for a game stored in float32 (written and read back as
  such; see :mod:`coalitions.precision`).
* ``coalitions/equilibrium@1``, ``coalitions/equilibria@1`` and
  ``coalitions/benefit-graph@1`` — builders returning JSON-ready dicts.

Every reader validates completely and raises
:class:`~coalitions.errors.InputError` whose one-line message starts with the
file name.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

import numpy as np
from numpy.lib import format as npformat

from .bitmask import all_masks, contains
from .errors import InputError
from .files import open_input, read_bytes, write_file, write_text
from .game import MAX_CLIENTS, Game, check_client_names, check_size, coalition_key
from .numbers import float_array
from .replicates import Replicates, check_count
from .resources import check_memory, game_bytes

__all__ = ["GAME_FORMAT", "read_game", "read_game_replicates", "write_game", "replicates_from_json", "game_to_json", "game_from_json",
           "equilibrium_to_json", "equilibria_to_json", "support_to_json", "benefit_graph_to_json", "write_json",
           "read_json", "parse_json", "check_game_output", "MAX_JSON_BYTES", "MAX_JSON_CLIENTS",
           "MAX_NPZ_BYTES"]

GAME_FORMAT = "coalitions/game@2"
#: The earlier game format, still read: its replicates (if any) are read, but the game is exact.
GAME_FORMAT_V1 = "coalitions/game@1"
GAME_FORMATS = (GAME_FORMAT_V1, GAME_FORMAT)
EQUILIBRIUM_FORMAT = "coalitions/equilibrium@1"
EQUILIBRIA_FORMAT = "coalitions/equilibria@1"
GRAPH_FORMAT = "coalitions/benefit-graph@1"

#: Largest JSON file read (games, estimates, reproductions): a JSON game of
#: :data:`MAX_JSON_CLIENTS` clients with short names is about 0.7 GB of text and
#: needs several times that in memory once parsed.
MAX_JSON_BYTES = 1 << 30
#: Peak memory of parsing JSON, in multiples of its bytes (measured: 3.4 for a 16-client game).
JSON_PEAK = 4
#: Largest game written as JSON; larger games go to ``.npz`` (docs/formats.md).
MAX_JSON_CLIENTS = 20
#: Largest ``.npz`` game file: the values of a :data:`~coalitions.game.MAX_CLIENTS` game, stored
#: uncompressed, plus room for the names and the provenance.
MAX_NPZ_BYTES = 8 * MAX_CLIENTS * (1 << MAX_CLIENTS) + (64 << 20)
#: Largest ``clients``, ``sense`` or ``provenance`` member of an ``.npz`` game, uncompressed.
MAX_NPZ_SMALL_BYTES = 16 << 20


def _fail(path, msg: str) -> NoReturn:
    raise InputError(f"{path}: {' '.join(msg.splitlines())}")


class _Duplicates(dict):
    """A parsed JSON object that had a key more than once (``key``: the first repeated one)."""

    key: str = ""


def _trail(trail: tuple) -> str:
    """``['values']['a']`` for the keys and indices leading to a JSON value."""
    return "".join(f"[{t!r}]" for t in trail)


def _where(trail: tuple) -> str:
    return f"object {_trail(trail)}" if trail else "the top-level object"


def _invalid_unicode(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _first_fault(data, surrogates: bool) -> str | None:
    """The first duplicated key or lone-surrogate string in ``data`` (depth first), as a message."""
    stack: list[tuple[tuple, Any]] = [((), data)]
    while stack:
        trail, x = stack.pop()
        if isinstance(x, _Duplicates):
            return f"duplicate key {x.key!r} in {_where(trail)}"
        children = list(x.items()) if isinstance(x, dict) else list(enumerate(x))
        for k, v in reversed(children):
            if surrogates and isinstance(k, str) and _invalid_unicode(k):
                return f"key {k!r} in {_where(trail)} is not valid Unicode (lone surrogate)"
            if surrogates and isinstance(v, str) and _invalid_unicode(v):
                return f"string {v!r} at {_trail(trail + (k,))} is not valid Unicode (lone surrogate)"
            if isinstance(v, (dict, list)):
                stack.append((trail + (k,), v))
    return None


def parse_json(text: str) -> Any:
    """``json.loads`` that refuses what ``json`` lets through: duplicate keys and lone surrogates.

    Python's ``json`` keeps the last of two equal keys (``{"a": 1, "a": -5}``
    reads as ``{"a": -5}``) -- a silently different game -- and decodes a
    ``"\\ud800"`` escape into a string that cannot be printed or written.
    Both raise :class:`InputError` naming the key or string and the object it is
    in (``object ['values']['a']``).
    """
    found = []

    def pairs_hook(pairs):
        d = dict(pairs)
        if len(d) == len(pairs):
            return d
        seen = set()
        for k, _ in pairs:
            if k in seen:
                break
            seen.add(k)
        found.append(k)
        d = _Duplicates(d)
        d.key = k
        return d

    data = json.loads(text, object_pairs_hook=pairs_hook)
    surrogates = re.search(r"\\u[dD][89a-fA-F]", text) is not None  # only \u escapes make surrogates
    if found or surrogates:
        fault = _first_fault(data, surrogates)
        if fault is not None:
            raise InputError(fault)
    return data


def read_json(path: str | os.PathLike, expected_format: str | None = None, max_bytes: int = MAX_JSON_BYTES) -> dict:
    """Load a JSON object, checking its ``"format"`` tag when ``expected_format`` is given.

    Only a regular file of at most ``max_bytes`` is read (:func:`coalitions.files.read_bytes`);
    duplicate keys and invalid Unicode are errors (:func:`parse_json`).
    """
    raw = read_bytes(path, max_bytes, "a JSON file")
    try:
        check_memory(JSON_PEAK * len(raw), f"{path}: parsing {len(raw):,} bytes of JSON")
    except InputError:
        del raw
        raise
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        _fail(path, f"cannot be read: not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start})")
    try:
        data = parse_json(text)
    except json.JSONDecodeError as e:
        _fail(path, f"not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})")
    except InputError as e:
        _fail(path, str(e))
    except MemoryError:
        _fail(path, f"out of memory parsing {len(raw):,} bytes of JSON")
    except (ValueError, RecursionError) as e:  # over-long integer literal, nesting too deep
        _fail(path, f"not valid JSON ({e.__class__.__name__}: {e})")
    finally:
        del raw
    if not isinstance(data, dict):
        _fail(path, "must hold a JSON object")
    if expected_format is not None:
        fmt = data.get("format")
        accepted = GAME_FORMATS if expected_format == GAME_FORMAT else (expected_format,)
        if fmt not in accepted:
            _fail(path, f"unknown format {fmt!r} (expected {' or '.join(map(repr, accepted))})")
    return data


def game_from_json(data: Mapping[str, Any]) -> Game:
    """Build a game from a parsed ``coalitions/game@1`` object (without the file name in errors)."""
    for key in ("clients", "values"):
        if key not in data:
            raise InputError(f"missing field {key!r}")
    sense = data.get("sense", "max")
    prov = data.get("provenance", {})
    if not isinstance(prov, dict):
        raise InputError("'provenance' must be an object")
    return Game.from_mapping(data["clients"], data["values"], sense, prov)


def replicates_from_json(data: Mapping[str, Any], game: Game) -> Replicates | None:
    """The optional ``"replicates"`` of a parsed ``coalitions/game@1`` object, checked like ``values``."""
    if "replicates" not in data:
        return None
    tables = data["replicates"]
    if not isinstance(tables, list):
        raise InputError("'replicates' must be a list of {client: {coalition: value}} objects")
    return Replicates.from_mappings(game.clients, tables, game.sense)


def _se_from_json(data: Mapping[str, Any], game: Game) -> np.ndarray:
    """The ``"se"`` table of a ``coalitions/game@2`` object: ``{client: {coalition: se}}``, every value present."""
    table = data["se"]
    if not isinstance(table, Mapping):
        raise InputError("'se' must be a mapping from client to {coalition: standard error}")
    # the same checks as values (every coalition present, numbers, no duplicates), in the sense "max"
    return Game.from_mapping(game.clients, table, "max").values


def uncertain_game(game: Game, replicates: Replicates | None, se: np.ndarray | None, fmt: str) -> Game:
    """``game`` carrying the uncertainty a ``coalitions/game@2`` file declares (an ``@1`` file's game stays exact)."""
    from .noise import Uncertainty

    if fmt != GAME_FORMAT:
        if se is not None:
            raise InputError(f"standard errors ('se') need format {GAME_FORMAT!r}")
        return game
    if replicates is not None and se is not None:
        raise InputError("a game carries either bootstrap 'replicates' or standard errors 'se', not both")
    if replicates is not None:
        return game.with_uncertainty(Uncertainty.from_replicates(replicates))
    if se is not None:
        return game.with_uncertainty(Uncertainty.from_se(game, se))
    return game


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
#: What a damaged zip archive or .npy header can raise (found by fuzzing in tests/test_hostile.py).
_DAMAGED = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError,
            struct.error, KeyError, SyntaxError, OverflowError, RecursionError, TypeError)


def _npy_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path, key: str):
    """``(shape, dtype)`` from the header of member ``key`` (read before its data)."""
    try:
        with zf.open(info) as m:
            version = npformat.read_magic(m)
            read = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
            shape, _, dtype = read(m)
    except _DAMAGED as e:
        _fail(path, f"array {key!r} is not a readable NumPy array ({e.__class__.__name__}: {e})")
    if dtype.hasobject:
        _fail(path, f"array {key!r} holds pickled Python objects (dtype {dtype}), which are never loaded")
    return shape, dtype


def _npy_data(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path, key: str) -> np.ndarray:
    try:
        with zf.open(info) as m:
            return npformat.read_array(m, allow_pickle=False)
    except MemoryError:
        _fail(path, f"out of memory reading array {key!r} ({info.file_size:,} bytes)")
    except _DAMAGED as e:
        _fail(path, f"array {key!r} is not readable ({e.__class__.__name__}: {e})")


def _read_npz(path) -> tuple[Game, Replicates | None]:
    """The ``.npz`` game of docs/formats.md and its replicates, every header checked before any array is read.

    The member list (no member twice), each array's header (dtype, shape) and
    uncompressed size are checked against the format before data is read, so a
    hostile archive cannot make the reader allocate more than a game of its
    declared number of clients needs.
    """
    with open_input(path, MAX_NPZ_BYTES, "an .npz game") as f:
        head = f.read(4)
        if head not in _ZIP_MAGIC:
            what = "a single .npy array" if head.startswith(b"\x93NUM") else "not a zip archive"
            _fail(path, f"not a .npz game: {what} (an .npz game is a zip archive of .npy arrays)")
        f.seek(0)
        try:
            zf = zipfile.ZipFile(f)
        except _DAMAGED as e:
            _fail(path, f"not a readable .npz game: damaged zip archive ({e})")
        with zf:
            names = zf.namelist()
            twice = sorted(x for x, k in Counter(names).items() if k > 1)  # linear: 100,000 members are fine
            if twice:
                _fail(path, f"the archive holds member {twice[0]!r} twice")
            members = {x[:-4]: zf.getinfo(x) for x in names if x.endswith(".npy")}
            missing = [k for k in ("values", "clients", "sense") if k not in members]
            if missing:
                _fail(path, f"npz game lacks array {missing[0]!r}")
            for key in ("clients", "sense", "provenance", "format"):
                if key in members and members[key].file_size > MAX_NPZ_SMALL_BYTES:
                    _fail(path, f"array {key!r} is {members[key].file_size:,} bytes, more than the "
                                f"{MAX_NPZ_SMALL_BYTES:,} an .npz game allows")
            shape, dtype = _npy_header(zf, members["clients"], path, "clients")
            if dtype.kind != "U" or len(shape) != 1:
                _fail(path, "'clients' must be a 1-d array of names")
            n = shape[0]
            try:
                check_size(n, itemsize=0)  # the memory is checked below, once the dtypes are known
            except InputError as e:
                _fail(path, str(e))
            shape, dtype = _npy_header(zf, members["values"], path, "values")
            if dtype.kind not in "fiu":
                _fail(path, f"'values' must be numeric, got dtype {dtype}")
            if tuple(shape) != (n, 1 << n):
                _fail(path, f"'values' must have shape ({n}, {1 << n}) for {n} clients, got {tuple(shape)}")
            # the game's peak (float32 stays float32) plus the member itself, unpacked
            kept = 4 if dtype == np.float32 else 8
            need = game_bytes(n, kept) + n * (1 << n) * dtype.itemsize
            shape, dtype = _npy_header(zf, members["sense"], path, "sense")
            if "replicates" in members:
                shape, dtype = _npy_header(zf, members["replicates"], path, "replicates")
                if dtype.kind not in "fiu":
                    _fail(path, f"'replicates' must be numeric, got dtype {dtype}")
                if len(shape) != 3 or tuple(shape[1:]) != (n, 1 << n):
                    _fail(path, f"'replicates' must have shape (B, {n}, {1 << n}) for {n} clients, "
                                f"got {tuple(shape)}")
                try:
                    check_count(shape[0], n, "'replicates': ")
                except InputError as e:
                    _fail(path, str(e))
                need += shape[0] * n * (1 << n) * (dtype.itemsize + 16)  # unpacked, as float64, validated
            if "se" in members:
                shape, dtype = _npy_header(zf, members["se"], path, "se")
                if dtype.kind not in "fiu":
                    _fail(path, f"'se' must be numeric, got dtype {dtype}")
                if tuple(shape) != (n, 1 << n):
                    _fail(path, f"'se' must have shape ({n}, {1 << n}) for {n} clients, got {tuple(shape)}")
                need += n * (1 << n) * (dtype.itemsize + 16)
            fmt = GAME_FORMAT_V1
            if "format" in members:
                shape, dtype = _npy_header(zf, members["format"], path, "format")
                tag = _npy_data(zf, members["format"], path, "format")
                if tag.shape != () or tag.dtype.kind != "U" or str(tag) not in GAME_FORMATS:
                    _fail(path, f"unknown format {tag!r} (expected {' or '.join(map(repr, GAME_FORMATS))})")
                fmt = str(tag)
            clients = _npy_data(zf, members["clients"], path, "clients")
            sense = _npy_data(zf, members["sense"], path, "sense")
            if sense.shape != () or sense.dtype.kind != "U" or str(sense) not in ("max", "min"):
                _fail(path, f"'sense' must be 'max' or 'min', got {sense!r}")
            prov: Any = {}
            if "provenance" in members:
                shape, dtype = _npy_header(zf, members["provenance"], path, "provenance")
                raw = _npy_data(zf, members["provenance"], path, "provenance")
                if raw.shape != () or raw.dtype.kind != "U":
                    _fail(path, "'provenance' must hold a JSON object")
                try:
                    prov = parse_json(str(raw))
                except (ValueError, RecursionError, InputError) as e:
                    _fail(path, f"'provenance' must hold a JSON object ({str(e).splitlines()[0]})")
            if not isinstance(prov, dict):
                _fail(path, "'provenance' must hold a JSON object")
            names = [str(c) for c in clients]
            try:
                check_client_names(names)
            except InputError as e:
                _fail(path, str(e))
            try:
                check_memory(need, f"unpacking its {n}-client game")
            except InputError as e:
                _fail(path, str(e))
            values = _npy_data(zf, members["values"], path, "values")
            reps = _npy_data(zf, members["replicates"], path, "replicates") if "replicates" in members else None
            se = _npy_data(zf, members["se"], path, "se") if "se" in members else None
    try:
        values = float_array(values, "'values'", np.float32 if values.dtype == np.float32 else np.float64, exact=True)
        reps = None if reps is None else float_array(reps, "'replicates'", exact=True)
        se = None if se is None else float_array(se, "'se'", exact=True)
    except InputError as e:
        _fail(path, str(e))
    _check_outside_nan(path, values, names)
    # float32 values stay float32 (a game stored in float32: see coalitions.precision)
    dtype = "float32" if values.dtype == np.float32 else "float64"
    game = Game.from_array(values, names, str(sense), prov, dtype=dtype)
    replicates = None
    if reps is not None:
        for b in range(reps.shape[0]):
            _check_outside_nan(path, reps[b], names, f"replicate {b}: ")
        try:
            replicates = Replicates.from_array(reps, names, game.sense)
        except InputError as e:
            _fail(path, str(e))
    if se is not None:
        _check_outside_nan(path, se, names, "'se': ")
    try:
        return uncertain_game(game, replicates, se, fmt), replicates
    except InputError as e:
        _fail(path, str(e))


def _check_outside_nan(path, values: np.ndarray, names, prefix: str = "") -> None:
    """docs/formats.md: ``values[i, mask]`` is NaN where bit ``i`` is not in ``mask``; anything else is an error.

    A number there is not a value of the game (``v_i(S)`` exists only for
    ``i ∈ S``); accepting it silently would hide a file written with the
    wrong layout (e.g. transposed bits).
    """
    n = len(names)
    masks = all_masks(n)
    for i in range(n):
        outside = ~contains(masks, i)
        bad = outside & ~np.isnan(values[i].astype(np.float64))
        if bad.any():
            m = int(masks[bad][0])
            where = f"coalition {coalition_key(m, names)!r}" if m else "the empty coalition (mask 0)"
            _fail(path, f"{prefix}value of client {names[i]!r} for {where}, which does not contain it, must be NaN "
                        f"(got {float(values[i, m])!r})")


def read_game(path: str | os.PathLike) -> Game:
    """Read a game from ``coalitions/game@1`` JSON or ``.npz`` (chosen by the file ending).

    Replicates the file holds are validated too (:func:`read_game_replicates`).
    """
    return read_game_replicates(path)[0]


def read_game_replicates(path: str | os.PathLike) -> tuple[Game, Replicates | None]:
    """Read a game and its bootstrap replicates (``None`` when the file holds none).

    A ``coalitions/game@2`` file's replicates (or standard errors) are the
    game's :attr:`~coalitions.game.Game.uncertainty`; a ``coalitions/game@1``
    file's game is exact, its replicates returned beside it.
    """
    try:
        if str(path).endswith(".npz"):
            return _read_npz(path)
        return _game_of(read_json(path, GAME_FORMAT))
    except MemoryError:
        raise InputError(f"{path}: out of memory building the game") from None
    except InputError as e:
        _named(path, e)


def _game_of(data: Mapping[str, Any]) -> tuple[Game, Replicates | None]:
    """The game and replicates of a parsed ``coalitions/game@1`` or ``@2`` object."""
    game = game_from_json(data)
    reps = replicates_from_json(data, game)
    se = _se_from_json(data, game) if "se" in data else None
    return uncertain_game(game, reps, se, str(data["format"])), reps


def _named(path, e: InputError) -> NoReturn:
    """``e`` again, its message starting with the file name."""
    msg = str(e)
    if msg.startswith(f"{path}: "):
        raise e
    raise InputError(f"{path}: {msg}") from None


def _values_json(game: Game, raw: np.ndarray) -> dict:
    """``{client: {"A,B": value}}`` of a raw ``(N, 2^N)`` array (NaN entries left out)."""
    values = {}
    for i, name in enumerate(game.clients):
        row = raw[i]
        masks = np.flatnonzero(~np.isnan(row))
        values[name] = {game.key(int(m)): float(row[m]) for m in masks}
    return values


def _carried(game: Game, replicates: Replicates | None) -> tuple[Replicates | None, np.ndarray | None]:
    """The replicates and standard errors to write: the game's uncertainty, or ``replicates`` given beside it."""
    u = game.uncertainty
    if u is None:
        return (None if replicates is None else replicates.check_matches(game)), None
    if replicates is not None and u.replicates is not replicates:
        raise InputError("the game carries its own uncertainty; write it without other replicates")
    return u.replicates, u.se


def game_to_json(game: Game, replicates: Replicates | None = None) -> dict:
    """``coalitions/game@2`` dict, values (and any replicates or standard errors) in the game's own sense.

    A game with uncertainty is written as ``coalitions/game@2`` with ``"replicates"``
    or ``"se"``; an exact game as ``coalitions/game@1``, with any replicates given
    beside it (bootstrap replicates for the support, the game exact), so that
    readers of the earlier format read it.
    """
    reps, se = _carried(game, replicates)
    fmt = GAME_FORMAT if game.uncertainty is not None else GAME_FORMAT_V1
    out = {"format": fmt, "clients": list(game.clients), "sense": game.sense,
           "values": _values_json(game, game.raw_values())}
    if reps is not None:
        out["replicates"] = [_values_json(game, r) for r in reps.raw_values()]
    if se is not None:
        out["se"] = _values_json(game, se)
    if game.provenance:
        out["provenance"] = dict(game.provenance)
    return out


def check_game_output(n: int, path: str | os.PathLike, replicates: int = 0) -> None:
    """Refuse up front a game of ``n`` clients (and ``replicates`` replicates) that ``path``'s format cannot hold.

    Called before generating it.  A JSON file holds at most as many numbers as a
    game of :data:`MAX_JSON_CLIENTS` clients, replicates included.
    """
    check_size(n, itemsize=0)  # the format's limit; the memory was checked when the game was made
    if replicates:
        check_count(replicates, n, f"{path}: ")
    if str(path).endswith(".npz"):
        return
    if n > MAX_JSON_CLIENTS:
        raise InputError(f"{path}: {n} clients make a JSON game too large to read back (at most "
                         f"{MAX_JSON_CLIENTS}); a name ending in .npz writes the compact binary form")
    if (1 + replicates) * n << (n - 1) > MAX_JSON_CLIENTS << (MAX_JSON_CLIENTS - 1):
        raise InputError(f"{path}: {replicates:,} replicates of a {n}-client game make a JSON file too large "
                         "to read back; a name ending in .npz writes the compact binary form")


def write_game(game: Game, path: str | os.PathLike, replicates: Replicates | None = None) -> None:
    """Write JSON, or ``.npz`` when ``path`` ends in ``.npz`` (through :func:`coalitions.files.write_file`).

    The game's uncertainty (:mod:`coalitions.noise`) is written with it
    (``coalitions/game@2``): the ``.npz`` array ``replicates`` of shape
    ``(B, N, 2^N)`` or ``se`` of shape ``(N, 2^N)``, or the JSON ``"replicates"`` /
    ``"se"``.  ``replicates`` given for an exact game are written as before
    (``coalitions/game@1``: the support's replicates, the game exact).
    """
    reps, se = _carried(game, replicates)
    check_game_output(game.n, path, (0 if reps is None else reps.b) + (0 if se is None else 1))
    if str(path).endswith(".npz"):
        extra: dict[str, Any] = {} if reps is None else {"replicates": reps.raw_values()}
        if se is not None:
            extra["se"] = np.array(se)
        fmt = GAME_FORMAT if game.uncertainty is not None else GAME_FORMAT_V1
        write_file(path, lambda f: np.savez_compressed(
            f, values=game.raw_values(), clients=np.array(game.clients), sense=np.array(game.sense),
            provenance=np.array(json.dumps(_clean(dict(game.provenance)))), format=np.array(fmt), **extra))
    else:
        write_json(game_to_json(game, replicates), path)


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        return _clean(x.item())
    return x


def write_json(data: Mapping, path: str | os.PathLike | None) -> str:
    """Serialise with NaN/inf as null; write to ``path`` unless it is None. Returns the text.

    The file is written by :func:`coalitions.files.write_text`: complete or not at all.
    """
    text = json.dumps(_clean(data), indent=1, allow_nan=False) + "\n"
    if path is not None:
        write_text(path, text)
    return text


def benefit_graph_to_json(graph) -> dict:
    """``coalitions/benefit-graph@1``, with each member's OCS and any ambiguity."""
    names = graph.clients
    from .bitmask import members

    out = {
        "format": GRAPH_FORMAT,
        "clients": [names[i] for i in members(graph.within)],
        "edges": [[names[j], names[i]] for j, i in graph.edges],
        "ocs": {names[i]: [names[j] for j in members(c)] for i, c in graph.collaborators},
    }
    amb = graph.ambiguous
    if amb:
        out["ambiguous"] = {names[i]: [[names[j] for j in members(a)] for a in alts] for i, alts in amb.items()}
    return out


def _report_json(game: Game, report) -> dict:
    def wit(v):
        d = {"coalition": game.names(v.coalition) if v.coalition else []}
        if v.subcoalition:
            d["subcoalition"] = game.names(v.subcoalition)
        if v.client >= 0:
            d["client"] = game.clients[v.client]
        d["payoffs"] = {game.clients[i]: {"deviation": a, "current": b} for i, a, b in v.payoffs}
        return d

    return {"holds": report.holds, "method": report.method, "checked": report.checked,
            "violations": report.violations, "witnesses": [wit(v) for v in report.witnesses]}


def equilibrium_to_json(eq) -> dict:
    """``coalitions/equilibrium@1`` for an :class:`~coalitions.equilibrium.Equilibrium`."""
    game = eq.game
    pay = eq.payoffs
    out = {
        "format": EQUILIBRIUM_FORMAT,
        "semantics": eq.semantics,
        "tol": eq.tol,
        **({"z": eq.z} if game.uncertainty is not None else {}),
        "clients": list(game.clients),
        "partition": eq.blocks(),
        "rounds": [[game.names(k) for k in ks] for ks in eq.rounds],
        "payoffs": {c: float(pay[i]) for i, c in enumerate(game.clients)},
        "mau": {c: float(eq.mau_all[i]) for i, c in enumerate(game.clients)},
        "found_by": eq.found_by,
        "benefit_graphs": [benefit_graph_to_json(g) for g in eq.graphs],
        **_contribution_json(eq),
    }
    if eq.certificate is not None:
        cert = eq.certificate
        out["certificate"] = {
            "inner_agreement": cert.inner.holds,
            "outer_agreement": cert.outer.holds,
            "method": cert.method,
            "inner": _report_json(game, cert.inner),
            "outer": _report_json(game, cert.outer),
        }
        if game.uncertainty is not None:
            out["certificate"].update({
                "z": cert.z, "verdict": cert.verdict, "confirmed": cert.confirmed,
                "uncertainty": game.uncertainty.kind,
                "family": cert.family,
                "thresholds": None if cert.thresholds is None else dict(zip(game.clients, cert.thresholds, strict=True)),
                "point_values_hold": cert.point_holds,
                "closest_inner": _closest_json(game, cert.closest_inner),
                "closest_outer": _closest_json(game, cert.closest_outer)})
    return out


def _closest_json(game: Game, c) -> dict | None:
    if c is None:
        return None
    out = {"coalition": game.names(c.coalition), "z_score": c.score,
           "members": {game.clients[i]: x for i, x in c.members}, "comparisons": c.comparisons}
    if c.subcoalition:
        out["subcoalition"] = game.names(c.subcoalition)
    return out


def _contribution_json(eq) -> dict:
    """``benefit``, ``contribution`` and ``carries`` (:mod:`coalitions.contribution`) of an equilibrium."""
    from .contribution import benefits, contributions

    game, names = eq.game, eq.game.clients
    gain = benefits(game, eq.masks, eq.semantics)
    c = contributions(game, eq.masks, eq.semantics)
    return {"benefit": {names[i]: float(gain[i]) for i in range(game.n)},
            "contribution": {names[i]: float(np.nansum(c[i])) for i in range(game.n)},
            "carries": {names[i]: {names[j]: float(c[i, j]) for j in range(game.n) if not np.isnan(c[i, j])}
                        for i in range(game.n)}}


def support_to_json(game: Game, sup) -> dict:
    """``"support"`` of ``coalitions/equilibrium@1``: partition share, coalition shares, replicate count."""
    return {"partition": sup.partition_share,
            "coalitions": {game.key(k): s for k, s in sup.coalition_shares.items()},
            "replicates": sup.b}


def equilibria_to_json(game: Game, semantics: str, found: Iterable[tuple[int, ...]]) -> dict:
    """``coalitions/equilibria@1``: every CE as lists of name lists."""
    from .partition import canonical

    return {"format": EQUILIBRIA_FORMAT, "semantics": semantics,
            "equilibria": [[game.names(k) for k in canonical(p)] for p in found]}


def checks_to_json(game: Game, partition, reports: Mapping[str, Any]) -> dict:
    """Verification output: the partition and every check with its witnesses."""
    return {"format": "coalitions/verification@1", "partition": [game.names(k) for k in partition],
            "is_equilibrium": reports["inner_agreement"].holds and reports["outer_agreement"].holds,
            "checks": {k: _report_json(game, r) for k, r in reports.items()}}
