"""This CPU's float32 matrix-product peak on one thread: the yardstick of the cost benchmarks.

:func:`matmul_peak` times square float32 products (``torch.mm``, 1024 × 1024 by default) on a
given number of PyTorch threads and returns the best rate in GMAC/s (10⁹ multiply-adds per
second).  A benchmark that counts its own multiply-adds divides its rate by this one, measured in
the same run (``benchmarks/spo_cost.py``, ``benchmarks/fashion_heads.py``), so that a share of the
hardware is read on the machine and in the minute that gave the rate: a shared host's speed drifts.

Run:  python benchmarks/peak.py [--quick] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time

__all__ = ["matmul_peak"]


def matmul_peak(threads: int = 1, size: int = 1024, seconds: float = 1.0) -> float:
    """Best float32 ``size × size`` matrix-product rate in GMAC/s on ``threads`` PyTorch threads.

    Products are repeated for about ``seconds`` after one warm-up; the fastest counts (a
    peak, not a mean: the load of a shared machine only ever slows a product down).  The
    thread count is restored afterwards.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(0)
        a = torch.randn(size, size, generator=g)
        b = torch.randn(size, size, generator=g)
        out = torch.empty(size, size)
        torch.mm(a, b, out=out)
        best = float("inf")
        end = time.perf_counter() + seconds
        while True:
            t = time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - t)
            if time.perf_counter() > end:
                break
        return size ** 3 / best / 1e9
    finally:
        torch.set_num_threads(before)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a tenth of a second per size")
    args = ap.parse_args(argv)
    seconds = 0.1 if args.quick else 1.0
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; PyTorch on {args.threads} thread(s)")
    for size in (256, 512, 1024):
        print(f"float32 {size} x {size} product: {matmul_peak(args.threads, size, seconds):.1f} GMAC/s (best)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
