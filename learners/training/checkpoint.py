"""On-disk checkpoints for the exhaustive oracle: resume without retraining.

The exhaustive oracle trains subset models chunk by chunk (SPEC §5).  After
each chunk a :class:`Checkpoint` rewrites one ``.npz`` file atomically (write a
temporary file, then ``os.replace``) holding the values found so far, which
chunks are done, and a *fingerprint* of everything that determines the result
(data, model, training options, seed, chunk layout).  A later run with the
same fingerprint loads the finished chunks and trains only the others; a
different fingerprint is refused, so a checkpoint never mixes two runs.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np

from coalitions.errors import InputError
from coalitions.files import open_input, write_file
from coalitions.io import MAX_NPZ_BYTES

__all__ = ["Checkpoint", "fingerprint"]


def fingerprint(config: dict, arrays=()) -> str:
    """SHA-256 of a JSON-able ``config`` and the bytes of ``arrays``."""
    h = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


class Checkpoint:
    """Finished chunks of one oracle run, kept in ``path``.

    Parameters
    ----------
    path : str or Path
        The ``.npz`` file (created on the first :meth:`save`).
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
        if not self.path.exists():
            return self
        try:
            with open_input(self.path, MAX_NPZ_BYTES, "an oracle checkpoint") as f, \
                    np.load(f, allow_pickle=False) as z:
                key = str(z["key"])
                done = z["done"]
                arrays = {k: z[k] for k in self.arrays}
        except InputError:
            raise
        except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError) as e:
            raise InputError(f"{self.path}: not a readable oracle checkpoint ({e.__class__.__name__}); "
                             "delete it to start afresh") from None
        if key != self.key or done.shape != self.done.shape or any(
                arrays[k].shape != v.shape for k, v in self.arrays.items()):
            raise InputError(f"{self.path}: checkpoint of a different run (data, model, options or seed "
                             "differ); delete it or pass another --checkpoint")
        self.arrays, self.done = arrays, done.astype(bool)
        return self

    def save(self) -> None:
        """Write the current state atomically."""
        write_file(self.path, lambda f: np.savez(f, key=np.array(self.key), done=self.done, **self.arrays))
