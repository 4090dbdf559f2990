"""Benchmark of the game core: solve + exhaustive certificate on planted games.

Prints, in one run:

1. ``solve`` with its exhaustive certificate on planted games at N = 12, 16, 18, 20, 22:
   wall time and peak memory (tracemalloc, which sees NumPy's buffers; the game's own
   array is included since it is built inside the measured block: "with game") and
   the solve alone.
2. The ratio to a straightforward pure-Python implementation (per-coalition loops,
   networkx SCC) at N = 14 and 16, on the same games, with a check that both give
   the same partition.
3. Brute-force enumeration of every CE at N = 10, on a planted game, on a game with
   unstructured random values, and on mean estimation with equal clients, where every
   coalition passes inner agreement so no partition is pruned before the outer check.

Run:  python benchmarks/core.py   (add --quick to skip N = 22 and the N = 16 reference)
"""

from __future__ import annotations

import argparse
import gc
import platform
import time
import tracemalloc

import networkx as nx
import numpy as np

import coalitions as co
from coalitions.brute_force import equilibria


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


def measure_solve(n: int, seed: int = 0) -> dict:
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    game = co.planted(groups_for(n), noise=0.05, seed=seed)
    t1 = time.perf_counter()
    _, base = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    eq = co.solve(game)
    t2 = time.perf_counter()
    _, peak_solve = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert eq.certificate.holds and eq.certificate.method == "exhaustive"
    planted = sorted(sum(1 << i for i in range(s, s + g)) for s, g in
                     zip(np.cumsum([0] + groups_for(n)[:-1]), groups_for(n), strict=True))
    return {"n": n, "build_s": t1 - t0, "solve_s": t2 - t1, "peak_with_game": max(base, peak_solve),
            "peak_solve_extra": peak_solve - base, "recovers_planted": sorted(eq.partition) == planted}


def measure_grand(n: int) -> dict:
    """Worst case for the shrink and inner checks: one coalition of all N clients."""
    game = co.mean_estimation([5] * n)
    t0 = time.perf_counter()
    eq = co.solve(game)
    return {"n": n, "solve_s": time.perf_counter() - t0, "grand": eq.partition == (game.grand,)}


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
    same = part == sorted(eq.partition) and inner and outer
    return {"n": n, "fast_s": fast, "reference_s": slow, "ratio": slow / fast, "same": same}


def measure_enumeration(n: int = 10) -> list[dict]:
    out = []
    rng = np.random.default_rng(0)
    random_values = rng.normal(size=(n, 1 << n))
    games = {"planted (3,3,4)": co.planted([3, 3, 4], noise=0.05, seed=0),
             "unstructured random": co.Game.from_array(random_values),
             "mean estimation, equal": co.mean_estimation([5] * n)}  # no block fails inner agreement
    for label, game in games.items():
        t0 = time.perf_counter()
        found = equilibria(game)
        out.append({"game": label, "seconds": time.perf_counter() - t0, "equilibria": len(found)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip N = 22 and the N = 16 reference")
    args = ap.parse_args()
    import os
    print(f"# coalitions {co.__version__} core benchmark; python {platform.python_version()}, "
          f"numpy {np.__version__}, {os.cpu_count()} CPUs, {platform.machine()}")
    print("\n## solve with exhaustive certificate (planted games, groups of 4, noise 0.05)")
    print(f"{'N':>3} {'solve s':>9} {'build s':>9} {'peak MiB (with game)':>21} {'solve extra MiB':>16} planted?")
    for n in (12, 16, 18, 20) + (() if args.quick else (22,)):
        r = measure_solve(n)
        print(f"{n:>3} {r['solve_s']:>9.3f} {r['build_s']:>9.3f} {r['peak_with_game'] / 2**20:>21.0f} "
              f"{r['peak_solve_extra'] / 2**20:>16.0f} {'yes' if r['recovers_planted'] else 'NO'}")
    print("\n## worst case for the shrink step and inner agreement: the grand coalition")
    print("   (mean estimation, N equal clients of 5 samples; every sub-coalition is checked)")
    for n in (16, 20):
        r = measure_grand(n)
        print(f"{n:>3} {r['solve_s']:>9.3f} s  grand coalition: {'yes' if r['grand'] else 'NO'}")
    print("\n## vectorised vs pure-Python reference (per-coalition loops, networkx SCC)")
    print("   (vectorised: best of 3, MAU recomputed each time)")
    print(f"{'N':>3} {'vectorised s':>13} {'reference s':>12} {'ratio':>8} same?")
    for n in (14,) + (() if args.quick else (16,)):
        r = measure_reference(n)
        print(f"{n:>3} {r['fast_s']:>13.3f} {r['reference_s']:>12.2f} {r['ratio']:>7.0f}x {'yes' if r['same'] else 'NO'}")
    print("\n## brute-force enumeration of every CE at N = 10 (Bell(10) = 115,975 partitions)")
    for r in measure_enumeration(10):
        print(f"{r['game']:>22}: {r['seconds']:.2f} s, {r['equilibria']} CE")


if __name__ == "__main__":
    main()
