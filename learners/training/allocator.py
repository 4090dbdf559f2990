"""Keep freed memory in the process: no allocation churn in the stacked subset trainers.

Every step of a stacked subset training (:mod:`coalitions.learners.game.shared`,
:mod:`coalitions.learners.game.personal`) allocates the chunk's activations and gradients
(tens of MB each) and frees them at the end of the step.  With glibc's defaults a block above
``M_MMAP_THRESHOLD`` (at most 32 MiB) is a fresh ``mmap`` and is returned with ``munmap`` when
freed, and the heap top is trimmed above ``M_TRIM_THRESHOLD``: every step then page-faults its
buffers in again.  Measured on the 10-client personal-head game of ``reproduce fashion``
(``benchmarks/fashion_heads.py``, docs/performance.md): half of the CPU time was system time,
85 million minor page faults.

:func:`keep_freed_memory` sets ``M_MMAP_MAX = 0`` (every block from the heap) and
``M_TRIM_THRESHOLD`` to its maximum (never give the heap back), so the second step reuses the
first step's pages.  The arithmetic is untouched (same kernels, same order): the game is the same
to the bit (``tests/test_allocator.py``).  The cost is that the peak heap stays resident (the game's
peak resident memory is in docs/performance.md, "The personal-head game of
``reproduce fashion``").  Only glibc is tuned; elsewhere it does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["keep_freed_memory"]

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
_done = False


def keep_freed_memory() -> bool:
    """Tune glibc's ``malloc`` so freed blocks stay in the process (module docstring); idempotent.

    Returns
    -------
    bool
        Whether the setting is in force (False on a C library without ``mallopt``).
    """
    global _done
    if _done:
        return True
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2 ** 31 - 1))
    return _done
