"""The command line's parameter types and the options several commands share, each declared once.

The contract for bad input (docs/cli.md#bad-input): exit 2 and one line naming the file, option,
client or coalition.  These types refuse a bad value in click's terms, before any work.
"""

from __future__ import annotations

import math
import os

import click
from click.shell_completion import CompletionItem

import coalitions as co
from coalitions import options as option_checks
from coalitions.files import check_output_path

__all__ = ["FORMATS", "SEMANTICS", "SEED", "Finite", "FINITE", "NON_NEGATIVE", "INPUT", "OUTPUT", "OUTPUT_FOLDER",
           "Tolerance", "Batch", "Rates", "check_tol", "numbers", "device_option", "threads_option",
           "backend_options", "ray_address"]

FORMATS = click.Choice(["text", "json", "dot", "graphml"])
SEMANTICS = click.Choice(["personalized", "shared"])

#: Every seed option: numpy and torch generators both take any integer in this range.
SEED = click.IntRange(0, 2**32 - 1)


class Finite(click.ParamType):
    """A finite float at least ``low`` (click's FloatRange lets NaN through: ``nan < 0`` is False)."""

    name = "float"

    def __init__(self, low: float | None = None, open_low: bool = False):
        self.low, self.open_low = low, open_low

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            x = value
        else:
            try:
                x = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.low is not None and (x < self.low or (self.open_low and x == self.low)):
            self.fail(f"{value!r} is {'not above' if self.open_low else 'below'} {self.low:g}", param, ctx)
        return x


FINITE = Finite()
NON_NEGATIVE = Finite(0.0)


class _Path(click.ParamType):
    """A path argument: the shell completes it as a file (or, with ``completes = "dir"``, a folder)."""

    completes = "file"

    def shell_complete(self, ctx, param, incomplete):
        """Click's completion item of this kind, so that the shell completes the path itself."""
        return [CompletionItem(incomplete, type=self.completes)]


class _InputFile(_Path):
    """A file argument; the readers check everything else (coalitions.files.open_input)."""

    name = "file"
    #: The files the command reads, named by the out-of-memory message (coalitions.cli.main).
    given: list = []

    def convert(self, value, param, ctx):
        if not str(value):
            self.fail("empty file name", param, ctx)
        self.given.append(str(value))
        return str(value)


class _OutputFile(_Path):
    """An output file, checked before any work: not empty, in an existing folder, not a non-regular file."""

    name = "file"

    def convert(self, value, param, ctx):
        if not str(value):
            self.fail("empty file name", param, ctx)
        try:
            check_output_path(str(value))
        except co.InputError as e:
            self.fail(str(e), param, ctx)
        return str(value)


class _OutputFolder(_Path):
    """An output folder (created if missing); an existing non-folder is refused."""

    name = "directory"
    completes = "dir"

    def convert(self, value, param, ctx):
        if not str(value):
            self.fail("empty folder name", param, ctx)
        if os.path.exists(value) and not os.path.isdir(value):
            self.fail(f"{value}: exists and is not a folder", param, ctx)
        return str(value)


INPUT = _InputFile()
OUTPUT = _OutputFile()
OUTPUT_FOLDER = _OutputFolder()


def check_tol(value: float) -> float:
    """``--tol`` as a number: finite and >= 0."""
    if not value >= 0 or value == float("inf"):
        raise co.InputError(f"--tol must be a finite number >= 0, got {value}")
    return value


class Tolerance(click.ParamType):
    """``--tol``: a number, or ``auto`` (from the bootstrap replicates the game holds, docs/concepts.md §6)."""

    name = "float|auto"

    def convert(self, value, param, ctx):
        if value == "auto" or isinstance(value, float):
            return value
        try:
            return float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is neither a number nor 'auto'", param, ctx)


class Batch(click.ParamType):
    """``--batch-size``: samples per step, an integer >= 1, or ``full`` (every step sees all of a client's data)."""

    name = "INTEGER|full"

    def convert(self, value, param, ctx):
        if value is None or value == "full" or isinstance(value, int):
            return value
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            self.fail(f"{value!r} is neither an integer >= 1 nor 'full'", param, ctx)
        return n


class Rates(click.ParamType):
    """``--lr-grid``: comma-separated learning rates, each finite and > 0."""

    name = "RATE,RATE,..."

    def convert(self, value, param, ctx):
        if value is None or isinstance(value, tuple):
            return value
        try:
            rates = tuple(float(v) for v in str(value).split(","))
        except ValueError:
            rates = ()
        if not rates or not all(math.isfinite(r) and r > 0 for r in rates):
            self.fail(f"{value!r} is not a comma-separated list of positive learning rates", param, ctx)
        return rates


def numbers(text: str, what: str, cast=float) -> list:
    """Comma-separated numbers of the option ``what``."""
    try:
        vals = [cast(x) for x in text.split(",")]
    except ValueError:
        raise co.InputError(f"{what} must be comma-separated numbers, got {text!r}") from None
    return vals


# Options that several commands declare, each declared once here.
device_option = click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
                             show_default=True, help="Where to train: auto picks CUDA when available.")
threads_option = click.option("--threads", type=int, default=None, callback=option_checks.threads,
                              help="CPU threads for training [the thread policy: 1 for small models, else the "
                                   "free cores].")


def backend_options(f):
    """``--backend local|ray`` and ``--address`` (docs/performance.md, "Ray"; Ray's ``RAY_ADDRESS`` is honoured)."""
    f = click.option("--address", default=None, metavar="ADDR",
                     help="Ray cluster to join (HOST:PORT, or auto) [RAY_ADDRESS if set, else a local Ray on this "
                          "machine].")(f)
    return click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                        help="ray: run the work as Ray tasks (pip install 'collaboration-equilibrium[ray]').")(f)


def ray_address(backend: str, address: str | None) -> str | None:
    """``--address``, which only ``--backend ray`` takes."""
    if address is not None and backend != "ray":
        raise co.InputError("--address needs --backend ray")
    return address
