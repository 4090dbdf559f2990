"""Every GPU path on CUDA against the CPU, in one run: the batched engine, the exact game, SPO.

For the neural game of ``reproduce fashion`` (its MLP 784-32-10 with personal heads, its
training protocol, the Dirichlet regime) on ``--clients`` clients (default 8, 255 subsets),
each path runs once on the CPU and once on CUDA, and the script prints both times, the
ratio CPU / GPU, and whether the two runs agree:

1. the batched engine: the ``local`` personalised learner (every client's model stacked and
   trained in one ``vmap`` call, :mod:`coalitions.learners.training.engine`);
2. the exact game: :class:`~coalitions.learners.exact.ExhaustiveOracle`, all ``2^N - 1``
   subset models trained in chunks (``runner.compute_piece``, 50 bootstrap replicates);
3. SPO: the Pareto hypernetwork and its direction searches
   (:class:`~coalitions.learners.methods.spo.SPO`, the experiment's settings).

Agreement: the largest difference of the two runs' validation payoffs, and whether the
CE (exact game) or the learned CE (learners) is the same.  Floating-point sums run in
another order on a GPU, so the numbers differ in their last bits and a tie may break
otherwise; a different CE is reported, not hidden.

On a machine without CUDA it says so in one line and exits 0; with ``--quick`` it runs the CPU
half instead (so that the code path stays tested).  SPO's search there folds each client's data
into the hypernetwork's output layer (``learners/methods/spo/fold.py``) on either device.

Run:  python benchmarks/gpu.py [--quick] [--clients 8] [--steps 100]

``--quick``: 4 clients, 5 training steps, short SPO searches.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import coalitions as co  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.experiments.catalogue import FASHION, budgeted_options  # noqa: E402
from coalitions.learners.experiments.runner import compute_piece  # noqa: E402
from coalitions.learners.experiments.statistics import separate_seeds  # noqa: E402

PATHS = (("batched engine (local learner)", "local"), ("exact game (exhaustive oracle)", "exact"),
         ("SPO (hypernetwork + searches)", "spo"))


def fashion_federation(clients: int, seed: int = 0, regime: str = "dirichlet"):
    """The ``reproduce fashion`` federation of ``regime`` with ``clients`` clients (data seed from ``seed``)."""
    r = next(r for r in FASHION.regimes if r.name == regime)
    return load(FASHION.dataset, seed=separate_seeds(seed).data, **{**r.options, "clients": clients})


def piece_options(what: str, fed, steps: int | None, quick: bool) -> dict:
    """``reproduce fashion``'s options of piece ``what`` (the oracle's or the learner's), ``steps`` overriding the budget."""
    regime = FASHION.regimes[0]
    if what == "exact":
        opts = FASHION.oracle_options(quick, regime)
        return {**opts, "protocol": opts["protocol"].with_(steps=steps)} if steps else opts
    opts = budgeted_options(FASHION, quick, what, fed.sizes("train"), regime)
    if steps and "protocol" in opts:
        opts["protocol"] = opts["protocol"].with_(steps=steps)
    elif steps:
        opts["steps"] = steps
    return opts


def run_piece(what: str, fed, options: dict, device: str, seed: int = 0) -> tuple[float, object]:
    """Wall seconds and result of one piece on ``device`` (CUDA synchronised before the clock stops)."""
    t = time.perf_counter()
    out = compute_piece(fed, FASHION, what, options, separate_seeds(seed).init, device)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t, out


def agreement(what: str, a, b) -> str:
    """How two runs of piece ``what`` agree: largest payoff difference and same CE."""
    if what == "exact":
        ga, gb = a[0], b[0]
        diff = float(np.nanmax(np.abs(ga.raw_values() - gb.raw_values())))
        same = set(co.solve(ga).masks) == set(co.solve(gb).masks)
    else:
        va = np.array([a.utilities["val"][c] for c in a.clients], dtype=float)
        vb = np.array([b.utilities["val"][c] for c in b.clients], dtype=float)
        diff = float(np.nanmax(np.abs(va - vb)))
        same = set(a.masks) == set(b.masks)
    return f"max |dv| {diff:.2e}, same CE: {'yes' if same else 'NO'}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 clients, 5 steps (CI)")
    ap.add_argument("--clients", type=int, default=8, help="clients of the fashion federation [8]")
    ap.add_argument("--steps", type=int, default=None, help="training steps [the experiment's protocol: 100]")
    args = ap.parse_args(argv)
    if args.quick:
        args.clients, args.steps = 4, 5
    if not 2 <= args.clients <= 14:
        print(f"gpu.py: --clients must be in 2..14, got {args.clients}", file=sys.stderr)
        return 2
    cuda = torch.cuda.is_available()
    print(f"# torch {torch.__version__}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")
    if not cuda and not args.quick:
        print("no CUDA device on this machine: nothing to compare (run this script where a GPU is; --quick runs "
              "the CPU half)")
        return 0
    print(f"# GPU: {torch.cuda.get_device_name() if cuda else 'none: no CUDA device on this machine'}")
    fed = fashion_federation(args.clients)
    torch.set_num_threads(1 if args.quick else max(1, torch.get_num_threads()))
    print(f"fashion federation, {fed.n} clients ({(1 << fed.n) - 1} subsets), MLP 784-32-10, personal heads, "
          f"{args.steps or 'the protocol'} steps")
    print(f"{'path':34s} {'CPU s':>8s} {'GPU s':>8s} {'CPU/GPU':>8s}  agreement")
    for label, what in PATHS:
        opts = piece_options(what, fed, args.steps, args.quick)
        t_cpu, out_cpu = run_piece(what, fed, opts, "cpu")
        if not cuda:
            print(f"{label:34s} {t_cpu:8.2f} {'-':>8s} {'-':>8s}  (no CUDA)", flush=True)
            continue
        run_piece(what, fed, piece_options(what, fed, 2, True), "cuda")  # warm-up: CUDA context, kernels
        t_gpu, out_gpu = run_piece(what, fed, opts, "cuda")
        print(f"{label:34s} {t_cpu:8.2f} {t_gpu:8.2f} {t_cpu / t_gpu:7.2f}x  {agreement(what, out_cpu, out_gpu)}",
              flush=True)
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
