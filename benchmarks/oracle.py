"""Benchmark of the exhaustive subset oracle, one function per measurement.

Prints, in one run:

1. ``closed_form``: all 2^N − 1 subset least-squares models of ``synthetic`` at
   N = 12 and 16 (weights from subset sums of Gram matrices, one batched solve,
   validation MSE of every member), wall time; and the ratio to a per-subset loop
   (``np.linalg.lstsq`` on the concatenated member data, then the validation MSE of
   each member).  The loop is timed on a random sample of subsets and extrapolated
   to all 2^N − 1; the output says so.
2. ``batched_logistic``: all 2^N − 1 logistic-regression subset models at N = 10 on
   the CPU, trained together (:func:`coalitions.learners.exact.train_subsets`), against a
   per-subset loop of plain PyTorch models (no vmap) with the same optimiser and
   epochs, timed on a sample of subsets and extrapolated.
3. Where CUDA exists: the oracle at N = 12 on the GPU, logistic regression
   (all 4095 models against the same sample of the per-subset loop) and the CNN
   (``digits`` images, 8×8, label skew; :class:`coalitions.learners.exact.ExhaustiveOracle`
   with ``model="cnn"``): wall time, models per second and the per-chunk cost.
   Without CUDA it prints that it was not run.
4. SPO's time to the full benefit graph against the exhaustive oracle's.

Run:  python benchmarks/oracle.py   (``--quick``: small sizes, runs to its end in seconds; CI runs it)

Timings depend on the load of the machine; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

# The repository root before this folder, so ``learners`` is the package, not benchmarks/learners.py.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.data.federation import Client, Federation, Split  # noqa: E402
from coalitions.learners.data.metrics import evaluate  # noqa: E402
from coalitions.learners.exact import closed_form_mse, closed_form_weights, train_subsets  # noqa: E402
from coalitions.learners.training.models import make_model  # noqa: E402
from coalitions.learners.training.protocol import TrainingProtocol  # noqa: E402

#: The exhaustive oracle's training per model before it took only a protocol, which the timings of
#: docs/performance.md were taken with: Adam, cosine schedule, weight decay 1e-3, full batch,
#: ``(epochs, learning rate)``.
FORMER_DEFAULTS = {"logistic": (500, 0.05), "mlp": (300, 0.01), "cnn": (60, 0.005)}


def former_default(model: str, epochs: int | None = None) -> TrainingProtocol:
    """:data:`FORMER_DEFAULTS` of ``model`` as a protocol (full batch: a step per epoch), ``epochs`` if given."""
    steps, lr = FORMER_DEFAULTS[model]
    return TrainingProtocol(model=model, lr=lr, weight_decay=1e-3, steps=epochs or steps)


def _members(mask: int, n: int) -> list[int]:
    return [i for i in range(n) if mask >> i & 1]


# --------------------------------------------------------------------------- 1. closed form
def closed_form(n: int, samples: int = 50, sample_loop: int = 300, seed: int = 0) -> dict:
    """Time every subset model of ``synthetic`` in closed form vs a per-subset lstsq loop."""
    fed = load("synthetic", clients=n, samples=samples, val=200, test=10, seed=seed)
    t = time.perf_counter()
    W = closed_form_weights(fed)
    val = closed_form_mse(fed, W, "val")
    batched = time.perf_counter() - t
    rng = np.random.default_rng(seed)
    masks = rng.choice(np.arange(1, 1 << n), size=min(sample_loop, (1 << n) - 1), replace=False)
    aug = [np.hstack([c.train.X.astype(np.float64), np.ones((len(c.train), 1))]) for c in fed.clients]
    t = time.perf_counter()
    worst = 0.0
    for mask in masks:
        idx = _members(int(mask), n)
        X = np.concatenate([aug[i] for i in idx])
        y = np.concatenate([fed.clients[i].train.y for i in idx]).astype(np.float64)
        w = np.linalg.lstsq(X, y, rcond=None)[0]
        for i in idx:
            v = fed.clients[i].val
            mse = evaluate("mse", v.y, v.X.astype(np.float64) @ w[:-1] + w[-1])
            worst = max(worst, abs(mse - val[i, mask]) / mse)
    loop_each = (time.perf_counter() - t) / len(masks)
    return {"n": n, "models": (1 << n) - 1, "batched_s": batched, "loop_sampled": len(masks),
            "loop_s": loop_each * ((1 << n) - 1), "max_rel_diff": worst}


# --------------------------------------------------------------------------- 2./3. batched logistic
def binary_federation(n: int, samples: int = 100, seed: int = 0) -> Federation:
    """``synthetic`` with labels ``y > 0``: a binary task with the same planted groups."""
    fed = load("synthetic", clients=n, samples=samples, rho=0.3, val=50, test=10, seed=seed)

    def b(s):
        return Split(s.X, (s.y > 0).astype(np.int64))

    clients = tuple(Client(c.name, b(c.train), b(c.val), b(c.test)) for c in fed.clients)
    return Federation("synthetic-binary", "binary", "accuracy", clients, 2, fed.planted_groups, fed.options)


def _loop_one(spec, X, y, init, epochs, lr, l2, device):
    module = spec.module().to(device)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(init[name])
    opt = torch.optim.Adam(module.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    for _ in range(epochs):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(module(X)[:, 0], y)
        loss = loss + 0.5 * l2 * module.weight.pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return module


def batched_logistic(n: int = 10, device: str = "cpu", epochs: int = 200, samples: int = 100,
                     sample_loop: int = 20, seed: int = 0) -> dict:
    """Time all 2^N − 1 logistic subsets trained together vs a per-subset loop (sampled)."""
    fed = binary_federation(n, samples, seed)
    spec = make_model("logistic", fed.input_shape, 1)
    X = torch.as_tensor(np.concatenate([c.train.X for c in fed.clients]), device=device)
    y = torch.as_tensor(np.concatenate([c.train.y for c in fed.clients]), device=device)
    owner = torch.as_tensor(np.repeat(np.arange(n), fed.sizes("train")), device=device)
    init = {k: v[0].to(device) for k, v in spec.init(torch.Generator().manual_seed(seed), 1).items()}
    masks = list(range(1, 1 << n))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    t = time.perf_counter()
    params = train_subsets(spec, "binary", X, y, owner, masks, n, init, epochs=epochs, lr=0.05, l2=1e-3)
    sync()
    batched = time.perf_counter() - t
    rng = np.random.default_rng(seed)
    sample = rng.choice(masks, size=min(sample_loop, len(masks)), replace=False)
    worst = 0.0
    t = time.perf_counter()
    for mask in sample:
        idx = _members(int(mask), n)
        keep = torch.as_tensor(np.isin(owner.cpu().numpy(), idx), device=device)
        m = _loop_one(spec, X[keep], y[keep].float(), init, epochs, 0.05, 1e-3, device)
        worst = max(worst, (m.weight.detach() - params["weight"][mask - 1]).abs().max().item())
    sync()
    loop_each = (time.perf_counter() - t) / len(sample)
    return {"n": n, "device": device, "models": len(masks), "epochs": epochs, "batched_s": batched,
            "loop_sampled": len(sample), "loop_s": loop_each * len(masks), "max_weight_diff": worst}


# --------------------------------------------------------------------------- 3. GPU
def oracle_on(device: str, model: str, n: int = 12, epochs: int | None = None, seed: int = 0) -> dict:
    """The exhaustive oracle on ``device``: wall time, chunks, models per second."""
    from coalitions.learners.exact import ExhaustiveOracle

    fed = binary_federation(n, samples=100, seed=seed) if model == "logistic" else \
        load("digits", clients=n, partition="practical", seed=seed)
    o = ExhaustiveOracle(protocol=former_default(model, epochs), device=device, seed=seed)
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    o.fit(fed)
    if device == "cuda":
        torch.cuda.synchronize()
    s = time.perf_counter() - t
    models = (1 << n) - 1
    return {"n": n, "model": model, "device": device, "seconds": s, "models": models,
            "chunks": o.chunks_trained_, "epochs": o.config_["epochs"], "per_chunk_s": s / max(1, o.chunks_trained_)}


def print_gpu(quick: bool = False) -> None:
    print(f"   on {torch.cuda.get_device_name()}")
    r = batched_logistic(12, "cuda", epochs=50 if quick else 200)
    print(f"   N=12 logistic, train_subsets: {r['models']} models in {r['batched_s']:.2f} s; loop on the GPU "
          f"~{r['loop_s']:.1f} s (extrapolated from {r['loop_sampled']}); ratio {r['loop_s'] / r['batched_s']:.1f}x")
    for model, epochs in (("logistic", 50 if quick else None), ("cnn", 5 if quick else None)):
        g = oracle_on("cuda", model, 12, epochs)
        print(f"   N=12 {model:8s} ExhaustiveOracle: {g['models']} models x {g['epochs']} epochs in "
              f"{g['seconds']:.2f} s ({g['models'] / g['seconds']:.0f} models/s), {g['chunks']} chunk(s), "
              f"{g['per_chunk_s']:.2f} s per chunk")


# --------------------------------------------------------------------------- main
def _machine() -> str:
    load_avg = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, load average {load_avg[0]:.2f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="small sizes only (closed form N = 12, logistic N = 8, SPO N = 6 with 200 steps)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads [the thread policy]")
    args = ap.parse_args(argv)
    from coalitions.learners.training.threads import configure

    configure(args.threads)
    print(f"machine: {_machine()}")
    print("\n1. closed-form least squares, synthetic (dim 20, 50 samples/client, 200 val points/client)")
    print("   per-subset loop: np.linalg.lstsq + validation MSE, timed on a random sample of subsets and "
          "extrapolated to all 2^N - 1")
    for n in ((12,) if args.quick else (12, 16)):
        r = closed_form(n)
        print(f"   N={n:2d}: {r['models']:6d} models in {r['batched_s']:.3f} s (closed form); "
              f"loop ~{r['loop_s']:.1f} s (extrapolated from {r['loop_sampled']}); "
              f"ratio {r['loop_s'] / r['batched_s']:.0f}x; max rel. MSE difference {r['max_rel_diff']:.1e}")
    print("\n2. logistic regression, all subsets trained together on the CPU "
          "(synthetic with labels y > 0, 100 samples/client, full batch, Adam, "
          f"{50 if args.quick else 200} epochs)")
    print("   per-subset loop: one plain torch model per subset, same optimiser and epochs, timed on a "
          "random sample of subsets and extrapolated")
    n = 8 if args.quick else 10
    r = batched_logistic(n, "cpu", epochs=50 if args.quick else 200)
    print(f"   N={n:2d}: {r['models']:5d} models in {r['batched_s']:.2f} s (batched); loop ~{r['loop_s']:.1f} s "
          f"(extrapolated from {r['loop_sampled']}); ratio {r['loop_s'] / r['batched_s']:.1f}x; "
          f"max weight difference {r['max_weight_diff']:.1e}")
    print("\n3. the oracle at N = 12 on a GPU (logistic regression and a CNN)")
    if torch.cuda.is_available():
        print_gpu(quick=args.quick)
    else:
        print("   not run: no CUDA device on this machine")
    if args.quick:
        print_spo_vs_exhaustive((6,), steps=200, logistic_epochs=50)
    else:
        print_spo_vs_exhaustive((6, 10, 14))



# --------------------------------------------------------------------------- 4. SPO vs exhaustive
def spo_vs_exhaustive(n: int, steps: int = 3000, seed: int = 0, logistic_epochs: int = 200) -> dict:
    """SPO's time to the full benefit graph vs the exhaustive oracle's, at ``n`` clients.

    ``synthetic`` regression (few samples, small rho) for SPO against the closed-form
    oracle, and the binary variant (labels ``y > 0``) for SPO with a logistic target
    against all 2^N − 1 logistic subset models trained together.  SPO's time is the
    hypernetwork's training plus every direction search that peeling asks for
    (``BG(all)`` and each later ``BG(R)``, elimination rule), i.e. ``SPO.fit`` and its ``estimate_``.
    """
    from coalitions.learners.exact import ExhaustiveOracle
    from coalitions.learners.methods.spo import SPO
    from coalitions.learners.training.protocol import TrainingProtocol

    budget = TrainingProtocol(steps=steps, batch_size=256)   # SPO's training settings (256: its former default batch)
    out = {"n": n}
    fed = load("synthetic", clients=n, samples=10, rho=0.01, val=200, test=10, seed=seed)
    t = time.perf_counter()
    ExhaustiveOracle().fit(fed)
    out["exhaustive_linear_s"] = time.perf_counter() - t
    spo = SPO(protocol=budget, device="cpu", seed=seed).fit(fed)
    _ = spo.estimate_  # the rest of the peeling
    out["spo_linear"] = dict(spo.timings_, peeling=spo.peeling_seconds_,
                          total=spo.timings_["total"] + spo.peeling_seconds_)
    bfed = binary_federation(n, samples=100, seed=seed)
    t = time.perf_counter()
    ExhaustiveOracle(protocol=former_default("logistic", logistic_epochs), device="cpu", seed=seed).fit(bfed)
    out["exhaustive_logistic_s"] = time.perf_counter() - t
    spo = SPO(protocol=budget, device="cpu", seed=seed).fit(bfed)
    _ = spo.estimate_  # the rest of the peeling
    out["spo_logistic"] = dict(spo.timings_, peeling=spo.peeling_seconds_,
                          total=spo.timings_["total"] + spo.peeling_seconds_)
    return out


def print_spo_vs_exhaustive(sizes=(6, 10, 14), steps: int = 3000, logistic_epochs: int = 200) -> None:
    print("\n4. SPO's time to the full benefit graph vs the exhaustive oracle (CPU)")
    print(f"   SPO: training ({steps} steps) + BG(all) + the rest of the peeling; exhaustive: all 2^N - 1 subsets")
    for n in sizes:
        r = spo_vs_exhaustive(n, steps=steps, logistic_epochs=logistic_epochs)
        a, b = r["spo_linear"], r["spo_logistic"]
        print(f"   N={n:2d} linear:   exhaustive {r['exhaustive_linear_s']:7.2f} s (closed form) | SPO "
              f"{a['total']:6.1f} s (train {a['train']:.1f}, BG(all) {a['graph_all']:.1f}, "
              f"other rounds {a['peeling']:.1f})")
        print(f"   N={n:2d} logistic: exhaustive {r['exhaustive_logistic_s']:7.2f} s (batched, {logistic_epochs} epochs) | SPO "
              f"{b['total']:6.1f} s (train {b['train']:.1f}, BG(all) {b['graph_all']:.1f}, "
              f"other rounds {b['peeling']:.1f})")


if __name__ == "__main__":
    main()
