"""Benchmark of the Ray backend on the exhaustive oracle (coalitions.learners.distributed).

Prints, in one run:

1. The N = 12 logistic oracle (``synthetic`` with labels ``y > 0``, 100 samples
   per client, 500 epochs: all 4095 subset models) in this process (the local
   backend: one chunk against its cache-aware default, in ``--repeats`` interleaved
   pairs, the median ratio and its range), and then at equal
   chunking (Ray's default of 16 chunks on both sides) in this process and on
   a local Ray with 2 workers (one thread per task), in ``--repeats``
   interleaved pairs: wall times, the median ratio and its range, and whether
   the games are equal to the bit.  Ray is started and its workers warmed up (PyTorch imported)
   before the clock starts: a cluster is started once, not per run.
2. The measured cost per subset model-epoch of both runs and a projection of
   N = 20 (1,048,575 models, 100 samples per client) on 64 workers, and on
   GPUs where CUDA exists (measured there at N = 12 with one GPU per task).
   The projection scales the measured per-model-epoch cost by the number of
   samples (the step is a matrix product over all samples) and divides by the
   workers; it assumes the workers are as fast as this machine's cores and
   that the 1,024 chunks at N = 20 keep all of them busy.

Run:  python benchmarks/distributed.py [--quick] [--workers 2] [--repeats 3]

``--quick``: N = 8 and 50 epochs (CI).  Timings depend on the machine's load,
which is printed; without Ray it prints that it was not run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from coalitions.learners.exact import ExhaustiveOracle  # noqa: E402
from coalitions.learners.training.protocol import TrainingProtocol  # noqa: E402


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def timed_fit(fed, backend: str, device: str, epochs: int, chunk_size: int | None = None) -> tuple[float, ExhaustiveOracle]:
    # Adam at 0.05, cosine, weight decay 1e-3, full batch: one step per epoch
    o = ExhaustiveOracle(protocol=TrainingProtocol(model="logistic", steps=epochs), device=device, seed=0,
                         backend=backend, threads=1, chunk_size=chunk_size)
    t = time.perf_counter()
    o.fit(fed)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t, o


def local_apart(n: int, samples: int, epochs: int, chunk: int) -> tuple[float, tuple]:
    """The local backend timed in a process of its own, without this driver's Ray threads beside it.

    Returns the fit's seconds (measured inside that process) and its ``(values_val_, values_test_)``.
    """
    import pickle
    import subprocess

    code = ("import pickle, sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
            "from distributed import timed_fit\nfrom oracle import binary_federation\n"
            "fed = binary_federation(int(sys.argv[3]), samples=int(sys.argv[4]), seed=0)\n"
            "t, o = timed_fit(fed, 'local', 'cpu', int(sys.argv[5]), chunk_size=int(sys.argv[6]))\n"
            "sys.stdout.buffer.write(pickle.dumps((t, (o.values_val_, o.values_test_))))\n")
    here = Path(__file__).resolve().parent
    out = subprocess.run([sys.executable, "-c", code, str(here.parent), str(here), str(n), str(samples), str(epochs),
                          str(chunk)], capture_output=True, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    return pickle.loads(out.stdout)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 8, 50 epochs (CI)")
    ap.add_argument("--workers", type=int, default=2, help="CPUs of the local Ray [2]")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved pairs of each comparison [3; quick 1]")
    ap.add_argument("--project", type=int, default=64, help="workers of the N = 20 projection [64]")
    args = ap.parse_args(argv)
    try:
        import ray  # noqa: F401
    except ImportError:
        print("not run: Ray is not installed (pip install 'collaboration-equilibrium[ray]')")
        print("the local backend needs no benchmark here: see benchmarks/oracle.py")
        print("done")
        return
    from oracle import binary_federation

    from coalitions.learners import distributed

    n, epochs = (8, 50) if args.quick else (12, 500)
    repeats = 1 if args.quick else args.repeats
    samples = 100
    fed = binary_federation(n, samples=samples, seed=0)
    models = (1 << n) - 1
    print(f"# torch {torch.__version__}, {os.cpu_count()} CPUs, load average {_load()}")
    print(f"1. logistic oracle, N = {n} ({models} subset models, {samples} samples per client, {epochs} epochs)")
    # The old chunking (one chunk) and the cache-aware default, in `repeats` interleaved pairs (before Ray starts).
    gains = []
    for k in range(repeats):
        t_one, _ = timed_fit(fed, "local", "cpu", epochs, chunk_size=models)
        t_local, local = timed_fit(fed, "local", "cpu", epochs)
        chunk = -(-models // local.chunks_trained_)
        gains.append(t_one / t_local)
        print(f"   pair {k + 1}/{repeats}: one chunk of {models} (the memory budget's, before cache-aware chunking) "
              f"{t_one:7.2f} s; default, {local.chunks_trained_} chunk(s) of <= {chunk}, 1 process, 1 thread "
              f"{t_local:7.2f} s; {t_one / t_local:.2f}x (load average {_load()})", flush=True)
    print(f"   cache-aware chunking: median {np.median(gains):.2f}x faster over {repeats} pair(s) "
          f"(range {min(gains):.2f}-{max(gains):.2f}x)", flush=True)
    t = time.perf_counter()
    ray = distributed.init(num_cpus=args.workers)

    @ray.remote(num_cpus=1)
    def warm():
        import torch  # noqa: F401 (the workers' one-off import is not the oracle's cost)

        import coalitions.learners.exact  # noqa: F401
        return os.getpid()

    pids = set(ray.get([warm.remote() for _ in range(4 * args.workers)]))
    print(f"   (Ray started and {len(pids)} workers warmed up in {time.perf_counter() - t:.1f} s, not counted; "
          f"load average {_load()})")
    # Equal chunking: both backends train Ray's default chunks (ceil(models / MIN_CHUNKS) models each,
    # enough chunks to keep the workers evenly busy), local and Ray runs interleaved, `repeats` pairs;
    # the median of the pairs' ratios is the figure (this virtual machine's speed drifts between runs).
    # The local run goes in a process of its own: beside this driver's Ray threads it ran slower.
    ray_chunk = distributed.oracle_chunk_size(models, models)
    pairs = []
    for k in range(repeats):
        t_eq, values = local_apart(n, samples, epochs, ray_chunk)
        t_ray, on_ray = timed_fit(fed, "ray", "cpu", epochs, chunk_size=ray_chunk)
        same = np.array_equal(values[0], on_ray.values_val_, equal_nan=True) and \
            np.array_equal(values[1], on_ray.values_test_, equal_nan=True) and \
            np.array_equal(local.values_val_, on_ray.values_val_, equal_nan=True)
        pairs.append((t_eq, t_ray))
        print(f"   pair {k + 1}/{repeats}, {on_ray.chunks_trained_} chunks of <= {ray_chunk} on both: local {t_eq:7.2f} s, "
              f"ray ({args.workers} workers, 1 thread each) {t_ray:7.2f} s, {t_eq / t_ray:.2f}x; "
              f"same game to the bit: {'yes' if same else 'NO'} (load average {_load()})", flush=True)
    ratios = sorted(a / b for a, b in pairs)
    t_eq, t_ray = sorted(pairs, key=lambda p: p[0] / p[1])[len(pairs) // 2]
    print(f"   ray speed-up at equal chunking: median {np.median(ratios):.2f}x over {repeats} pair(s) "
          f"(range {ratios[0]:.2f}-{ratios[-1]:.2f}x)", flush=True)

    print(f"\n2. projection of N = 20 ({(1 << 20) - 1:,} models, {samples} samples per client, {epochs} epochs)")
    per_local = t_eq / (models * epochs)
    per_ray = t_ray * args.workers / (models * epochs)  # per worker
    scale = 20 / n  # samples grow with the clients; the step is a product over all samples
    for label, per in (("local measurement", per_local), ("ray measurement, per worker", per_ray)):
        total = per * scale * ((1 << 20) - 1) * epochs
        print(f"   from the {label}: {per * 1e6:.3f} us per model-epoch -> one worker {total / 3600:.1f} h, "
              f"{args.project} workers {total / args.project / 60:.1f} min")
    if torch.cuda.is_available():
        t_gpu, _ = timed_fit(fed, "local", "cuda", epochs)
        per = t_gpu / (models * epochs)
        total = per * scale * ((1 << 20) - 1) * epochs
        print(f"   GPU ({torch.cuda.get_device_name()}): N = {n} in {t_gpu:.2f} s, {per * 1e9:.1f} ns per model-epoch "
              f"-> N = 20 on one GPU {total / 60:.1f} min, on 8 GPUs {total / 8 / 60:.1f} min "
              f"(ray: --device cuda, one GPU per task)")
    else:
        print("   GPUs: not projected, no CUDA device on this machine (the same script prints it where one is)")
    ray.shutdown()
    print("done")


if __name__ == "__main__":
    main()
