"""Every column of a report before and after a change: mean test metric, the rate each seed kept, where it stopped.

Reads two ``results.json`` files of the same experiment written by ``coalitions reproduce``
(docs/formats.md) and prints, per regime, one Markdown row per column of the newer run: the
column's mean test metric over clients (each client's mean over seeds, as the reports' tables)
in the older run's regime on the same data (the same loader options) and in the newer one, and, for the newer run, the learning rate each seed's
column kept on validation and the local step at which it stopped (``max`` where it ran the
whole budget), from each piece's ``stopping`` record (``learners/experiments/columns.py``).
A column the older run did not have shows ``–``.  Issue 18 asked for these tables: the
committed reports before the round engine (git revision 725148b) against today's:

    git show 725148b:docs/results/heart/results.json > /tmp/heart-before.json
    python benchmarks/before_after.py /tmp/heart-before.json docs/results/heart/results.json

Deterministic (no timing).  ``--quick`` compares the committed heart report with itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coalitions.learners.experiments.catalogue import METHOD_LABELS  # noqa: E402


def column_means(regime: dict) -> dict[str, float]:
    """``{column label: mean over clients of the client's mean test metric over seeds}``."""
    return {label: float(np.mean([v["mean"] for v in per.values()])) for label, per in regime["summary"]["test"].items()}


def stopping(regime: dict, label: str) -> tuple[str, str]:
    """The rate each seed kept and the step it stopped at (``max``: the whole budget), or ``–`` without a record."""
    method = next((m for m, lab in METHOD_LABELS.items() if lab == label), None)
    records = [run["methods"].get(method, {}).get("stopping") for run in regime["runs"]] if method else []
    if not records or any(r is None for r in records):
        return "–", "–"
    rates = ", ".join(f"{r['lr']:g}" if r.get("lr") is not None    # Local tunes per client: its clients' rates
                      else "/".join(f"{x:g}" for x in r.get("lr_clients") or ()) or "per client" for r in records)
    steps = ", ".join("max" if r["hit_max"] else str(r["stopped_at"]) for r in records)
    return rates, steps


def table(before: dict, after: dict) -> str:
    """The Markdown tables, one per regime of ``after`` (matched to ``before`` by name)."""
    out = []
    for regime in after["regimes"]:
        # the same data: the same loader options (a regime may have been renamed since)
        match = [r for r in before["regimes"] if r["options"] == regime["options"] and r["metric"] == regime["metric"]]
        old = column_means(match[0]) if match else {}
        new = column_means(regime)
        seeds = f"seeds {before.get('seeds')} before, {after.get('seeds')} after" if match else "no regime on the same data before"
        out.append(f"{after.get('experiment', '')} {regime['name']} ({regime['metric']}, mean over clients; {seeds})\n")
        out.append("| column | before | after | rate kept (per seed) | stopped at step (per seed) |")
        out.append("| --- | --- | --- | --- | --- |")
        for label, value in new.items():
            rates, steps = stopping(regime, label)
            was = f"{old[label]:.3f}" if label in old else "–"
            out.append(f"| {label} | {was} | {value:.3f} | {rates} | {steps} |")
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", nargs="?", type=Path)
    ap.add_argument("after", nargs="?", type=Path)
    ap.add_argument("--quick", action="store_true", help="the committed heart report against itself")
    args = ap.parse_args(argv)
    if args.quick:
        args.before = args.after = ROOT / "docs" / "results" / "heart" / "results.json"
    if args.before is None or args.after is None:
        ap.error("give two results.json files (or --quick)")
    print(table(json.loads(args.before.read_text()), json.loads(args.after.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
