"""Calibration of the noise-aware equilibrium where the true game is known (docs/concepts.md, "Measurement noise").

A *true* game is planted: clients in groups whose members gain from each other, clients best
alone, tied pairs whose members neither gain nor lose together (a gain of exactly 0), and in
half the games two or three *flat* clients, to whom every coalition is worth the same (as to
most fashion clients, docs/results.md):

    v_i(S) = b_i + sum_{j in S, j != i} W_ij,
    W_ij ~ U(0.05, 0.15) within a gaining group, 0 within a tied pair and for a flat i,
    U(-0.15, -0.05) otherwise.

It is then *measured* with noise of known standard deviation ``sigma``: each client's values
share a component (the same scoring rows score every subset model), ``e_i(S) = sigma *
(sqrt(rho) u_i + sqrt(1 - rho) eps_{i,S})`` with ``rho = 0.5``, so a paired difference has
standard error ``sigma``; ``B`` bootstrap-like replicates are drawn from the same law around
the measured values.  For each noise level the script solves the measured game — on
point values (``z = 0``) and noise-aware at ``z = 1.96`` for each family of comparisons
(:mod:`coalitions.noise`: per comparison, client-wise, game-wise; and ``z = 1`` per
comparison) — and reports, over ``--runs`` games:

* how often each equals the true game's equilibrium (the true game's CE, unique here), to
  show the trade-off the level and the family set, and, paired on the same games, in how many
  a noise-aware rule finds it where point values do not and the reverse, with the exact McNemar
  test of the difference (a difference within its noise is a tie);
* how often "stable at z = 1.96" is said of a partition that the true game *blocks*
  (outer agreement fails on the true values: a group that truly gains is split), and, apart,
  of a partition that is not a CE of the true game for the other reason (a block holds
  members who truly gain nothing: inner agreement fails on the true values).

The first is a claim of *absence* (no significant blocker): its error rate is a matter of
power and grows once the true gains fall within the noise.  The second is a claim of
*presence* (each member of a split-off group loses significantly), which the level ``z``
controls.  Both are printed; the figure ``docs/figures/noise_calibration.png`` shows them.

The certificate's verdict separates the two (``Certificate.confirmed``): "stable at z" only
where every potential blocker is *refuted* (a member's best gain significantly below ``tol``),
else "not significantly blocked".  The last table counts, per comparison, how often each
verdict is said and how often the true game blocks the partition it is said of, at the default
``tol`` (1e-9: a member who gains exactly nothing cannot be refuted) and at the margin
``tol = 0.025`` (half the smallest planted gain: a gain below it is no gain).

Run:  python benchmarks/noise.py [--quick] [--runs 200] [--figure PATH]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import coalitions as co
from coalitions.certificate import inner_agreement, outer_agreement
from coalitions.noise import DEFAULT_FAMILY, DEFAULT_Z, FAMILIES, Uncertainty
from coalitions.partition import canonical
from coalitions.replicates import Replicates

RHO = 0.5
#: Noise levels: the standard error of a paired difference, against gains of 0.05-0.15 per partner.
LEVELS = (0.0025, 0.005, 0.01, 0.02, 0.04, 0.08)
#: The equivalence margin of the last table: half the smallest planted gain per partner.
MARGIN = 0.025
#: The tolerances of the verdict table: the library's default, and the margin.
VERDICT_TOLS = {"default": 1e-9, "margin": MARGIN}


def true_game(rng: np.random.Generator) -> tuple[co.Game, tuple[int, ...]]:
    """A planted game of 6-11 clients: one or two gaining groups, a tied pair, best-alone clients, maybe flat ones."""
    kinds: list[tuple[str, int]] = [("gain", int(rng.integers(2, 4)))]
    if rng.random() < 0.5:
        kinds.append(("gain", 2))
    kinds.append(("tie", 2))
    kinds += [("alone", 1)] * int(rng.integers(1, 3))
    if rng.random() < 0.5:
        kinds += [("flat", 1)] * int(rng.integers(2, 4))
    n = sum(size for _, size in kinds)
    label = np.repeat(np.arange(len(kinds)), [size for _, size in kinds])
    W = rng.uniform(-0.15, -0.05, (n, n))
    for g, (kind, _) in enumerate(kinds):
        inside = np.flatnonzero(label == g)
        block = np.ix_(inside, inside)
        W[block] = rng.uniform(0.05, 0.15, (inside.size, inside.size)) if kind == "gain" else 0.0
        if kind == "flat":
            W[inside, :] = 0.0     # every coalition is worth the same to it
    np.fill_diagonal(W, 0.0)
    base = rng.uniform(0.0, 1.0, n)
    masks = np.arange(1 << n)
    bits = (masks[:, None] >> np.arange(n)) & 1
    values = np.full((n, 1 << n), np.nan)
    for i in range(n):
        inside = bits[:, i] == 1
        values[i, inside] = base[i] + bits[inside] @ W[i]
    game = co.Game.from_array(values)
    # the truth: each gaining group together, everyone else alone (a tied pair gains exactly nothing)
    blocks = []
    for g, (kind, _) in enumerate(kinds):
        members = np.flatnonzero(label == g)
        if kind == "gain":
            blocks.append(int(sum(1 << int(i) for i in members)))
        else:
            blocks += [1 << int(i) for i in members]
    return game, canonical(blocks)


def measure(game: co.Game, sigma: float, b: int, rng: np.random.Generator) -> co.Game:
    """The game measured with noise ``sigma`` (paired SE ``sigma``), carrying ``b`` replicates."""
    def noise(shape):
        shared = rng.normal(size=shape[:-1] + (1,))
        return sigma * (np.sqrt(RHO) * shared + np.sqrt(1 - RHO) * rng.normal(size=shape))

    measured = game.raw_values() + noise(game.values.shape)
    reps = measured[None] + noise((b, *game.values.shape))
    g = co.Game.from_array(measured)
    return g.with_uncertainty(Uncertainty.from_replicates(Replicates.from_array(reps, g.clients)))


def mcnemar(gains: int, losses: int) -> float:
    """Two-sided exact McNemar p-value of ``gains`` against ``losses`` discordant games (1 when there are none)."""
    from scipy.stats import binomtest

    return float(binomtest(gains, gains + losses, 0.5).pvalue) if gains + losses else 1.0


def run_level(sigma: float, runs: int, b: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, int(sigma * 1e6)])
    equal = {"point": 0, "z1": 0, **{f: 0 for f in FAMILIES}}
    # games where one rule finds the true CE and point values do not, and the reverse (McNemar's discordant pairs)
    gains = {f: 0 for f in FAMILIES}
    losses = {f: 0 for f in FAMILIES}
    spurious = {"point": 0, **{f: 0 for f in FAMILIES}}
    stable = {f: 0 for f in FAMILIES}
    blocked = {f: 0 for f in FAMILIES}
    inner = {f: 0 for f in FAMILIES}
    # per comparison, at each tol of VERDICT_TOLS: how often each verdict is said, and said of a blocked partition
    said = {t: {"confirmed": 0, "unrefuted": 0} for t in VERDICT_TOLS}
    wrong = {t: {"confirmed": 0, "unrefuted": 0} for t in VERDICT_TOLS}
    margin_equal = 0

    def tally(t: str, cert, found) -> None:
        if cert.holds:
            kind = "confirmed" if cert.confirmed else "unrefuted"
            said[t][kind] += 1
            wrong[t][kind] += not outer_agreement(truth, found, tol=1e-12).holds

    for _ in range(runs):
        truth, want = true_game(rng)
        g = measure(truth, sigma, b, rng)
        point = canonical(co.solve(g, z=0.0, certify_result=False).masks)
        equal["point"] += point == want
        spurious["point"] += not inner_agreement(truth, point, tol=1e-12).holds
        comparison = g.with_uncertainty(g.uncertainty.with_family("comparison"))
        equal["z1"] += canonical(co.solve(comparison, z=1.0, certify_result=False).masks) == want
        for f in FAMILIES:
            eq = co.solve(g.with_uncertainty(g.uncertainty.with_family(f)), z=DEFAULT_Z)
            found = canonical(eq.masks)
            equal[f] += found == want
            gains[f] += found == want and point != want
            losses[f] += found != want and point == want
            # a block holding a client who truly gains nothing from it (a spurious collaboration)
            spurious[f] += not inner_agreement(truth, found, tol=1e-12).holds
            if f == "comparison":
                tally("default", eq.certificate, found)
            if eq.certificate.holds:
                stable[f] += 1
                blocked[f] += not outer_agreement(truth, found, tol=1e-12).holds
                inner[f] += not inner_agreement(truth, found, tol=1e-12).holds
        eq = co.solve(comparison, tol=MARGIN, z=DEFAULT_Z)
        margin_equal += canonical(eq.masks) == want
        tally("margin", eq.certificate, canonical(eq.masks))
    return {"sigma": sigma, "runs": runs,
            "equal": {k: v / runs for k, v in equal.items()},
            "versus_point": {f: {"gains": gains[f], "losses": losses[f], "p": mcnemar(gains[f], losses[f])}
                             for f in FAMILIES},
            "spurious": {k: v / runs for k, v in spurious.items()},
            "stable": stable,
            "stable_but_blocked": {f: blocked[f] / max(stable[f], 1) for f in FAMILIES},
            "stable_but_spurious": {f: inner[f] / max(stable[f], 1) for f in FAMILIES},
            "margin_equal": margin_equal / runs,
            "verdicts": {t: {k: {"said": said[t][k], "blocked": wrong[t][k] / max(said[t][k], 1)}
                             for k in said[t]} for t in VERDICT_TOLS}}


MARKS = {"point": "o-", "z1": "^-", "comparison": "v-", "client": "D-", "game": "s-"}
NAMES = {"point": "point values (z = 0)", "z1": "z = 1, per comparison", "comparison": "z = 1.96, per comparison",
         "client": "z = 1.96, client-wise", "game": "z = 1.96, game-wise"}


def figure(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = [r["sigma"] for r in rows]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for k in ("point", "z1", *FAMILIES):
        ax[0].plot(s, [r["equal"][k] for r in rows], MARKS[k], label=NAMES[k])
    ax[0].set(xscale="log", xlabel="standard error of a paired difference (gains 0.05-0.15 per partner)",
              ylabel="share equal to the true CE", ylim=(-0.02, 1.02))
    ax[0].legend(fontsize=8)
    for f in FAMILIES:
        ax[1].plot(s, [r["stable_but_blocked"][f] for r in rows], MARKS[f], label=f"true game blocks it ({f})")
    ax[1].plot(s, [r["stable_but_spurious"][DEFAULT_FAMILY] for r in rows], ":", color="grey",
               label=f"a member truly gains nothing ({DEFAULT_FAMILY})")
    said = [r["verdicts"]["margin"]["confirmed"]["said"] for r in rows]
    ax[1].plot([x for x, n in zip(s, said, strict=True) if n], [r["verdicts"]["margin"]["confirmed"]["blocked"]
               for r, n in zip(rows, said, strict=True) if n], "*-", color="black",
               label=f'"stable" (every blocker refuted, tol {MARGIN:g}): true game blocks it')
    ax[1].axhline(0.05, color="grey", lw=0.8, ls="--")
    ax[1].set(xscale="log", xlabel="standard error of a paired difference",
              ylabel="share of the partitions not significantly blocked\nat z = 1.96 that the true game blocks",
              ylim=(-0.02, 1.02))
    ax[1].legend(fontsize=8)
    for a in ax:
        a.set_xticks(s)
        a.set_xticklabels([f"{x:g}" for x in s])
        a.minorticks_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 games per level, 30 replicates (CI: it runs to its end; not a measurement).")
    ap.add_argument("--runs", type=int, default=200, help="Games per noise level.")
    ap.add_argument("--replicates", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--figure", default=None, help="Write the figure here (PNG).")
    ap.add_argument("--json", default=None, help="Write the rows here (JSON).")
    args = ap.parse_args()
    runs, b = (3, 30) if args.quick else (args.runs, args.replicates)
    print(f"noise calibration: {runs} planted games of 6-11 clients per level, {b} replicates, seed {args.seed}; "
          f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    cols = ("point", "z1", *FAMILIES)
    print("share equal to the true CE (point values; z = 1 per comparison; z = 1.96 per family), the share with a "
          "spurious block, and, of the partitions certified stable at z = 1.96, the share the true game blocks")
    print(f"{'SE':>7}  " + "  ".join(f"{c:>10}" for c in cols) + "  " +
          "  ".join(f"{'spur ' + c:>15}" for c in ("point", *FAMILIES)) + "  " +
          "  ".join(f"{'blocked ' + c:>18}" for c in FAMILIES))
    rows = []
    start = time.perf_counter()
    for sigma in LEVELS:
        r = run_level(sigma, runs, b, args.seed)
        rows.append(r)
        print(f"{sigma:7.4f}  " + "  ".join(f"{r['equal'][c]:10.2f}" for c in cols) + "  " +
              "  ".join(f"{r['spurious'][c]:15.2f}" for c in ("point", *FAMILIES)) + "  " +
              "  ".join(f"{r['stable_but_blocked'][f]:11.3f} ({r['stable'][f]:4d})" for f in FAMILIES), flush=True)
    for f in FAMILIES:
        ratio = sum(r["equal"][f] for r in rows) / max(sum(r["equal"]["point"] for r in rows), 1e-12)
        print(f"ratio {f}-wise / point-value equal-to-truth, summed over levels: {ratio:.2f}")
    print("\neach family at z = 1.96 against point values, paired on the same games: games where only it finds the "
          "true CE (+) and only point values do (-), and the exact McNemar p-value (two-sided; p >= 0.05: a tie)")
    print(f"{'SE':>7}  " + "  ".join(f"{f:>24}" for f in FAMILIES))
    for r in rows:
        cells = (f"+{v['gains']} -{v['losses']} p {v['p']:.2g}" for v in (r["versus_point"][f] for f in FAMILIES))
        print(f"{r['sigma']:7.4f}  " + "  ".join(f"{c:>24}" for c in cells))
    print(f"\nthe verdicts at z = 1.96 per comparison, at tol 1e-9 and at the margin tol {MARGIN:g}: how often each "
          "is said (of the runs) and the share of those the true game blocks; then the share equal to the true CE "
          "at the margin")
    print(f"{'SE':>7}  " + "  ".join(f"{t + ' ' + k:>22}" for t in VERDICT_TOLS for k in ("confirmed", "unrefuted"))
          + f"  {'margin = truth':>14}")
    for r in rows:
        v = r["verdicts"]
        print(f"{r['sigma']:7.4f}  " + "  ".join(f"{v[t][k]['blocked']:15.3f} ({v[t][k]['said']:4d})"
                                                   for t in VERDICT_TOLS for k in ("confirmed", "unrefuted"))
              + f"  {r['margin_equal']:14.2f}")
    print(f"{time.perf_counter() - start:.1f} s")
    if args.json:
        import json

        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"runs": runs, "replicates": b, "seed": args.seed, "rows": rows}, f, indent=1)
    if args.figure:
        figure(rows, args.figure)
        print(f"figure: {args.figure}")


if __name__ == "__main__":
    main()
