"""The two validation scorings that dominated ``reproduce fashion``: each against its simple reference.

Both run at every step of the Table 3 experiment (``learners/experiments/catalogue.py``, FASHION: ten
clients, about 100 validation samples each, the MLP 784-32-10 with personal heads):

``game``
    The exact game's patience scores every subset model of a chunk on its members' validation data
    after every step (:mod:`coalitions.learners.game.stopping`).  Reference: every model of the chunk
    on every client's samples (:func:`~coalitions.learners.training.models.stacked_personal_forward`),
    non-members masked afterwards.  Now: each client's samples under its member models only
    (:func:`~coalitions.learners.training.models.member_personal_outputs`), half the products.
``spo``
    SPO's direction search scores client ``targets[r]``'s validation loss of the body
    ``h(d[r])`` with its own head, for thousands of rows per call
    (:class:`~coalitions.learners.methods.spo.heads.HeadsDirectionSearch`).  Reference: each row
    with its own copy of its client's validation set (``X[targets]``, what the search did before).
    Now: rows sorted by target, each client's validation set shared by its rows.

Each pair runs interleaved ``--repeats`` times in this process, on the same inputs; the script prints
each side's median time, the ratio and whether the two give the same values (the same bits on this
machine's shapes; the test suite checks them to float32 rounding).  Inputs are random with the
experiment's shapes (no data set needed).

Run:  python benchmarks/fashion_scoring.py [--repeats 5] [--chunk 103] [--rows 1500] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _timed(f, repeats: int, other) -> tuple[list[float], list[float]]:
    """Interleaved timings of ``f`` and ``other`` (each once per repeat, after one warm-up call each)."""
    f(), other()
    a, b = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        a.append(time.perf_counter() - t)
        t = time.perf_counter()
        other()
        b.append(time.perf_counter() - t)
    return a, b


def game_pair(chunk: int, n_val: int = 100, clients: int = 10, start: int = 300):
    """``(reference, new)``: the patience's per-client validation losses of one chunk, two ways."""
    import numpy as np
    import torch

    from coalitions.learners.data.metrics import loss_function
    from coalitions.learners.game.masks import membership
    from coalitions.learners.training.models import (
        make_model,
        member_personal_outputs,
        personal_init,
        product_major,
        stack_init,
        stacked_personal_forward,
    )

    gen = torch.Generator().manual_seed(0)
    spec = make_model("mlp", (784,), 10, hidden=32)
    init = personal_init(spec, {k: v[0] for k, v in spec.init(gen, 1).items()}, clients)
    params = stack_init(init, chunk, product_major(spec))
    with torch.no_grad():
        for v in params.values():
            v.add_(torch.randn(v.shape, generator=gen) * 0.05)
    X = torch.rand(clients * n_val, 784, generator=gen)
    y = torch.randint(0, 10, (clients * n_val,), generator=gen)
    counts = [n_val] * clients
    onehot = torch.nn.functional.one_hot(torch.arange(clients).repeat_interleave(n_val), clients).float()
    member = torch.as_tensor(membership(np.arange(start, start + chunk) % ((1 << clients) - 1) + 1, clients))
    members = [torch.nonzero(member[:, i])[:, 0] for i in range(clients)]
    loss = loss_function("multiclass")

    def reference():
        with torch.no_grad():
            return (loss(stacked_personal_forward(spec, params, X, counts), y) @ onehot) / n_val

    def new():
        with torch.no_grad():
            per_sample = X.new_zeros((chunk, X.shape[0]))
            for i, out in enumerate(member_personal_outputs(spec, params, X, counts, members)):
                if out is not None:
                    rows = slice(i * n_val, (i + 1) * n_val)
                    per_sample[:, rows].index_copy_(0, members[i], loss(out, y[rows]))
            return (per_sample @ onehot) / n_val

    return reference, new, member > 0


def spo_pair(rows: int, n_val: int = 100, clients: int = 10):
    """``(reference, new)``: SPO's per-row validation losses with personal heads, two ways."""
    import torch
    from torch.func import vmap

    from coalitions.learners.data.metrics import loss_function
    from coalitions.learners.methods.spo.heads import HeadsDirectionSearch
    from coalitions.learners.methods.spo.hypernetwork import ParetoHypernetwork
    from coalitions.learners.training.models import make_model

    torch.manual_seed(0)
    spec = make_model("mlp", (784,), 10, hidden=32)
    net = ParetoHypernetwork(clients, spec, hidden=100, embed=32, layers=2, heads="personal")
    val = type("Val", (), {})()
    val.X = torch.rand(clients, n_val, 784)
    val.y = torch.randint(0, 10, (clients, n_val))
    val.m = torch.ones(clients, n_val)
    val.sizes = torch.full((clients,), n_val)   # what the search reads to decide whether folding pays
    loss = loss_function("multiclass")
    search = HeadsDirectionSearch(net, spec, loss, val, torch.device("cpu"), 0, 1, 2, 2)
    d = torch.distributions.Dirichlet(torch.ones(clients)).sample((rows,))
    targets = torch.randint(0, clients, (rows,))

    def reference():   # the search before: every row with its own copy of its client's validation set
        with torch.no_grad():
            params = net.member_params(net(d), targets)
            return vmap(search._single_loss)(params, val.X[targets], val.y[targets], val.m[targets])

    def new():
        with torch.no_grad():
            return search.own_loss(d, targets)

    return reference, new, None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=103, help="subset models per chunk (fashion's default chunking)")
    ap.add_argument("--rows", type=int, default=1500, help="rows per SPO call (a search's starts x line steps)")
    ap.add_argument("--quick", action="store_true", help="small shapes, 2 repeats (what CI runs; not a measurement)")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.chunk, args.rows = 2, 16, 64
    import torch

    torch.set_num_threads(1)
    print(f"one thread; {args.repeats} interleaved repeats; medians")
    print("scoring        reference s   new s    ratio   same values")
    for name, pair in (("game", lambda: game_pair(args.chunk)), ("spo", lambda: spo_pair(args.rows))):
        reference, new, mask = pair()
        a, b = _timed(reference, args.repeats, new)
        x, y = reference(), new()
        same = torch.equal(x[mask], y[mask]) if mask is not None else torch.equal(x, y)
        close = bool(torch.allclose(x[mask] if mask is not None else x, y[mask] if mask is not None else y,
                                    rtol=1e-5, atol=1e-6))
        ra, rb = statistics.median(a), statistics.median(b)
        print(f"{name:<12} {ra:>11.4f} {rb:>8.4f} {ra / rb:>7.2f}x   "
              f"{'same bits' if same else ('within float32 rounding' if close else 'DIFFERENT')}")
        if not close:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
