"""The cost frontier of the neural game, measured: exhaustive game, SPO and the sampled CE against N.

For ``reproduce fashion``'s Dirichlet federation cut to N clients (``--sizes``; MLP 784-32-10
with personal heads, the experiment's protocol: Adam, weight decay 1e-3, full batch, 100 steps,
patience 10) and each seed of ``--seeds`` (the data split and the training seed, as
``reproduce`` derives them), one run measures three ways to the benefit graph and the CE:

* **exhaustive**: the exact oracle trains all ``2^N - 1`` subsets with the experiment's
  settings and 200 bootstrap replicates of the validation rows; ``BG(all)`` and the CE are
  solved at z = 1.96 with the regime's family of comparisons (game-wise for this regime), as
  ``reproduce`` solves them.  Its CPU time is to ``BG(all)`` and to the CE (one ``solve``
  more).  ``--backend ray`` trains its chunks as tasks of a private local Ray with
  ``--workers`` workers (one thread each); the CPU time then adds every process this one
  started (Ray's workers and daemons, read from ``/proc``) to this process's own;
* **SPO** (the experiment's settings) on the same federation: its CPU time to ``BG(all)``
  (its CE comes with it), the edge F1 of its ``BG(all)`` against the exhaustive one and
  whether its CE is the exhaustive CE (:func:`coalitions.compare.compare`).  Its reference is
  the exhaustive graph's **self-agreement**: the median edge F1 of the exact graph against
  the graphs re-solved on its 200 bootstrap replicates
  (:func:`coalitions.support.self_agreement`, as ``benchmarks/self_agreement.py`` reads it):
  the F1 the exact game itself reaches when only its validation rows are resampled.  Both are
  also given at point values (z = 0), where the exhaustive graph has edges to agree with;
* **sampled**: :func:`coalitions.sample_ce` over a
  :class:`~coalitions.learners.game.source.SubsetSource` with the exhaustive oracle's
  settings (the same subset models, trained on demand), ``--budget`` coalitions, ε = δ =
  0.05: its CPU time, the coalitions it trained, whether its partition is the exhaustive CE,
  and whether it is a CE of the full game under the payoffs it judges (each block's own
  model, per comparison: :func:`coalitions.certify` over every coalition).

**Both sides are tuned by the same rule: the experiment protocol's fixed rate, no search.**  The
exhaustive game trains every subset model with Adam at the protocol's rate 0.003 (chosen on the
validation rows of seeds 100-101; ``reproduce fashion`` fixes it too, since tuning each subset model
on the three-rate grid costs 3.5-5.8 times as much; should an experiment's oracle take the grid, it is
removed here), and SPO's hypernetwork is trained with Adam at the same 0.003, its protocol's grid
removed; both under the same protocol (the experiment's budget, local steps and patience).  ``reproduce`` instead gives SPO the grid (0.001, 0.003, 0.01),
three trainings where the exhaustive game has one per subset: a cost the exhaustive side does
not pay.  ``--diagnose`` also fits SPO on that grid and at its default hypernetwork rate 0.01
(what this script ran before) against the same exhaustive game, printed per (N, seed).

CPU time is ``time.process_time`` (PyTorch on one thread), so it is the work whatever the
load; wall time is printed beside it.  After every (N, seed) one JSON line goes to
``--jsonl``; the table gives, per N, the mean over seeds and the range (min–max) of each
CPU time and agreement, and the **crossover**: the smallest measured N at which the
exhaustive game costs more CPU (mean over seeds) than SPO, and than the sampled CE, or the
statement that there is none up to the largest N measured.  Nothing is projected beyond the
measured points.  ``--figure PATH``: log CPU seconds against N, the mean with min–max bars.
``--from FILE.jsonl ...``: no measurement; the table, crossover and figure of saved lines.

Run:  python benchmarks/frontier.py [--quick] [--sizes 6,8,10] [--seeds 0,1,2] [--backend ray]
      [--jsonl OUT.jsonl] [--figure PATH]

``--quick``: N = 3, 4, seeds 0 and 1, five training steps, short SPO searches (CI).  Without the
Debian package ``dataset-fashion-mnist`` it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import coalitions as co  # noqa: E402
from coalitions.compare import compare  # noqa: E402
from coalitions.errors import InputError  # noqa: E402
from coalitions.learners.data.datasets import load  # noqa: E402
from coalitions.learners.experiments.catalogue import FASHION, SYNTHETIC, budgeted_options  # noqa: E402
from coalitions.learners.experiments.runner import compute_piece  # noqa: E402
from coalitions.learners.experiments.statistics import separate_seeds  # noqa: E402
from coalitions.learners.training import threads  # noqa: E402
from coalitions.support import self_agreement  # noqa: E402

#: The games the helpers below know (``benchmarks/sampled_vs_learned.py`` uses ``linear``); the frontier runs fashion.
GAMES = {"fashion": (FASHION, "dirichlet"), "linear": (SYNTHETIC, "few")}
#: The significance level of every exhaustive graph and CE (the oracle's replicates give the standard errors).
Z = 1.96
#: The three curves, in the table's and the figure's order.
CURVES = ("exhaustive", "spo", "sampled")


def regime(game: str):
    """The experiment and regime of ``game``."""
    exp, name = GAMES[game]
    return exp, next(r for r in exp.regimes if r.name == name)


def federation(game: str, n: int, seed: int):
    """Game ``game``'s federation with ``n`` clients (the experiment's regime, data seed from ``seed``)."""
    exp, r = regime(game)
    return load(exp.dataset, seed=separate_seeds(seed).data, **{**r.options, "clients": n})


def options(game: str, what: str, fed, quick: bool, spo: str | float = "grid") -> dict:
    """The experiment's options of piece ``what`` (``--quick``: the experiment's own quick settings, 5 steps).

    SPO's rate (``spo``): ``"grid"`` as ``reproduce`` (the protocol's grid, the lowest validation
    loss kept); ``"fixed"``: the protocol's own rate, the exhaustive game's, for its hypernetwork
    (grid removed); a number: that hypernetwork rate (grid removed).
    """
    exp, r = regime(game)
    if what == "exact":
        opts = exp.oracle_options(quick, r)
        if "protocol" in opts:   # the protocol's own rate, one training per subset model, whatever the oracle takes
            opts["protocol"] = opts["protocol"].with_(lr_grid=None)
    else:
        opts = budgeted_options(exp, quick, what, fed.sizes("train"), r)
        if what == "spo" and spo != "grid" and "protocol" in opts:
            p = opts["protocol"]
            opts = {**opts, "protocol": p.with_(lr_grid=None), "lr": float(p.lr if spo == "fixed" else spo)}
    if quick:
        if "protocol" in opts:
            opts["protocol"] = opts["protocol"].with_(steps=5)
        for key in ("steps", "rounds"):
            if key in opts:
                opts[key] = min(opts[key], 5)
    return opts


def tree_cpu() -> float:
    """CPU seconds (user and system) of every process this one started and that still runs (``/proc``; 0 elsewhere).

    Ray's workers and daemons are children of this process or of its children; their CPU time
    is not in ``time.process_time``.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return 0.0
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2:].split()   # after "pid (name) ": state ppid ... utime(14) stime(15)
        parent[int(d.name)], ticks[int(d.name)] = int(f[1]), int(f[11]) + int(f[12])
    mine, frontier = set(), [os.getpid()]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in mine]
        mine.update(kids)
        frontier += kids
    return sum(ticks[c] for c in mine) / os.sysconf("SC_CLK_TCK")


def clock(backend: str) -> tuple[float, float]:
    """``(CPU seconds, wall seconds)`` now: this process's CPU, plus its descendants' under Ray."""
    return time.process_time() + (tree_cpu() if backend == "ray" else 0.0), time.perf_counter()


def measure(game: str, what: str, fed, seed: int, quick: bool, *, backend: str = "local", workers: int = 2,
            spo: str | float = "grid") -> dict:
    """One method on ``fed``: CPU and wall seconds to ``BG(all)`` and to the CE, with what it found.

    The exact oracle (``what == "exact"``) also returns its ``game`` (with the regime's family of
    comparisons), its ``replicates``, its ``edges`` and CE ``partition`` (at the game's level:
    z = 1.96 when it carries replicates); a learner its ``estimate``.  ``backend="ray"`` trains the
    exhaustive game's chunks on a local Ray with ``workers`` workers.
    """
    exp, r = regime(game)
    opts = options(game, what, fed, quick, spo)
    if what == "exact" and backend == "ray":
        from coalitions.learners.distributed import init

        init(None, num_cpus=workers)
        opts = {**opts, "backend": "ray", "threads": 1}
    c0, w0 = clock(backend if what == "exact" else "local")
    out = compute_piece(fed, exp, what, opts, separate_seeds(seed).init, "cpu")
    if what == "exact":
        g = out[0]
        if g.uncertainty is not None and g.uncertainty.family != r.family:
            g = g.with_uncertainty(g.uncertainty.with_family(r.family))   # as reproduce solves the regime
        edges = set(co.ExactOracle(g).benefit_graph(g.grand).edges)
        c1, w1 = clock(backend)
        partition = set(co.solve(g).masks)
        c2, w2 = clock(backend)
        return {"cpu_graph": c1 - c0, "wall_graph": w1 - w0, "cpu_ce": c2 - c0, "wall_ce": w2 - w0,
                "game": g, "replicates": out[3], "edges": edges, "partition": partition}
    c1, w1 = clock("local")
    return {"cpu_graph": c1 - c0, "wall_graph": w1 - w0, "cpu_ce": c1 - c0, "wall_ce": w1 - w0, "estimate": out}


def against(exact: dict, r: dict) -> tuple[float, bool]:
    """Edge F1 of a learner's ``BG(all)`` and whether its CE is the exact game's CE (at the game's level)."""
    if "estimate" not in r:
        return 1.0, True
    cmp = compare(r["estimate"], exact["game"])
    return float(cmp["edge_f1"]), bool(cmp["same_partition"])


def sampled(game: str, fed, seed: int, budget: int, quick: bool) -> dict:
    """The sampled CE on the exhaustive oracle's own subset models, trained on demand (in this process, one thread).

    ``{"cpu", "wall", "partition", "trained", "certificate"}``; ε = δ = 0.05, the search's level
    z = 1.96 from the oracle's replicates.
    """
    from coalitions.learners.exact import ExhaustiveOracle
    from coalitions.learners.experiments.columns import REPLICATES
    from coalitions.learners.game.source import SubsetSource
    from coalitions.sampled_ce import required_budget

    opts = options(game, "exact", fed, quick)
    init = separate_seeds(seed).init
    c0, w0 = time.process_time(), time.perf_counter()
    src = SubsetSource(fed, ExhaustiveOracle(seed=init, device="cpu", **{"replicates": REPLICATES, **opts}))
    res = co.sample_ce(src, max(budget, required_budget(fed.n, 0.05, 0.05)), epsilon=0.05, delta=0.05, seed=init)
    return {"cpu": time.process_time() - c0, "wall": time.perf_counter() - w0, "partition": set(res.masks),
            "trained": int(res.trainings), "certificate": res.certificate}


def spo_fit(fed, seed: int, exact: dict, quick: bool, spo: str | float) -> dict:
    """SPO on ``fed`` at rate rule ``spo`` (:func:`options`): CPU, wall, its rate, and its agreement with ``exact``."""
    r = measure("fashion", "spo", fed, seed, quick, spo=spo)
    f1, same = against(exact, r)
    est = r["estimate"]
    return {"cpu": r["cpu_ce"], "wall": r["wall_ce"], "f1": f1, "same_ce": same,
            "f1_point": float(compare(est, exact["game"], z=0.0)["edge_f1"]),
            "lr": (est.extra or {}).get("stopping", {}).get("lr"), "edges": len(est.benefit_graph.edges),
            "edge_list": sorted([est.clients[j], est.clients[i]] for j, i in est.benefit_graph.edges)}


def cell(n: int, seed: int, args) -> dict:
    """Every measurement of one (N, seed): a JSON-ready record.

    ``spo``: SPO at the exhaustive game's fixed rate (the curve); with ``args.diagnose`` also
    ``spo_grid`` (``reproduce``'s grid) and ``spo_0.01`` (SPO's default hypernetwork rate, what
    the frontier ran before), each scored against the same exhaustive game.
    """
    fed = federation("fashion", n, seed)
    exact = measure("fashion", "exact", fed, seed, args.quick, backend=args.backend, workers=args.workers)
    g = exact["game"]
    reps = exact["replicates"]
    f1_self, f1_self_point = ((float(np.median(self_agreement(g, reps, z=z))) for z in (Z, 0.0)) if reps is not None
                              else (float("nan"), float("nan")))
    spo = {"spo": spo_fit(fed, seed, exact, args.quick, "fixed")}
    if args.diagnose:
        spo.update({"spo_grid": spo_fit(fed, seed, exact, args.quick, "grid"),
                    "spo_0.01": spo_fit(fed, seed, exact, args.quick, 0.01)})
    s = sampled("fashion", fed, seed, args.budget, args.quick)
    plain = g.with_uncertainty(g.uncertainty.with_family("comparison")) if g.uncertainty is not None else g
    stable = bool(co.certify(plain, sorted(s["partition"]), semantics="shared", detail=False).holds)
    return {"n": n, "seed": seed, "backend": args.backend, "workers": args.workers if args.backend == "ray" else 1,
            "exhaustive": {"cpu_graph": exact["cpu_graph"], "cpu": exact["cpu_ce"], "wall": exact["wall_ce"],
                           "edges": len(exact["edges"]), "self_f1": f1_self,
                           "self_f1_point": f1_self_point,
                           "edge_list": sorted([g.clients[j], g.clients[i]] for j, i in exact["edges"]),
                           "edge_list_point": sorted([g.clients[j], g.clients[i]]
                                                     for j, i in co.ExactOracle(g, z=0.0).benefit_graph(g.grand).edges),
                           "partition": co.format_partition(g, sorted(exact["partition"]))},
            **spo,
            "sampled": {"cpu": s["cpu"], "wall": s["wall"], "same_ce": s["partition"] == exact["partition"],
                        "shared_ce": stable, "trained": s["trained"],
                        "partition": co.format_partition(g, sorted(s["partition"]))}}


def _span(xs: list[float], fmt: str = "{:.1f}") -> str:
    """``mean [min–max]`` of ``xs`` (one value: itself)."""
    xs = [x for x in xs if not (isinstance(x, float) and math.isnan(x))]
    if not xs:
        return "-"
    m = fmt.format(float(np.mean(xs)))
    return m if len(xs) == 1 else f"{m} [{fmt.format(min(xs))}–{fmt.format(max(xs))}]"


def by_size(rows: list[dict]) -> dict[int, list[dict]]:
    """The records grouped by N (sizes ascending; a repeated (N, seed) keeps its last record)."""
    out: dict[int, dict[int, dict]] = {}
    for r in rows:
        out.setdefault(r["n"], {})[r["seed"]] = r
    return {n: list(out[n].values()) for n in sorted(out)}


def table(rows: list[dict]) -> None:
    """Print the measured table (mean [min–max] over seeds per N) and the crossovers."""
    groups = by_size(rows)
    print("\n| N | seeds | exhaustive CPU s to CE | SPO CPU s | sampled CPU s | exhaustive edges "
          "| exhaustive self-agreement (median F1) | SPO edge F1 | at z = 0: exhaustive edges, self-agreement, SPO F1 "
          "| SPO CE = exhaustive | sampled CE = exhaustive | sampled a CE (shared) | sampled coalitions |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, rs in groups.items():
        k = len(rs)
        print(f"| {n} | {k} ({','.join(str(r['seed']) for r in rs)}) "
              f"| {_span([r['exhaustive']['cpu'] for r in rs])} | {_span([r['spo']['cpu'] for r in rs])} "
              f"| {_span([r['sampled']['cpu'] for r in rs])} | {_span([r['exhaustive']['edges'] for r in rs], '{:.0f}')} "
              f"| {_span([r['exhaustive']['self_f1'] for r in rs], '{:.2f}')} | {_span([r['spo']['f1'] for r in rs], '{:.2f}')} "
              f"| {_span([len(r['exhaustive']['edge_list_point']) for r in rs], '{:.0f}')}; "
              f"{_span([r['exhaustive'].get('self_f1_point', math.nan) for r in rs], '{:.2f}')}; "
              f"{_span([r['spo']['f1_point'] for r in rs], '{:.2f}')} "
              f"| {sum(r['spo']['same_ce'] for r in rs)}/{k} "
              f"| {sum(r['sampled']['same_ce'] for r in rs)}/{k} | {sum(r['sampled']['shared_ce'] for r in rs)}/{k} "
              f"| {_span([r['sampled']['trained'] for r in rs], '{:.0f}')} of {(1 << n) - 1} |")
    print()
    for name in CURVES[1:]:
        print("crossover: " + crossover(groups, name))


def crossover(groups: dict[int, list[dict]], name: str) -> str:
    """The smallest measured N at which the exhaustive game's mean CPU exceeds ``name``'s, or that there is none."""
    label = {"spo": "SPO", "sampled": "the sampled CE"}[name]
    sizes = list(groups)
    for n in sizes:
        rs = groups[n]
        e, c = float(np.mean([r["exhaustive"]["cpu"] for r in rs])), float(np.mean([r[name]["cpu"] for r in rs]))
        if e > c:
            above = sum(r["exhaustive"]["cpu"] > r[name]["cpu"] for r in rs)
            first = " (the smallest N measured)" if n == sizes[0] else ""
            return (f"the exhaustive game costs more CPU than {label} from N = {n}{first}: {e:.1f} against {c:.1f} "
                    f"CPU s (mean of {len(rs)} seeds; on {above}/{len(rs)} seeds)")
    return (f"none up to N = {sizes[-1]}: the exhaustive game costs less CPU than {label} at every measured N "
            f"({', '.join(map(str, sizes))})")


def _backend(rows: list[dict]) -> str:
    """How the exhaustive game of ``rows`` was trained, for a label."""
    r = rows[0]
    return f"Ray, {r['workers']} workers" if r.get("backend") == "ray" else "in process, 1 thread"


def draw(path: Path, rows: list[dict], others: tuple[list[dict], ...] = ()) -> None:
    """Log CPU seconds against N: the mean over seeds with min–max bars, one line per curve.

    ``others``: runs of the same cells whose exhaustive game was trained another way (another
    backend), drawn as one more exhaustive line each; SPO's and the sampled CE's curves take their
    points from ``rows`` and, at a size ``rows`` lacks, from ``others`` (the same fits, in process).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    own = {r["n"] for r in rows}
    cheap = rows + [r for o in others for r in o if r["n"] not in own]
    curves = [(rows, "exhaustive", f"exhaustive game to the CE ({_backend(rows)})", "#222222", "o-"),
              (cheap, "spo", "SPO to BG(all) and its CE", "#1f77b4", "s-"),
              (cheap, "sampled", "sampled CE (ε = δ = 0.05)", "#2ca02c", "^-")]
    curves += [(o, "exhaustive", f"exhaustive game to the CE ({_backend(o)})", "#888888", "o--") for o in others]
    sizes: set[int] = set()
    seeds: set[int] = set()
    for k, (rs_all, name, label, colour, fmt) in enumerate(curves):
        groups = by_size(rs_all)
        xs = list(groups)
        sizes.update(xs)
        seeds.update(len(v) for v in groups.values())
        vals = [[r[name]["cpu"] for r in groups[n]] for n in xs]
        mean = np.array([np.mean(v) for v in vals])
        lo, hi = mean - np.array([min(v) for v in vals]), np.array([max(v) for v in vals]) - mean
        ax.errorbar(np.array(xs) + 0.05 * (k - 1), mean, yerr=[lo, hi], fmt=fmt, color=colour, capsize=3, label=label)
    ax.set_yscale("log")
    ax.set_xticks(sorted(sizes))
    ax.set_xlabel("clients N")
    ax.set_ylabel("CPU s (mean over seeds, min–max)")
    ax.set_title(f"fashion, Dirichlet: measured points only ({'/'.join(map(str, sorted(seeds)))} seeds per N)",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ints(text: str) -> list[int]:
    out: set[int] = set()
    for part in text.split(","):
        if part.strip():
            a, _, b = part.partition("-")
            out.update(range(int(a), int(b) + 1) if b else [int(a)])
    return sorted(out)


def line(r: dict) -> str:
    """One (N, seed) as a printed line."""
    e, s, m = r["exhaustive"], r["spo"], r["sampled"]
    return (f"N {r['n']:2d} seed {r['seed']}: exhaustive {e['cpu']:8.2f} CPU s ({e['wall']:.1f} wall, {e['edges']} edges, "
            f"self-agreement {e['self_f1']:.2f}, at z = 0 {e.get('self_f1_point', math.nan):.2f}, CE {e['partition']}) | SPO {s['cpu']:6.2f} CPU s (lr {s['lr']}, "
            f"{s['edges']} edges, F1 {s['f1']:.2f}, at z = 0 {s['f1_point']:.2f}, same CE {s['same_ce']}) | sampled "
            f"{m['cpu']:7.2f} CPU s ({m['trained']} coalitions, same CE {m['same_ce']}, a CE {m['shared_ce']}, "
            f"{m['partition']})  load {os.getloadavg()[0]:.1f}"
            + "".join(f"\n      {k}: {v['cpu']:.2f} CPU s, lr {v['lr']}, {v['edges']} edges, F1 {v['f1']:.2f}, "
                      f"at z = 0 {v['f1_point']:.2f}, same CE {v['same_ce']}" for k, v in r.items() if k.startswith("spo_")))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 3, 4, seeds 0 and 1, 5 steps (CI)")
    ap.add_argument("--sizes", default="6,8,10", help="client counts [6,8,10]")
    ap.add_argument("--seeds", default="0,1,2", help="seeds, e.g. 0-2 [0,1,2]")
    ap.add_argument("--budget", type=int, default=400, help="coalitions the sampled CE may train [400]")
    ap.add_argument("--backend", choices=("local", "ray"), default="local",
                    help="the exhaustive game in this process (one thread) or on a local Ray [local]")
    ap.add_argument("--workers", type=int, default=2, help="Ray's workers with --backend ray [2]")
    ap.add_argument("--diagnose", action="store_true",
                    help="also fit SPO on reproduce's grid and at its default rate 0.01 (printed, not in the table)")
    ap.add_argument("--jsonl", default=None, help="append one JSON line per (N, seed) here")
    ap.add_argument("--figure", default=None, help="write the figure here (PNG)")
    ap.add_argument("--from", dest="saved", nargs="+", default=None, metavar="FILE",
                    help="measure nothing: a table and crossover per saved --jsonl file; the figure from the first, "
                         "with the others' exhaustive game beside (and their SPO and sampled points where the "
                         "first has no such N)")
    args = ap.parse_args(argv)
    if args.saved:
        runs = [[json.loads(x) for x in Path(f).read_text().splitlines() if x.strip()] for f in args.saved]
        for f, rows in zip(args.saved, runs, strict=True):
            print(f"# from {f} (nothing measured now): the exhaustive game {_backend(rows)}")
            table(rows)
        if args.figure:
            draw(Path(args.figure), runs[0], tuple(runs[1:]))
            own = {r["n"] for r in runs[0]}
            extra = sorted({r["n"] for o in runs[1:] for r in o} - own)
            print(f"figure: {args.figure} (every curve from {args.saved[0]}"
                  + (f"; the exhaustive game also from {', '.join(args.saved[1:])}" if runs[1:] else "")
                  + (f"; SPO and the sampled CE at N = {', '.join(map(str, extra))} from there" if extra else "")
                  + ")")
        return 0
    try:
        sizes, seeds = _ints(args.sizes), _ints(args.seeds)
    except ValueError:
        print(f"frontier.py: --sizes and --seeds take integers (a,b or a-b), got {args.sizes!r}, {args.seeds!r}",
              file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 2 or max(sizes) > 14 or not seeds or args.budget < 1 or args.workers < 1:
        print("frontier.py: --sizes must lie in 2..14, --seeds be given, --budget and --workers be positive",
              file=sys.stderr)
        return 2
    if args.quick:
        sizes, seeds = [3, 4], [0, 1]
    threads.set_override(1)
    try:
        federation("fashion", sizes[0], seeds[0])
    except InputError as e:
        print(f"fashion: not measured: {e}")
        print("install the Debian package dataset-fashion-mnist to run this benchmark")
        print("# nothing else to do")
        return 0
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, load average "
          f"{os.getloadavg()[0]:.2f} at the start; PyTorch on 1 thread; CPU = process time"
          + (f" + Ray's processes ({args.workers} workers) for the exhaustive game" if args.backend == "ray" else "")
          + f"; sizes {sizes}, seeds {seeds}; SPO at the fixed rate"
          f"{' (also on the grid and at 0.01)' if args.diagnose else ''}; "
          f"sampled budget {args.budget}, epsilon = delta = 0.05; exhaustive level z = {Z}, "
          f"family {regime('fashion')[1].family}", flush=True)
    if not args.quick:   # imports, first calls and Ray's workers, not counted
        warm = federation("fashion", 3, seeds[0])
        measure("fashion", "exact", warm, seeds[0], True, backend=args.backend, workers=args.workers)
        measure("fashion", "spo", warm, seeds[0], True)
        sampled("fashion", warm, seeds[0], args.budget, True)
    rows = []
    for n in sizes:
        for seed in seeds:
            r = cell(n, seed, args)
            rows.append(r)
            print(line(r), flush=True)
            if args.jsonl:
                with open(args.jsonl, "a", encoding="utf-8") as f:
                    f.write(json.dumps(r) + "\n")
    table(rows)
    if args.figure:
        draw(Path(args.figure), rows)
        print(f"figure: {args.figure}")
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
