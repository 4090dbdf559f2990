"""On-disk checkpoints: one format and one fingerprint for every long fit.

The personalised learners save their state after every round and the exhaustive
oracle after every chunk of subset models; both resume from the file and give the
result an uninterrupted run gives.  One format serves both: a NumPy ``.npz``
archive (no pickle) holding

* ``format``: ``"coalitions/checkpoint@1"``;
* ``key``: the *fingerprint* of everything that determines the result
  (:func:`fingerprint`: the settings and the data), so that a checkpoint of
  another run is refused instead of mixed in;
* ``progress``: the rounds or chunks done;
* the state, a tree of dicts and lists whose leaves are arrays, tensors and JSON
  numbers or strings: the tree's skeleton as JSON, every array or tensor as its
  own member (tensors come back as tensors, on the caller's device);
* ``meta``: JSON-ready notes (a loss history, the engine chosen);
* ``checksum``: SHA-256 of all of the above (``_checksum``), so that a
  checkpoint damaged or edited by hand is refused instead of resumed from.
  It detects accidents only: it is not keyed, and anyone who can write the
  file can re-compute it (docs/formats.md, "Checkpoints").

Members are stored uncompressed; reading, every ``.npy`` header is checked
against its member's bytes before any array is allocated, members that unpack
to more than the file's size (a compressed bomb) are refused, and the total is
checked against the available memory (``_read_members``).

Reading it back, every fault of the content -- a string or object array where
numbers belong, a skeleton nested deeper than :data:`MAX_DEPTH`, a node of
unknown kind, a checksum that does not match -- is one
:class:`~coalitions.errors.InputError` naming the checkpoint.

Files are read through :func:`coalitions.files.open_input` (regular files only, size
limit first) and replaced by :func:`coalitions.files.write_file` (a temporary file, then
``os.replace``), so an interrupted save leaves the previous checkpoint intact.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import zipfile
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from coalitions.errors import InputError
from coalitions.files import open_input, write_file
from coalitions.io import MAX_NPZ_BYTES, parse_json
from coalitions.numbers import to_int

__all__ = ["CHECKPOINT_FORMAT", "fingerprint", "federation_arrays", "save_state", "load_state", "Checkpoint"]

CHECKPOINT_FORMAT = "coalitions/checkpoint@1"
#: Deepest skeleton read back (the learners' states are at most about 5 levels deep).
MAX_DEPTH = 64


def fingerprint(config: dict, arrays=()) -> str:
    """SHA-256 of a JSON-able ``config`` and the dtype, shape and bytes of ``arrays``."""
    h = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def federation_arrays(federation) -> list[np.ndarray]:
    """Every client's features and targets of every split, in order (for :func:`fingerprint`)."""
    return [a for c in federation.clients for part in (c.train, c.val, c.test) for a in (part.X, part.y)]


# --------------------------------------------------------------------------- the state tree
def _pack(x, arrays: list):
    """The JSON skeleton of ``x``; arrays and tensors are appended to ``arrays``."""
    if isinstance(x, dict):
        return {"dict": {str(k): _pack(v, arrays) for k, v in x.items()}}
    if isinstance(x, (list, tuple)):
        return {"list": [_pack(v, arrays) for v in x]}
    if isinstance(x, np.ndarray):
        arrays.append(np.ascontiguousarray(x))
        return {"array": len(arrays) - 1}
    if type(x).__module__.startswith("torch"):  # a tensor, without importing torch here
        arrays.append(x.detach().cpu().numpy())
        return {"tensor": len(arrays) - 1}
    if isinstance(x, np.generic):
        x = x.item()
    if x is None or isinstance(x, (bool, int, float, str)):
        return {"value": x}
    raise TypeError(f"a checkpoint cannot hold a {type(x).__name__}")


class _Bad(Exception):
    """A fault of a checkpoint's content (the reader adds the file name)."""


def _unpack(node, arrays, device, depth: int = 0):
    if depth > MAX_DEPTH:
        raise _Bad(f"its state is nested deeper than {MAX_DEPTH} levels")
    if not isinstance(node, dict) or len(node) != 1:
        raise _Bad(f"its skeleton holds a node that is not one of dict, list, array, tensor, value: {node!r:.60}")
    (kind, x), = node.items()
    if kind == "dict" and isinstance(x, dict):
        return {k: _unpack(v, arrays, device, depth + 1) for k, v in x.items()}
    if kind == "list" and isinstance(x, list):
        return [_unpack(v, arrays, device, depth + 1) for v in x]
    if kind in ("array", "tensor"):
        a = arrays.get(f"a{x}") if isinstance(x, int) and not isinstance(x, bool) else None
        if a is None:
            raise _Bad(f"its skeleton names a missing array {x!r:.40}")
        if a.dtype.kind not in "biuf":
            raise _Bad(f"array a{x} holds {a.dtype} data, not numbers")
        if kind == "array":
            return a
        import torch

        return torch.from_numpy(a).to(device)
    if kind == "value" and (x is None or isinstance(x, (bool, int, float, str))):
        return x
    raise _Bad(f"its skeleton holds an unknown node {kind!r:.40}")


def _checksum(fields: dict) -> str:
    """SHA-256 of every member but ``checksum``, each as its name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(fields):
        if name == "checksum":
            continue
        a = np.ascontiguousarray(fields[name])
        h.update(str((name, a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


#: What a damaged zip archive or ``.npy`` header can raise (as for games: coalitions.io).
_DAMAGED = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError,
            struct.error, KeyError, SyntaxError, OverflowError, RecursionError, TypeError)
#: Unpacked bytes a checkpoint may hold beyond its own size: :func:`save_state` stores its members uncompressed,
#: so only the zip's own headers and directory make the two differ.
_SLACK_BYTES = 1 << 20


def _read_members(path: Path) -> dict[str, np.ndarray]:
    """Every array of the checkpoint at ``path``, each header checked before its data is allocated.

    A checkpoint is written uncompressed (:func:`save_state`), so members that
    unpack to more than the file's own size are a compressed bomb and refused
    before anything is unpacked; every ``.npy`` header's dtype and shape must
    account for exactly the bytes its member holds (a header that declares 8 TB
    over 8 bytes of data is named, not allocated); and the total is compared
    with the memory the machine will give (:func:`coalitions.resources.check_memory`).
    """
    from numpy.lib import format as npformat

    from coalitions.resources import check_memory

    with open_input(path, MAX_NPZ_BYTES, "a checkpoint") as fh:
        size = os.fstat(fh.fileno()).st_size
        zf = zipfile.ZipFile(fh)  # not a zip archive: BadZipFile, "not a readable checkpoint"
        with zf:
            infos = zf.infolist()
            names = Counter(i.filename for i in infos)
            twice = sorted(x for x, k in names.items() if k > 1)
            if twice:
                raise _Bad(f"the archive holds member {twice[0]!r} twice")
            unpacked = sum(i.file_size for i in infos)
            if unpacked > size + _SLACK_BYTES:
                raise _Bad(f"its members unpack to {unpacked:,} bytes from a {size:,}-byte file (a checkpoint is "
                           "written uncompressed: a compressed bomb?)")
            headers = {}
            for info in infos:
                if not info.filename.endswith(".npy"):
                    continue  # not an array of this toolkit's (another program's archive): never read
                name = info.filename[:-4]
                try:
                    with zf.open(info) as m:
                        version = npformat.read_magic(m)
                        read = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
                        shape, _, dtype = read(m)
                        offset = m.tell()
                except _DAMAGED as e:
                    raise _Bad(f"member {name!r} is not a readable NumPy array ({e.__class__.__name__})") from None
                if dtype.hasobject:
                    raise _Bad(f"array {name!r} holds pickled Python objects (dtype {dtype}), which are never loaded")
                declared = math.prod(shape) * dtype.itemsize
                if declared != info.file_size - offset:
                    raise _Bad(f"the header of array {name!r} lies: it declares {dtype.str} of shape {tuple(shape)} "
                               f"({declared:,} bytes) over {info.file_size - offset:,} bytes of data")
                headers[name] = info
            try:
                check_memory(2 * unpacked, f"{path}: loading its {len(headers)} arrays")
            except InputError as e:
                raise _Bad(str(e).split(": ", 1)[1]) from None
            fields = {}
            for name, info in headers.items():
                try:
                    with zf.open(info) as m:
                        fields[name] = npformat.read_array(m, allow_pickle=False)
                except _DAMAGED as e:
                    raise _Bad(f"array {name!r} is not readable ({e.__class__.__name__})") from None
    return fields


def save_state(path, key: str, progress: int, state: dict, meta: dict | None = None) -> None:
    """Write ``state`` after ``progress`` rounds or chunks to ``path``, atomically."""
    path = Path(path)
    arrays: list[np.ndarray] = []
    skeleton = json.dumps(_pack(state, arrays))
    # Any: numpy's savez stub would also match the ``**fields`` against its ``allow_pickle: bool``
    fields: dict[str, Any] = {"format": np.array(CHECKPOINT_FORMAT), "key": np.array(key), "progress": np.array(int(progress)),
              "skeleton": np.array(skeleton), "meta": np.array(json.dumps(meta or {})),
              **{f"a{i}": a for i, a in enumerate(arrays)}}
    fields["checksum"] = np.array(_checksum(fields))
    write_file(path, lambda fh: np.savez(fh, **fields))


def load_state(path, key: str, device="cpu"):
    """``(progress, state, meta)`` from ``path``; ``None`` when there is no file.

    A file of another run (different data, settings or seed), or one that is not
    a readable checkpoint, raises :class:`~coalitions.errors.InputError`.
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        fields = _read_members(path)
        fmt, found = str(fields.get("format", "")), str(fields.get("key", ""))
        if fmt == CHECKPOINT_FORMAT and found == key:
            if str(fields.get("checksum", "")) != _checksum(fields):
                raise _Bad("its checksum does not match its content (edited or damaged)")
            arrays = {name: a for name, a in fields.items() if name[:1] == "a" and name[1:].isdigit()}
            progress = to_int(fields["progress"][()], "its progress", low=0)
            state = _unpack(parse_json(str(fields["skeleton"])), arrays, device)
            meta = parse_json(str(fields["meta"]))
    except InputError as e:
        if str(e).startswith(f"{path}: "):  # from the file gate: missing, not a regular file, too large
            raise
        raise InputError(f"{path}: not a usable checkpoint: {e}; delete it to start afresh") from None
    except _Bad as e:
        raise InputError(f"{path}: not a usable checkpoint: {e}; delete it to start afresh") from None
    except RecursionError:
        raise InputError(f"{path}: not a usable checkpoint: its state is nested too deeply; "
                         "delete it to start afresh") from None
    except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile, EOFError) as e:
        raise InputError(f"{path}: not a readable checkpoint ({e.__class__.__name__}); "
                         "delete it to start afresh") from None
    if fmt != CHECKPOINT_FORMAT:
        raise InputError(f"{path}: not a checkpoint of this toolkit; delete it or choose another file")
    if found != key:
        raise InputError(f"{path}: checkpoint of a different run (data, method, options or seed differ); "
                         "delete it or choose another file")
    return progress, state, meta


# --------------------------------------------------------------------------- chunked results
class Checkpoint:
    """Finished chunks of one exhaustive-oracle run, kept in ``path`` (the format above).

    Parameters
    ----------
    path : str or Path
        The file (created on the first :meth:`save`).
    key : str
        Fingerprint of the run; a file with another key is refused.
    arrays : dict of str -> shape
        The result arrays (float64, initialised to NaN) and their shapes.
    n_chunks : int
    """

    def __init__(self, path, key: str, arrays: dict, n_chunks: int):
        self.path = Path(path)
        self.key = key
        self.arrays = {k: np.full(s, np.nan) for k, s in arrays.items()}
        self.done = np.zeros(n_chunks, dtype=bool)

    def load(self) -> Checkpoint:
        """Read finished chunks from ``path`` if it exists (else keep an empty state)."""
        loaded = load_state(self.path, self.key)
        if loaded is None:
            return self
        _, state, _ = loaded
        done = state.get("done") if isinstance(state, dict) else None
        arrays = state.get("arrays", {}) if isinstance(state, dict) else {}
        if (not isinstance(done, np.ndarray) or not isinstance(arrays, dict) or done.shape != self.done.shape
                or set(arrays) != set(self.arrays)
                or any(arrays[k].shape != v.shape for k, v in self.arrays.items())):
            raise InputError(f"{self.path}: checkpoint of a different run (data, model, options or seed "
                             "differ); delete it or choose another file")
        self.arrays, self.done = arrays, done.astype(bool)
        return self

    def save(self) -> None:
        """Write the current state atomically."""
        save_state(self.path, self.key, int(self.done.sum()), {"done": self.done, "arrays": self.arrays})
