"""The exact game's in-place stacked Adam step: one pass per operation over a whole parameter
against the same operations a cache-sized block of models at a time (issue 22).

Runs :meth:`coalitions.learners.training.engine.Adam.step_` on the stacked first layer of the
``fashion_heads`` game's chunk (40 models of an MLP 784-32) with ``BLOCK`` set to the whole tensor
and to its default, checks that the two give the same bits, and prints CPU time per step (the
best of ``--repeats``) and the ratio.

Run:  python benchmarks/adam_blocks.py   (``--quick``: a smaller tensor; CI runs it)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 models, 2 repeats")
    ap.add_argument("--models", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    import torch

    from coalitions.learners.training import engine

    torch.set_num_threads(1)
    models, repeats = (8, 2) if args.quick else (args.models, args.repeats)
    gen = torch.Generator().manual_seed(0)
    shape = (models, 784, 32)
    grads = {"w1": torch.randn(shape, generator=gen)}
    active = torch.ones(models, dtype=torch.bool)
    print(f"# torch {torch.__version__}, 1 thread, load average {os.getloadavg()[0]:.2f}; Adam.step_ on a "
          f"{'x'.join(map(str, shape))} float32 parameter")
    default, results = engine.BLOCK, {}
    for label, block in (("whole tensor", 1 << 40), (f"blocks of {default} elements", default)):
        engine.BLOCK = block
        opt = engine.Adam(0.01)
        params = {"w1": torch.randn(shape, generator=torch.Generator().manual_seed(1))}
        state = opt.init(params)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.process_time()
            opt.step_(params, grads, state, active)
            best = min(best, time.process_time() - t0)
        results[label] = (best, params["w1"].clone())
        print(f"{label:>28}: {best * 1e3:.2f} ms CPU per step (best of {repeats})")
    engine.BLOCK = default
    (a, pa), (b, pb) = results.values()
    print(f"same bits: {torch.equal(pa, pb)}; blocked is {a / b:.2f}x the whole-tensor pass")
    return 0 if torch.equal(pa, pb) else 1


if __name__ == "__main__":
    raise SystemExit(main())
