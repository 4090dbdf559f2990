"""The learned-vs-exhaustive cost frontier: when does a learned benefit graph pay?

For two games and N = 4, 6, 8, 10 clients (``--sizes``), in one run:

* ``fashion``: the neural game of ``reproduce fashion`` (its Dirichlet federation with N
  clients, MLP 784-32-10 with personal heads, the experiment's protocol: Adam, 100 full-batch
  steps; the exact game trains all ``2^N - 1`` subsets with 50 bootstrap replicates);
* ``linear``: ``reproduce synthetic``'s regime I (10 samples per client, linear regression;
  the exact game in closed form),

it runs the exact oracle, SPO (the experiment's settings) and the fastest personalised learner
that learns weights (FedAMP, FedAMP-heuristic or FeDeRiCo: all three are timed at the first
size of each game and the fastest is kept), each from the same federation and seed, and prints
for each its **CPU time** (``time.process_time`` of this process, every thread; PyTorch on
one thread, so CPU time is what the work costs whatever the machine's load) and its wall time
to the full benefit graph ``BG(all)`` and to the CE, and its agreement with the exact game:
edge F1 of the learned ``BG(all)`` and whether its CE is the exact CE.  For the exact oracle
the graph costs the training of every subset and the CE one ``solve`` more; a learner's fit
yields both at once (SPO's peeling runs its searches on the remaining sets), so its two times
are the same.

Then the crossover: the smallest measured N at which the exact oracle costs more CPU than
the learner.  Past the largest measured N the script extrapolates, **labelled as a
projection**: the exact oracle's CPU time as ``a·2^N`` (its work is one model per subset; the
constant from the largest measured N) and each learner's as a power law of N fitted by least
squares to all its measured points (log-log).

Run:  python benchmarks/frontier.py [--quick] [--sizes 4,6,8,10] [--seeds 0] [--figure PATH]

``--quick``: N = 3, 4, five training steps, short SPO searches; the fashion game only.
``--plot-from OUT.txt ...``: no measurement; the crossover, projections and figure redrawn from
saved runs' printed tables (e.g. one run per game).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import coalitions as co  # noqa: E402
from coalitions.compare import compare  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.experiments.catalogue import FASHION, SYNTHETIC, budgeted_options  # noqa: E402
from coalitions.learners.experiments.runner import compute_piece  # noqa: E402
from coalitions.learners.experiments.statistics import separate_seeds  # noqa: E402
from coalitions.learners.training import threads  # noqa: E402

LEARNERS = ("fedamp", "fedamp-heuristic", "federico")
GAMES = {"fashion": (FASHION, "dirichlet"), "linear": (SYNTHETIC, "few")}


def federation(game: str, n: int, seed: int):
    """Game ``game``'s federation with ``n`` clients (the experiment's regime, data seed from ``seed``)."""
    exp, regime = GAMES[game]
    r = next(r for r in exp.regimes if r.name == regime)
    return load(exp.dataset, seed=separate_seeds(seed).data, **{**r.options, "clients": n})


def options(game: str, what: str, fed, quick: bool) -> dict:
    """The experiment's options of piece ``what`` (``--quick``: the experiment's own quick settings, 5 steps)."""
    exp, regime_name = GAMES[game]
    regime = next(r for r in exp.regimes if r.name == regime_name)
    if what == "exact":
        opts = exp.oracle_options(quick, regime)
    else:
        opts = budgeted_options(exp, quick, what, fed.sizes("train"), regime)
    if quick:
        if "protocol" in opts:
            opts["protocol"] = opts["protocol"].with_(steps=5)
        for key in ("steps", "rounds"):
            if key in opts:
                opts[key] = min(opts[key], 5)
    return opts


def measure(game: str, what: str, fed, seed: int, quick: bool) -> dict:
    """One method on ``fed``: CPU and wall seconds to ``BG(all)`` and to the CE, with the graph and the CE."""
    exp = GAMES[game][0]
    opts = options(game, what, fed, quick)
    c0, w0 = time.process_time(), time.perf_counter()
    out = compute_piece(fed, exp, what, opts, separate_seeds(seed).init, "cpu")
    if what == "exact":
        g = out[0]
        edges = set(co.ExactOracle(g).benefit_graph(g.grand).edges)
        c1, w1 = time.process_time(), time.perf_counter()
        partition = set(co.solve(g).masks)
        c2, w2 = time.process_time(), time.perf_counter()
        return {"cpu_graph": c1 - c0, "wall_graph": w1 - w0, "cpu_ce": c2 - c0, "wall_ce": w2 - w0,
                "game": g, "edges": edges, "partition": partition}
    c1, w1 = time.process_time(), time.perf_counter()
    return {"cpu_graph": c1 - c0, "wall_graph": w1 - w0, "cpu_ce": c1 - c0, "wall_ce": w1 - w0, "estimate": out}


def against(exact: dict, r: dict) -> tuple[float, bool]:
    """Edge F1 of a learner's ``BG(all)`` and whether its CE is the exact game's CE."""
    if "estimate" not in r:
        return 1.0, True
    cmp = compare(r["estimate"], exact["game"])
    return float(cmp["edge_f1"]), bool(cmp["same_partition"])


def projection(xs: list[int], ys: list[float], n: int, exhaustive: bool) -> float:
    """CPU seconds projected at ``n``: ``a·2^n`` through the last point, or a power law ``b·n^k``.

    The power law is the least-squares line through every measured ``(log N, log CPU)``: a
    learner's cost moves with the game's structure (SPO searches once per client and
    remaining set), so two points alone can even give a falling cost.
    """
    if exhaustive or len(xs) < 2:
        return ys[-1] * 2.0 ** (n - xs[-1]) if exhaustive else ys[-1]
    lx, ly = np.log(np.asarray(xs, dtype=float)), np.log(np.asarray(ys, dtype=float))
    k, b = np.polyfit(lx, ly, 1)
    return float(math.exp(b + k * math.log(n)))


def run_game(game: str, sizes: list[int], seeds: list[int], quick: bool) -> dict:
    """Rows ``{(n, method): [result per seed]}`` of one game; the learner kept is timed once at the first size."""
    rows: dict = {}
    learner = None
    if not quick:  # imports and first-call set-up, not counted
        warm = federation(game, 3, seeds[0])
        for m in ("exact", "spo", *LEARNERS):
            measure(game, m, warm, seeds[0], True)
    for n in sizes:
        for seed in seeds:
            fed = federation(game, n, seed)
            exact = measure(game, "exact", fed, seed, quick)
            rows.setdefault((n, "exact"), []).append(exact)
            methods = ["spo"] + ([learner] if learner else list(LEARNERS))
            for m in methods:
                r = measure(game, m, fed, seed, quick)
                r["f1"], r["same"] = against(exact, r)
                rows.setdefault((n, m), []).append(r)
            exact["f1"], exact["same"] = 1.0, True
            if learner is None:
                learner = min(LEARNERS, key=lambda m: rows[(n, m)][0]["cpu_ce"])
                print(f"   ({game}: fastest weight learner at N = {n}: {learner}; CPU s "
                      + ", ".join(f"{m} {rows[(n, m)][0]['cpu_ce']:.2f}" for m in LEARNERS) + ")", flush=True)
            for m in ("exact", "spo", learner):
                rs = rows[(n, m)]
                k = len(rs)
                print(f"   {game:8s} {n:3d}  {m:17s} {sum(r['cpu_graph'] for r in rs) / k:9.2f} "
                      f"{sum(r['cpu_ce'] for r in rs) / k:9.2f} {sum(r['wall_ce'] for r in rs) / k:9.2f} "
                      f"{sum(r['f1'] for r in rs) / k:6.2f} {sum(r['same'] for r in rs)}/{k}   "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    return {"rows": rows, "learner": learner}


def cpu_series(res: dict, sizes: list[int]) -> dict[str, list[float]]:
    """Mean CPU seconds to the CE per size: ``{method: [...]}`` for the exact oracle, SPO and the learner kept."""
    rows = res["rows"]
    return {m: [sum(r["cpu_ce"] for r in rows[(n, m)]) / len(rows[(n, m)]) for n in sizes]
            for m in ("exact", "spo", res["learner"])}


def read_table(path: Path) -> tuple[dict, dict]:
    """The CPU-to-CE series of a saved run's printed table (this script's stdout): ``(sizes, series)`` per game."""
    sizes: dict = {}
    series: dict = {}
    for line in path.read_text().splitlines():
        f = line.split()
        if len(f) >= 8 and f[0] in GAMES and f[1].isdigit():
            game, n, m, cpu = f[0], int(f[1]), f[2], float(f[4])
            if n not in sizes.setdefault(game, []):
                sizes[game].append(n)
            series.setdefault(game, {}).setdefault(m, []).append(cpu)
    return sizes, series


def summary(game: str, sizes: list[int], series: dict, project: list[int]) -> None:
    """Print the crossover of ``game`` and the labelled projections from its CPU series."""
    learner = [m for m in series if m not in ("exact", "spo")][0]
    for m in ("spo", learner):
        cross = next((n for n, e, c in zip(sizes, series["exact"], series[m], strict=True) if e > c), None)
        where = (f"N = {cross} (measured)" if cross is not None and cross != sizes[0] else
                 f"every measured N (N = {sizes[0]} to {sizes[-1]})" if cross is not None else
                 f"no measured N (N <= {sizes[-1]})")
        proj = ""
        if cross is None and project:
            hit = next((n for n in project if projection(sizes, series["exact"], n, True)
                        > projection(sizes, series[m], n, False)), None)
            proj = (f"; projection: N = {hit}" if hit else f"; projection: not by N = {project[-1]}")
        print(f"   {game}: the exact oracle costs more CPU than {m} from {where}{proj}")
    for n in project:
        print(f"   {game} N = {n} PROJECTION (not measured): exact {projection(sizes, series['exact'], n, True):.0f} "
              f"CPU s, spo {projection(sizes, series['spo'], n, False):.0f}, "
              f"{learner} {projection(sizes, series[learner], n, False):.0f}")


def draw(path: Path, sizes: dict, series: dict, project: list[int]) -> None:
    """CPU seconds to the CE against N, log scale, one panel per game; projections dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(series), figsize=(5 * len(series), 3.8), squeeze=False)
    for ax, (game, s) in zip(axes[0], series.items(), strict=True):
        xs = sizes[game]
        ahead = [n for n in project if n > xs[-1]]
        for (m, ys), colour in zip(s.items(), ("#222222", "#1f77b4", "#d62728"), strict=False):
            ax.plot(xs, ys, "o-", color=colour, label=m)
            if ahead:
                px = [xs[-1], *ahead]
                py = [ys[-1], *(projection(xs, ys, n, m == "exact") for n in ahead)]
                ax.plot(px, py, ":", color=colour)
        ax.set_yscale("log")
        ax.set_xlabel("clients N")
        ax.set_ylabel("CPU s to the CE")
        ax.set_title(f"{game} ({'dotted: projection, not measured' if ahead else 'measured'})")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ints(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x.strip()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 3, 4, 5 steps, fashion only (CI)")
    ap.add_argument("--sizes", default="4,6,8,10", help="client counts [4,6,8,10]")
    ap.add_argument("--games", default="fashion,linear", help="games: fashion, linear [both]")
    ap.add_argument("--seeds", default="0", help="seeds, comma-separated [0]")
    ap.add_argument("--project", default="12,14,16", help="N to project to, labelled [12,14,16]")
    ap.add_argument("--figure", default=None, help="write the figure here (PNG)")
    ap.add_argument("--plot-from", nargs="+", default=None, metavar="FILE",
                    help="measure nothing: the crossover and the figure from saved runs' output (this script's stdout)")
    args = ap.parse_args(argv)
    try:
        sizes, seeds, project = _ints(args.sizes), _ints(args.seeds), _ints(args.project)
    except ValueError:
        print(f"frontier.py: --sizes, --seeds and --project take comma-separated integers, got "
              f"{args.sizes!r}, {args.seeds!r}, {args.project!r}", file=sys.stderr)
        return 2
    games = [g.strip() for g in args.games.split(",") if g.strip()]
    if not games or any(g not in GAMES for g in games) or not sizes or min(sizes) < 2 or max(sizes) > 14:
        print(f"frontier.py: --games must name {', '.join(GAMES)} and --sizes lie in 2..14", file=sys.stderr)
        return 2
    if args.quick:
        sizes, games, project = [3, 4], ["fashion"], [6]
    if args.plot_from:
        print(f"# redrawn from {', '.join(args.plot_from)} (nothing measured now)")
        runs = [read_table(Path(f)) for f in args.plot_from]
        all_sizes = {g: s for r in runs for g, s in r[0].items()}
        series = {g: s for r in runs for g, s in r[1].items()}
        for game in series:
            summary(game, all_sizes[game], series[game], [n for n in project if n > all_sizes[game][-1]])
        if args.figure:
            draw(Path(args.figure), all_sizes, series, project)
            print(f"   figure: {args.figure}")
        return 0
    project = [n for n in project if n > sizes[-1]]
    threads.set_override(1)
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start; PyTorch on 1 thread; "
          f"seeds {seeds}; CPU = process time of this process")
    print(f"   {'game':8s} {'N':>3s}  {'method':17s} {'CPU->BG':>9s} {'CPU->CE':>9s} {'wall->CE':>9s} "
          f"{'edgeF1':>6s} sameCE")
    series = {}
    for game in games:
        series[game] = cpu_series(run_game(game, sizes, seeds, args.quick), sizes)
        summary(game, sizes, series[game], project)
    if args.figure:
        draw(Path(args.figure), dict.fromkeys(games, sizes), series, project)
        print(f"   figure: {args.figure}")
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
