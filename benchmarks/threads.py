"""Benchmark of the thread policy (coalitions.learners.training.threads), ratios in one run.

Prints:

1. ``step``: one training step of stacked models (all subset models of the
   exhaustive oracle, full batch) from about 1e5 to 1e9 multiply-adds, on one
   thread and on every core this process may use, with the policy's choice: the
   evidence for ``PARALLEL_MACS``.
2. ``command``: the README's first command, ``coalitions reproduce synthetic
   --quick`` (``--quick``: a short ``coalitions oracle`` run instead, and no
   all-cores run), as a subprocess into a fresh folder, with the thread policy
   (no ``--threads``), with ``--threads 1`` and with ``--threads`` = all cores
   (PyTorch's default before the policy), first alone and then beside one other CPU-bound process
   (a Python busy loop).  Ratios are against ``--threads 1`` under the same
   condition; the target is that the policy stays within 1.2× of it.

Run:  python benchmarks/threads.py [--quick] [--repeats 2]

The load average is printed before each condition; on a shared machine every
figure includes the other users' load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from coalitions.learners.exact import membership, train_subsets  # noqa: E402
from coalitions.learners.training.models import make_model  # noqa: E402
from coalitions.learners.training.threads import PARALLEL_MACS, decide, free_cores, step_macs  # noqa: E402


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


# --------------------------------------------------------------------------- 1. one step
def step_time(kind: str, shape, models: int, samples: int, threads: int, repeats: int = 3) -> float:
    """Best time of one full-batch step of ``models`` stacked models on ``threads`` threads."""
    spec = make_model(kind, shape, 10, hidden=256)
    gen = torch.Generator().manual_seed(0)
    X = torch.rand((samples, *shape), generator=gen)
    y = torch.randint(0, 10, (samples,), generator=gen)
    owner = torch.arange(samples) % 4
    init = {k: v[0] for k, v in spec.init(gen, 1).items()}
    masks = (np.arange(models) % 15) + 1
    assert membership(masks, 4).any(axis=1).all()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        train_subsets(spec, "multiclass", X, y, owner, masks, 4, init, epochs=1, lr=0.01)  # warm-up
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            train_subsets(spec, "multiclass", X, y, owner, masks, 4, init, epochs=1, lr=0.01)
            best = min(best, time.perf_counter() - t)
        return best
    finally:
        torch.set_num_threads(before)


def print_steps(quick: bool) -> None:
    cores = _cores()
    cases = [("logistic", (20,), 16, 64), ("mlp", (64,), 16, 256), ("mlp", (1, 28, 28), 16, 512),
             ("cnn", (1, 28, 28), 4, 64), ("cnn", (1, 28, 28), 16, 256)]
    if quick:
        cases = cases[:2]
    print(f"1. one full-batch training step, 1 thread vs {cores} (the cores this process may use); "
          f"PARALLEL_MACS = {PARALLEL_MACS:.0e}; load average {_load()}")
    print(f"   {'model':8} {'input':>10} {'models':>6} {'samples':>7} {'MACs':>9} {'1 thread ms':>12} "
          f"{f'{cores} threads ms':>13} {'ratio':>6} {'policy if idle':>14}")
    for kind, shape, models, samples in cases:
        spec = make_model(kind, shape, 10, hidden=256)
        macs = step_macs(spec, samples, models)
        one = step_time(kind, shape, models, samples, 1)
        many = step_time(kind, shape, models, samples, cores)
        pick = decide(macs, allowed=cores, load=0.0)
        print(f"   {kind:8} {'x'.join(map(str, shape)):>10} {models:6d} {samples:7d} {macs:9.1e} {one * 1e3:12.1f} "
              f"{many * 1e3:13.1f} {one / many:5.2f}x {pick:14d}", flush=True)


# --------------------------------------------------------------------------- 2. the command
def _command(quick: bool, out: Path) -> list[str]:
    exe = [sys.executable, "-m", "coalitions.cli"]
    if quick:
        return exe + ["oracle", "digits", "--clients", "4", "--model", "logistic", "--steps", "20",
                      "-o", str(out / "game.json")]
    return exe + ["reproduce", "synthetic", "--quick", "-o", str(out)]


def run_command(quick: bool, threads: int | None) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = _command(quick, Path(tmp)) + ([] if threads is None else ["--threads", str(threads)])
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        t = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - t


def print_command(quick: bool, repeats: int) -> None:
    cores = _cores()
    label = "coalitions oracle digits --clients 4 --model logistic --steps 20" if quick else \
        "coalitions reproduce synthetic --quick"
    configs = {"policy": None, "--threads 1": 1}
    if not quick:
        configs[f"--threads {cores}"] = cores
    print(f"\n2. {label}: wall time (best of {repeats}), " + ", ".join(configs))
    for condition in ("alone", "one busy process"):
        busy = None
        if condition != "alone":
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(1.0)
        try:
            load = _load()
            times = {}
            for _ in range(repeats):
                for name, threads in configs.items():  # interleaved: a burst of load hits all alike
                    times[name] = min(times.get(name, float("inf")), run_command(quick, threads))
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
        ref = times["--threads 1"]
        cells = ", ".join(f"{name} {t:.1f} s ({t / ref:.2f}x)" for name, t in times.items())
        print(f"   {condition:16} (load average {load}, {free_cores()} free cores now): {cells}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small steps and a short command (CI runs it)")
    ap.add_argument("--repeats", type=int, default=None, help="runs of each command per condition [2; quick 1]")
    args = ap.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 2)
    print(f"# torch {torch.__version__}, {_cores()} cores usable, python {sys.version.split()[0]}")
    print_steps(args.quick)
    print_command(args.quick, repeats)


if __name__ == "__main__":
    main()
