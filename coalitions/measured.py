"""The measurements of a lazy game, kept: asked of the source once, saved and resumed (docs/formats.md).

A :class:`MeasuredGame` stands between a :class:`~coalitions.lazy.ValueSource` and
whatever asks for values.  It asks the source only for coalitions not yet measured,
so its :attr:`~MeasuredGame.trainings` — the number of distinct coalitions measured —
is what the source trained.  It saves itself as ``coalitions/measured@1`` (an
``.npz``, written through :func:`coalitions.files.write_file`, complete or not at
all) and :meth:`MeasuredGame.load` reads it back for the same source only: an
interrupted run resumes without training again what it had.

Standard errors of differences follow :mod:`coalitions.noise`: the paired bootstrap
SD when the source gives replicates, ``sqrt(s_S² + s_T²)`` with one standard error per
value, zero for exact values.

Examples
--------
>>> import numpy as np
>>> from coalitions.lazy_analytic import PlantedSource
>>> cache = MeasuredGame(PlantedSource((2, 2), seed=1))
>>> cache.measure(np.array([3, 5])), cache.measure(np.array([3, 12])), cache.trainings   # {0,1} is asked once
(2, 1, 3)
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections import Counter
from typing import Any

import numpy as np

from .errors import InputError
from .files import open_input, write_file
from .io import _DAMAGED, _ZIP_MAGIC, MAX_NPZ_BYTES, _clean, _npy_data, _npy_header, parse_json
from .lazy import Measurement, ValueSource, check_masks, check_measurement, check_source

__all__ = ["MEASURED_FORMAT", "MeasuredGame"]

MEASURED_FORMAT = "coalitions/measured@1"
#: Largest ``clients``/``sense``/``provenance``/``format`` member, uncompressed.
_SMALL = 16 << 20


def _normal(prov: Any) -> Any:
    """A provenance as its JSON round trip (tuples become lists, NaN null): what a file holds."""
    return json.loads(json.dumps(_clean(prov)))


class MeasuredGame:
    """A cache of a source's measurements (mutable: it grows as coalitions are measured).

    Parameters
    ----------
    source : ValueSource
        What measures the coalitions not yet held.

    Attributes
    ----------
    trainings : int
        Distinct coalitions measured (by this object or by the run it was loaded from).
    kind : {"exact", "replicates", "se"}
        The uncertainty the source gives, fixed by its first measurement.
    """

    def __init__(self, source: ValueSource):
        self.source = check_source(source)
        self.clients = tuple(source.clients)
        self.sense = source.sense
        self.provenance = _normal(dict(source.provenance))
        self.n = len(self.clients)
        self._masks = np.zeros(0, dtype=np.int64)
        self._values = np.zeros((self.n, 0))
        self._reps: np.ndarray | None = None
        self._se: np.ndarray | None = None
        self.kind: str | None = None
        self._sign = -1.0 if self.sense == "min" else 1.0

    @property
    def trainings(self) -> int:
        """Distinct coalitions measured."""
        return int(self._masks.size)

    @property
    def masks(self) -> np.ndarray:
        """The measured coalitions, ascending (a read-only copy)."""
        out = self._masks.copy()
        out.setflags(write=False)
        return out

    def missing(self, masks: np.ndarray) -> np.ndarray:
        """The distinct coalitions of ``masks`` not measured yet, ascending."""
        masks = np.unique(np.asarray(masks, dtype=np.int64))
        return masks[~np.isin(masks, self._masks)]

    def measure(self, masks: np.ndarray) -> int:
        """Measure the coalitions of ``masks`` not held yet (one call of the source); return how many."""
        new = self.missing(masks)
        if not new.size:
            return 0
        check_masks(new, self.n)
        got = check_measurement(self.source.measure(new.copy()), new, self.n)
        self._add(got)
        return int(new.size)

    def _add(self, got: Measurement) -> None:
        if self.kind is None:
            self.kind = got.kind
            if got.replicates is not None:
                self._reps = np.zeros((np.asarray(got.replicates).shape[0], self.n, 0))
            elif got.se is not None:
                self._se = np.zeros((self.n, 0))
        elif got.kind != self.kind:
            raise InputError(f"the source gave {got.kind} measurements after {self.kind} ones; one kind per game")
        masks = np.concatenate([self._masks, got.masks])
        order = np.argsort(masks, kind="stable")
        self._masks = masks[order]
        self._values = np.concatenate([self._values, np.asarray(got.values, dtype=np.float64)], axis=1)[:, order]
        if self._reps is not None:
            reps = np.asarray(got.replicates, dtype=np.float64)
            if reps.shape[0] != self._reps.shape[0]:
                raise InputError(f"the source gave {reps.shape[0]} replicates after {self._reps.shape[0]}")
            self._reps = np.concatenate([self._reps, reps], axis=2)[:, :, order]
        if self._se is not None:
            self._se = np.concatenate([self._se, np.asarray(got.se, dtype=np.float64)], axis=1)[:, order]

    def _columns(self, masks: np.ndarray) -> np.ndarray:
        masks = np.asarray(masks, dtype=np.int64)
        cols = np.searchsorted(self._masks, masks)
        if masks.size and (np.any(cols >= self._masks.size) or np.any(self._masks[np.minimum(cols, self._masks.size - 1)]
                                                                         != masks)):
            raise KeyError("coalition not measured")
        return cols

    def values(self, masks: np.ndarray) -> np.ndarray:
        """``v_i(S)`` higher-is-better (a loss negated), shape ``(N, len(masks))``; the coalitions must be measured."""
        return self._sign * self._values[:, self._columns(masks)]

    def raw_values(self, masks: np.ndarray) -> np.ndarray:
        """``v_i(S)`` in the source's sense, shape ``(N, len(masks))``."""
        return self._values[:, self._columns(masks)]

    def diff_se(self, i: int, s: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``se_i(S, T)`` for paired arrays of measured coalitions ``s`` and ``t`` (``0`` where ``S = T``)."""
        s = np.asarray(s, dtype=np.int64)
        t = np.broadcast_to(np.asarray(t, dtype=np.int64), s.shape)
        if self._reps is not None:
            d = self._reps[:, i, self._columns(s)] - self._reps[:, i, self._columns(t)]
            return np.std(d, axis=0, ddof=1)
        if self._se is not None:
            return np.where(s == t, 0.0, np.hypot(self._se[i, self._columns(s)], self._se[i, self._columns(t)]))
        return np.zeros(s.shape)

    # ---------------------------------------------------------------- files

    def save(self, path: str | os.PathLike) -> None:
        """Write ``coalitions/measured@1`` (docs/formats.md) through :func:`coalitions.files.write_file`."""
        extra: dict[str, Any] = {}
        if self._reps is not None:
            extra["replicates"] = self._reps
        if self._se is not None:
            extra["se"] = self._se
        buf = io.BytesIO()
        np.savez_compressed(buf, format=np.array(MEASURED_FORMAT), clients=np.array(self.clients),
                            sense=np.array(self.sense), provenance=np.array(json.dumps(self.provenance)),
                            kind=np.array(self.kind or "exact"), masks=self._masks, values=self._values, **extra)
        data = buf.getvalue()
        write_file(path, lambda f: f.write(data))

    @classmethod
    def load(cls, path: str | os.PathLike, source: ValueSource) -> MeasuredGame:
        """Read ``path`` back as the cache of ``source``; a file of another source is refused.

        Raises
        ------
        InputError
            Naming ``path``: not a ``coalitions/measured@1`` file, damaged, arrays of the
            wrong type or shape, values where a client is not a member, or measured by
            another source (its clients, sense or provenance differ: the message says which).
        """
        out = cls(source)
        arrays = _read(path)
        fail = _failer(path)
        names = [str(c) for c in arrays["clients"]]
        if tuple(names) != out.clients:
            if len(names) != out.n:
                fail(f"measured by another source: its clients are {len(names)}, the source's {out.n}")
            k = next(k for k, (a, b) in enumerate(zip(names, out.clients, strict=True)) if a != b)
            fail(f"measured by another source: its clients differ from the source's at {k}: {names[k]!r} in "
                 f"the file, {out.clients[k]!r} for the source")
        if str(arrays["sense"]) != out.sense:
            fail(f"measured by another source: its sense is {str(arrays['sense'])!r}, the source's {out.sense!r}")
        try:
            prov = parse_json(str(arrays["provenance"]))
        except (ValueError, RecursionError, InputError) as e:
            fail(f"'provenance' must hold a JSON object ({str(e).splitlines()[0]})")
        if prov != out.provenance:
            keys = sorted(set(prov) | set(out.provenance)) if isinstance(prov, dict) else ["provenance"]
            key = next(k for k in keys if not isinstance(prov, dict) or prov.get(k) != out.provenance.get(k))
            got = prov.get(key) if isinstance(prov, dict) else prov
            fail(f"measured by another source: provenance {key!r} is {got!r} in the file, "
                 f"{out.provenance.get(key)!r} for the source")
        kind = str(arrays["kind"])
        if kind not in ("exact", "replicates", "se") or (kind == "replicates") != ("replicates" in arrays) or (
                kind == "se") != ("se" in arrays):
            fail(f"'kind' {kind!r} does not match the arrays the file holds")
        masks = arrays["masks"]
        try:
            masks = check_masks(masks, out.n)
            if masks.size and np.any(np.diff(masks) <= 0):
                raise InputError("'masks' must be ascending")
            m = Measurement(masks, arrays["values"], arrays.get("replicates"), arrays.get("se"))
            check_measurement(m, masks, out.n, "the file")
        except InputError as e:
            fail(str(e))
        if kind == "replicates":
            out._reps = np.zeros((np.asarray(m.replicates).shape[0], out.n, 0))
        elif kind == "se":
            out._se = np.zeros((out.n, 0))
        out.kind = kind
        out._add(Measurement(m.masks, np.asarray(m.values, dtype=np.float64),
                             None if m.replicates is None else np.asarray(m.replicates, dtype=np.float64),
                             None if m.se is None else np.asarray(m.se, dtype=np.float64)))
        return out


def _failer(path):
    def fail(msg: str):
        raise InputError(f"{path}: {' '.join(msg.splitlines())}")
    return fail


def _read(path) -> dict[str, np.ndarray]:
    """The arrays of a ``coalitions/measured@1`` file, every header checked before its data is read."""
    fail = _failer(path)
    out: dict[str, np.ndarray] = {}
    with open_input(path, MAX_NPZ_BYTES, "a measured game") as f:
        head = f.read(4)
        if head not in _ZIP_MAGIC:
            fail("not a coalitions/measured@1 file (an .npz zip archive of .npy arrays)")
        f.seek(0)
        try:
            zf = zipfile.ZipFile(f)
        except _DAMAGED as e:
            fail(f"not a readable .npz file: damaged zip archive ({e})")
        with zf:
            names = zf.namelist()
            twice = sorted(x for x, k in Counter(names).items() if k > 1)
            if twice:
                fail(f"the archive holds member {twice[0]!r} twice")
            members = {x[:-4]: zf.getinfo(x) for x in names if x.endswith(".npy")}
            if "format" not in members:
                fail(f"not a {MEASURED_FORMAT} file (no 'format' array)")
            for key in ("format", "clients", "sense", "provenance", "kind"):
                if key not in members:
                    fail(f"{MEASURED_FORMAT} file lacks array {key!r}")
                if members[key].file_size > _SMALL:
                    fail(f"array {key!r} is {members[key].file_size:,} bytes, more than the {_SMALL:,} allowed")
                _, dtype = _npy_header(zf, members[key], path, key)
                if dtype.kind != "U":
                    fail(f"{key!r} must hold text, got dtype {dtype}")
                out[key] = _npy_data(zf, members[key], path, key)
                if key != "clients" and out[key].shape != ():
                    fail(f"{key!r} must be one string")
            if str(out["format"]) != MEASURED_FORMAT:
                fail(f"unknown format {str(out['format'])!r} (expected {MEASURED_FORMAT!r})")
            if out["clients"].ndim != 1:
                fail("'clients' must be a 1-d array of names")
            n = out["clients"].shape[0]
            shapes = {"masks": 1, "values": 2, "replicates": 3, "se": 2}
            for key, ndim in shapes.items():
                if key not in members:
                    if key in ("masks", "values"):
                        fail(f"{MEASURED_FORMAT} file lacks array {key!r}")
                    continue
                shape, dtype = _npy_header(zf, members[key], path, key)
                if dtype.kind not in ("iu" if key == "masks" else "f"):
                    fail(f"{key!r} must be {'integer' if key == 'masks' else 'floating-point'}, got dtype {dtype}")
                if len(shape) != ndim or (ndim >= 2 and shape[-2] != n):
                    fail(f"{key!r} has shape {tuple(shape)}, which does not fit {n} clients")
                out[key] = _npy_data(zf, members[key], path, key)
            k = out["masks"].shape[0]
            for key in ("values", "replicates", "se"):
                if key in out and out[key].shape[-1] != k:
                    fail(f"{key!r} has {out[key].shape[-1]} columns for {k} coalitions")
    return out
