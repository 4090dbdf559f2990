"""Memory decided up front: a job's peak is compared with what the machine will give before allocating.

A job that outgrows its container is killed by the kernel with exit 137 and no
message (a 22-client game under a 4 GiB cap, a 6.8 MB ``.npz`` that unpacks to
7 GB).  Every allocation whose size follows from the input -- an exhaustive
game of ``N`` clients, ``B`` bootstrap replicates, an ``.npz`` member -- is
first checked with :func:`check_memory` against :func:`available_memory`, the
smaller of

* the control group's room, ``memory.max − memory.current`` (cgroup v2;
  ``memory.limit_in_bytes − memory.usage_in_bytes`` in cgroup v1), and
* the kernel's estimate of what can be allocated without swapping,
  ``MemAvailable`` in ``/proc/meminfo``,

so that too large a job ends in one line (exit 2) naming what needs the memory.

Peaks are estimates, measured rather than derived: ``coalitions solve`` of a
20-client game (168 MB of values) peaks at 3.1 times its values, ``welfare`` at
4.1 times (``/usr/bin/time -f %M``, docs/cli.md, "Bad input"); :data:`GAME_PEAK` is 4.

Examples
--------
>>> check_memory(1 << 20, "a 1 MiB job")      # fits everywhere
>>> check_memory(1 << 62, "a 4 EiB job")       # doctest: +ELLIPSIS
Traceback (most recent call last):
...
coalitions.errors.InputError: a 4 EiB job needs about 4.29e+09 GiB of memory; only ... GiB are available (...)
"""

from __future__ import annotations

from .errors import InputError

__all__ = ["available_memory", "check_memory", "game_bytes", "GAME_PEAK", "QUICK_BYTES"]

#: A game job's peak memory in multiples of its values (measured: solve 3.1, welfare 4.1).
GAME_PEAK = 4
#: Jobs smaller than this are never checked (reading /proc costs about 50 µs).
QUICK_BYTES = 64 << 20

_CGROUP_V2 = "/sys/fs/cgroup"
_CGROUP_V1 = "/sys/fs/cgroup/memory"


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) and garbage read as None


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room() -> tuple[int, str] | None:
    for limit, usage, name in ((f"{_CGROUP_V2}/memory.max", f"{_CGROUP_V2}/memory.current", "cgroup memory.max"),
                               (f"{_CGROUP_V1}/memory.limit_in_bytes", f"{_CGROUP_V1}/memory.usage_in_bytes",
                                "cgroup memory.limit_in_bytes")):
        cap = _read_int(limit)
        if cap is not None and cap < 1 << 60:  # v1 writes a huge number for "no limit"
            return max(0, cap - (_read_int(usage) or 0)), name
    return None


def available_memory() -> tuple[int, str] | None:
    """``(bytes, source)``: the memory this process may still allocate, or None when nothing says.

    The smaller of the cgroup's room and ``MemAvailable``; ``source`` names
    which one, for the message.
    """
    found = []
    room = _cgroup_room()
    if room is not None:
        found.append(room)
    avail = _mem_available()
    if avail is not None:
        found.append((avail, "MemAvailable in /proc/meminfo"))
    return min(found) if found else None


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.3g} GiB"


def check_memory(need: int, what: str) -> None:
    """Refuse, before allocating, a job that needs more than :func:`available_memory`.

    Parameters
    ----------
    need : int
        The job's estimated peak, in bytes.
    what : str
        What needs it, starting the message (``"a 22-client game"``).

    Raises
    ------
    InputError
        ``"<what> needs about X GiB of memory; only Y GiB are available (<source>)"``.
    """
    if need < QUICK_BYTES:
        return
    got = available_memory()
    if got is not None and need > got[0]:
        raise InputError(f"{what} needs about {_gib(need)} of memory; only {_gib(got[0])} are available ({got[1]})")


def game_bytes(n: int, itemsize: int = 8, copies: int = GAME_PEAK) -> int:
    """Peak bytes of a job on an exhaustive game of ``n`` clients: ``copies · n · 2^n · itemsize``."""
    return copies * n * (1 << n) * itemsize
