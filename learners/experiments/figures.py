"""Figures of a reproduction: matplotlib PNGs when it is installed, Graphviz DOT always.

Per regime (first seed):

* ``<regime>-benefit-graph.png``: the exact ``BG(all)`` with the CE's coalitions
  as shaded clusters labelled with the peeling round that removed them;
* ``<regime>-weights.png``: each learner's ``N×N`` weight matrix as a heatmap,
  beside the exact benefit graph as a matrix (row ``i``, column ``j``: ``j`` is
  in ``OCS_i``; the diagonal is the client itself);
* ``<regime>-utilities.png``: each client's test metric per method (mean over
  seeds, bars of one sample standard deviation);
* ``convergence_<regime>.png``: each learner's validation loss (mean over clients)
  against gradient steps per client (:func:`convergence_series`, :func:`draw_convergence`),
  so that a reader sees whether the matched budget let every method converge;
* ``<regime>-exact-ce.dot`` and ``<regime>-<method>-graph.dot``: the same graphs
  for Graphviz (``dot -Tpng FILE.dot -o FILE.png``).

matplotlib is an optional extra (``pip install 'collaboration-equilibrium[plot]'``); without it
only the DOT files are written and :func:`write_figures` returns a hint.

The PNGs need nothing but ``results.json`` (the convergence curves are kept there, as
``convergence_curves``), so they can be drawn again without training (:func:`redraw`)::

    python -m coalitions.learners.experiments.figures docs/results/heart/results.json
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from coalitions.errors import InputError
from coalitions.files import write_file, write_text
from coalitions.learners.experiments.catalogue import METHOD_LABELS
from coalitions.render import equilibrium_dot, graph_dot

__all__ = ["write_figures", "redraw", "PLOT_HINT", "convergence_series", "draw_convergence", "column_style",
           "PALETTE"]

#: Colours of the columns, in order: matplotlib's ``tab20`` dark shades (``tab10``), then its light ones.
#: Column ``k`` and ``k + 10`` share a hue; their line style, marker and (bars) hatch tell them apart.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
           "#dbdb8d", "#9edae5")
_LINESTYLES = ("-", "--", ":")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
_HATCHES = ("", "//", "..")


def column_style(k: int) -> dict:
    """Colour, line style, marker and hatch of column ``k``.

    The first 20 columns have 20 colours; the (colour, line style) pair is distinct for every
    ``k < 60`` (the style cycles every 10 columns), and a colour's dark and light shades
    (``k`` and ``k + 10``) differ in line style and hatch, so that neighbours in hue stay apart.
    """
    shade = (k // 10) % len(_LINESTYLES)
    return {"color": PALETTE[k % len(PALETTE)], "linestyle": _LINESTYLES[shade],
            "marker": _MARKERS[k % len(_MARKERS)], "hatch": _HATCHES[shade]}

PLOT_HINT = ("matplotlib is not installed, so no PNG figures were drawn: `pip install 'collaboration-equilibrium[plot]'` "
             "and run the same command again (finished runs are reused), or render the DOT files "
             "with Graphviz (`dot -Tpng FILE.dot -o FILE.png`).")


def _pyplot():
    try:
        import matplotlib
    except ModuleNotFoundError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _layout(clients, partition):
    """Coalitions around a circle, members around each coalition's centre."""
    pos, centres = {}, []
    k = len(partition)
    big = 0.0 if k == 1 else 3.0
    for b, block in enumerate(partition):
        a = 2 * math.pi * b / k + (math.pi if k == 2 else math.pi / 2)  # two coalitions side by side
        cx, cy = big * math.cos(a), big * math.sin(a)
        r = 0.0 if len(block) == 1 else 0.55 + 0.12 * len(block)
        for m, c in enumerate(block):
            t = 2 * math.pi * m / len(block) + math.pi / 2
            pos[c] = (cx + r * math.cos(t), cy + r * math.sin(t))
        centres.append((cx, cy, r + 0.55))
    return pos, centres


def _draw_benefit_graph(plt, reg: dict, path: Path) -> None:
    from matplotlib.patches import Circle, FancyArrowPatch

    ex = reg["runs"][0]["exact"]
    partition = ex["partition"]
    round_of = {c: k + 1 for k, r in enumerate(ex["rounds"]) for block in r for c in block}
    pos, centres = _layout(reg["clients"], partition)
    fig, ax = plt.subplots(figsize=(6.4, 6.4))
    colours = plt.get_cmap("tab10")
    for b, (block, (cx, cy, r)) in enumerate(zip(partition, centres, strict=True)):
        ax.add_patch(Circle((cx, cy), r, color=colours(b % 10), alpha=0.15, zorder=0))
        rnd = round_of.get(block[0])
        ax.text(cx, cy + r + 0.12, f"round {rnd}" if rnd else "coalition", ha="center", va="bottom",
                fontsize=9, color="0.3")
    def shrink(c, dx, dy):
        """Points from a label's centre to the edge of its box (about 5.5 pt a character at size 9)
        along the direction (dx, dy), so that arrows end at the box."""
        half_w, half_h = 2.75 * len(c) + 8.0, 11.0
        norm = math.hypot(dx, dy) or 1.0
        cos, sin = abs(dx) / norm, abs(dy) / norm
        return min(half_w / cos if cos > 1e-9 else math.inf, half_h / sin if sin > 1e-9 else math.inf) + 2.0

    for j, i in ex["edges"]:
        dx, dy = pos[i][0] - pos[j][0], pos[i][1] - pos[j][1]
        ax.add_patch(FancyArrowPatch(pos[j], pos[i], arrowstyle="-|>", mutation_scale=12,
                                     shrinkA=shrink(j, dx, dy), shrinkB=shrink(i, dx, dy), color="0.35", lw=1.0,
                                     connectionstyle="arc3,rad=0.12", zorder=1))
    block_of = {c: b for b, block in enumerate(partition) for c in block}
    for c, (x, y) in pos.items():
        ax.text(x, y, c, ha="center", va="center", fontsize=9, zorder=3,
                bbox={"boxstyle": "round,pad=0.5", "facecolor": "white",
                      "edgecolor": colours(block_of[c] % 10), "linewidth": 2})
    xs = [p[0] for p in pos.values()] + [c[0] - c[2] for c in centres] + [c[0] + c[2] for c in centres]
    ys = [p[1] for p in pos.values()] + [c[1] - c[2] for c in centres] + [c[1] + c[2] + 0.5 for c in centres]
    ax.set_xlim(min(xs) - 0.3, max(xs) + 0.3)
    ax.set_ylim(min(ys) - 0.3, max(ys) + 0.3)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"{reg['title']}\nexact benefit graph BG(all), seed {reg['runs'][0]['seed']} "
                 "(edge j → i: j is in OCS of i);\nshaded: the collaboration equilibrium's coalitions",
                 fontsize=9)
    fig.tight_layout()
    write_file(path, lambda f: fig.savefig(f, format="png", dpi=110, bbox_inches="tight"))
    plt.close(fig)


def _draw_weights(plt, reg: dict, path: Path) -> bool:
    run = reg["runs"][0]
    clients = reg["clients"]
    n = len(clients)
    mats = []
    if "exact" in run:
        a = np.eye(n)
        index = {c: i for i, c in enumerate(clients)}
        for j, i in run["exact"]["edges"]:
            a[index[i], index[j]] = 1.0
        mats.append(("exact benefit graph\n(row i: i's OCS and itself)", a))
    for m, s in run["methods"].items():
        if s.get("weights") is not None:
            mats.append((f"{METHOD_LABELS.get(m, m)} weights", np.asarray(s["weights"])))
    if len(mats) < 2:
        return False
    cols = min(4, len(mats))
    rows = math.ceil(len(mats) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.2 * rows + 0.4), squeeze=False)
    for ax in axes.flat[len(mats):]:
        ax.axis("off")
    for ax, (title, m) in zip(axes.flat, mats, strict=False):
        im = ax.imshow(m, vmin=0, vmax=1, cmap="viridis")
        ax.set_title(title, fontsize=9)
        ticks = range(n)
        ax.set_xticks(ticks, clients, rotation=90 if max(map(len, clients)) > 2 else 0, fontsize=7)
        ax.set_yticks(ticks, clients, fontsize=7)
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.7, label="weight of column j in row i")
    fig.suptitle(f"{reg['title']}, seed {run['seed']}", fontsize=9)
    write_file(path, lambda f: fig.savefig(f, format="png", dpi=110, bbox_inches="tight"))
    plt.close(fig)
    return True


def _draw_utilities(plt, reg: dict, path: Path) -> None:
    s = reg["summary"]
    cols = s["columns"]
    clients = reg["clients"]
    width = 0.8 / len(cols)
    width_in = min(12.0, max(6.0, 0.3 * len(clients) * len(cols)))
    fig, ax = plt.subplots(figsize=(width_in, 4.2))
    x = np.arange(len(clients))
    for k, col in enumerate(cols):
        cells = [s["test"][col][c] for c in clients]
        mean = [np.nan if c["mean"] is None else c["mean"] for c in cells]
        std = [0.0 if c["std"] is None else c["std"] for c in cells]
        style = column_style(k)
        ax.bar(x + (k - (len(cols) - 1) / 2) * width, mean, width, yerr=std if len(reg["runs"]) > 1 else None,
               label=col, color=style["color"], hatch=style["hatch"], edgecolor="white", linewidth=0.3,
               capsize=2, error_kw={"lw": 0.8})
    ax.set_xticks(x, clients)
    metric = reg["metric"]
    if metric == "mse":
        ax.set_yscale("log")
    ax.set_ylabel(f"test {metric} ({'lower' if metric == 'mse' else 'higher'} is better)")
    n = len(reg["runs"])
    ax.set_title(f"{reg['title']}\nmean over {n} seed{'s' if n > 1 else ''}"
                 + (", bars: one std" if n > 1 else ""), fontsize=9)
    ax.legend(fontsize=7, ncol=min(len(cols), int(width_in / 1.5)), loc="upper center",
              bbox_to_anchor=(0.5, -0.1), frameon=False)
    write_file(path, lambda f: fig.savefig(f, format="png", dpi=110, bbox_inches="tight"))
    plt.close(fig)


def convergence_series(reg: dict, steps_per_client: int | None = None) -> dict[str, tuple[list, list]]:
    """Each learner's validation loss curve in ``reg``'s first run: ``{label: (x, mean loss)}``.

    Read from the estimates' ``extra.val_loss_history`` (one value per round for the
    personalised learners, per evaluation for SPO, labelled "(16 fixed directions)": its
    hypernetwork's validation objective, not its searched models).  ``x`` is in gradient steps per
    client: SPO's own steps; round ``r`` of a learner that ran ``R`` rounds is at
    ``r·steps_per_client/R`` when the regime has a matched budget (``steps_per_client``),
    else at ``r`` (rounds).  Methods without a history (Local in closed form) are left out.
    Without estimates (``reg`` read back from ``results.json``), the curves kept there
    (``convergence_curves``), already in these units; ``{}`` when the file has none.
    """
    out: dict[str, tuple[list, list]] = {}
    for m, s in reg["runs"][0]["methods"].items():
        est = s.get("_estimate")
        hist = (est.extra or {}).get("val_loss_history") if est is not None else None
        if not hist or not hist.get("mean"):
            continue
        y = [float(v) for v in hist["mean"]]
        x: list[float]
        if "steps" in hist:
            x = [int(v) for v in hist["steps"]]
        elif steps_per_client:
            x = [(r + 1) * steps_per_client / len(y) for r in range(len(y))]
        else:
            x = list(range(1, len(y) + 1))
        label = METHOD_LABELS.get(m, m)
        out[f"{label} (16 fixed directions)" if "steps" in hist else label] = (x, y)
    if not out and not any("_estimate" in s for s in reg["runs"][0]["methods"].values()):
        kept = reg.get("convergence_curves") or {}
        out = {label: (list(c["x"]), [float(v) for v in c["y"]]) for label, c in kept.items()}
    return out


def draw_convergence(plt, reg: dict, path: Path, steps_per_client: int | None = None) -> bool:
    """Validation loss per round of every learner of ``reg`` on one axes (log scale); False if none has one."""
    series = convergence_series(reg, steps_per_client)
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for k, (label, (x, y)) in enumerate(series.items()):
        style = column_style(k)
        ax.plot(x, y, color=style["color"], linestyle=style["linestyle"], marker=style["marker"], markersize=4,
                markevery=max(1, len(x) // 8), linewidth=1.3, label=label)
    if all(v > 0 for _, y in series.values() for v in y):
        ax.set_yscale("log")
    ax.set_xlabel("gradient steps per client" if steps_per_client else "round (SPO: step)")
    ax.set_ylabel("validation loss (mean over clients)")
    import textwrap

    ax.set_title(textwrap.fill(f"{reg['title']}: convergence (seed {reg['runs'][0]['seed']})", 80), fontsize=9)
    # beside the axes, not over the curves; bbox_inches="tight" widens the figure to hold it
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)
    write_file(path, lambda f: fig.savefig(f, format="png", dpi=110, bbox_inches="tight"))
    plt.close(fig)
    return True


def write_figures(results: dict, out: str | Path) -> tuple[list[str], str | None]:
    """Write every figure of ``results`` into ``out``.

    Returns the file names written (relative to ``out``) and a hint for the
    user when matplotlib is missing (else ``None``).
    """
    out = Path(out)
    files: list[str] = []
    for reg in results["regimes"]:
        run = reg["runs"][0]
        eq = run.get("exact", {}).get("_equilibrium")
        if eq is not None:
            name = f"{reg['name']}-exact-ce.dot"
            write_text(out / name, equilibrium_dot(eq))
            files.append(name)
        for m, s in run["methods"].items():
            est = s.get("_estimate")
            if est is not None:
                name = f"{reg['name']}-{m}-graph.dot"
                write_text(out / name, graph_dot(est.benefit_graph))
                files.append(name)
    plt = _pyplot()
    if plt is None:
        return files, PLOT_HINT
    return files + _draw_pngs(plt, results, out), None


def _draw_pngs(plt, results: dict, out: Path) -> list[str]:
    """Draw every PNG figure of ``results`` (its JSON suffices) into ``out``; the file names written."""
    files: list[str] = []
    for reg in results["regimes"]:
        if "exact" in reg["runs"][0]:
            name = f"{reg['name']}-benefit-graph.png"
            _draw_benefit_graph(plt, reg, out / name)
            files.append(name)
        name = f"{reg['name']}-weights.png"
        if _draw_weights(plt, reg, out / name):
            files.append(name)
        name = f"{reg['name']}-utilities.png"
        _draw_utilities(plt, reg, out / name)
        files.append(name)
        budget = (results.get("budget") or {}).get(reg["name"]) or {}
        name = f"convergence_{reg['name']}.png"
        if draw_convergence(plt, reg, out / name, budget.get("steps_per_client")):
            files.append(name)
    return files


def redraw(results_path, out=None) -> list[str]:
    """Draw the PNG figures of a finished reproduction again from its ``results.json``, training nothing.

    Parameters
    ----------
    results_path : path-like
        A ``results.json`` (:func:`~coalitions.learners.experiments.results.read_results`).
    out : path-like, optional
        Where to write; by default the folder of ``results_path``.

    Returns
    -------
    list of str
        The file names written.  A regime's ``convergence_<regime>.png`` is left as it is when
        the file keeps no curves (written before ``convergence_curves`` existed).

    Raises
    ------
    InputError
        For an unreadable or malformed file, or without matplotlib.
    """
    from coalitions.learners.experiments.results import read_results

    results = read_results(results_path).to_json()
    plt = _pyplot()
    if plt is None:
        raise InputError("matplotlib is not installed: pip install 'collaboration-equilibrium[plot]'")
    return _draw_pngs(plt, results, Path(results_path).parent if out is None else Path(out))


def main(argv=None) -> int:
    """``python -m coalitions.learners.experiments.figures RESULTS.json ...``: redraw each file's PNGs beside it."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or any(a.startswith("-") for a in args):
        print("usage: python -m coalitions.learners.experiments.figures RESULTS.json ...", file=sys.stderr)
        return 2
    from coalitions.learners.experiments.results import read_results

    for path in args:
        try:
            files = redraw(path)
        except InputError as e:
            print(f"figures: {e}", file=sys.stderr)
            return 2
        kept = [name for name in (f"convergence_{r.name}.png" for r in read_results(path).regimes)
                if name not in files]
        print(f"{path}: drew {', '.join(files)}" + (f"; kept {', '.join(kept)} (no curves in the file)"
                                                    if kept else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
