"""Coalitions as integer bitmasks.

Inside the exhaustive core a coalition is an integer: bit ``i`` set means
client ``i`` is a member (docs/concepts.md §1).  These helpers convert between bitmasks
and member lists and enumerate sub-coalitions with NumPy, never one Python
iteration per coalition.

Examples
--------
>>> members(0b1011)
(0, 1, 3)
>>> mask_of([0, 1, 3])
11
>>> submasks(0b101).tolist()
[0, 1, 4, 5]
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["members", "mask_of", "submasks", "popcount", "all_masks", "contains"]


def members(mask: int) -> tuple[int, ...]:
    """Return the client indices whose bits are set in ``mask``, ascending."""
    mask = int(mask)
    out = []
    i = 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return tuple(out)


def mask_of(indices: Iterable[int]) -> int:
    """Return the bitmask of a collection of client indices."""
    m = 0
    for i in indices:
        m |= 1 << int(i)
    return m


def popcount(masks: np.ndarray) -> np.ndarray:
    """Number of members of each coalition in an integer array (vectorised)."""
    return np.bitwise_count(np.asarray(masks, dtype=np.int64)).astype(np.int64)


def all_masks(n: int) -> np.ndarray:
    """All ``2**n`` bitmasks ``0 .. 2**n - 1`` (the empty set included) as int64."""
    return np.arange(1 << n, dtype=np.int64)


def contains(masks: np.ndarray, i: int) -> np.ndarray:
    """Boolean array: does each coalition in ``masks`` contain client ``i``?"""
    return ((np.asarray(masks, dtype=np.int64) >> i) & 1).astype(bool)


def submasks(mask: int) -> np.ndarray:
    """All sub-coalitions of ``mask`` (the empty set and ``mask`` included), ascending.

    Built bit by bit: the submasks of ``{b} ∪ T`` are those of ``T`` and the same
    again with ``b`` added, so the result has ``2**|mask|`` entries, computed in
    ``|mask|`` vectorised steps.
    """
    out = np.zeros(1, dtype=np.int64)
    for b in members(mask):
        out = np.concatenate([out, out | (1 << b)])
    return out  # ascending, since bits are added in increasing order
