"""Figures keep every column apart and their legends off the data (learners/experiments/figures.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coalitions.learners.experiments.figures import column_style, draw_convergence

plt = pytest.importorskip("matplotlib.pyplot")


def test_sixty_columns_have_sixty_colour_and_style_pairs():
    pairs = {(column_style(k)["color"], column_style(k)["linestyle"]) for k in range(60)}
    assert len(pairs) == 60
    assert len({column_style(k)["color"] for k in range(20)}) == 20


def _reg(n: int) -> dict:
    methods = {f"m{k}": {"_estimate": SimpleNamespace(extra={"val_loss_history": {"mean": [1.0 / (k + r + 1)
                                                                                   for r in range(5)]}})}
               for k in range(n)}
    return {"title": "seventeen columns", "runs": [{"seed": 0, "methods": methods}]}


def test_convergence_draws_seventeen_distinct_curves_with_the_legend_outside(tmp_path, monkeypatch):
    kept, close = {}, plt.close
    monkeypatch.setattr(plt, "close", lambda fig: kept.setdefault("fig", fig))
    assert draw_convergence(plt, _reg(17), tmp_path / "convergence_x.png", steps_per_client=100)
    assert (tmp_path / "convergence_x.png").stat().st_size > 0
    fig = kept["fig"]
    ax = fig.axes[0]
    looks = {(line.get_color(), line.get_linestyle(), line.get_marker()) for line in ax.get_lines()}
    assert len(ax.get_lines()) == 17 and len(looks) == 17
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend, axes = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.x0 >= axes.x1, "the legend overlaps the axes"
    close(fig)


def test_a_label_skew_regime_is_named_for_its_split():
    """Figure files are named ``<regime>-*.png``: a regime's name is the split its title names."""
    from coalitions.learners.experiments.catalogue import EXPERIMENTS

    skewed = [(r.name, r.options["partition"], r.title) for e in EXPERIMENTS.values() for r in e.regimes
              if "partition" in r.options]
    assert skewed
    for name, partition, title in skewed:
        assert name == partition, (name, title)
        assert ("twins" in title) == (partition == "twins"), (name, title)
