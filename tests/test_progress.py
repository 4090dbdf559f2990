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


class Clock:
    """A stand-in for the ``time`` module whose clock moves only when told."""

    def __init__(self):
        self.now = 100.0

    def monotonic(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(pg, "time", c)
    return c


def test_steps_off_a_terminal_are_lines_once_the_job_is_long(clock):
    from coalitions.learners.experiments.progress import StepProgress

    out = io.StringIO()
    quick = StepProgress("enumerating", out)
    for k in range(1, 6):
        clock.now += 0.01
        quick(k, 5)
    assert out.getvalue() == ""                       # a job done within LINE_S stays quiet in a pipe
    rounds = StepProgress("rounds", out)
    for k in range(1, 4):                             # slow steps: one line each, with the time so far
        clock.now += 2.5
        rounds(k, 3)
    # with the rate and the time left at that rate (issue 36, item 6)
    assert out.getvalue().splitlines() == ["rounds: 1/3 (2.5 s, 0.4/s, 5.0 s left)",
                                           "rounds: 2/3 (5.0 s, 0.4/s, 2.5 s left)", "rounds: 3/3 (7.5 s, 0.4/s)"]
    out.truncate(0), out.seek(0)
    fast = StepProgress("epochs", out)
    for k in range(1, 42):                            # 0.25 s steps: one line a second, and the last
        clock.now += 0.25
        fast(k, 41)
    lines = out.getvalue().splitlines()
    assert len(lines) == 11 and lines[0] == "epochs: 4/41 (1.0 s, 4/s, 9.2 s left)"
    assert lines[-2] == "epochs: 40/41 (10.0 s, 4/s, 0.2 s left)" and lines[-1] == "epochs: 41/41 (10.2 s, 4/s)"


def test_steps_on_a_terminal_are_a_bar_then_one_line(clock, monkeypatch):
    from coalitions.learners.experiments.progress import StepProgress

    monkeypatch.setattr(pg, "REDRAW_S", 0.0)
    out = Terminal()
    step = StepProgress("rounds", out)
    clock.now += 1.0
    step(1, 2)
    assert out.getvalue().startswith("\rrounds  [##########..........]  50%  1/2")
    clock.now += 1.0
    step(2, 2)
    assert out.getvalue().startswith("\rrounds  [##########..........]  50%  1/2  1/s  ETA 1.0 s")
    assert out.getvalue().endswith("\rrounds: 2/2 (2.0 s, 1/s)\n")


def test_a_resumed_job_takes_its_rate_from_the_work_done_now(clock):
    """A first report at once (a checkpoint's chunks) sets the origin; it is not work done in no time."""
    from coalitions.learners.experiments.progress import StepProgress

    out = io.StringIO()
    step = StepProgress("chunks", out)
    step(600, 1000)                                   # resumed: 600 units already done
    for _ in range(4):
        clock.now += 1.0
        step(600 + 10 * round(clock.now - 100), 1000)
    assert out.getvalue().splitlines()[-1] == "chunks: 640/1000 (4.0 s, 10/s, 36 s left)"


def test_a_piece_on_a_terminal_shows_its_rate_and_eta(clock, monkeypatch):
    monkeypatch.setattr(pg, "REDRAW_S", 0.0)
    out = Terminal()
    show = PieceProgress("[s] ", out)
    show.progress("few-seed0: spo", 0, 1000)           # the piece starts: no rate yet
    assert "/s" not in out.getvalue()
    clock.now += 2.0
    show.progress("few-seed0: spo", 100, 1000)
    assert out.getvalue().endswith("  10%  100/1000  50/s  ETA 18 s")
    show.progress("many-seed0: spo", 5, 1000)          # a new piece: a new rate
    assert out.getvalue().rstrip().endswith("0%  5/1000")


@pytest.mark.parametrize(("seconds", "text"), [(0.44, "0.4 s"), (12.4, "12 s"), (185, "3 min 05 s"),
                                               (7620, "2 h 07 min")])
def test_durations_read_as_a_person_reads_them(seconds, text):
    assert pg.duration(seconds) == text
    assert pg.rate_text(0.25) == "0.25/s" and pg.rate_text(41.66) == "41.7/s" and pg.rate_text(1234.4) == "1,234/s"


def test_cli_commands_write_step_lines_to_a_log(monkeypatch, tmp_path):
    """``oracle`` logged to a file (stderr not a terminal): its training's steps as lines."""
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from coalitions.cli import cli

    monkeypatch.setattr(pg, "LINE_S", 0.0)
    r = CliRunner().invoke(cli, ["oracle", "synthetic", "--clients", "3", "--model", "logistic", "--steps", "3",
                                 "-o", str(tmp_path / "g.json")])
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stderr.splitlines() if line.startswith("training 7 subset models: ")]
    assert lines and lines[-1].startswith("training 7 subset models: 21/21 (")
