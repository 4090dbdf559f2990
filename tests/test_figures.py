"""Figures keep every column apart and their legends off the data (learners/experiments/figures.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from coalitions.learners.experiments.figures import column_style, convergence_series, draw_convergence, main

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


# --------------------------------------------------------------------------- redrawn from results.json
RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results" / "synthetic" / "results.json"


def test_kept_curves_are_the_estimates_curves():
    """What results.json keeps (``convergence_curves``) gives back the series drawn from the estimates."""
    from coalitions.learners.experiments.results import RegimeResult

    reg = _reg(3)
    live = convergence_series(reg, steps_per_client=50)
    kept = {label: {"x": x, "y": y} for label, (x, y) in live.items()}
    regime = RegimeResult("r", "t", {}, [], [], None, {}, curves=kept)
    back = RegimeResult.from_json(json.loads(json.dumps(regime.to_json())))
    assert back.curves == kept
    plain = {"runs": [{"seed": 0, "methods": {m: {} for m in reg["runs"][0]["methods"]}}],
             "convergence_curves": back.curves}
    assert convergence_series(plain, steps_per_client=50) == live


def test_redraw_from_results_json_trains_nothing(tmp_path, capsys):
    data = json.loads(RESULTS.read_text())
    first, second = (r["name"] for r in data["regimes"])
    data["regimes"][0]["convergence_curves"] = {"FedAvg": {"x": [10, 20, 30], "y": [1.0, 0.5, 0.25]}}
    data["regimes"][1].pop("convergence_curves", None)   # a file written before the curves were kept
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    assert main([str(path)]) == 0
    drawn = {p.name for p in tmp_path.glob("*.png")}
    assert drawn == {f"{r}-{kind}.png" for r in (first, second) for kind in ("benefit-graph", "weights", "utilities")
                     } | {f"convergence_{first}.png"}
    assert f"kept convergence_{second}.png" in capsys.readouterr().out


def test_redraw_of_a_bad_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "results.json"
    bad.write_text("{")
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("figures: ") and str(bad) in err
