"""Strict reading of gzip-compressed IDX files, the format of MNIST and Fashion-MNIST.

An IDX file (LeCun et al., "The MNIST database", format section) is a header
followed by the data in row-major order:

* a magic number of four bytes: ``0x00 0x00``, the element type (``0x08``:
  unsigned byte, the only type these datasets use) and the number of
  dimensions ``d``;
* ``d`` dimension sizes, big-endian unsigned 32-bit integers;
* ``n_0 · n_1 ⋯ n_{d-1}`` elements.

:func:`read_idx` checks every part against what the caller expects (type,
number of dimensions, the item dimensions such as ``28 × 28``), reads only the
first ``rows`` items when asked to (no more of the gzip stream is inflated),
and otherwise checks that the file ends exactly where the header says.  Any
deviation is an :class:`~coalitions.errors.InputError` naming the file.
Files are opened through :func:`coalitions.files.open_input`.
"""

from __future__ import annotations

import gzip
import os
import zlib

import numpy as np

from coalitions.errors import InputError
from coalitions.files import open_input

__all__ = ["read_idx", "UBYTE", "MAX_FILE_BYTES", "MAX_ITEMS"]

UBYTE = 0x08
#: Largest compressed file read (the Fashion-MNIST training images are 26.4 MB).
MAX_FILE_BYTES = 64 << 20
#: Largest item count a header may announce (refused before anything is allocated).
MAX_ITEMS = 1_000_000


def _exact(f, n: int, path, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise InputError(f"{path}: truncated IDX file: {what} needs {n:,} bytes, the file has {len(data):,}")
    return data


def read_idx(path: str | os.PathLike, item_shape: tuple[int, ...], rows: int | None = None,
             items: int | None = None) -> tuple[int, np.ndarray]:
    """The item count and the first ``rows`` items of a gzip IDX file of unsigned bytes.

    Parameters
    ----------
    path : path-like
        A ``.gz`` IDX file.
    item_shape : tuple of int
        Expected dimensions after the first: ``()`` for labels, ``(28, 28)``
        for images.
    rows : int, optional
        Read only the first ``rows`` items (at most the count in the header).
        Default: all of them, and the file must end right after them.
    items : int, optional
        The item count the header must announce (e.g. the labels' count for
        an image file).

    Returns
    -------
    n : int
        The item count the header announces.
    data : ndarray of uint8, shape ``(rows or n,) + item_shape``

    Raises
    ------
    InputError
        Naming ``path``: not gzip, a wrong magic number, element type or
        number of dimensions, unexpected item dimensions or count, a truncated payload,
        data after the payload, or ``rows`` beyond the count.
    """
    ndim = 1 + len(item_shape)
    try:
        with open_input(path, max_bytes=MAX_FILE_BYTES, what="a gzip IDX file") as raw, \
                gzip.GzipFile(fileobj=raw, mode="rb") as f:
            magic = _exact(f, 4, path, "the magic number")
            if magic[:2] != b"\0\0":
                raise InputError(f"{path}: not an IDX file (magic number {magic.hex()} does not start with 0000)")
            if magic[2] != UBYTE:
                raise InputError(f"{path}: IDX element type 0x{magic[2]:02x}, expected 0x08 (unsigned byte)")
            if magic[3] != ndim:
                raise InputError(f"{path}: IDX file of {magic[3]} dimensions, expected {ndim}")
            dims = tuple(int(d) for d in np.frombuffer(_exact(f, 4 * ndim, path, "the dimensions"), dtype=">u4"))
            if dims[1:] != tuple(item_shape):
                raise InputError(f"{path}: IDX items of shape {dims[1:]}, expected {tuple(item_shape)}")
            n = dims[0]
            if not 0 < n <= MAX_ITEMS:
                raise InputError(f"{path}: IDX header announces {n:,} items (expected 1..{MAX_ITEMS:,})")
            if items is not None and n != items:
                raise InputError(f"{path}: IDX header announces {n:,} items, expected {items:,}")
            take = n if rows is None else int(rows)
            if not 0 <= take <= n:
                raise InputError(f"{path}: {take:,} items asked, the file holds {n:,}")
            size = int(np.prod(item_shape, dtype=np.int64))
            data = np.frombuffer(_exact(f, take * size, path, f"{take:,} items of {size} bytes"), dtype=np.uint8)
            if rows is None and f.read(1):
                raise InputError(f"{path}: data after the {n:,} items the IDX header announces")
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise InputError(f"{path}: not a readable gzip file ({e.__class__.__name__}: {e})") from None
    except OSError as e:  # a read error inside the stream (open errors are InputError already)
        raise InputError(f"{path}: cannot be read ({e.__class__.__name__}: {e})") from None
    return n, data.reshape((take,) + tuple(item_shape))
