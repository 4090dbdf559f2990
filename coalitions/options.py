"""Checks of command-line options that click's types cannot express (docs/cli.md, "Bad input").

Each check raises :class:`~coalitions.errors.InputError` with one line naming
the option, so that the command line exits 2 before any work:

* :func:`threads`: ``--threads`` between 1 and :func:`max_threads` (PyTorch
  crashes with a segmentation fault when asked for 100,000 threads);
* :func:`trains`: ``learn --rounds 0`` would write an estimate of untrained
  models (the library allows 0 rounds, to inspect an initial model);
* :func:`distinct_seeds`: ``--seeds 0,0`` runs seed 0 twice, and the doubled
  pairs make a Wilcoxon test claim a significance one seed cannot give;
* :func:`distinct_outputs`: ``-o X --checkpoint X`` writes the result over the
  checkpoint, and the next run fails reading it back;
* :func:`check_stdout`: a closed standard output (``coalitions solve g.json >&-``)
  leaves Python's ``sys.stdout`` as ``None``, and the next file opened would
  take descriptor 1.

Examples
--------
>>> distinct_seeds([0, 1, 2])
[0, 1, 2]
>>> distinct_seeds([0, 1, 0])
Traceback (most recent call last):
...
coalitions.errors.InputError: --seeds: seed 0 is given twice; each seed is one independent run
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

from .errors import InputError

__all__ = ["max_threads", "threads", "trains", "distinct_seeds", "distinct_outputs", "check_stdout",
           "check_environment", "THREADS_PER_CPU"]

#: ``--threads`` may oversubscribe each usable CPU at most this many times.
THREADS_PER_CPU = 4


def max_threads() -> int:
    """The largest ``--threads``: :data:`THREADS_PER_CPU` per CPU this process may run on."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return THREADS_PER_CPU * max(1, cpus)


def threads(ctx: object, param: object, value: int | None) -> int | None:
    """The click callback of ``--threads`` (the core does not import click): ``None`` (the thread
    policy) or an integer in ``[1, max_threads()]``, else :class:`InputError`."""
    if value is None:
        return None
    top = max_threads()
    if not 1 <= value <= top:
        raise InputError(f"--threads: {value} is not in [1, {top}] ({THREADS_PER_CPU} per CPU this process may use)")
    return value


def trains(rounds: int | None, flag: str = "--rounds") -> None:
    """Refuse ``rounds < 1`` on the command line: an estimate of models that never trained."""
    if rounds is not None and rounds < 1:
        raise InputError(f"{flag} must be at least 1, got {rounds} (zero rounds train nothing: the estimate "
                         "would describe untrained models)")


def distinct_seeds(seeds: Sequence[int], option: str = "--seeds") -> list[int]:
    """``seeds`` if no seed repeats, else :class:`InputError` naming the first repeated one."""
    seen: set[int] = set()
    for s in seeds:
        if s in seen:
            raise InputError(f"{option}: seed {s} is given twice; each seed is one independent run")
        seen.add(s)
    return list(seeds)


def _same(a: str, b: str) -> bool:
    a, b = os.path.realpath(a), os.path.realpath(b)
    return a == b or (os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b))


def distinct_outputs(**paths: str | None) -> None:
    """Refuse two output options naming the same file or folder (``output="x", checkpoint="x"``).

    Keyword names are the options without dashes (``_`` for ``-``); ``None`` is skipped.
    A checkpoint inside an output folder is fine; the same path twice is not.
    """
    given = [(k, str(v)) for k, v in paths.items() if v]
    for i, (ka, a) in enumerate(given):
        for kb, b in given[i + 1:]:
            if _same(a, b):
                flag = {"output": "-o"}.get(ka, f"--{ka.replace('_', '-')}")
                raise InputError(f"{flag} and --{kb.replace('_', '-')} name the same path {a!r}; the result "
                                 "would overwrite the checkpoint it resumes from")


def check_stdout() -> None:
    """Refuse to run with standard output closed (descriptor 1 not open), before anything is opened."""
    try:
        os.fstat(1)
        closed = sys.stdout is None
    except OSError:
        closed = True
    if closed:
        raise InputError("standard output is closed; redirect it to a file or to /dev/null instead of closing it")


#: ``OMP_NUM_THREADS`` as the OpenMP specification writes it: positive integers, comma-separated (one per level).
_OMP_THREADS = re.compile(r"\s*[1-9][0-9]*\s*(,\s*[1-9][0-9]*\s*)*")


def check_environment(environ=None) -> None:
    """Refuse or repair, before anything runs, an environment a library would complain about on stderr.

    * ``OMP_NUM_THREADS`` that is not a list of positive integers (``abc``, ``0``):
      libgomp prints its own line when PyTorch or scikit-learn loads it and goes on
      with its default; refused instead, naming the variable.
    * ``HOME`` that is not a folder (``/dev/null``) with ``MPLCONFIGDIR`` and
      ``XDG_CONFIG_HOME`` unset: matplotlib would print two lines of warnings and
      make a cache folder of its own; a private temporary folder, removed at exit,
      is given to it instead (the figures are the same).
    """
    env = os.environ if environ is None else environ
    omp = env.get("OMP_NUM_THREADS")
    if omp is not None and omp.strip() and not _OMP_THREADS.fullmatch(omp):
        raise InputError(f"OMP_NUM_THREADS={omp!r} (environment): not a positive integer or a comma-separated "
                         "list of them; unset it or set it to e.g. 4")
    home = env.get("HOME")
    if ("MPLCONFIGDIR" not in env and not env.get("XDG_CONFIG_HOME") and home is not None
            and not os.path.isdir(home)):
        import atexit
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix="coalitions-matplotlib-")
        atexit.register(shutil.rmtree, folder, True)
        env["MPLCONFIGDIR"] = folder
