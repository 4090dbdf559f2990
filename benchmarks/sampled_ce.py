"""Calibration of the sampled equilibrium where the truth is known (docs/scale.md).

Planted games (:func:`coalitions.planted`, groups whose members gain from each other and lose
with everyone else, values with Gaussian noise drawn per coalition) are solved with
:func:`coalitions.sample_ce` under a budget, and the answer is compared with the truth,
computed exhaustively:

* **N = 10, 12, 14** (many seeds, two noise levels): does the sampled partition equal the
  exhaustive CE (:func:`coalitions.solve`, peeling on the full game)?  Is it a CE of the full
  game under the sampled rules (each block's own model, checked exhaustively with
  :mod:`coalitions.certificate`)?  Its welfare gap (mean value per client of the exhaustive CE
  minus the sampled one's, each block's own model).  And the coverage of the certificate: is
  the true blocking share under D (the D-weighted share of *all* coalitions that block,
  computed exhaustively) at most the certified ε (δ = 0.05)?  The coverage rate is given with
  its 95 % Clopper–Pearson interval.
* **N = 16, 20, 24** (fewer seeds, two noise levels): the same against the planted groups, and
  whether the exhaustive pass confirms them to be a CE (no coalition of the 2^N blocks them, no
  sub-coalition splits off);
  the full game of 24 clients is never built: the truth is streamed in chunks of coalitions,
  client by client.
* **N = 50**, 5 groups of 10 whose tasks conflict: planted groups recovered on how many of 10
  seeds, ε at δ = 0.05, coalitions trained, time.

Run:  python benchmarks/sampled_ce.py [--quick] [--seeds 40]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import coalitions as co
from coalitions.analytic import coalition_normals, planted_weights
from coalitions.bitmask import members, submasks
from coalitions.certificate import inner_agreement, outer_agreement
from coalitions.lazy_analytic import PlantedSource
from coalitions.pac import d_weights, epsilon_bound
from coalitions.payoffs import payoff_at

EPSILON, DELTA = 0.01, 0.05
SMALL = {10: (4, 3, 3), 12: (4, 4, 4), 14: (5, 5, 4)}
MEDIUM = {16: (4, 4, 4, 4), 20: (5, 5, 5, 5), 24: (6, 6, 6, 6)}
NOISES = (0.1, 0.3, 0.5)
CHUNK = 1 << 18


def interval(k: int, n: int) -> tuple[float, float]:
    """Two-sided 95 % Clopper–Pearson interval of a rate ``k / n``."""
    hi = epsilon_bound(n, k, 0.025)
    lo = 0.0 if k == 0 else 1.0 - epsilon_bound(n, n - k, 0.025)
    return lo, hi


def groups_of(sizes) -> tuple[int, ...]:
    out, at = [], 0
    for g in sizes:
        out.append(((1 << g) - 1) << at)
        at += g
    return tuple(out)


def streamed_blocking_share(sizes, noise: float, seed: int, partition, tol: float = 1e-9) -> float:
    """The D-share of all coalitions of ≥ 2 clients blocking ``partition`` in the planted game, in chunks.

    Client by client, only for the coalitions still possibly blocking; values as the planted game's
    (noiseless part by a matrix product: the same numbers up to the order of a sum, 1e-16).
    """
    W, base = planted_weights(list(sizes), seed)
    n = len(base)
    where = np.zeros(n, dtype=np.int64)
    for k in partition:
        for i in members(k):
            where[i] = k
    now = PlantedSource(tuple(sizes), noise, 0.0, seed).measure(np.unique(where)).values
    cols = {int(m): x for x, m in enumerate(np.unique(where))}
    now_i = np.array([now[i, cols[int(where[i])]] for i in range(n)])
    share = 0.0
    for start in range(1, 1 << n, CHUNK):
        masks = np.arange(start, min(start + CHUNK, 1 << n), dtype=np.int64)
        alive = np.bitwise_count(masks) >= 2
        alive &= ~np.isin(masks, np.asarray(partition, dtype=np.int64))
        for i in range(n):
            idx = np.flatnonzero(alive & ((masks >> i) & 1).astype(bool))
            if not idx.size:
                continue
            m = masks[idx]
            bits = ((m[:, None] >> np.arange(n)) & 1).astype(np.float64)
            v = base[i] + bits @ W[i]
            if noise:
                v = v + noise * coalition_normals(seed, i, m)
            alive[idx] = v > now_i[i] + tol
        share += float(d_weights(masks[alive], n).sum())
    return share


def mean_payoff(game: co.Game, partition, semantics: str) -> float:
    """Mean over clients of their payoff in their block: its own model (shared) or its best sub-model (personalized)."""
    return float(np.mean([payoff_at(game, i, k, semantics) for k in partition for i in members(k)]))


def small(seeds: int) -> list[str]:
    rows = ["| N | groups | noise | seeds | = exhaustive CE | = planted groups | CE of the full game (own models) "
            "| welfare gap: personalized, own models (mean) | ε certified (mean) | blocker drawn "
            "| true share ≤ ε: coverage [95 % CI] | true share (mean, max) | coalitions used (mean) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n, sizes in SMALL.items():
        for noise in NOISES:
            same = ce = cover = drawn = groups = 0
            gaps, own, eps, used, shares = [], [], [], [], []
            for seed in range(seeds):
                src = PlantedSource(sizes, noise, 0.0, seed)
                r = co.sample_ce(src, budget=3000, epsilon=EPSILON, delta=DELTA, seed=seed)
                game = co.planted(list(sizes), noise=noise, seed=seed)
                truth = co.solve(game, certify_result=False).masks
                same += set(r.masks) == set(truth)
                groups += set(r.masks) == set(groups_of(sizes))
                ce += (outer_agreement(game, r.masks, "shared").holds
                       and inner_agreement(game, r.masks, "shared").holds)
                gaps.append(mean_payoff(game, truth, "personalized") - mean_payoff(game, r.masks, "personalized"))
                own.append(mean_payoff(game, truth, "shared") - mean_payoff(game, r.masks, "shared"))
                true_share = streamed_blocking_share(sizes, noise, seed, r.masks)
                cover += true_share <= r.certificate.epsilon
                shares.append(true_share)
                drawn += r.certificate.blocking_draws > 0
                eps.append(r.certificate.epsilon)
                used.append(r.trainings)
            lo, hi = interval(cover, seeds)
            rows.append(f"| {n} | {','.join(map(str, sizes))} | {noise:g} | {seeds} | {same}/{seeds} | "
                        f"{groups}/{seeds} | {ce}/{seeds} | {np.mean(gaps):.3g}, {np.mean(own):.3g} | "
                        f"{np.mean(eps):.4f} | {drawn}/{seeds} | "
                        f"{cover}/{seeds} = {cover / seeds:.2f} [{lo:.2f}, {hi:.2f}] | "
                        f"{np.mean(shares):.2g}, {max(shares):.2g} | {np.mean(used):.0f} |")
    return rows


def medium(seeds: int, sizes_by_n, noises=(0.1, 0.3)) -> list[str]:
    rows = ["| N | groups | noise | seeds | = planted groups | groups are a CE (exhaustive) | sampled partition is a CE "
            "(exhaustive) | ε certified (mean) | true share ≤ ε | true share (max) | coalitions used (mean) of 2^N "
            "| time per run |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n, sizes in sizes_by_n.items():
        for noise in noises:
            same = cover = ce = found_ce = 0
            eps, used, times, shares = [], [], [], []
            planted_p = groups_of(sizes)
            for seed in range(seeds):
                src = PlantedSource(sizes, noise, 0.0, seed)
                t = time.perf_counter()
                r = co.sample_ce(src, budget=4000, epsilon=EPSILON, delta=DELTA, seed=seed)
                times.append(time.perf_counter() - t)
                same += set(r.masks) == set(planted_p)
                groups_block = streamed_blocking_share(sizes, noise, seed, planted_p)
                ce += groups_block == 0 and all(_inner_exact(src, k) for k in planted_p)
                share = groups_block if set(r.masks) == set(planted_p) else streamed_blocking_share(
                    sizes, noise, seed, r.masks)
                cover += share <= r.certificate.epsilon
                found_ce += share == 0 and _individually_rational(src, r.masks) and all(
                    _inner_exact(src, k) for k in r.masks)
                shares.append(share)
                eps.append(r.certificate.epsilon)
                used.append(r.trainings)
            rows.append(f"| {n} | {','.join(map(str, sizes))} | {noise:g} | {seeds} | {same}/{seeds} | {ce}/{seeds} | "
                        f"{found_ce}/{seeds} | "
                        f"{np.mean(eps):.4f} | {cover}/{seeds} | {max(shares):.2g} | {np.mean(used):.0f} of "
                        f"{1 << n:,} | {np.mean(times):.2f} s |")
    return rows


def _individually_rational(src: PlantedSource, partition) -> bool:
    """No client strictly prefers being alone to its block."""
    n = len(src.clients)
    alone = src.measure(np.array([1 << i for i in range(n)], dtype=np.int64)).values
    blocks = np.asarray(partition, dtype=np.int64)
    inside = src.measure(blocks).values
    where = {i: x for x, k in enumerate(partition) for i in members(k)}
    return all(alone[i, i] <= inside[i, where[i]] + 1e-9 for i in range(n))


def _inner_exact(src: PlantedSource, block: int) -> bool:
    """No proper sub-coalition of ``block`` splits off with no member worse (every one measured)."""
    subs = submasks(block)[1:-1]
    v = src.measure(subs).values
    now = src.measure(np.array([block])).values[:, 0]
    ok = np.ones(subs.size, dtype=bool)
    for i in members(block):
        inside = ((subs >> i) & 1).astype(bool)
        ok[inside] &= v[i, inside] >= now[i] - 1e-9
    return not ok.any()


def large(seeds: int) -> list[str]:
    sizes = (10,) * 5
    rows = ["| N | groups | seeds | groups recovered | ε certified at δ = 0.05 | coalitions used (mean, max) "
            "| of which the certificate | time per run (mean) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    found, eps, used, cert, times = 0, [], [], [], []
    for seed in range(seeds):
        t = time.perf_counter()
        r = co.sample_ce(PlantedSource(sizes, 0.1, 0.0, seed), budget=2_000, epsilon=EPSILON, delta=DELTA, seed=seed)
        times.append(time.perf_counter() - t)
        found += set(r.masks) == set(groups_of(sizes))
        eps.append(r.certificate.epsilon)
        used.append(r.trainings)
        cert.append(r.certificate.trainings)
    rows.append(f"| 50 | 10,10,10,10,10 | {seeds} | {found}/{seeds} | {max(eps):.4f} (max) | "
                f"{np.mean(used):.0f}, {max(used)} | {np.mean(cert):.0f} | {np.mean(times):.2f} s |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a few seeds, N up to 16 and one N = 50 run (CI)")
    p.add_argument("--seeds", type=int, default=40, help="seeds per row at N = 10, 12, 14 [40]")
    p.add_argument("--parts", default="small,medium,large", help="which tables: small (N <= 14), medium (16-24), "
                                                                 "large (50) [all]")
    args = p.parse_args()
    parts = set(args.parts.split(","))
    t0 = time.perf_counter()
    print(f"# sampled CE calibration ({platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"epsilon {EPSILON}, delta {DELTA}, budget 3000 / 4000 / 2000)")
    seeds = 2 if args.quick else args.seeds
    if "small" in parts:
        print("\n## N = 10, 12, 14\n")
        print("\n".join(small(seeds)))
    if "medium" in parts:
        print("\n## N = 16 to 24\n")
        print("\n".join(medium(1 if args.quick else 5, {16: MEDIUM[16]} if args.quick else MEDIUM)))
    if "large" in parts:
        print("\n## N = 50\n")
        print("\n".join(large(1 if args.quick else 10)))
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
