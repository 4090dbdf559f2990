"""Benchmarks of the personalised learners.

``timing`` (the default) prints, in one run, the time of one communication
round (one local epoch of every client: 64 training samples each, batch 32,
SGD) for 10, 50 and 200 clients (on CUDA too: ``--device auto`` is the
default), for a small CNN (two 3×3 convolutions, 16 and
32 channels, on 1×28×28 images, and the same on 8×8 digits-sized images:
``cnn@8``) and an MLP (64 hidden units, 28×28 inputs): the sequential per-client loop, the batched engine (``vmap`` over all
clients, and in chunks of 32), and the path ``--engine auto`` picks by its
rule (:mod:`coalitions.learners.training.paths`) with that path's time.  Rounds of the engines interleave and the
best of ``--repeats`` counts, so a burst of load elsewhere does not favour one.
On CUDA it also prints the peak GPU memory and the mean GPU utilisation
sampled by ``nvidia-smi`` every 50 ms while the batched rounds run (alone).

``accuracy`` trains every method on ``digits`` federations (``practical`` and
``twins`` partitions, 9 clients; ``practical`` in 3 groups) for several
seeds, each as ``coalitions learn`` trains it without training flags (the data's
protocol stopped on its validation loss, the rate chosen on a grid around the
protocol's by the kept models' validation loss; ``--steps`` the budget, ``--fixed``
one fit at the protocol's rate to its whole budget), and writes one JSON line per
(partition, seed, method): mean and worst-client test accuracy, the learned
equilibrium, its adjusted Rand index against the planted groups under each weight
rule, the rate kept, the rounds run of the budget and the engine path used.

Run::

    python benchmarks/learners.py timing [--device cuda] [--sizes 10,50,200] [--repeats 3]
    python benchmarks/learners.py --quick                   # a short timing run (CI)
    python benchmarks/learners.py accuracy --seeds 0,1,2,3,4 --steps 200 -o results.jsonl
    python benchmarks/learners.py summary results.jsonl     # the tables of docs/learners-personalized.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

# The repository root first: this script's own folder would make ``learners`` this file.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from coalitions import peel_oracle  # noqa: E402
from coalitions.bitmask import members  # noqa: E402
from coalitions.compare import adjusted_rand_index  # noqa: E402
from coalitions.learners.data.federation import Client, Federation, Split  # noqa: E402
from coalitions.learners.training.engine import SGD, Engine, Padded, masked_mean, resolve_device, train_epochs  # noqa: E402
from coalitions.learners.training.models import make_model  # noqa: E402
from coalitions.oracles import WEIGHT_RULES, WeightOracle  # noqa: E402

METHODS = ("local", "fedavg", "fedamp", "fedamp-heuristic", "federico", "superfed-mm", "superfed-lm")


# --------------------------------------------------------------------------- timing
def _random_federation(n_clients: int, samples: int, shape=(1, 28, 28), seed: int = 0) -> Federation:
    rng = np.random.default_rng(seed)

    def split(m):
        return Split(rng.random((m, *shape), dtype=np.float32), rng.integers(0, 10, m).astype(np.int64))

    clients = tuple(Client(str(i), split(samples), split(4), split(4)) for i in range(n_clients))
    return Federation("random", "multiclass", "accuracy", clients, 10, None, {})


class _GpuSampler:
    """Samples ``nvidia-smi`` GPU utilisation every 50 ms while active."""

    def __init__(self):
        self.values, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=2).stdout.split()
                if out:
                    self.values.append(float(out[0]))
            except (OSError, ValueError, subprocess.SubprocessError):
                return
            self._stop.wait(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _time_rounds(engines: dict, spec, fed: Federation, device, repeats: int, batch: int,
                 sampler: _GpuSampler | None = None) -> dict:
    """Best time of one round per engine; rounds of the engines interleave, so load bursts hit all alike."""
    data = Padded(fed, "train", device)
    per = torch.nn.functional.cross_entropy

    def loss(p, X, y, m):
        return masked_mean(per(spec.forward(p, X), y, reduction="none"), m)

    opt = SGD(0.05, momentum=0.9)
    params = {name: {k: v.to(device) for k, v in spec.init(torch.Generator().manual_seed(0), fed.n).items()}
              for name in engines}
    best = {name: float("inf") for name in engines}
    for r in range(repeats + 1):  # round 0 warms up
        for name, engine in engines.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            params[name], _, _ = train_epochs(engine, loss, params[name], opt, opt.init(params[name]), data, 1,
                                              batch, np.random.default_rng(r))
            if device.type == "cuda":
                torch.cuda.synchronize()
            if r:
                best[name] = min(best[name], time.perf_counter() - t0)
    return best


def timing(args) -> None:
    from coalitions.learners.training.threads import configure

    configure(getattr(args, "threads", None))
    device = resolve_device(args.device)
    sizes = [int(s) for s in args.sizes.split(",")]
    if getattr(args, "quick", False):
        sizes = [50] if device.type == "cuda" else [10]
        args.models, args.repeats = "mlp,cnn@8", 1
    print(f"# one round = one local epoch per client ({args.samples} samples, batch {args.batch}), SGD; "
          f"best of {args.repeats} interleaved rounds after one warm-up round")
    print(f"# device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    if device.type == "cuda":
        print(f"# GPU {torch.cuda.get_device_name(0)}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# load average at start: {load:.2f}")
    header = (f"{'model':6} {'clients':>7} {'sequential ms':>14} {'batched ms':>11} {'batched[32] ms':>15} "
              f"{'speed-up':>9} {'auto picks':>11} {'auto ms':>8}")
    if device.type == "cuda":
        header += f" {'peak MiB':>9} {'GPU util %':>10}"
    print(header)
    for item in args.models.split(","):
        kind, _, side = item.partition("@")
        side = int(side or 28)
        spec = make_model(kind, (1, side, side), 10, hidden=64)
        for n in sizes:
            fed = _random_federation(n, args.samples, shape=(1, side, side))
            auto = Engine(device, "auto")
            engines = {"sequential": Engine(device, "sequential"), "batched": Engine(device, "batched"),
                       "chunk32": Engine(device, "batched", 32), "auto": auto}
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
                with _GpuSampler() as gpu:
                    t = _time_rounds({"batched": engines["batched"]}, spec, fed, device, args.repeats, args.batch)
                peak = torch.cuda.max_memory_allocated() / 2**20
                util = statistics.mean(gpu.values) if gpu.values else float("nan")
                engines.pop("batched")
                t.update(_time_rounds(engines, spec, fed, device, args.repeats, args.batch))
            else:
                t = _time_rounds(engines, spec, fed, device, args.repeats, args.batch)
            line = (f"{item:6} {n:7d} {t['sequential'] * 1e3:14.1f} {t['batched'] * 1e3:11.1f} "
                    f"{t['chunk32'] * 1e3:15.1f} {t['sequential'] / t['batched']:8.1f}x {auto.label:>11} "
                    f"{t['auto'] * 1e3:8.1f}")
            if device.type == "cuda":
                line += f" {peak:9.0f} {util:10.0f}"
            print(line, flush=True)


# --------------------------------------------------------------------------- accuracy
def _make(method: str, **kw):
    from coalitions.learners.methods.baselines import FedAvg, Local
    from coalitions.learners.methods.fedamp import FedAMP, FedAMPHeuristic
    from coalitions.learners.methods.federico import FedeRiCo
    from coalitions.learners.methods.superfed import SuPerFedLM, SuPerFedMM

    cls = {"local": Local, "fedavg": FedAvg, "fedamp": FedAMP, "fedamp-heuristic": FedAMPHeuristic,
           "federico": FedeRiCo, "superfed-mm": SuPerFedMM, "superfed-lm": SuPerFedLM}[method]
    return cls(**kw)


def _labels(partition_masks, n):
    lab = np.zeros(n, dtype=np.int64)
    for b, k in enumerate(partition_masks):
        lab[list(members(k))] = b
    return lab


def accuracy(args) -> None:
    from coalitions.learners.data.datasets import load
    from coalitions.learners.methods.federico import data_weights
    from coalitions.learners.training.protocol import protocol_with, tuned
    from coalitions.learners.training.tuning import fit_on_grid

    out = open(args.output, "a") if args.output else sys.stdout
    for partition in args.partitions.split(","):
        for seed in [int(s) for s in args.seeds.split(",")]:
            fed = load("digits", clients=args.clients, partition=partition, groups=args.groups, seed=seed)
            names = fed.names
            planted = None
            if fed.planted_groups:
                idx = {c: i for i, c in enumerate(names)}
                planted = _labels([sum(1 << idx[c] for c in g) for g in fed.planted_groups], fed.n)
            for method in args.methods.split(","):
                t0 = time.perf_counter()
                # every method as `coalitions learn` trains it: digits' default protocol (the CNN; --steps its
                # budget), stopped on its validation loss, its rate chosen on the grid by the same rule
                protocol = protocol_with(fed.task, fed.input_shape, {"steps": args.steps} if args.steps else {})
                if not args.fixed:
                    protocol = tuned(protocol)
                m, _ = fit_on_grid(lambda lr, method=method, seed=seed: _make(
                    method, seed=seed, engine=args.engine, device=args.device), protocol, fed)
                test = np.array([m.utilities_["test"][c] for c in names])
                row = {"partition": partition, "seed": seed, "method": method, "mean": float(test.mean()),
                       "worst": float(test.min()), "seconds": round(time.perf_counter() - t0, 1),
                       "engine": m.engine_.label, "blocks": m.estimate_.blocks(), "lr": float(m.protocol_.lr),
                       "rounds": int(m.rounds_), "rounds_run": int(m.rounds_run_), "hit_max": bool(m.hit_max_)}
                if getattr(m, "lr_clients_", None) is not None:     # Local: each client's own rate
                    row["lr_clients"] = [float(x) for x in m.lr_clients_]
                if planted is not None:
                    row["ari"] = adjusted_rand_index(_labels(m.estimate_.masks, fed.n), planted)
                    if m.weights_ is not None:
                        mats = {"weights": m.weights_}
                        if m.rule_weights() is not m.weights_:  # FedAMP: its affinity to an identical peer
                            mats["affinity"] = m.rule_weights()
                        if method == "federico":
                            mats = {"posterior": m.posterior_, "data": data_weights(m.posterior_)}
                        for label, w in mats.items():
                            for rule in WEIGHT_RULES:
                                p = peel_oracle(WeightOracle(names, w, rule)).partition
                                row[f"ari_{label}_{rule}"] = adjusted_rand_index(_labels(p, fed.n), planted)
                print(json.dumps(row), file=out, flush=True)


def summary(args) -> None:
    rows = [json.loads(line) for line in open(args.results) if line.strip()]
    for partition in dict.fromkeys(r["partition"] for r in rows):
        part = [r for r in rows if r["partition"] == partition]
        seeds = sorted({r["seed"] for r in part})
        print(f"\n{partition} (seeds {', '.join(map(str, seeds))}): test accuracy, mean over clients / worst client")
        print("| method | " + " | ".join(f"seed {s}" for s in seeds) + " | average |")
        print("|---" * (len(seeds) + 2) + "|")
        for method in dict.fromkeys(r["method"] for r in part):
            by = {r["seed"]: r for r in part if r["method"] == method}
            cells = [f"{by[s]['mean']:.3f} / {by[s]['worst']:.3f}" if s in by else "" for s in seeds]
            avg_m = np.mean([by[s]["mean"] for s in by])
            avg_w = np.mean([by[s]["worst"] for s in by])
            print(f"| {method} | " + " | ".join(cells) + f" | {avg_m:.3f} / {avg_w:.3f} |")
        print(f"\n{partition}: rounds run of the budget (a star: the whole budget, the method may not have converged)"
              " and the rate kept")
        for method in dict.fromkeys(r["method"] for r in part):
            by = {r["seed"]: r for r in part if r["method"] == method}
            if "rounds" in next(iter(by.values())):
                runs = " ".join(f"{by[s]['rounds_run']}/{by[s]['rounds']}{'*' if by[s]['hit_max'] else ''}"
                                for s in seeds if s in by)
                rates = " ".join(("/".join(f"{x:g}" for x in sorted(set(by[s]["lr_clients"]))) if "lr_clients" in by[s]
                                  else f"{by[s]['lr']:g}") for s in seeds if s in by)
                spent = sum(by[s]["hit_max"] for s in by)
                print(f"  {method:17} rounds {runs}   whole budget in {spent}/{len(by)}   lr {rates}")
        keys = sorted({k for r in part for k in r if k.startswith("ari")})
        if keys:
            print(f"\n{partition}: adjusted Rand index against the planted groups (per seed)")
            for method in dict.fromkeys(r["method"] for r in part):
                by = {r["seed"]: r for r in part if r["method"] == method}
                for k in keys:
                    if any(k in by[s] for s in by):
                        vals = [by[s].get(k, float("nan")) for s in seeds if s in by]
                        hits = sum(abs(v - 1) < 1e-12 for v in vals)
                        print(f"  {method:17} {k:24} " + " ".join(f"{v:5.2f}" for v in vals) + f"   ARI=1 in {hits}/{len(vals)}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="timing --quick (without a command)")
    sub = p.add_subparsers(dest="cmd")
    t = sub.add_parser("timing", help="time of one round, batched vs sequential")
    t.add_argument("--device", default="auto")
    t.add_argument("--sizes", default="10,50,200")
    t.add_argument("--models", default="cnn,mlp,cnn@8",
                   help="model kinds, each optionally @side for side×side images [28]")
    t.add_argument("--samples", type=int, default=64)
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--repeats", type=int, default=3)
    t.add_argument("--quick", action="store_true",
                   help="a short run that CI executes: 10 clients (50 on CUDA), mlp and cnn@8, one repeat")
    t.add_argument("--threads", type=int, default=None, help="torch intra-op threads [the thread policy]")
    a = sub.add_parser("accuracy", help="every method on digits, several seeds (JSON lines)")
    a.add_argument("--partitions", default="practical,twins")  # twins: pairs with planted groups
    a.add_argument("--seeds", default="0,1,2,3,4")
    a.add_argument("--methods", default=",".join(METHODS))
    a.add_argument("--clients", type=int, default=9)
    a.add_argument("--groups", type=int, default=3)
    a.add_argument("--steps", type=int, default=None, help="local gradient steps per client [the protocol's]")
    a.add_argument("--fixed", action="store_true",
                   help="train once at the protocol's rate to its whole budget (not as `coalitions learn` does)")
    a.add_argument("--engine", default="auto")
    a.add_argument("--device", default="auto")
    a.add_argument("-o", "--output", default=None)
    s = sub.add_parser("summary", help="tables from an accuracy run")
    s.add_argument("results")
    args = p.parse_args(argv)
    if args.cmd in (None, "timing"):
        if args.cmd is None:
            args = t.parse_args(["--quick"] if args.quick else [])
        timing(args)
    elif args.cmd == "accuracy":
        accuracy(args)
    else:
        summary(args)


if __name__ == "__main__":
    main()
