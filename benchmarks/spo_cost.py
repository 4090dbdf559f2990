"""SPO's cost on ``reproduce fashion``: CPU seconds to the full benefit graph, its work, and its share of the peak.

On ``reproduce fashion``'s Dirichlet federation cut to ``--clients`` clients (default 10, the
experiment's), SPO with the experiment's settings (MLP 784-32-10 with personal heads, its
hypernetwork, its protocol with the three-rate grid, 50-step direction searches) is fitted once on
one PyTorch thread, and the script prints:

* the CPU time (``time.process_time``: the work, whatever the load) of the training (every rate of
  the grid) and of the rest of the fit: the direction searches of ``BG(all)``, its elimination
  rounds, the utilities;
* the multiply-adds SPO performed, counted from the shapes: every training step's directions
  (hypernetwork, generated body on every client's batch, heads) times 3 for the backward pass,
  the validation evaluations, and every row the searches evaluated (folded or not, as it ran;
  gradient rows times 3), plus the folds themselves (``learners/methods/spo/fold.py``);
* GMAC per CPU-second, and as a share of this CPU's float32 matrix-product peak on one thread
  measured in the same run (``benchmarks/peak.py``);
* with ``--exact``: the exhaustive game on the same federation (the experiment's oracle, 50
  replicates) timed the same way, the ratio of the two CPU times, and the edge F1 of SPO's
  ``BG(all)`` against the exhaustive game's.

``--save FILE`` writes SPO's learned weights (each client's best direction), validation losses,
utilities and ``BG(all)`` edges (and the exhaustive game's edges with ``--exact``); ``--against FILE`` prints the largest differences from a saved
run (e.g. of an older checkout: how much a change of rounding moved the results);
``--plain-search`` searches without the fold and with ``log_softmax``, to tell what the search's
new arithmetic changed from what the training's did.

Run:  python benchmarks/spo_cost.py [--quick] [--clients 10] [--exact] [--save F] [--against F] [--plain-search]

``--quick``: 4 clients, 5 training steps, 10-step searches (seconds; CI runs it).  Without the
Debian package ``dataset-fashion-mnist`` it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from peak import matmul_peak  # noqa: E402

from coalitions.errors import InputError  # noqa: E402


class Counter:
    """Rows the direction searches evaluated, per client, with and without a gradient (wraps ``own_loss``)."""

    def __init__(self):
        self.rows: dict[tuple[int, bool], int] = {}
        self.searches: list = []

    def install(self):
        from coalitions.learners.methods.spo.search import DirectionSearch

        original = DirectionSearch.own_loss
        counter = self

        def own_loss(search, d, targets):
            if search not in counter.searches:
                counter.searches.append(search)
            grad = bool(d.requires_grad and torch.is_grad_enabled())
            for c, k in zip(*np.unique(targets.cpu().numpy(), return_counts=True), strict=True):
                counter.rows[(int(c), grad)] = counter.rows.get((int(c), grad), 0) + int(k)
            return original(search, d, targets)

        DirectionSearch.own_loss = own_loss   # type: ignore[method-assign]
        return original


def plain_search() -> None:
    """Every later SPO search generates its rows' weights (no fold) and scores with ``log_softmax``.

    What the search computed before issue 37, except that rows whose line search failed still
    leave the batch (that changes no bit: their next step would repeat the failed one).
    """
    from coalitions.learners.data.metrics import loss_function
    from coalitions.learners.methods.spo import estimator
    from coalitions.learners.methods.spo.search import DirectionSearch

    estimator.loss_function = lambda task, logsumexp=False: loss_function(task)   # type: ignore[assignment]
    init = DirectionSearch.__init__

    def unfolded(self, *a, **k):
        init(self, *a, **k)
        self._fold_decided = True   # decided: not folded

    DirectionSearch.__init__ = unfolded   # type: ignore[method-assign]


def hyper_body_macs(net) -> int:
    """Multiply-adds of the hypernetwork up to its last hidden layer, per direction."""
    return sum(m.in_features * m.out_features for m in net.body if isinstance(m, torch.nn.Linear))


def target_macs(spec, first_done: bool) -> int:
    """Multiply-adds of the target per sample (the first layer left out when it was folded)."""
    shapes = spec.shapes
    if spec.kind == "mlp":
        d, h = shapes["w1"]
        return (0 if first_done else d * h) + h * shapes["w2"][1]
    if spec.kind in ("linear", "logistic"):
        return 0 if first_done else int(np.prod(shapes["weight"]))
    raise InputError(f"spo_cost counts mlp and affine targets, not {spec.kind}")


def search_macs(est, counter: Counter) -> float:
    """Multiply-adds of every row the searches evaluated, and of the folds, as they ran."""
    net, spec = est.hypernet_, est.spec_
    width = net.head.in_features
    P = sum(net.sizes)
    sizes = est.val_.sizes
    folded = any(getattr(s, "_folded", None) is not None for s in counter.searches)
    total = 0.0
    for (c, grad), rows in counter.rows.items():
        n = int(sizes[c])
        if folded:
            from coalitions.learners.methods.spo.fold import FIRST_LAYER

            d_in, h = spec.shapes[FIRST_LAYER[spec.kind][0]]
            per = hyper_body_macs(net) + (P - d_in * h) * width + n * h * width + n * target_macs(spec, True)
        else:
            per = hyper_body_macs(net) + P * width + n * target_macs(spec, False)
        total += rows * per * (3 if grad else 1)
    for s in counter.searches:
        f = getattr(s, "_folded", None)
        if f is not None:
            d_in, h = spec.shapes[f.weight]
            total += sum(int(sizes[c]) * d_in * h * width for c in f._folds)
    return total


def train_macs(est, steps: int) -> float:
    """Multiply-adds of ``steps`` training steps (times 3: forward and backward) and their evaluations."""
    net, spec, fed = est.hypernet_, est.spec_, est.federation_
    width = net.head.in_features
    P = sum(net.sizes)
    batch = est.protocol_.batch_size
    n_train = float(fed.sizes("train").sum()) if batch is None else batch * fed.n
    per_step = est.directions * (hyper_body_macs(net) + P * width) + est.directions * n_train * target_macs(spec, False)
    evals = -(-steps // 50)   # every EVAL_EVERY steps and at the end, 16 directions on the tuning rows
    per_eval = 16 * (hyper_body_macs(net) + P * width) + 16 * float(est.tune_.sizes.sum()) * target_macs(spec, False)
    return 3 * steps * per_step + evals * per_eval


def result_record(est) -> dict:
    """What ``--save`` writes and ``--against`` compares."""
    return {"weights": est.weights_.tolist(), "val_loss": [float(x) for x in est.val_loss_],
            "utilities": est.utilities_, "edges": sorted(est.oracle_.benefit_graph((1 << est.federation_.n) - 1).edges)}


def edge_f1(a, b) -> float:
    """F1 of edge list ``a`` against edge list ``b`` (1 when both are empty)."""
    sa, sb = set(map(tuple, a)), set(map(tuple, b))
    return 2 * len(sa & sb) / (len(sa) + len(sb)) if sa or sb else 1.0


def against(saved: dict, now: dict) -> None:
    """Print the largest differences between a saved run and this one."""
    w = float(np.max(np.abs(np.asarray(saved["weights"]) - np.asarray(now["weights"]))))
    v = float(np.max(np.abs(np.asarray(saved["val_loss"]) - np.asarray(now["val_loss"]))))
    u = max(abs(saved["utilities"][p][c] - now["utilities"][p][c]) for p in now["utilities"] for c in now["utilities"][p])
    print(f"against the saved run: max |weights diff| {w:.3g}, max |val loss diff| {v:.3g}, "
          f"max |utility diff| {u:.3g}; BG(all): {len(saved['edges'])} edges then, {len(now['edges'])} now, "
          f"edge F1 {edge_f1(now['edges'], saved['edges']):.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 clients, 5 steps, 10-step searches (CI)")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--exact", action="store_true", help="time the exhaustive game on the same federation too")
    ap.add_argument("--save", type=Path, help="write SPO's weights, losses, utilities and edges here (JSON)")
    ap.add_argument("--against", type=Path, help="compare with a file written by --save")
    ap.add_argument("--plain-search", action="store_true",
                    help="search without the fold and with log_softmax (to measure what they change)")
    args = ap.parse_args(argv)
    if args.quick:
        args.clients = 4
    torch.set_num_threads(1)
    from coalitions.learners.training import threads

    threads.set_override(1)
    print(f"# torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start; PyTorch on 1 thread")
    from gpu import fashion_federation, piece_options, run_piece

    from coalitions.learners.experiments.statistics import separate_seeds
    from coalitions.learners.methods.spo import SPO
    try:
        fed = fashion_federation(args.clients, args.seed)
    except InputError as e:
        print(f"fashion: not measured: {e}")
        print("install the Debian package dataset-fashion-mnist to run this benchmark")
        print("# nothing else to do")
        return 0
    steps = 5 if args.quick else None
    opts = dict(piece_options("spo", fed, steps, args.quick))
    protocol = opts.pop("protocol")
    from coalitions.learners.methods.registry import create

    def spo(o, p):
        return create("spo", dict(o), device="cpu", seed=separate_seeds(args.seed).init).set_params(protocol=p)

    small = fashion_federation(3, args.seed)   # imports and first calls, not counted
    spo({**opts, "search_steps": 2}, protocol.with_(steps=2, lr_grid=None)).fit(small)
    peak0 = matmul_peak(1, seconds=0.2 if args.quick else 1.0)
    print(f"float32 1024 x 1024 matrix product, 1 thread: {peak0:.1f} GMAC/s (best; the peak)")

    counter = Counter()
    original = counter.install()
    if args.plain_search:
        plain_search()
    est = spo(opts, protocol)
    steps_run: list[int] = []
    train, conclude = SPO._train, SPO._conclude
    cpu: dict[str, float] = {}

    def timed_train(self, f, lr=None):
        out = train(self, f, lr)
        steps_run.append(self.stopped_at_)
        return out

    def timed_conclude(self, *a):
        cpu["train"] = time.process_time() - cpu["start"]
        return conclude(self, *a)

    SPO._train, SPO._conclude = timed_train, timed_conclude   # type: ignore[method-assign]
    try:
        cpu["start"] = time.process_time()
        wall = time.perf_counter()
        est.fit(fed)
        cpu["fit"] = time.process_time() - cpu["start"]
        wall = time.perf_counter() - wall
    finally:
        from coalitions.learners.methods.spo.search import DirectionSearch

        SPO._train, SPO._conclude = train, conclude   # type: ignore[method-assign]
        DirectionSearch.own_loss = original   # type: ignore[method-assign]
    peak1 = matmul_peak(1, seconds=0.2 if args.quick else 1.0)
    peak = max(peak0, peak1)
    rest = cpu["fit"] - cpu["train"]
    w_train, w_search = train_macs(est, sum(steps_run)), search_macs(est, counter)
    folded = any(getattr(s, "_folded", None) is not None for s in counter.searches)
    rows = sum(counter.rows.values())
    print(f"fashion, {fed.n} clients, seed {args.seed}: SPO {opts}, protocol steps {protocol.steps}, "
          f"grid {protocol.lr_grid}")
    print(f"SPO to BG(all): {cpu['fit']:.2f} CPU s ({wall:.2f} s wall): training {cpu['train']:.2f} "
          f"({sum(steps_run)} steps over {len(steps_run)} rate(s)), searches and the rest {rest:.2f}")
    print(f"work: training {w_train / 1e9:.2f} GMAC, searches {w_search / 1e9:.2f} GMAC ({rows:,} rows, "
          f"{'folded' if folded else 'not folded'}); {(w_train + w_search) / cpu['fit'] / 1e9:.2f} GMAC per CPU-second "
          f"= {(w_train + w_search) / cpu['fit'] / 1e9 / peak:.0%} of the peak")
    print(f"   training {w_train / cpu['train'] / 1e9:.2f} GMAC/s ({w_train / cpu['train'] / 1e9 / peak:.0%}), "
          f"searches and the rest {w_search / max(rest, 1e-9) / 1e9:.2f} GMAC/s "
          f"({w_search / max(rest, 1e-9) / 1e9 / peak:.0%}); peak {peak0:.1f} before, {peak1:.1f} after")
    record = result_record(est)
    saved = json.loads(args.against.read_text()) if args.against else None
    if saved:
        against(saved, record)
    if args.exact:
        import coalitions as co

        e_opts = piece_options("exact", fed, steps, args.quick)
        c0 = time.process_time()
        _, out = run_piece("exact", fed, e_opts, "cpu", args.seed)
        e_cpu = time.process_time() - c0
        game = out[0]
        record["exact_edges"] = sorted(co.ExactOracle(game).benefit_graph(game.grand).edges)
        print(f"exhaustive game ({(1 << fed.n) - 1} subsets, 50 replicates): {e_cpu:.2f} CPU s; "
              f"its CPU over SPO's to BG(all): {e_cpu / cpu['fit']:.2f}")
        print(f"edge F1 of SPO's BG(all) against the exhaustive game's: {edge_f1(record['edges'], record['exact_edges']):.3f}"
              + (f" (the saved run's: {edge_f1(saved['edges'], record['exact_edges']):.3f})" if saved else ""))
    if args.save:
        args.save.write_text(json.dumps(record))
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
