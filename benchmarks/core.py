"""Benchmark of the game core: solve + exhaustive certificate on planted games, up to N = 24.

Prints, in one run:

1. ``solve`` with its exhaustive certificate on planted games at N = 12 ... 24, each size
   in a fresh subprocess so that its peak resident memory (``getrusage`` maxrss) is its own:
   time to build the game, time to solve and certify, the peak RSS, and the size of the
   game's own array; in float64 and, from N = 20, in float32 storage (the same planted
   game rounded; every comparison is still float64, see ``coalitions.precision``).
2. The streamed certificate against the table-based checks (``coalitions.axioms``, which
   build the ``N × 2^N`` MAU table) on the same game, in the same process.
3. The worst case for the shrink step and inner agreement: the grand coalition.
4. The ratio to a straightforward pure-Python implementation (per-coalition loops,
   networkx SCC), with a check that both give the same partition.
5. Brute-force enumeration of every CE on a planted game, on a game with unstructured
   random values, and on mean estimation with equal clients, where every coalition passes
   inner agreement so no partition is pruned before the outer check.

Run:  python benchmarks/core.py            (about 3 minutes; N = 24 needs about 7 GiB free)
      python benchmarks/core.py --quick    (small sizes only: a few seconds)
      python benchmarks/core.py --max-n 22 (stop earlier on a smaller machine)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import networkx as nx
import numpy as np

import coalitions as co
from coalitions import axioms
from coalitions.brute_force import equilibria
from coalitions.payoffs import mau


# --------------------------------------------------------------------------- reference
def reference_solve(values: np.ndarray, tol: float = 1e-9):
    """Peeling and certificate with per-coalition Python loops and networkx SCC.

    ``values`` is a plain nested list ``values[i][mask]`` (None outside), higher is better.
    Returns (partition, inner_ok, outer_ok).
    """
    n = len(values)
    full = (1 << n) - 1
    # MAU by per-coalition loops: MAU_i(R) = max(v_i(R), max_b MAU_i(R - b))
    mau = []
    for i in range(n):
        row = [None] * (1 << n)
        for r in range(1, 1 << n):
            if not (r >> i) & 1:
                continue
            best = values[i][r]
            for b in range(n):
                if b != i and (r >> b) & 1:
                    sub = row[r & ~(1 << b)]
                    if sub > best:
                        best = sub
            row[r] = best
        mau.append(row)

    def ocs(i, r):
        target = mau[i][r] - tol
        best = None
        rest = r & ~(1 << i)
        sub = rest
        while True:
            s = sub | (1 << i)
            if values[i][s] >= target:
                key = (bin(s).count("1"), -values[i][s], s)
                if best is None or key < best:
                    best = key
            if sub == 0:
                break
            sub = (sub - 1) & rest
        return best[2] & ~(1 << i)

    def stable_a(k, r):
        return all(mau[i][k] >= mau[i][r] - tol for i in range(n) if (k >> i) & 1)

    remaining, partition = full, []
    while remaining:
        g = nx.DiGraph()
        members = [i for i in range(n) if (remaining >> i) & 1]
        g.add_nodes_from(members)
        for i in members:
            c = ocs(i, remaining)
            g.add_edges_from((j, i) for j in range(n) if (c >> j) & 1)
        cond = nx.condensation(g)
        found = []
        for node in cond.nodes:
            if cond.in_degree(node) == 0:
                comp = sum(1 << i for i in cond.nodes[node]["members"])
                # shrink: smallest sub-coalition satisfying (a)
                best = None
                sub = comp
                while sub:
                    if stable_a(sub, remaining):
                        key = (bin(sub).count("1"), sub)
                        best = key if best is None or key < best else best
                    sub = (sub - 1) & comp
                found.append(best[1])
        for k in found:
            remaining &= ~k
        partition.extend(found)
    where = {i: k for k in partition for i in range(n) if (k >> i) & 1}
    now = [mau[i][where[i]] for i in range(n)]
    inner_ok = True
    for k in partition:
        sub = (k - 1) & k
        while sub:
            if all(mau[i][sub] >= mau[i][k] - tol for i in range(n) if (sub >> i) & 1):
                inner_ok = False
            sub = (sub - 1) & k
    outer_ok = True
    for m in range(1, full + 1):
        if all(mau[i][m] > now[i] + tol for i in range(n) if (m >> i) & 1):
            outer_ok = False
    return sorted(partition), inner_ok, outer_ok


# --------------------------------------------------------------------------- measurements
def groups_for(n: int) -> list[int]:
    return [4] * (n // 4) + ([n % 4] if n % 4 else [])


def planted_partition(n: int) -> list[int]:
    starts = np.cumsum([0] + groups_for(n)[:-1])
    return sorted(sum(1 << i for i in range(s, s + g)) for s, g in zip(starts, groups_for(n), strict=True))


def measure_solve_here(n: int, dtype: str, seed: int = 0) -> dict:
    """Build and solve one planted game in this process; meant to run in a fresh subprocess."""
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    game = co.planted(groups_for(n), noise=0.05, seed=seed, dtype=dtype)
    t1 = time.perf_counter()
    eq = co.solve(game)
    t2 = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"n": n, "dtype": dtype, "build_s": t1 - t0, "solve_s": t2 - t1, "peak_rss": rss * 1024,
            "import_rss": rss0 * 1024, "game_bytes": game.values.nbytes,
            "certified": eq.certificate.holds and eq.certificate.method == "exhaustive",
            "recovers_planted": sorted(eq.masks) == planted_partition(n)}


def measure_solve(n: int, dtype: str) -> dict:
    """:func:`measure_solve_here` in a subprocess (one at a time: the large sizes use gigabytes)."""
    out = subprocess.run([sys.executable, __file__, "--one", str(n), dtype], capture_output=True, text=True,
                         check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    return json.loads(out.stdout.splitlines()[-1])


def measure_streamed_vs_tables(n: int, seed: int = 0) -> dict:
    """Certificate of the planted CE: streamed (no table) vs table-based (MAU table built each time)."""
    game = co.planted(groups_for(n), noise=0.05, seed=seed)
    part = co.solve(game, certify_result=False).masks
    fresh = lambda: co.Game.from_array(game.values, game.clients)  # noqa: E731  (no cached MAU table)
    g = fresh()
    t0 = time.perf_counter()
    streamed = co.certify(g, part)
    t1 = time.perf_counter()
    g = fresh()
    t2 = time.perf_counter()
    mau(g)
    table = co.Certificate(axioms.inner_agreement(g, part), axioms.outer_agreement(g, part))
    t3 = time.perf_counter()
    return {"n": n, "streamed_s": t1 - t0, "table_s": t3 - t2, "same": streamed == table and table.holds}


def measure_grand(n: int) -> dict:
    """Worst case for the shrink and inner checks: one coalition of all N clients."""
    game = co.mean_estimation([5] * n)
    t0 = time.perf_counter()
    eq = co.solve(game)
    return {"n": n, "solve_s": time.perf_counter() - t0, "grand": eq.masks == (game.grand,)}


def best_of(k, fn):
    times = []
    for _ in range(k):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def measure_reference(n: int, seed: int = 0) -> dict:
    game = co.planted(groups_for(n), noise=0.05, seed=seed)
    # a fresh game each repetition, so the cached MAU is recomputed every time
    fast, eq = best_of(3, lambda: co.solve(co.Game.from_array(game.values, game.clients)))
    lists = [[None if np.isnan(x) else float(x) for x in row] for row in game.values]
    t0 = time.perf_counter()
    part, inner, outer = reference_solve(lists)
    slow = time.perf_counter() - t0
    same = part == sorted(eq.masks) and inner and outer
    return {"n": n, "fast_s": fast, "reference_s": slow, "ratio": slow / fast, "same": same}


def measure_enumeration(n: int = 10) -> list[dict]:
    out = []
    rng = np.random.default_rng(0)
    random_values = rng.normal(size=(n, 1 << n))
    groups = [3, 3, n - 6]
    games = {f"planted {tuple(groups)}": co.planted(groups, noise=0.05, seed=0),
             "unstructured random": co.Game.from_array(random_values),
             "mean estimation, equal": co.mean_estimation([5] * n)}  # no block fails inner agreement
    for label, game in games.items():
        t0 = time.perf_counter()
        found = equilibria(game)
        out.append({"game": label, "seconds": time.perf_counter() - t0, "equilibria": len(found)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only (a few seconds)")
    ap.add_argument("--max-n", type=int, default=24, help="largest planted game (default 24)")
    ap.add_argument("--one", nargs=2, metavar=("N", "DTYPE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure_solve_here(int(args.one[0]), args.one[1])))
        return
    quick = args.quick
    print(f"# coalitions {co.__version__} core benchmark; python {platform.python_version()}, "
          f"numpy {np.__version__}, {os.cpu_count()} CPUs, {platform.machine()}; "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    print("\n## solve with exhaustive certificate (planted games, groups of 4, noise 0.05)")
    print("   one subprocess per row; peak RSS = the whole process (Python and NumPy included)")
    print(f"{'N':>3} {'dtype':>8} {'build s':>8} {'solve s':>8} {'peak RSS MiB':>13} {'game MiB':>9} "
          "certified planted")
    sizes = (8, 12) if quick else (12, 16, 20, 22, 24)
    for n in (m for m in sizes if m <= args.max_n):
        for dtype in ("float64",) + (("float32",) if n >= (12 if quick else 20) else ()):
            r = measure_solve(n, dtype)
            print(f"{n:>3} {dtype:>8} {r['build_s']:>8.2f} {r['solve_s']:>8.2f} {r['peak_rss'] / 2**20:>13.0f} "
                  f"{r['game_bytes'] / 2**20:>9.0f} {'yes' if r['certified'] else 'NO':>9} "
                  f"{'yes' if r['recovers_planted'] else 'NO'}")
    print("\n## certificate streamed (no payoff table) vs table-based (MAU table + coalitions.axioms)")
    print(f"{'N':>3} {'streamed s':>11} {'tables s':>9} {'ratio':>7} same?")
    for n in (10,) if quick else (16, 20):
        r = measure_streamed_vs_tables(n)
        print(f"{n:>3} {r['streamed_s']:>11.3f} {r['table_s']:>9.3f} {r['table_s'] / r['streamed_s']:>6.1f}x "
              f"{'yes' if r['same'] else 'NO'}")
    print("\n## worst case for the shrink step and inner agreement: the grand coalition")
    print("   (mean estimation, N equal clients of 5 samples; every sub-coalition is checked)")
    for n in (10,) if quick else (16, 20):
        r = measure_grand(n)
        print(f"{n:>3} {r['solve_s']:>9.3f} s  grand coalition: {'yes' if r['grand'] else 'NO'}")
    print("\n## vectorised vs pure-Python reference (per-coalition loops, networkx SCC)")
    print("   (vectorised: best of 3, a fresh game each time)")
    print(f"{'N':>3} {'vectorised s':>13} {'reference s':>12} {'ratio':>8} same?")
    for n in (10,) if quick else (14, 16):
        r = measure_reference(n)
        print(f"{n:>3} {r['fast_s']:>13.3f} {r['reference_s']:>12.2f} {r['ratio']:>7.0f}x {'yes' if r['same'] else 'NO'}")
    m = 7 if quick else 10
    print(f"\n## brute-force enumeration of every CE at N = {m} (Bell({m}) = {co.brute_force.bell(m):,} partitions)")
    for r in measure_enumeration(m):
        print(f"{r['game']:>22}: {r['seconds']:.2f} s, {r['equilibria']} CE")
    print(f"\n# load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
