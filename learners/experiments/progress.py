"""What a long command shows while it runs: bars on a terminal, one line per finished step elsewhere.

:class:`PieceProgress` (``coalitions reproduce``)
    On a terminal one status line is redrawn in place (carriage return, at
    most every :data:`REDRAW_S` seconds, and always for a new piece and at its
    end)::

        [synthetic] many-seed0: spo  [##########..........]  50%  500/1000

    and every finished piece prints its own line above it.  When the stream is
    not a terminal (a log file, a pipe, CI) nothing but the finished pieces'
    lines is written, one per line.
:class:`StepProgress` (every other command's ``progress(done, total)``: rounds, chunks, replicates)
    On a terminal the same bar, and a last line with the time taken.  Elsewhere
    one line per finished step, ``label: done/total (elapsed s)``, at most one
    every :data:`LINE_S` seconds and the last step always; a command done
    within :data:`LINE_S` writes nothing, so quick commands stay quiet in pipes.

No dependency: a bar is a few characters.

Examples
--------
>>> import io
>>> out = io.StringIO()                       # not a terminal: lines only
>>> show = PieceProgress("[x] ", out)
>>> show.progress("a-seed0: spo", 5, 10)
>>> show.line("a-seed0: spo, 1.0 s")
>>> out.getvalue()
'[x] a-seed0: spo, 1.0 s\\n'
>>> bar(0.5, 10)
'[#####.....]'
"""

from __future__ import annotations

import math
import shutil
import time

__all__ = ["PieceProgress", "StepProgress", "bar", "REDRAW_S", "LINE_S"]

#: Least time between two redraws of the status line.
REDRAW_S = 0.1
#: Least time between two lines of :class:`StepProgress` off a terminal (and before its first).
LINE_S = 1.0


def bar(fraction: float, width: int = 20) -> str:
    """``[####......]``: ``fraction`` (clipped to [0, 1]) of ``width`` cells filled."""
    f = min(1.0, max(0.0, float(fraction)))
    filled = int(f * width + 1e-9)
    return "[" + "#" * filled + "." * (width - filled) + "]"


class PieceProgress:
    """Progress of a run made of pieces, drawn on ``stream``.

    Parameters
    ----------
    prefix : str
        Put before every line (e.g. ``"[synthetic] "``).
    stream : text stream
        Where to write (standard error in the CLI); a status line is drawn only
        when ``stream.isatty()``.
    """

    def __init__(self, prefix: str, stream):
        self.prefix = prefix
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._shown = 0          # characters of the status line on screen
        self._last = -math.inf   # when it was drawn
        self._piece: str | None = None   # the piece it shows

    def line(self, text: str) -> None:
        """A finished piece: its own line (above the status line on a terminal)."""
        self.clear()
        self.stream.write(self.prefix + text + "\n")
        self.stream.flush()

    def progress(self, piece: str, done: int, total: int) -> None:
        """The running ``piece`` has done ``done`` of ``total`` units (terminal only)."""
        if not self.tty:
            return
        now = time.monotonic()
        if done < total and piece == self._piece and now - self._last < REDRAW_S:
            return
        self._last, self._piece = now, piece
        frac = done / total if total else 1.0
        text = f"{self.prefix}{piece}  {bar(frac)} {frac:4.0%}  {done}/{total}"
        width = shutil.get_terminal_size((80, 24)).columns - 1
        text = text[:width]
        self.stream.write("\r" + text + " " * max(0, self._shown - len(text)))
        self.stream.flush()
        self._shown = len(text)

    def clear(self) -> None:
        """Erase the status line (before a line of text, or when stopping)."""
        if self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0


class StepProgress:
    """A ``progress(done, total)`` callback for one long step-by-step job, drawn on ``stream``.

    Parameters
    ----------
    label : str
        What runs (``"FedAvg rounds, all coalitions at once"``); starts every line.
    stream : text stream
        Where to write (standard error in the CLI).  On a terminal
        (``stream.isatty()``) a bar (:class:`PieceProgress`), then one line when
        the job ends; otherwise a line ``label: done/total (t s)`` for a
        finished step when :data:`LINE_S` seconds passed since the start or
        the previous line, and for the last step once any line was written or
        the job took :data:`LINE_S` or more.  The clock starts when the
        callback is made; ``done == total`` ends the job and restarts it.

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> step = StepProgress("rounds", out)
    >>> step(1, 2); step(2, 2)            # a job within LINE_S: quiet off a terminal
    >>> out.getvalue()
    ''
    """

    def __init__(self, label: str, stream):
        self.label = label
        self.stream = stream
        self._bar = PieceProgress("", stream)
        self._start = time.monotonic()
        self._last: float | None = None     # when the last line was written (None: none yet)

    def _line(self, done: int, total: int, now: float) -> None:
        self.stream.write(f"{self.label}: {done}/{total} ({now - self._start:.1f} s)\n")
        self.stream.flush()
        self._last = now

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        if self._bar.tty:
            self._bar.progress(self.label, done, total)
            if finished:
                self._bar.clear()
                self._line(done, total, now)
        elif now - (self._start if self._last is None else self._last) >= LINE_S or (finished and self._last):
            self._line(done, total, now)
        if finished:
            self._start, self._last = time.monotonic(), None
