"""What a long command shows while it runs: bars on a terminal, one line per finished step elsewhere.

:class:`PieceProgress` (``coalitions reproduce``)
    On a terminal one status line is redrawn in place (carriage return, at
    most every :data:`REDRAW_S` seconds, and always for a new piece and at its
    end)::

        [synthetic] many-seed0: spo  [##########..........]  50%  500/1000  41.7/s  ETA 12 s

    (the piece's rate in its units per second and the time it still needs at that rate,
    once it has reported twice), and every finished piece prints its own line above it.  When the stream is
    not a terminal (a log file, a pipe, CI) nothing but the finished pieces'
    lines is written, one per line.
:class:`StepProgress` (every other command's ``progress(done, total)``: rounds, chunks, replicates)
    On a terminal the same bar, and a last line with the time taken.  Elsewhere
    one line per finished step, ``label: done/total (elapsed, rate, time left)``
    (``training 7 subset models: 9/21 (1.0 s, 9/s, 1.3 s left)``), at most one
    every :data:`LINE_S` seconds and the last step always; a command done
    within :data:`LINE_S` writes nothing, so quick commands stay quiet in pipes.

The rate is the units done per second since the first report (a job's first
report, when it comes at once, is work done before: a checkpoint's), and the
time left is what the units still to do take at that rate.

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

__all__ = ["PieceProgress", "StepProgress", "Rate", "bar", "duration", "rate_text", "REDRAW_S", "LINE_S"]

#: Least time between two redraws of the status line.
REDRAW_S = 0.1
#: Least time between two lines of :class:`StepProgress` off a terminal (and before its first).
LINE_S = 1.0
#: A job's first report within this many seconds of its start is work done before (no rate from it).
AT_ONCE_S = 0.05


def duration(seconds: float) -> str:
    """A time span as a person reads it: ``0.4 s``, ``12 s``, ``3 min 05 s``, ``2 h 07 min``."""
    s = max(0.0, float(seconds))
    if s < 10:
        return f"{s:.1f} s"
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        m, r = divmod(int(round(s)), 60)
        return f"{m} min {r:02d} s"
    h, r = divmod(int(round(s)) // 60, 60)
    return f"{h} h {r:02d} min"


def rate_text(rate: float) -> str:
    """Units per second with three significant digits and no exponent: ``0.4/s``, ``41.7/s``, ``1,234/s``."""
    return f"{rate:,.0f}/s" if rate >= 100 else f"{rate:.3g}/s"


class Rate:
    """The rate of a job and the time it still needs, from its ``(done, time)`` reports.

    The rate is the units done per second since the first report; that first report
    itself counts from ``start`` unless it comes within :data:`AT_ONCE_S` of it (work
    done before, such as the chunks of a checkpoint), when it only sets the origin.

    Examples
    --------
    >>> r = Rate(start=0.0)
    >>> r.update(10, 2.0), r.update(30, 4.0)
    (5.0, 10.0)
    >>> r.eta(30, 100)
    7.0
    """

    def __init__(self, start: float):
        self.start = start
        self._origin: tuple[float, int] | None = None
        self.rate: float | None = None

    def update(self, done: int, now: float) -> float | None:
        """Record ``done`` units at ``now``; returns the rate (units per second), ``None`` until known."""
        if self._origin is None:
            span, units = now - self.start, done
            self._origin = (now, done)
            if span < AT_ONCE_S:
                return self.rate
        else:
            span, units = now - self._origin[0], done - self._origin[1]
        if span > 0 and units > 0:
            self.rate = units / span
        return self.rate

    def eta(self, done: int, total: int) -> float | None:
        """Seconds the ``total - done`` units still take at the rate (``None`` while it is unknown)."""
        return None if not self.rate else max(0, total - done) / self.rate


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
        self._rate: Rate | None = None   # the piece's rate (a new piece starts a new one)

    def line(self, text: str) -> None:
        """A finished piece: its own line (above the status line on a terminal)."""
        self.clear()
        self.stream.write(self.prefix + text + "\n")
        self.stream.flush()

    def progress(self, piece: str, done: int, total: int, rate: Rate | None = None) -> None:
        """The running ``piece`` has done ``done`` of ``total`` units (terminal only).

        ``rate``: the piece's :class:`Rate`, already updated (:class:`StepProgress` keeps its
        own); by default this object's, started at the piece's first report.
        """
        if not self.tty:
            return
        now = time.monotonic()
        if piece != self._piece or self._rate is None:
            self._rate = Rate(now)
        if rate is None:
            rate = self._rate
            rate.update(done, now)
        if done < total and piece == self._piece and now - self._last < REDRAW_S:
            return
        self._last, self._piece = now, piece
        frac = done / total if total else 1.0
        text = f"{self.prefix}{piece}  {bar(frac)} {frac:4.0%}  {done}/{total}"
        if rate.rate:
            text += f"  {rate_text(rate.rate)}"
            if done < total:
                text += f"  ETA {duration(rate.eta(done, total) or 0.0)}"
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
        self._rate = Rate(self._start)
        self._last: float | None = None     # when the last line was written (None: none yet)

    def _line(self, done: int, total: int, now: float) -> None:
        parts = [f"{now - self._start:.1f} s"]
        if self._rate.rate:
            parts.append(rate_text(self._rate.rate))
            if done < total:
                parts.append(f"{duration(self._rate.eta(done, total) or 0.0)} left")
        self.stream.write(f"{self.label}: {done}/{total} ({', '.join(parts)})\n")
        self.stream.flush()
        self._last = now

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        self._rate.update(done, now)
        if self._bar.tty:
            self._bar.progress(self.label, done, total, self._rate)
            if finished:
                self._bar.clear()
                self._line(done, total, now)
        elif now - (self._start if self._last is None else self._last) >= LINE_S or (finished and self._last):
            self._line(done, total, now)
        if finished:
            self._start, self._last = time.monotonic(), None
            self._rate = Rate(self._start)
