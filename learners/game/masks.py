"""Subset bitmasks: sums over the members of every mask, and the membership matrix of a list of masks.
"""

from __future__ import annotations

import numpy as np


def subset_sums(per_client) -> np.ndarray:
    """``out[mask] = Σ_{i ∈ mask} per_client[i]`` for all ``2^N`` masks, by doubling.

    ``per_client`` has shape ``(N, ...)``; ``out`` has shape ``(2^N, ...)``,
    float64, with ``out[0] = 0``.  ``O(2^N)`` additions of one item each.
    """
    a = np.asarray(per_client, dtype=np.float64)
    out = np.zeros((1 << a.shape[0],) + a.shape[1:])
    for i in range(a.shape[0]):
        np.add(out[: 1 << i], a[i], out=out[1 << i: 2 << i])
    return out


def membership(masks, n: int) -> np.ndarray:
    """Boolean ``(M, N)`` matrix: ``[k, i]`` is bit ``i`` of ``masks[k]``."""
    m = np.asarray(masks, dtype=np.int64)
    return ((m[:, None] >> np.arange(n)) & 1).astype(bool)
