"""Reading and writing the file formats of SPEC §7.

* ``coalitions/game@1`` JSON and the equivalent ``.npz`` (arrays ``values``,
  ``clients``, ``sense``) — :func:`read_game`, :func:`write_game`.  ``values``
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
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError
from .game import Game

__all__ = ["GAME_FORMAT", "read_game", "write_game", "game_to_json", "game_from_json",
           "equilibrium_to_json", "equilibria_to_json", "benefit_graph_to_json", "write_json",
           "read_json"]

GAME_FORMAT = "coalitions/game@1"
EQUILIBRIUM_FORMAT = "coalitions/equilibrium@1"
EQUILIBRIA_FORMAT = "coalitions/equilibria@1"
GRAPH_FORMAT = "coalitions/benefit-graph@1"


def _fail(path, msg: str):
    raise InputError(f"{path}: {msg}")


def read_json(path: str | os.PathLike, expected_format: str | None = None) -> dict:
    """Load a JSON object, checking its ``"format"`` tag when ``expected_format`` is given."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        _fail(path, "no such file")
    except IsADirectoryError:
        _fail(path, "is a directory, not a file")
    except (OSError, UnicodeDecodeError) as e:
        _fail(path, f"cannot be read ({e.__class__.__name__}: {e})")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        _fail(path, f"not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})")
    except (ValueError, RecursionError) as e:  # over-long integer literal, nesting too deep
        _fail(path, f"not valid JSON ({e.__class__.__name__}: {e})")
    if not isinstance(data, dict):
        _fail(path, "must hold a JSON object")
    if expected_format is not None:
        fmt = data.get("format")
        if fmt != expected_format:
            _fail(path, f"unknown format {fmt!r} (expected {expected_format!r})")
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


def _read_npz(path) -> Game:
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("values", "clients", "sense") if k not in z.files]
            if missing:
                _fail(path, f"npz game lacks array {missing[0]!r}")
            values = z["values"]
            clients = z["clients"]
            sense = z["sense"]
            prov = json.loads(str(z["provenance"])) if "provenance" in z.files else {}
    except InputError:
        raise
    except FileNotFoundError:
        _fail(path, "no such file")
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        _fail(path, f"not a readable .npz game ({e.__class__.__name__}: {e})")
    if values.dtype.kind not in "fiu":
        _fail(path, f"'values' must be numeric, got dtype {values.dtype}")
    if clients.dtype.kind != "U" or clients.ndim != 1:
        _fail(path, "'clients' must be a 1-d array of names")
    if sense.shape != () or str(sense) not in ("max", "min"):
        _fail(path, f"'sense' must be 'max' or 'min', got {sense!r}")
    if not isinstance(prov, dict):
        _fail(path, "'provenance' must hold a JSON object")
    n = clients.size
    if values.shape != (n, 1 << n):
        _fail(path, f"'values' must have shape ({n}, {1 << n}) for {n} clients, got {values.shape}")
    # float32 values stay float32 (a game stored in float32: see coalitions.precision)
    dtype = "float32" if values.dtype == np.float32 else "float64"
    return Game.from_array(values, [str(c) for c in clients], str(sense), prov, dtype=dtype)


def read_game(path: str | os.PathLike) -> Game:
    """Read a game from ``coalitions/game@1`` JSON or ``.npz`` (chosen by the file ending)."""
    try:
        if str(path).endswith(".npz"):
            return _read_npz(path)
        return game_from_json(read_json(path, GAME_FORMAT))
    except InputError as e:
        msg = str(e)
        if msg.startswith(f"{path}: "):
            raise
        raise InputError(f"{path}: {msg}") from None


def game_to_json(game: Game) -> dict:
    """``coalitions/game@1`` dict, values in the game's own sense."""
    raw = game.raw_values()
    values = {}
    for i, name in enumerate(game.clients):
        row = raw[i]
        masks = np.flatnonzero(~np.isnan(row))
        values[name] = {game.key(int(m)): float(row[m]) for m in masks}
    out = {"format": GAME_FORMAT, "clients": list(game.clients), "sense": game.sense, "values": values}
    if game.provenance:
        out["provenance"] = dict(game.provenance)
    return out


def write_game(game: Game, path: str | os.PathLike) -> None:
    """Write JSON, or ``.npz`` when ``path`` ends in ``.npz``."""
    path = str(path)
    if path.endswith(".npz"):
        _atomic(path, lambda tmp: np.savez_compressed(
            tmp, values=game.raw_values(), clients=np.array(game.clients), sense=np.array(game.sense),
            provenance=np.array(json.dumps(_clean(dict(game.provenance))))))
    else:
        write_json(game_to_json(game), path)


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
    """Serialise with NaN/inf as null; write to ``path`` unless it is None. Returns the text."""
    text = json.dumps(_clean(data), indent=1, allow_nan=False) + "\n"
    if path is not None:
        _atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return text


def _atomic(path, write) -> None:
    """``write(tmp)`` next to ``path``, then rename: an interrupted write never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.partial{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


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
        "clients": list(game.clients),
        "partition": eq.blocks(),
        "rounds": [[game.names(k) for k in ks] for ks in eq.rounds],
        "payoffs": {c: float(pay[i]) for i, c in enumerate(game.clients)},
        "mau": {c: float(eq.mau_all[i]) for i, c in enumerate(game.clients)},
        "found_by": eq.found_by,
        "benefit_graphs": [benefit_graph_to_json(g) for g in eq.graphs],
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
    return out


def equilibria_to_json(game: Game, semantics: str, found: Iterable[tuple[int, ...]]) -> dict:
    """``coalitions/equilibria@1``: every CE as lists of name lists."""
    return {"format": EQUILIBRIA_FORMAT, "semantics": semantics,
            "equilibria": [[game.names(k) for k in p] for p in found]}


def checks_to_json(game: Game, partition, reports: Mapping[str, Any]) -> dict:
    """Verification output: the partition and every check with its witnesses."""
    return {"format": "coalitions/verification@1", "partition": [game.names(k) for k in partition],
            "is_equilibrium": reports["inner_agreement"].holds and reports["outer_agreement"].holds,
            "checks": {k: _report_json(game, r) for k, r in reports.items()}}
