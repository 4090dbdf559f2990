"""The finished pieces of a reproduction on disk: where they live, how they are stored and resumed.

A *piece* is one exact game or one learner's estimate of one regime and seed
(:func:`~coalitions.learners.experiments.columns.compute_piece` trains it).  Each is written under
``DIR/runs/<quick|full>/<regime>-seed<k>/`` as soon as it finishes — the exact games as
``coalitions/game@1``, the estimates as ``coalitions/estimate@1`` — with its training time, so
an interrupted ``coalitions reproduce`` resumes without losing finished work, and a piece
written by another version or other settings is trained again rather than trusted.
"""

from __future__ import annotations

import time
from pathlib import Path

import coalitions as co
from coalitions.errors import InputError
from coalitions.io import read_json, write_json
from coalitions.learners.experiments.catalogue import (
    Experiment,
)
from coalitions.learners.experiments.columns import (
    compute_piece,
)
from coalitions.numbers import to_float

__all__ = ["store_piece"]


def _read_timings(folder: Path) -> dict:
    """``{piece file name: seconds}`` of the pieces finished in ``folder`` (empty if none)."""
    path = folder / "timings.json"
    try:
        table = read_json(path) if path.exists() else {}
    except InputError:  # an unreadable table only loses the timings of earlier invocations
        return {}
    out = {}
    for piece, seconds in table.items():  # likewise an entry that is not a duration (10**400, "x", -1)
        try:
            if to_float(seconds, "a timing") >= 0:
                out[piece] = seconds
        except InputError:
            pass
    return out


def _record_time(folder: Path, piece: str, seconds: float) -> None:
    """Remember how long a finished piece took, so that a resumed run still reports it."""
    table = _read_timings(folder)
    table[piece] = round(seconds, 3)
    write_json(table, folder / "timings.json")


def _files(where: Path, what: str, loss: bool = False) -> tuple[Path, ...]:
    """The files of one piece: ``what`` is ``"exact"`` (two games, three with the ``loss`` game) or a learner's name."""
    if what == "exact":
        return ((where.with_name(where.name + "-game.json"), where.with_name(where.name + "-test-game.json"))
                + ((where.with_name(where.name + "-loss-game.json"),) if loss else ()))
    return (where.with_name(f"{where.name}-{what}.json"),)


def store_piece(where: Path, what: str, result, seconds: float) -> None:
    """Write a finished piece into the run folder (its last file marks it finished) with its time."""
    from coalitions.estimate import write_estimate

    files = _files(where, what, what == "exact" and len(result) > 4 and result[4] is not None)
    if what == "exact":
        if len(files) > 2:
            co.write_game(result[4], files[2], result[5])
        co.write_game(result[1], files[1])
        co.write_game(result[0], files[0], result[3])  # last: its presence marks the pair finished
    else:
        write_estimate(result, files[0])
    _record_time(where.parent, files[0].name, seconds)


def _done_line(where: Path, what: str, result, n: int, seconds: float) -> str:
    if what == "exact":
        return f"{where.name}: exact game, {2 ** n - 1} subset models ({result[2]}), {seconds:.1f} s"
    return f"{where.name}: {what}, {seconds:.1f} s"


def _read_piece(files, what: str):
    """A finished piece from its files: ``(game, test game, replicates, loss game, loss replicates)`` or an estimate."""
    if what == "exact":
        from coalitions.io import read_game_replicates

        game, reps = read_game_replicates(files[0])
        loss, loss_reps = read_game_replicates(files[2]) if len(files) > 2 else (None, None)
        return game, co.read_game(files[1]), reps, loss, loss_reps
    from coalitions.estimate import read_estimate
    from coalitions.numbers import to_array

    est = read_estimate(files[0])
    outputs = est.extra.get("test_outputs")
    for c, o in (outputs.items() if isinstance(outputs, dict) else ()):
        try:
            to_array(o, f"extra.test_outputs of client {c!r}")
        except InputError as e:
            raise InputError(f"{files[0]}: {e}") from None
    return est


def _same_protocol(recorded, wanted, tuned=None) -> bool:
    """Was a piece that records ``recorded`` (its protocol's JSON) trained under ``wanted`` (None: nothing to check)?

    Under a rate grid a fitted column records the rate it chose, so the rate is then not compared,
    but the grid it was tuned on must be ``wanted``'s: the recorded protocol's ``lr_grid``, or
    ``tuned`` (the grid of the piece's ``lr_tuning`` record) where the column records only the rate it
    kept. A piece tuned on a grid is not current for a fixed rate, nor one trained at a fixed rate
    for a grid. Every other field is compared (the budget, the local steps, the patience, the rows
    that tune, ...).
    """
    from dataclasses import asdict

    from coalitions.learners.training.protocol import TrainingProtocol
    from coalitions.params import ParameterError

    if wanted is None:
        return True
    if not isinstance(recorded, dict):
        return False
    try:
        got = asdict(TrainingProtocol.from_json(recorded))
    except (ParameterError, InputError, TypeError, ValueError):
        return False
    want = asdict(wanted)
    grid = got["lr_grid"] if got["lr_grid"] is not None else tuned
    grid = None if grid is None else [float(g) for g in grid]
    if grid != (None if wanted.lr_grid is None else [float(g) for g in wanted.lr_grid]):
        return False
    if wanted.lr_grid is not None:
        for k in ("lr", "lr_grid"):
            got.pop(k)
            want.pop(k)
    return got == want


def _is_current(piece, what: str, fed, init_seed: int, options: dict | None = None) -> bool:
    """Was this finished piece made from this federation's split and ``init_seed``, under ``options``' protocol and
    method options, with the report's records?

    Pieces of an earlier version (one seed for split and initialisation, or estimates without
    ``extra.test_outputs``) or of other settings (a changed protocol, budget or method option) are
    trained again, never mixed in.
    """
    options = options or {}
    data_seed = fed.options.get("seed")
    wanted = options.get("protocol")
    if what == "exact":
        prov = piece[0].provenance
        return (prov.get("seed") == init_seed and prov.get("options", {}).get("seed") == data_seed
                and _same_protocol((prov.get("model") or {}).get("protocol"), wanted))
    cfg = piece.config
    own = {_recorded_as(what, k): v for k, v in options.items() if k != "protocol"}
    tuned = (piece.extra.get("lr_tuning") or {}).get("grid")
    return (cfg.get("seed") == init_seed and cfg.get("data_options", {}).get("seed") == data_seed
            and "test_outputs" in piece.extra and _same_protocol(cfg.get("protocol"), wanted, tuned)
            and all(k in cfg and cfg[k] == v for k, v in own.items()))


def _recorded_as(what: str, key: str) -> str:
    """The name under which an estimate of column ``what`` records its option ``key``: the estimator's
    parameter (SPO's ``mlp_hidden`` is its ``target_hidden``), or ``key`` for an option the registry does not list."""
    from coalitions.learners.experiments.catalogue import method_of
    from coalitions.learners.methods.registry import METHODS

    method = METHODS.get(method_of(what))
    try:
        return method.option(key).arg if method is not None else key
    except KeyError:
        return key


def _piece(fed, exp: Experiment, what: str, options: dict, seed: int, device: str, where: Path, log, progress,
           quiet: bool = False):
    """A piece read back from ``where`` when finished (said in ``log`` unless ``quiet``), else trained and written."""
    files = _files(where, what, what == "exact" and bool(options.get("loss_game")))
    if all(f.exists() for f in files):
        back = _read_piece(files, what)
        if _is_current(back, what, fed, seed, options):
            if not quiet:
                log(f"{where.name}: {'exact game' if what == 'exact' else what} read back from {files[0].name}")
            return back
        log(f"{where.name}: {files[0].name} was made with other seeds or settings or lacks the test outputs; "
            "training again")
    t = time.perf_counter()
    tick = None if progress is None else (lambda done, total: progress(f"{where.name}: {what}", done, total))
    result = compute_piece(fed, exp, what, options, seed, device, tick)
    seconds = time.perf_counter() - t
    store_piece(where, what, result, seconds)
    log(_done_line(where, what, result, fed.n, seconds))
    return (result[0], result[1], result[3], result[4], result[5]) if what == "exact" else result
