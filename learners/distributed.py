"""Beyond one process: the oracle's chunks and ``reproduce``'s pieces as Ray tasks.

`Ray <https://docs.ray.io>`_ schedules the tasks, ships their inputs, retries a
task whose worker died, and runs on one machine or a cluster alike; this
module only says what a task is and stores what comes back (optional extra
``ray``: ``pip install 'collaboration-equilibrium[ray]'``).

* **The exhaustive oracle** (:class:`coalitions.learners.exact.ExhaustiveOracle`
  with ``backend="ray"``, ``coalitions oracle ... --backend ray``): every
  unfinished chunk of subset models is one task running the same
  :class:`~coalitions.learners.exact.ChunkTrainer` as the local loop.  As each
  task finishes, the driver writes its values into the checkpoint
  (:mod:`coalitions.learners.training.checkpoint`), so a killed worker costs
  only its own chunk (Ray runs the task again, up to :data:`MAX_RETRIES`
  times) and a killed driver resumes from the checkpoint with every finished
  chunk.  A subset's values do not depend on the chunk that holds it, so the
  game is the local backend's, to the bit on the CPU when both train with the
  same thread count (one thread per task here; the thread policy gives one
  thread to small models locally too).  Chunks are at most
  ``ceil((2^N − 1) / MIN_CHUNKS)`` models so that even N = 12 spreads over
  :data:`MIN_CHUNKS` tasks; the layout depends on nothing but the game and
  the options, so a run resumes on a cluster of another size.
* **``reproduce``** (``coalitions reproduce ... --backend ray``): every
  unfinished piece — the exact game of a (regime, seed), or one learner's
  estimate — is one task running
  :func:`coalitions.learners.experiments.runner.compute_piece`; the driver
  writes each into the output folder as it arrives, then assembles the
  report exactly as the local run does.

Resources: a task asks for ``num_cpus`` = its thread count (``--threads``,
default 1) and, when the device is ``cuda``, ``num_gpus`` = :data:`GPUS_PER_TASK`
(a fraction lets several small chunks share a GPU).  On a cluster every
machine needs this package installed (the same version) and, for
``reproduce``, its data sets; see docs/performance.md, "Ray".
"""

from __future__ import annotations

import math
import os
import socket
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from coalitions.errors import InputError

__all__ = ["init", "run_tasks", "oracle_chunks", "oracle_chunk_size", "reproduce_pieces", "MIN_CHUNKS",
           "MAX_RETRIES", "GPUS_PER_TASK"]

#: The oracle's chunks are small enough that there are at least this many (if there are models enough).
MIN_CHUNKS = 16
#: Times Ray reruns a task whose worker process died.
MAX_RETRIES = 3
#: GPUs one task asks for when the device is CUDA.
GPUS_PER_TASK = 1.0


def init(address: str | None = None, num_cpus: int | None = None):
    """Connect to Ray (once per process) and return the ``ray`` module.

    ``address``: a running cluster (``"HOST:6379"``, or ``"auto"`` for the one
    started on this machine by ``ray start --head``); ``None`` takes Ray's own
    variable ``RAY_ADDRESS`` when it is set (as ``ray`` itself and Ray's jobs
    do), and otherwise starts a private local Ray with ``num_cpus`` CPUs
    (default: all), on the loopback interface, without the dashboard.
    """
    source = "--address"
    if address is None and os.environ.get("RAY_ADDRESS", "").strip():
        address, source = os.environ["RAY_ADDRESS"].strip(), "RAY_ADDRESS"
    if address is not None and _on_loopback(address):
        _single_machine()
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")   # Ray 2.55's FutureWarning otherwise
    import ray

    if ray.is_initialized():
        return ray
    if address is not None:
        _reachable(address, source=source)
    try:
        if address is None:
            # "local": always a new private instance, never a cluster that `ray start` left running
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                     _node_ip_address="127.0.0.1", configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"{source} {address}" if address else "a local Ray"
        raise InputError(f"{where}: cannot start or reach Ray ({str(e).splitlines()[0][:200]})") from None
    return ray


def _on_loopback(address: str) -> bool:
    """Whether ``address`` (``HOST:PORT``, ``ray://HOST:PORT``) names this machine's loopback interface."""
    host = address.split("://")[-1].rpartition(":")[0].strip("[]")
    return host == "localhost" or host == "::1" or host.startswith("127.")


def _single_machine() -> None:
    """Ray's single-machine mode in this process (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``).

    Ray (2.55) replaces a loopback node address by the machine's own outside
    this mode, so a driver would wait forever for a head started on 127.0.0.1
    (``ray start --head --node-ip-address 127.0.0.1``).  The switch is read
    when Ray is imported; when it already is, its constant is set too.
    """
    import sys

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    constants: Any = sys.modules.get("ray._private.ray_constants")   # Ray's module (its constants are not typed)
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False


def _reachable(address: str, timeout: float = 10.0, source: str = "--address") -> None:
    """Fail fast on an address nothing listens at (Ray itself retries for minutes); ``source`` names where it came from."""
    host, sep, port = address.split("://")[-1].rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", or no port: Ray resolves it
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise InputError(f"{source} {address}: no Ray cluster answers there ({e.strerror or e}); "
                         "start one with `ray start --head`") from None


def _traced(fn: Callable, *args):
    """``fn(*args)`` in a worker, with the worker that ran it: ``(value, (node id, process id))``."""
    import ray

    return fn(*args), (ray.get_runtime_context().get_node_id(), os.getpid())


def _record(ray, tasks: int, workers: set) -> dict:
    """Which backend ran ``tasks`` tasks on the worker processes ``workers`` (provenance: ``backend``)."""
    try:
        address = ray.get_runtime_context().gcs_address
    except Exception:   # a record must not fail a finished run
        address = None
    return {"name": "ray", "address": address, "nodes": len({node for node, _ in workers}),
            "workers": len(workers), "tasks": tasks}


def run_tasks(fn: Callable, items: Iterable, on_result: Callable, *, num_cpus: float = 1,
              num_gpus: float = 0, address: str | None = None, max_retries: int = MAX_RETRIES) -> dict:
    """Run ``fn(*item)`` for every item as a Ray task; ``on_result(item, value)`` as each one finishes.

    Results arrive in the order the tasks finish; ``on_result`` runs in this
    (the driver's) process.  A task whose worker dies is rerun up to
    ``max_retries`` times; an exception raised by ``fn`` stops the run and is
    raised here (an :class:`InputError` as itself).

    Returns what ran the tasks, for a run's provenance: ``{"name": "ray",
    "address": the cluster's (GCS) address, "nodes": machines and "workers":
    worker processes that returned a result, "tasks": results}`` (a rerun task
    counts the worker that finished it).
    """
    ray = init(address)
    remote = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=max_retries)(_traced)
    pending = {remote.remote(fn, *item): item for item in items}
    workers: set = set()
    tasks = 0
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                item = pending.pop(ref)
                try:
                    value, worker = ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    cause = getattr(e, "cause", None)
                    if isinstance(cause, InputError):
                        raise InputError(str(cause)) from None
                    raise
                workers.add(worker)
                tasks += 1
                on_result(item, value)
    except BaseException:
        # An error or an interrupt: leave no work running for nobody.  Ending this driver's Ray
        # session does it (Ray ends the tasks a departed driver owns, on a cluster too); it is done
        # now, while the driver is whole.  Force-cancelling the pending tasks first made Ray 2.55
        # crash in its reply thread about one time in four (a C++ stack dump and exit 1 on Ctrl-C).
        ray.shutdown()
        raise
    return _record(ray, tasks, workers)


# ---------------------------------------------------------------------------- the oracle
def oracle_chunk_size(memory_chunk: int, n_masks: int) -> int:
    """Models per chunk on Ray: the memory budget's, but at most ``ceil(n_masks / MIN_CHUNKS)``."""
    return max(1, min(memory_chunk, math.ceil(n_masks / MIN_CHUNKS)))


_TRAINERS: dict = {}


def _oracle_task(job: str, setup, k: int, ms, threads: int, make_trainer: Callable):
    """One chunk, in a worker: the job's trainer (``make_trainer(*setup)``, once per worker process) on ``ms``."""
    from coalitions.learners.training.threads import step_macs, using

    trainer = _TRAINERS.get(job)
    if trainer is None:
        _TRAINERS.clear()  # one job at a time per worker: keep memory flat
        trainer = _TRAINERS[job] = make_trainer(*setup)
    with using(step_macs(trainer.spec, trainer.step_samples, len(ms)), threads):
        return trainer(ms)


def oracle_chunks(oracle, fed, cfg: dict, todo, store: Callable[[int, dict], None], make_trainer: Callable, *,
                  address: str | None = None) -> dict:
    """Train the chunks ``todo`` (``[(k, masks), ...]``) of ``oracle`` as Ray tasks; ``store(k, values)``.

    Returns :func:`run_tasks`'s record of what ran them.

    ``make_trainer(params, federation, config, device)`` builds the chunk trainer in a worker
    (:func:`coalitions.learners.exact.chunk_trainer`, passed in so that this module never imports
    the oracle it serves).
    """
    from coalitions.learners.training.threads import get_override

    ray = init(address)
    threads = oracle.threads or get_override() or 1
    # the workers rebuild the oracle from these; the protocol is the one the driver resolved (``protocol_``)
    params = {k: getattr(oracle, k) for k in ("memory_mb", "device", "dtype", "seed", "replicates")}
    params["protocol"] = oracle.protocol_
    setup = ray.put((params, fed, cfg, oracle.device_))
    job = uuid.uuid4().hex
    gpus = GPUS_PER_TASK if str(oracle.device_).startswith("cuda") else 0
    return run_tasks(_oracle_task, [(job, setup, k, ms, threads, make_trainer) for k, ms in todo],
                     lambda item, values: store(item[2], values), num_cpus=threads, num_gpus=gpus, address=address)


# ---------------------------------------------------------------------------- reproduce
def _piece_task(compute: Callable, args: tuple, threads):
    """One piece of ``reproduce``, in a worker: ``compute(*args)`` is ``(result, seconds, n_clients)``."""
    from coalitions.learners.training.threads import configure

    configure(threads)
    return compute(*args)


def reproduce_pieces(exp, quick: bool, todo, runs_dir: Path, device: str, log: Callable[[str], None],
                     compute: Callable, store_piece: Callable, done_line: Callable, *,
                     address: str | None = None) -> tuple[set, dict | None]:
    """Run ``reproduce``'s unfinished pieces ``todo`` (``[(regime, seed, what), ...]``) as Ray tasks.

    ``compute(experiment, quick, regime, seed, what, device)`` trains one piece in a worker;
    ``store_piece`` and ``done_line`` write and describe it on the driver (the runner's own
    functions, passed in so that this module never imports the runner).  Each finished piece is
    written into ``runs_dir`` (as the local backend writes it) and logged.  Returns the
    ``(folder name, what)`` pairs written and :func:`run_tasks`'s record of what ran them
    (``None`` when there was nothing to run).
    """
    from coalitions.learners.training.threads import get_override

    threads = get_override() or 1
    gpus = GPUS_PER_TASK if device == "cuda" else 0
    written: set = set()

    def arrived(item, value):
        _, (_, _, regime_name, seed, what, _), _ = item
        result, seconds, n = value
        where = runs_dir / f"{regime_name}-seed{seed}"
        store_piece(where, what, result, seconds)
        written.add((where.name, what))
        log(done_line(where, what, result, n, seconds) + " (ray)")

    items = [(compute, (exp.name, quick, regime.name, seed, what, device), threads) for regime, seed, what in todo]
    record = None
    if items:
        record = run_tasks(_piece_task, items, arrived, num_cpus=threads, num_gpus=gpus, address=address)
    return written, record
