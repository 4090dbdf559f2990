"""How many CPU threads PyTorch may use: one rule, applied by every fit.

PyTorch's default is one intra-op thread per physical core.  For this
project's models that is the wrong default: a training step of a linear,
logistic or small MLP model is a handful of small kernels, each too small to
split, so extra threads only add synchronisation, and when the cores are
already busy (another process, a test runner, a second fit) the threads of
every process compete and one fit runs several times slower than with one
thread (docs/performance.md, "Threads").  The rule:

1. ``--threads N`` (:func:`set_override`, or the ``threads`` argument of an
   estimator) wins.
2. Otherwise a step whose work is below :data:`PARALLEL_MACS` multiply-adds
   (:func:`step_macs`) runs on **one** thread.
3. A larger step gets the *free* cores: the cores this process may run on
   (``os.sched_getaffinity``) minus the busy ones (the one-minute load
   average, rounded down), at least 1, and never more than ``OMP_NUM_THREADS``
   when that is set nor more than PyTorch's own default.

Inter-op threads (PyTorch's pool for ``torch.jit.fork``; nothing here uses
it) are set to one, once per process, so that no idle pool is created.

NumPy's BLAS (OpenBLAS, MKL: matrix products outside PyTorch, e.g. in the
metrics and the closed-form games) follows the same count, through
`threadpoolctl <https://github.com/joblib/threadpoolctl>`_ (installed with
scikit-learn; without it BLAS keeps its own default).  A BLAS product summed
over two threads may differ from the one-thread sum in the last digits, so
without this a local run (BLAS on every core) and a Ray task (Ray gives a
one-CPU task ``OMP_NUM_THREADS=1``) differed in the 14th digit.

The thread count never changes which code path runs (that is
:func:`coalitions.learners.training.paths.choose`), but with several threads
some reductions may sum in another order: the same command gives the same
numbers to the bit when its models are below the threshold (one thread
whatever the load) or when ``--threads`` is given.

Examples
--------
>>> decide(1e4, allowed=8, load=0.0)
1
>>> decide(1e10, allowed=8, load=5.3, env=None, default=8)
3
>>> decide(1e10, allowed=8, load=0.0, env="4", default=8)
4
>>> decide(1e4, threads=3)
3
"""

from __future__ import annotations

import functools
import math
import os
from contextlib import contextmanager

from coalitions.errors import InputError

__all__ = ["PARALLEL_MACS", "decide", "free_cores", "step_macs", "set_override", "get_override", "using", "configure", "applied",
           "limit_interop", "blas_threads", "limit_blas"]

#: Multiply-adds per training step below which a second thread never paid off.  At 1e8 a step
#: takes some 20–40 ms on one core of the development machine; ``benchmarks/threads.py`` prints
#: one step at 1 and 2 threads for work from 2e5 to 4e9 multiply-adds (docs/performance.md).
PARALLEL_MACS = 1e8

_override: int | None = None
_interop_done = False


def _check(n, what: str = "--threads") -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"{what} must be an integer >= 1, got {n!r}")
    return n


def set_override(threads: int | None) -> None:
    """Fix the thread count of every later fit in this process (``--threads``); ``None``: the rule."""
    global _override
    _override = None if threads is None else _check(threads)


def get_override() -> int | None:
    """The process-wide ``--threads`` (``None`` when the rule decides)."""
    return _override


def free_cores(allowed: int | None = None, load: float | None = None) -> int:
    """Cores this process may use that are not busy: ``allowed − ⌊load⌋``, at least 1.

    ``allowed`` defaults to ``len(os.sched_getaffinity(0))`` (``os.cpu_count()``
    where affinity is not available) and ``load`` to the one-minute load average.
    """
    if allowed is None:
        try:
            allowed = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            allowed = os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):
            load = 0.0
    return max(1, int(allowed) - int(math.floor(max(0.0, load))))


def decide(macs: float, *, threads: int | None = None, allowed: int | None = None, load: float | None = None,
           env: str | None | bool = False, default: int | None = None) -> int:
    """Intra-op threads for training steps of ``macs`` multiply-adds each (the module's rule).

    Parameters
    ----------
    macs : float
        Work of one step (:func:`step_macs`).
    threads : int, optional
        An explicit count; wins over everything (then the process-wide override).
    allowed, load : optional
        Passed to :func:`free_cores` (for tests; measured by default).
    env : str or None, optional
        ``OMP_NUM_THREADS`` (read from the environment unless given).
    default : int, optional
        PyTorch's own default thread count (asked from PyTorch unless given).
    """
    if threads is not None:
        return _check(threads)
    if _override is not None:
        return _override
    if macs < PARALLEL_MACS:
        return 1
    n = free_cores(allowed, load)
    env = os.environ.get("OMP_NUM_THREADS") if env is False else env
    if env:
        try:
            n = min(n, max(1, int(env)))
        except ValueError:
            pass
    if default is None:
        import torch

        default = _torch_default(torch)
    return max(1, min(n, default))


_default_threads: int | None = None


def _torch_default(torch) -> int:
    """PyTorch's thread count before this module first changed it."""
    global _default_threads
    if _default_threads is None:
        _default_threads = torch.get_num_threads()
    return _default_threads


def step_macs(spec, samples: int, models: int = 1) -> float:
    r"""Multiply-adds of one forward pass of ``models`` copies of ``spec`` on ``samples`` samples.

    Affine: ``d·k`` per sample; MLP: ``d·h + h·k``; CNN on ``C×H×W`` images with
    3×3 convolutions of ``c₁`` and ``c₂`` channels (each followed by 2×2
    pooling): ``9·C·c₁·H·W + 9·c₁·c₂·(H/2)·(W/2) + f·k`` with ``f`` the
    flattened features.  The backward pass costs about twice the forward one for
    every kind, so the ratio between kinds, which is all the rule uses, is the
    same with or without it.
    """
    shapes = spec.shapes
    if spec.kind == "cnn":
        _, h, w = spec.input_shape
        c1, c = shapes["c1"][:2]
        c2 = shapes["c2"][0]
        per = 9 * c * c1 * h * w + 9 * c1 * c2 * (h // 2) * (w // 2) + math.prod(shapes["w"])
    else:
        per = sum(math.prod(s) for s in shapes.values() if len(s) >= 2)
    return float(per) * int(samples) * int(models)


def limit_interop() -> None:
    """One inter-op thread (once per process; later calls, or a pool already started, are ignored)."""
    global _interop_done
    if _interop_done:
        return
    _interop_done = True
    import torch

    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # the pool already runs (PyTorch allows setting it once, before any use)
        pass


def _blas_controller():
    """threadpoolctl's view of this process's BLAS libraries (``None`` without threadpoolctl)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()


def blas_threads() -> int | None:
    """The BLAS thread count now in force (the largest over the loaded BLAS libraries; ``None``: unknown)."""
    ctl = _blas_controller()
    if ctl is None:
        return None
    counts = [lib.num_threads for lib in ctl.lib_controllers if lib.user_api == "blas"]
    return max(counts) if counts else None


def limit_blas(n: int):
    """Set the BLAS libraries' thread count to ``n``; returns what restores the previous counts (or ``None``).

    The returned object has ``restore_original_limits()``; ``None`` when threadpoolctl is not installed.
    """
    ctl = _blas_controller()
    return None if ctl is None else ctl.limit(limits=_check(n, "BLAS threads"), user_api="blas")


@contextmanager
def using(macs: float, threads: int | None = None):
    """Run the body with :func:`decide`'s thread count; PyTorch's setting is restored afterwards.

    Yields the thread count in use.
    """
    import torch

    limit_interop()
    _torch_default(torch)
    n = decide(macs, threads=threads)
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    blas = limit_blas(n)
    try:
        yield n
    finally:
        if blas is not None:     # first: a BLAS built on OpenMP shares its pool with PyTorch
            blas.restore_original_limits()
        torch.set_num_threads(before)


def configure(threads: int | None = None) -> int:
    """Set this process up for training: ``--threads`` (or the rule) for PyTorch and BLAS, one inter-op thread.

    Called once by the commands that train and by the test suite, so that work
    outside a fit (loading data to tensors, evaluation) follows the rule too;
    fits apply :func:`using` themselves.  Returns the thread count now set.
    """
    import torch

    set_override(threads)
    limit_interop()
    _torch_default(torch)
    n = decide(0.0)
    torch.set_num_threads(n)
    limit_blas(n)
    return n


def applied(fit):
    """Decorator for an estimator's ``fit(federation)``: run it under :func:`using`.

    The work comes from the estimator's ``_step_macs(federation)`` (multiply-adds
    of one training step); settings it cannot read yet count as small work, so
    that ``fit`` itself reports them.  An estimator attribute ``threads`` (when
    not ``None``) overrides the rule.
    """

    @functools.wraps(fit)
    def wrapper(self, federation, *args, **kwargs):
        try:
            macs = float(self._step_macs(federation))
        except (InputError, AttributeError, TypeError, ValueError, KeyError):
            macs = 0.0
        with using(macs, getattr(self, "threads", None)):
            return fit(self, federation, *args, **kwargs)

    return wrapper
