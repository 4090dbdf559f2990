"""What reproduce shows while it runs: a status line on a terminal, finished pieces' lines always."""

from __future__ import annotations

import io

import pytest

from coalitions.learners.experiments import progress as pg
from coalitions.learners.experiments.progress import PieceProgress, bar


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_bar_fills_proportionally():
    assert bar(0, 4) == "[....]" and bar(1, 4) == "[####]" and bar(0.5, 4) == "[##..]"
    assert bar(-3, 4) == "[....]" and bar(7, 4) == "[####]"
    assert all(len(bar(k / 13, 10)) == 12 for k in range(14))


def test_not_a_terminal_writes_finished_pieces_only():
    out = io.StringIO()
    show = PieceProgress("[s] ", out)
    for k in range(11):
        show.progress("few-seed0: spo", k, 10)
    show.line("few-seed0: spo, 1.0 s")
    show.clear()
    assert out.getvalue() == "[s] few-seed0: spo, 1.0 s\n"


def test_terminal_draws_the_running_piece_and_keeps_finished_lines(monkeypatch):
    monkeypatch.setattr(pg, "REDRAW_S", 0.0)
    out = Terminal()
    show = PieceProgress("[s] ", out)
    show.progress("few-seed0: spo", 5, 10)
    assert out.getvalue().startswith("\r[s] few-seed0: spo  [##########..........]  50%  5/10")
    show.progress("few-seed0: spo", 10, 10)
    show.line("few-seed0: spo, 1.0 s")
    text = out.getvalue()
    assert "100%  10/10" in text and text.endswith("\r[s] few-seed0: spo, 1.0 s\n")
    # the status line was erased (overwritten by spaces) before the finished line
    erased = text[:text.rindex("\r[s] few-seed0: spo, 1.0 s")]
    assert erased.rstrip("\r").endswith(" " * 20)


def test_redraws_are_throttled_but_the_end_is_always_drawn(monkeypatch):
    monkeypatch.setattr(pg, "REDRAW_S", 3600.0)
    out = Terminal()
    show = PieceProgress("", out)
    for k in range(1, 1001):
        show.progress("p", k, 1000)
    assert out.getvalue().count("\r") == 2 and "1000/1000" in out.getvalue()


def test_reproduce_reports_progress_inside_pieces(tmp_path):
    pytest.importorskip("torch")
    from coalitions.learners.experiments.runner import reproduce

    seen, lines = [], []
    reproduce("synthetic", tmp_path, quick=True, methods=("local", "spo"), figures=False, device="cpu",
              log=lines.append, progress=lambda piece, done, total: seen.append((piece, done, total)))
    pieces = list(dict.fromkeys(p for p, _, _ in seen))
    assert pieces == ["few-seed0: exact", "few-seed0: local", "few-seed0: spo",
                      "many-seed0: exact", "many-seed0: local", "many-seed0: spo"]
    for piece in pieces:
        ticks = [(d, t) for p, d, t in seen if p == piece]
        assert ticks[-1][0] == ticks[-1][1] and [d for d, _ in ticks] == sorted(d for d, _ in ticks)
    assert len(lines) == 6 and all(" s" in line for line in lines)
