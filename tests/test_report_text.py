"""Sentences of the generated reports that say what a figure leaves out (docs/results.md)."""

from coalitions.learners.experiments.report import _weights_caption


def test_the_weights_caption_names_the_columns_the_figure_leaves_out():
    reg = {"runs": [{"methods": {"fedamp": {"weights": [[1.0]]}, "superfed-mm": {"weights": None},
                                 "local": {}}}]}
    text = _weights_caption(reg, {"fedamp": "FedAMP", "superfed-mm": "SuPerFed-MM", "local": "Local"})
    assert "weight matrix of FedAMP" in text
    assert "Not shown: SuPerFed-MM, Local" in text


def test_nothing_is_said_missing_when_every_column_has_weights():
    reg = {"runs": [{"methods": {"fedamp": {"weights": [[1.0]]}}}]}
    assert "Not shown" not in _weights_caption(reg, {})
