"""Data roles: the rows that train, the rows that tune and the rows that score (docs/learners-protocol.md#data-roles).

A model's learning rate (the protocol's ``lr_grid``) and its stopping step (``patience``) are
*chosen*; a choice made on the rows that then score the game is scored optimistically, the more so
the fewer rows a client has (Adult's PhD client has 82 validation rows).  Under a protocol with a
``tune_split`` every column — the exact game's subset models, every personalised learner, SPO —
therefore trains on the same rows, chooses on the same *tuning* rows and is scored on the
validation rows, which keep their number (the game's measurement noise does not grow):

* **train**: what remains of each client's training rows;
* **tune**: ``tune_split`` of each client's training rows, held out before anything trains,
  stratified by class for classification, drawn from the federation's split seed
  (``options["seed"]``) and the client's name, so that the rows are the same for every column,
  every run and every site of a federated run;
* **score**: the validation rows (the game's values, the learners' utilities, the bootstrap
  replicates);
* **test**: untouched, for reporting only.

Without a ``tune_split`` (``None``, the default) the validation rows tune *and* score, as before.

Examples
--------
>>> import numpy as np
>>> from coalitions.learners.data.federation import Client, Federation, Split
>>> s = Split(np.arange(20, dtype=np.float32).reshape(10, 2), np.arange(10, dtype=np.float32))
>>> fed = Federation("toy", "regression", "mse", (Client("a", s, s, s),), options={"seed": 3})
>>> carved = carve_tuning(fed, 0.2)
>>> len(carved.clients[0].train), len(carved.clients[0].tune), len(carved.clients[0].val)
(8, 2, 10)
>>> data_roles(carved)["tune"], data_roles(fed)["tune"]
('train holdout 20%', 'validation')
"""

from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np

from coalitions.errors import InputError
from coalitions.learners.data.federation import Client, Federation, Split

__all__ = ["carve_tuning", "with_roles", "data_roles", "tuning_rows", "TUNE_SALT"]

#: Mixed into every client's seed, so that the tuning rows are not the rows any other draw of the split seed picks.
TUNE_SALT = 0x7E5E


def tuning_rows(y: np.ndarray, fraction: float, rng: np.random.Generator, stratify: bool) -> np.ndarray:
    """The sorted indices of the rows of ``y`` held out for tuning.

    ``round(fraction·n_c)`` rows of every class ``c`` (``stratify``; regression: of all ``n``
    rows), never a class's last row (training keeps every class it had), and at least one row in
    all: a client with a single training row has none to spare (:class:`InputError`).
    """
    y = np.asarray(y)
    n = len(y)
    if n < 2:
        raise InputError(f"{n} training row(s): none to hold out for tuning")
    groups = ([rng.permutation(np.flatnonzero(y == c)) for c in np.unique(y)] if stratify
              else [rng.permutation(n)])
    take = [min(len(g) - 1, int(round(fraction * len(g)))) for g in groups]
    if sum(take) == 0:   # too few rows for the share: one row of the largest group
        take[int(np.argmax([len(g) for g in groups]))] = 1
    return np.sort(np.concatenate([g[:k] for g, k in zip(groups, take, strict=True)])).astype(np.int64)


def _client_rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), TUNE_SALT, zlib.crc32(name.encode())])


def carve_tuning(federation: Federation, fraction: float, seed: int | None = None) -> Federation:
    """``federation`` with ``fraction`` of each client's training rows moved into its ``tune`` split.

    Parameters
    ----------
    federation : Federation
        Without tuning rows of its own.
    fraction : float
        In ``(0, 1)``: the share of each client's training rows (per class for classification) held out.
    seed : int, optional
        The seed of the draw; ``None``: the federation's split seed, ``options["seed"]`` (0 without one).
        Each client draws from ``(seed, TUNE_SALT, crc32(name))``: its rows do not depend on the other clients.

    Returns
    -------
    Federation
        The same clients, validation and test rows; training rows the rest, in their order;
        ``tuning = {"fraction": fraction, "seed": seed}``.
    """
    if federation.tuning is not None:
        raise InputError(f"federation {federation.name!r} already holds tuning rows ({federation.tuning})")
    if not 0 < float(fraction) < 1:
        raise InputError(f"the tuning share must lie in (0, 1), got {fraction!r}")
    seed = int(federation.options.get("seed", 0) or 0) if seed is None else int(seed)
    clients = []
    for c in federation.clients:
        try:
            held = tuning_rows(c.train.y, float(fraction), _client_rng(seed, c.name), federation.task != "regression")
        except InputError as e:
            raise InputError(f"client {c.name!r}: {e}") from None
        keep = np.setdiff1d(np.arange(len(c.train)), held)
        clients.append(Client(c.name, Split(c.train.X[keep], c.train.y[keep]), c.val, c.test,
                              Split(c.train.X[held], c.train.y[held])))
    return replace(federation, clients=tuple(clients), tuning={"fraction": float(fraction), "seed": seed})


def with_roles(federation: Federation, protocol) -> Federation:
    """The federation a column trains on under ``protocol``: its tuning rows held out when ``tune_split`` asks.

    Every column calls it with its protocol, so that all columns of a comparison see the same
    rows: with ``protocol.tune_split`` the carved federation (:func:`carve_tuning`, from the
    federation's split seed); without one the federation itself (its validation rows tune).
    Idempotent: a federation already carved with the same share is returned as it is; one
    carved differently, or carved under a protocol without a ``tune_split``, is an error (two
    columns would tune on different rows).
    """
    share = getattr(protocol, "tune_split", None)
    have = federation.tuning
    if have is not None:
        if share is None or float(share) != float(have["fraction"]):
            raise InputError(f"federation {federation.name!r} holds tuning rows of share {have['fraction']:g}; "
                             f"the protocol's tune_split is {share!r}")
        return federation
    return federation if share is None else carve_tuning(federation, share)


def data_roles(federation: Federation) -> dict:
    """Which rows tuned and which scored, with each client's row counts (the provenance of a result).

    ``{"tune": "validation" | "train holdout 20%", "score": "validation", "seed": s (carved only),
    "rows": {client: {"train": n, "tune": n, "score": n, "test": n}}}``.
    """
    carved = federation.tuning
    out: dict = {"tune": "validation" if carved is None else f"train holdout {100 * carved['fraction']:g}%",
                 "score": "validation"}
    if carved is not None:
        out["seed"] = int(carved["seed"])
    out["rows"] = {c.name: {"train": len(c.train), "tune": len(c.tuning), "score": len(c.val), "test": len(c.test)}
                   for c in federation.clients}
    return out
