"""The exact personal-head game of ``coalitions reproduce fashion``: time, peak memory, work, GPU estimate.

Trains the exhaustive oracle of the ``fashion`` experiment alone (ten clients, all 1023 subsets,
one body per subset and one output layer per member, the experiment's MLP, epochs and 50
bootstrap replicates; ``learners/experiments/catalogue.py``) on the CPU with one thread, at the
protocol's own rate (one training per subset model; ``reproduce`` tunes each on the grid, one
training per rate), and prints:

* wall time, CPU time and peak resident memory of this process (``resource.getrusage``);
* the training work in multiply-adds, ``3 × step_macs × epochs`` (forward plus a backward pass of
  about twice the forward one; :func:`coalitions.learners.training.threads.step_macs`), and the
  rate this CPU reached, also as a share of its float32 matrix-product peak on one thread
  measured just after (``benchmarks/peak.py``);
* an *estimate* of the same game on a GPU: the measured work divided by an assumed sustained
  rate (``--gpu-tflops``, default 20 TFLOP/s = 10 TMAC/s of FP32 on small batched matrix
  products, a conservative share of an H100's peak), plus the per-epoch kernel launches as a
  floor.  It is an estimate, not a measurement: no GPU was available.

Run:  python benchmarks/fashion_heads.py   (``--quick``: 4 clients, 3 epochs, seconds; CI runs it)

``--game issue22`` trains the game that issue 22 measured before its changes (the federation of
``reproduce fashion`` until issue 19: pathological label skew, 10 clients, 100 samples each, 60 of
them for training; Adam at lr 0.01, weight decay 1e-3, 100 full-batch steps; accuracy game only),
so that this code and an older checkout can be timed on the same game.

Without the Debian package ``dataset-fashion-mnist`` it says so and exits 0 (nothing to measure).
Timings depend on the load of the machine; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from peak import matmul_peak  # noqa: E402

from coalitions.errors import InputError  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 clients, 3 epochs (seconds)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpu-tflops", type=float, default=20.0, help="assumed sustained FP32 TFLOP/s of a GPU")
    ap.add_argument("--epochs", type=int, default=None,
                    help="override the experiment's epochs (a shorter run; the cost per subset model-step is the same)")
    ap.add_argument("--game", choices=("current", "issue22"), default="current",
                    help="current: today's fashion experiment; issue22: the game issue 22 measured before its changes")
    args = ap.parse_args(argv)

    import torch

    from coalitions.learners.data.datasets import load
    from coalitions.learners.exact import ExhaustiveOracle
    from coalitions.learners.experiments.catalogue import get_experiment
    from coalitions.learners.experiments.runner import REPLICATES
    from coalitions.learners.training.models import make_model
    from coalitions.learners.training.threads import step_macs

    exp = get_experiment("fashion")
    data = dict(exp.regimes[0].options)
    opts = {"replicates": REPLICATES, **exp.oracle_options(False)}
    # one training per subset model, at the protocol's own rate: the work below counts one (``reproduce``
    # tunes each subset model on the grid, as many trainings as rates)
    opts["protocol"] = opts["protocol"].with_(lr_grid=None)
    if args.game == "issue22":
        from coalitions.learners.training.protocol import TrainingProtocol

        data = {"clients": 10, "partition": "pathological", "samples": 100}
        opts = {"replicates": REPLICATES, "heads": "personal",
                "protocol": TrainingProtocol(model="mlp", hidden=32, optimizer="adam", lr=0.01,
                                             weight_decay=1e-3, steps=100)}
    if args.quick:   # (the oracle's own ``epochs`` beside a protocol was ignored before; now it is refused)
        data.update(clients=4, samples=30)
        args.epochs = 3 if args.epochs is None else args.epochs
    if args.epochs is not None:  # the protocol's step budget is the epochs of a full-batch game
        import dataclasses

        opts.update(protocol=dataclasses.replace(opts["protocol"], steps=args.epochs))
    print(f"# torch {torch.__version__}, python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    try:
        fed = load("fashion", seed=args.seed, **data)
    except InputError as e:
        print(f"fashion: not measured: {e}")
        print("install the Debian package dataset-fashion-mnist to run this benchmark")
        print("# nothing else to do")
        return 0
    n_train = int(fed.sizes("train").sum())
    subsets = (1 << fed.n) - 1
    print(f"fashion, seed {args.seed}: {fed.n} clients, {subsets} subsets, {n_train} training samples, "
          f"options {opts}")
    t0, c0 = time.perf_counter(), time.process_time()
    o = ExhaustiveOracle(device="cpu", seed=args.seed, threads=1, **opts).fit(fed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    spec = make_model(o.config_["model"], fed.input_shape, fed.n_outputs, hidden=o.config_.get("hidden", 64))
    epochs = o.config_["epochs"]
    print(f"per subset model-step: {cpu / (subsets * epochs) * 1e6:.1f} µs CPU, "
          f"{wall / (subsets * epochs) * 1e6:.1f} µs wall")
    macs = 3 * step_macs(spec, n_train, subsets) * epochs
    print(f"personal-head game: {wall:.1f} s wall, {cpu:.1f} s CPU, peak resident memory {peak_mb:.0f} MB, "
          f"{o.chunks_trained_} chunk(s)")
    peak = matmul_peak(1, seconds=0.2 if args.quick else 1.0)
    print(f"training work: {macs:.3g} multiply-adds ({epochs} epochs); this CPU: {macs / cpu / 1e9:.2f} GMAC/s "
          f"per CPU-second ({macs / cpu / 1e9 / peak:.0%} of a float32 matrix product's {peak:.1f} GMAC/s on "
          f"one thread, benchmarks/peak.py), {macs / wall / 1e9:.2f} GMAC/s of wall time")
    gpu = macs / (args.gpu_tflops / 2 * 1e12)
    launches = epochs * (fed.n * 12 + 40) * 20e-6 * max(1, o.chunks_trained_)
    print(f"GPU ESTIMATE (not measured): {gpu:.3g} s of arithmetic at {args.gpu_tflops:g} TFLOP/s sustained, "
          f"plus about {launches:.3g} s of kernel launches (20 µs each): about {gpu + launches:.3g} s")
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
