"""What ``coalitions reproduce`` shows while it runs: the running piece and a bar inside it.

On a terminal one status line is redrawn in place (carriage return, at most
every :data:`REDRAW_S` seconds, and always for a new piece and at its end)::

    [synthetic] many-seed0: spo  [##########..........]  50%  500/1000

and every finished piece prints its own line above it.  When the stream is
not a terminal (a log file, a pipe, CI) nothing but the finished pieces'
lines is written, one per line, as before.  No dependency: a bar is a few
characters.

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

__all__ = ["PieceProgress", "bar", "REDRAW_S"]

#: Least time between two redraws of the status line.
REDRAW_S = 0.1


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
        self._piece = None       # the piece it shows

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
