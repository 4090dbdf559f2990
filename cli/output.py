"""What a command gives back: its result on standard output or a file, progress on stderr, one-line errors.

Exit codes (coalitions.cli.main maps them): 0 success; 1 a negative answer (:class:`Negative`);
2 unusable input, an :class:`~coalitions.errors.InputError` naming the flag the user typed
(:func:`flag_errors`).
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import coalitions as co
from coalitions.files import write_text
from coalitions.params import ParameterError

__all__ = ["Negative", "emit", "stdout_failed", "progress", "flag_errors"]


class Negative(Exception):
    """A well-formed question whose answer is no (exit code 1)."""


def stdout_failed(e: OSError):
    """Standard output cannot be written (a full disk, a closed pipe): one line, exit 2."""
    try:  # what is still buffered must not fail again, with a traceback, when Python exits
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass
    return co.InputError(f"standard output: cannot write ({e.strerror or e.__class__.__name__})")


def emit(text: str, output: str | None) -> None:
    """The command's result: to ``output`` through the one writer, else to standard output."""
    text = text if text.endswith("\n") else text + "\n"
    if output:
        write_text(output, text)
        return
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):  # not a real file (tests capture it)
        fd = None
    try:
        if fd is None:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        # Straight to the descriptor: a buffered stream can report a short write (a disk filling up
        # mid-way) as success and lose the rest; os.write raises on the part that does not fit.
        data = text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict")
        sys.stdout.flush()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:
        raise stdout_failed(e) from None
    except UnicodeEncodeError as e:
        raise co.InputError(f"standard output: cannot write {text[e.start]!r} in its encoding {e.encoding}") from None


def progress(label: str):
    """A ``progress(done, total)`` callback for stderr: a bar on a terminal, one line per finished step elsewhere.

    (:class:`~coalitions.learners.experiments.progress.StepProgress`: plain Python, no learner dependency.)
    """
    from coalitions.learners.experiments.progress import StepProgress

    return StepProgress(label, sys.stderr)


@contextmanager
def flag_errors(flags: Mapping[str, str] | None = None) -> Iterator[None]:
    """Report a library's :class:`~coalitions.params.ParameterError` with the flag the user typed.

    ``flags`` maps a parameter to its flag; a parameter not in it is shown as
    ``--name-with-dashes``.
    """
    try:
        yield
    except ParameterError as e:
        flag = (flags or {}).get(e.param, "--" + e.param.replace("_", "-"))
        raise co.InputError(e.phrase(flag)) from None
