"""The ``coalitions`` command (docs/cli.md): parse, call the library, print.

Exit codes: 0 success; 1 a negative answer (an axiom is violated, no CE
exists); 2 unusable input or arguments, with one line naming the file, client
or coalition at fault and never a traceback.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import signal
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import click

import coalitions as co
from coalitions import io as cio
from coalitions import options as option_checks
from coalitions import render
from coalitions.brute_force import MAX_ENUMERATE
from coalitions.files import check_output_path, write_text
from coalitions.game import check_client_names
from coalitions.learners.data.datasets import LOADERS
from coalitions.learners.data.datasets import OPTIONS as LOADER_OPTIONS
from coalitions.learners.experiments.catalogue import EXPERIMENTS
from coalitions.learners.methods.registry import METHODS, all_options
from coalitions.networks import graphml
from coalitions.numbers import NumberOverflow
from coalitions.params import ParameterError

FORMATS = click.Choice(["text", "json", "dot", "graphml"])
SEMANTICS = click.Choice(["personalized", "shared"])


class Negative(Exception):
    """A well-formed question whose answer is no (exit code 1)."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that writers remove their temporary files (exit 143)."""


# ---------------------------------------------------------------------------- bad-input plumbing
# The contract for bad input (docs/cli.md#bad-input): exit 2 and one line naming the file, option,
# client or coalition.  These option types and _emit are shared by every command.
#: Every seed option: numpy and torch generators both take any integer in this range.
SEED = click.IntRange(0, 2**32 - 1)


class _Finite(click.ParamType):
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


FINITE = _Finite()
NON_NEGATIVE = _Finite(0.0)


class _InputFile(click.ParamType):
    """A file argument; the readers check everything else (coalitions.files.open_input)."""

    name = "file"
    #: The files the command reads, named by the out-of-memory message (main).
    given: list = []

    def convert(self, value, param, ctx):
        if not str(value):
            self.fail("empty file name", param, ctx)
        self.given.append(str(value))
        return str(value)


class _OutputFile(click.ParamType):
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


class _OutputFolder(click.ParamType):
    """An output folder (created if missing); an existing non-folder is refused."""

    name = "directory"

    def convert(self, value, param, ctx):
        if not str(value):
            self.fail("empty folder name", param, ctx)
        if os.path.exists(value) and not os.path.isdir(value):
            self.fail(f"{value}: exists and is not a folder", param, ctx)
        return str(value)


INPUT = _InputFile()
OUTPUT = _OutputFile()
OUTPUT_FOLDER = _OutputFolder()


def _stdout_failed(e: OSError):
    """Standard output cannot be written (a full disk, a closed pipe): one line, exit 2."""
    try:  # what is still buffered must not fail again, with a traceback, when Python exits
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass
    return co.InputError(f"standard output: cannot write ({e.strerror or e.__class__.__name__})")


def _emit(text: str, output: str | None) -> None:
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
        raise _stdout_failed(e) from None
    except UnicodeEncodeError as e:
        raise co.InputError(f"standard output: cannot write {text[e.start]!r} in its encoding {e.encoding}") from None


def _progress(label: str):
    """A ``progress(done, total)`` callback for stderr: a bar on a terminal, one line per finished step elsewhere.

    (:class:`~coalitions.learners.experiments.progress.StepProgress`: plain Python, no learner dependency.)
    """
    from coalitions.learners.experiments.progress import StepProgress

    return StepProgress(label, sys.stderr)


@contextmanager
def _flags(flags: Mapping[str, str] | None = None) -> Iterator[None]:
    """Report a library's :class:`~coalitions.params.ParameterError` with the flag the user typed.

    ``flags`` maps a parameter to its flag; a parameter not in it is shown as
    ``--name-with-dashes``.
    """
    try:
        yield
    except ParameterError as e:
        flag = (flags or {}).get(e.param, "--" + e.param.replace("_", "-"))
        raise co.InputError(e.phrase(flag)) from None


# Options that several commands declare, each declared once here.
device_option = click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
                             show_default=True, help="Where to train: auto picks CUDA when available.")
threads_option = click.option("--threads", type=int, default=None, callback=option_checks.threads,
                              help="CPU threads for training [the thread policy: 1 for small models, else the "
                                   "free cores].")


def _tol(value: float) -> float:
    if not value >= 0 or value == float("inf"):
        raise co.InputError(f"--tol must be a finite number >= 0, got {value}")
    return value


class _Tolerance(click.ParamType):
    """``--tol``: a number, or ``auto`` (from the bootstrap replicates the game holds, docs/concepts.md §6)."""

    name = "float|auto"

    def convert(self, value, param, ctx):
        if value == "auto" or isinstance(value, float):
            return value
        try:
            return float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is neither a number nor 'auto'", param, ctx)


def _read_game_tol(game_file: str, tol, z=None):
    """The game, its replicates (or None), the tolerance and the level ``z``.

    ``--tol auto`` is resolved from the replicates.  ``--z`` defaults to 1.96 for a
    game that carries its uncertainty (``coalitions/game@2``) and 0 otherwise; a
    level given for a ``coalitions/game@1`` file with replicates makes them its
    uncertainty.
    """
    from coalitions.noise import Uncertainty, check_z, resolve_z
    from coalitions.support import AUTO_TOL_FACTOR, auto_tol

    game, reps = cio.read_game_replicates(game_file)
    if z is not None:
        z = check_z(z, "--z")
        if z > 0 and game.uncertainty is None and reps is not None:
            try:
                game = game.with_uncertainty(Uncertainty.from_replicates(reps))
            except co.InputError as e:
                raise co.InputError(f"{game_file}: --z {z:g}: {e}") from None
    level = resolve_z(game, z)
    if tol != "auto":
        return game, reps, _tol(tol), level
    if reps is None:
        raise co.InputError(f"{game_file}: --tol auto needs bootstrap replicates, and the game holds none "
                            "(coalitions oracle ... --replicates B records them)")
    try:
        value = auto_tol(reps)
    except co.InputError as e:
        raise co.InputError(f"{game_file}: {e}") from None
    click.echo(f"--tol auto: {value:.6g} ({AUTO_TOL_FACTOR:g} x the median bootstrap SD of the marginal contributions "
               f"over {reps.b} replicates)", err=True)
    return game, reps, value, level


common_game = [
    click.option("--semantics", type=SEMANTICS, default="personalized", show_default=True,
                 help="Payoff of a member: best model on the coalition's Pareto front (personalized) "
                      "or the coalition's own model (shared)."),
    click.option("--tol", type=_Tolerance(), default=1e-9, show_default=True,
                 help="Absolute tolerance: values within it are equal; 'auto' derives it from the game's "
                      "bootstrap replicates."),
    click.option("--z", "z", type=NON_NEGATIVE, default=None,
                 help="Significance level of every comparison: a client prefers S to T only when "
                      "v(S) - v(T) > tol + z x its paired standard error; 0 compares point values "
                      "[default: 1.96 when GAME carries its uncertainty (coalitions/game@2), else 0]."),
]


def with_common(f):
    for opt in reversed(common_game):
        f = opt(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(co.__version__, prog_name="coalitions")
def cli():
    """Who should learn with whom: collaboration equilibria with certificates.

    GAME files are coalitions/game@1 JSON or .npz (see docs/formats.md).
    """


@cli.command()
@click.argument("game_file", metavar="GAME", type=INPUT)
@with_common
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True)
@click.option("--exhaustive-up-to", type=click.IntRange(0), default=None,
              help="Check (sub-)coalitions exhaustively over at most this many clients, sample beyond "
                   "[default: always exhaustive].")
@click.option("--max-enumerate", type=click.IntRange(1), default=MAX_ENUMERATE, show_default=True,
              help="Largest game searched exhaustively when peeling finds no CE (shared semantics).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed for sampled certificates.")
@click.option("--retrained", "retrained", multiple=True, type=INPUT, metavar="GAME",
              help="The same game measured again with another training seed (repeatable): the equilibrium's "
                   "support over retraining.")
@click.option("-o", "--output", type=OUTPUT, help="Write here instead of stdout.")
def solve(game_file, semantics, tol, z, fmt, exhaustive_up_to, max_enumerate, seed, retrained, output):
    """Peel GAME into a collaboration equilibrium and certify it.

    When GAME carries its measurement uncertainty (coalitions oracle records it),
    every comparison is made at the level --z and the certificate states the
    confidence it holds at.  When GAME holds bootstrap replicates, each is solved
    the same way and the support of the equilibrium over them is reported; each
    --retrained game likewise gives its support over retraining.
    """
    from coalitions.support import support, support_over

    game, reps, tol, z = _read_game_tol(game_file, tol, z)
    others = []
    for path in retrained:
        other, _, _, _ = _read_game_tol(path, tol, None)
        if other.clients != game.clients or other.sense != game.sense:
            raise co.InputError(f"--retrained {path}: its clients or sense differ from {game_file}'s")
        others.append(other.with_uncertainty(game.uncertainty if z > 0 else None))
    options = {"exhaustive_up_to": exhaustive_up_to, "max_enumerate": max_enumerate, "seed": seed}
    try:
        eq = co.solve(game, semantics, tol, **options, progress=_progress("enumerating partitions"), z=z)
    except co.NoEquilibrium as e:
        raise Negative(f"{game_file}: {e}") from None
    sup = again = None
    try:
        if reps is not None:
            sup = support(eq.partition, reps, semantics, tol, **options, progress=_progress("solving replicates"),
                          z=z, uncertainty=game.uncertainty)
        if others:
            again = support_over(eq.partition, others, len(others), semantics, tol, **options, z=z,
                                 what="retrained game")
    except co.InputError as e:
        raise co.InputError(f"{game_file}: {e}") from None
    if fmt == "json":
        out = cio.equilibrium_to_json(eq)
        if sup is not None:
            out["support"] = cio.support_to_json(game, sup)
        if again is not None:
            out["support_retraining"] = cio.support_to_json(game, again)
        text = cio.write_json(out, None)
    elif fmt == "dot":
        text = render.equilibrium_dot(eq)
    elif fmt == "graphml":
        text = graphml(eq.to_networkx())
    else:
        text = render.equilibrium_text(eq)
        if sup is not None:
            text += "\n\n" + render.support_text(game, sup)
        if again is not None:
            text += "\n\n" + render.support_text(game, again, "retrained games (--retrained)")
    _emit(text, output)
    if eq.certificate is not None and not eq.certificate.holds:
        if eq.certificate.noisy:
            raise Negative(f"{game_file}: no partition is stable at z = {z:g}; the peeled one "
                           f"{eq.certificate.verdict} (see above)")
        raise Negative(f"{game_file}: the partition fails its certificate (see above)")


@cli.command()
@click.argument("game_file", metavar="GAME", type=INPUT)
@click.option("--partition", "partition_text", required=True, help='Blocks separated by "|", members by ",": "A,B|C".')
@with_common
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--exhaustive-up-to", type=click.IntRange(0), default=None,
              help="Exhaustive over at most this many clients, sampled beyond [default: always exhaustive].")
@click.option("--seed", type=SEED, default=0, show_default=True)
def verify(game_file, partition_text, semantics, tol, z, fmt, exhaustive_up_to, seed):
    """Check a partition against both CE axioms (and the classic stability notions).

    On a game that carries its uncertainty the two axioms are checked at the level
    --z (the classic notions on point values).  Exit 0 when it is a CE, 1 when it
    is not, 2 when the partition is unusable.
    """
    game, _, tol, z = _read_game_tol(game_file, tol, z)
    try:
        part = co.parse_partition(game, partition_text)
    except co.InputError as e:
        raise co.InputError(f"--partition {partition_text!r}: {e}") from None
    reports = co.all_checks(game, part, semantics, tol, exhaustive_up_to, seed)
    cert = co.certify(game, part, semantics, tol, exhaustive_up_to, seed, z=z)
    reports["inner_agreement"], reports["outer_agreement"] = cert.inner, cert.outer
    ok = reports["inner_agreement"].holds and reports["outer_agreement"].holds
    if fmt == "json":
        _emit(cio.write_json(cio.checks_to_json(game, part, reports), None), None)
    else:
        at = f" at z {z:g}" if cert.noisy else ""
        head = (f"Partition {co.format_partition(game, part)} is "
                f"{'a' if ok else 'NOT a'} collaboration equilibrium ({semantics} semantics{at})")
        lines = [head, ""] + [render.report_text(game, r) for r in reports.values()]
        if cert.noisy:
            lines += ["", render.certificate_text(game, cert)]
        _emit("\n".join(lines), None)
    if not ok:
        raise Negative(None)


@cli.command("enumerate")
@click.argument("game_file", metavar="GAME", type=INPUT)
@with_common
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--max-clients", type=click.IntRange(1), default=MAX_ENUMERATE, show_default=True,
              help="Refuse larger games (Bell(N) partitions are enumerated).")
def enumerate_cmd(game_file, semantics, tol, z, fmt, max_clients):
    """Every collaboration equilibrium of GAME, by brute force over all partitions (at the level --z).

    Exit 1 when there is none.
    """
    game, _, tol, z = _read_game_tol(game_file, tol, z)
    found = co.equilibria(game, semantics, tol, max_clients=max_clients,
                          progress=_progress("enumerating partitions"), z=z)
    if fmt == "json":
        _emit(cio.write_json(cio.equilibria_to_json(game, semantics, found), None), None)
    else:
        lines = [f"{len(found)} collaboration equilibri{'um' if len(found) == 1 else 'a'} "
                 f"({semantics} semantics, {co.brute_force.bell(game.n):,} partitions checked)"]
        lines += [f"  {co.format_partition(game, p)}" for p in found]
        _emit("\n".join(lines), None)
    if not found:
        raise Negative(None)


@cli.command("welfare")
@click.argument("game_file", metavar="GAME", type=INPUT)
@with_common
@click.option("--weights", default="uniform", show_default=True,
              help="Client weights: uniform, sizes (the sample counts the game records), or a=3,b=5.")
@click.option("--stability", type=click.Choice(["ce", "core", "individual_stability", "nash_stability"]),
              default="ce", show_default=True, help="The notion a stable partition satisfies.")
@click.option("--max-enumerate", type=click.IntRange(1), default=MAX_ENUMERATE, show_default=True,
              help="Largest game whose partitions are enumerated for the stable ones (the optimum has no limit).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-o", "--output", type=OUTPUT, help="Write here instead of stdout.")
def welfare_cmd(game_file, semantics, tol, z, weights, stability, max_enumerate, fmt, output):
    """The social optimum of GAME, every stable partition's welfare, and the prices of anarchy and stability.

    A loss game (sense min) reports the cost sum of w_i * err_i and prices as cost ratios (stable over
    optimum); a gain game, welfare ratios (optimum over stable).  Exit 1 when no partition is stable.
    """
    from coalitions.welfare import resolve_weights, welfare, welfare_text, welfare_to_json

    game, _, tol, z = _read_game_tol(game_file, tol, z)
    try:
        omega = resolve_weights(game, weights)
    except co.InputError as e:
        raise co.InputError(f"{game_file}: --weights {weights}: {e}") from None
    report = welfare(game, omega, semantics, stability, tol, max_enumerate,
                     progress=_progress("optimum over partitions"),
                     enumeration_progress=_progress("enumerating partitions"), z=z)
    _emit(cio.write_json(welfare_to_json(report), None) if fmt == "json" else welfare_text(report), output)
    if report.stable == ():
        raise Negative(f"{game_file}: {report.notes[0]}")


@cli.command()
@click.argument("game_file", metavar="GAME", type=INPUT)
@click.option("--within", default=None, help="Remaining set R as 'A,B,C' [default: all clients].")
@click.option("--tol", type=float, default=1e-9, show_default=True)
@click.option("--z", "z", type=NON_NEGATIVE, default=None,
              help="Significance level: a collaborator is necessary only when leaving it out costs more than "
                   "tol + z paired standard errors [default: 1.96 when GAME carries its uncertainty, else 0].")
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True)
def graph(game_file, within, tol, z, fmt):
    """The benefit graph BG(R): each client's optimal collaborator set, ambiguity shown."""
    game, _, _, z = _read_game_tol(game_file, 0.0, z)
    if within is None:
        r = game.grand
    else:
        try:
            r = game.coalition(within)
        except co.InputError as e:
            raise co.InputError(f"--within: {e}") from None
    bg = co.ExactOracle(game, "personalized", _tol(tol), z=z).benefit_graph(r)
    if fmt == "json":
        text = cio.write_json(cio.benefit_graph_to_json(bg), None)
    elif fmt == "dot":
        text = render.graph_dot(bg)
    elif fmt == "graphml":
        text = graphml(bg.to_networkx())
    else:
        text = render.graph_text(bg)
    _emit(text, None)


@cli.group()
def game():
    """Write analytic or generated games (JSON, or .npz by the file's ending)."""


def _numbers(text: str, what: str, cast=float) -> list:
    try:
        vals = [cast(x) for x in text.split(",")]
    except ValueError:
        raise co.InputError(f"{what} must be comma-separated numbers, got {text!r}") from None
    return vals


@game.command("mean-estimation")
@click.option("--sizes", required=True, help="Sample count of each client, e.g. 5,5,25.")
@click.option("--mu-e", type=FINITE, default=10.0, show_default=True, help="Mean noise variance.")
@click.option("--sigma2", type=FINITE, default=1.0, show_default=True, help="Spread of the true means.")
@click.option("--names", default=None, help="Client names, comma-separated [default: 0,1,...].")
@click.option("--federation", type=click.Choice(["uniform", "coarse", "fine"]), default="uniform",
              show_default=True, help="How a member uses the coalition's data: the pooled mean, the optimal "
                                      "mix of its own and the pooled mean, or optimal weights on every member.")
@click.option("-o", "--output", required=True, type=OUTPUT)
def mean_estimation(sizes, mu_e, sigma2, names, federation, output):
    """Mean estimation: each client's expected error, a loss (Donahue & Kleinberg; docs/concepts.md §4)."""
    n = _numbers(sizes, "--sizes")
    if names is not None:
        names = list(check_client_names(names.split(","), "--names", prefix="--names: "))
        if len(names) != len(n):
            raise co.InputError(f"--names gives {len(names)} names for {len(n)} sizes")
    _check_game_size(len(n), output, "--sizes")
    try:
        g = co.mean_estimation(n, mu_e, sigma2, names, federation)
    except MemoryError:
        raise co.InputError(f"--sizes: out of memory building a game of {len(n)} clients; {output} not written"
                            ) from None
    _write(g, output)


@game.command("planted")
@click.option("--groups", required=True, help="Hidden group sizes, e.g. 3,3,2.")
@click.option("--noise", type=NON_NEGATIVE, default=0.05, show_default=True, help="Noise standard deviation.")
@click.option("--ties", type=NON_NEGATIVE, default=0.0, show_default=True,
              help="Round values to multiples of this (0: off).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--dtype", type=click.Choice(["float64", "float32"]), default="float64", show_default=True,
              help="Storage of the values; float32 halves the memory (the values are then float32 numbers).")
@click.option("-o", "--output", required=True, type=OUTPUT)
def planted(groups, noise, ties, seed, dtype, output):
    """Hidden groups whose members help each other, with noise and optional ties."""
    sizes = _numbers(groups, "--groups", int)
    if any(g <= 0 for g in sizes):
        raise co.InputError(f"--groups: group sizes must be positive integers, got {groups!r}")
    _check_game_size(sum(sizes), output, "--groups", 4 if dtype == "float32" else 8)
    try:
        g = co.planted(sizes, noise, ties, seed, dtype=dtype)
    except MemoryError:
        raise co.InputError(f"--groups {groups}: out of memory building a game of {sum(sizes)} clients; "
                            f"{output} not written") from None
    _write(g, output)


def _check_game_size(n: int, output: str, option: str, itemsize: int = 8) -> None:
    """Refuse, before generating anything, a game the readers would refuse (coalitions.io limits) or memory cannot hold."""
    try:
        co.game.check_size(n, itemsize=itemsize)
    except co.InputError as e:
        raise co.InputError(f"{option}: {e}") from None
    cio.check_game_output(n, output)


def _write(g, output):
    co.write_game(g, output)
    click.echo(f"wrote {output}: {g.n} clients", err=True)


# ---------------------------------------------------------------------------- data
#: The datasets and the loader options offered as flags: the datasets registry's.
DATASETS = tuple(LOADERS)
DATASET_OPTIONS = tuple(o.name for o in LOADER_OPTIONS)


def _loader_option(o):
    if o.name == "seed":  # every seed option takes the same type (SEED)
        kind = SEED
    elif o.kind == "choice":
        kind = click.Choice(list(o.choices))
    else:
        kind = {"int": int, "float": float, "str": str}[o.kind]
    return click.option(f"--{o.flag}", o.name, type=kind, default=None, help=o.help)


def dataset_options(f):
    """Add the loader options shared by every command that reads a dataset (docs/learners-data.md)."""
    for o in reversed(LOADER_OPTIONS):
        f = _loader_option(o)(f)
    return f


class _Batch(click.ParamType):
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


class _Rates(click.ParamType):
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


#: The training flags: one set, turned into one TrainingProtocol (``learn``); SPO reads the fields it trains with.
_TRAINING_FLAGS = (
    ("model", click.Choice(["linear", "logistic", "mlp", "cnn"]),
     "The model [cnn for images, linear for regression, logistic otherwise]."),
    ("mlp-hidden", click.IntRange(1), "Hidden units of --model mlp [64]."),
    ("optimizer", click.Choice(["adam", "sgd"]), "The optimiser [the dataset's default protocol: adam]."),
    ("lr", _Finite(0.0, open_low=True), "Peak learning rate [the dataset's default protocol]."),
    ("lr-grid", _Rates(), "Train once per rate and keep the one with the lowest validation loss."),
    ("schedule", click.Choice(["cosine", "constant"]), "Learning rate over the run [cosine]."),
    ("momentum", _Finite(0.0), "SGD momentum [0]."),
    ("weight-decay", _Finite(0.0), "weight_decay/2 |w|^2 on the weights [the dataset's default protocol]."),
    ("steps", click.IntRange(1), "The budget: local gradient steps per client [the dataset's default protocol]."),
    ("local-steps", click.IntRange(1), "Local steps a site takes per communication round [1]."),
    ("batch-size", _Batch(), "Samples per step and client, or full [the dataset's default protocol]."),
    ("patience", click.IntRange(1), "Stop when the validation loss has not improved for this many evaluations "
                                    "and keep the best models [train the whole budget]."),
    ("tune-split", _Finite(0.0, open_low=True), "Hold this share of each client's training rows out to choose "
                                                "the rate and the stopping step, so that the validation rows only "
                                                "score [none: the validation rows tune and score]."),
)


def training_options(f):
    """The one set of training flags (docs/cli.md): each sets a field of the run's training protocol."""
    for flag, kind, text in reversed(_TRAINING_FLAGS):
        f = click.option(f"--{flag}", flag.replace("-", "_"), type=kind, default=None, help=text)(f)
    return f


def _training(opts: dict) -> dict:
    """The training flags given (click keys), ``--batch-size full`` as ``None`` (full batch)."""
    given = {k: opts.pop(k) for k in list(opts) if k in TRAINING_KEYS}
    return {k: (None if v == "full" else v) for k, v in given.items() if v is not None}


TRAINING_KEYS = tuple(flag.replace("-", "_") for flag, _, _ in _TRAINING_FLAGS)
#: A protocol field -> the flag that sets it (error messages name the flag the user typed).
TRAINING_FLAG_OF = {"hidden": "--mlp-hidden", **{k: "--" + k.replace("_", "-") for k in TRAINING_KEYS if k != "mlp_hidden"}}


class _Sectioned(click.Command):
    """A command whose ``--help`` groups its options: the training protocol, each method's own, the dataset, the run.

    ``learn`` takes some eighty flags (every registered method's options); one flat list hides
    which apply to the method at hand.  The sections follow the methods registry: an option
    appears under the methods that take it.
    """

    def format_options(self, ctx, formatter):
        records = {p.name: p.get_help_record(ctx) for p in self.get_params(ctx) if p.get_help_record(ctx)}
        sections: list[tuple[str, list[str]]] = []
        training = [k for k in TRAINING_KEYS if k in records]
        data = [k for k in DATASET_OPTIONS if k in records]
        placed = set(training) | set(data)
        if "method" in records:
            sections.append(("Method", ["method"]))
            placed.add("method")
        if training:
            sections.append(("Training protocol (one set of flags, docs/cli.md)", training))
        if self.name == "learn":
            shared = [o.key for o in METHODS["fedavg"].options if o.key in records and o.key not in placed]
            sections.append(("Every personalised learner", shared))
            placed |= set(shared)
            for method in METHODS.values():
                own = [o.key for o in method.options if o.key in records and o.key not in placed]
                if own:
                    users = [m for m, other in METHODS.items() if set(own) <= set(other.keys)]
                    sections.append((", ".join(users), own))
                    placed |= set(own)
        if data:
            sections.append(("Dataset", data))
        rest = [k for k in records if k not in placed and k not in data]
        sections.append(("Run", rest))
        for title, keys in sections:
            with formatter.section(title):
                formatter.write_dl([records[k] for k in keys])


def _threads(threads: int | None) -> None:
    """Apply the thread policy (docs/performance.md) with ``--threads`` as its override."""
    from coalitions.learners.training.threads import configure

    configure(threads)


def _backend_options(f):
    """``--backend local|ray`` and ``--address`` (docs/performance.md, "Ray"; Ray's ``RAY_ADDRESS`` is honoured)."""
    f = click.option("--address", default=None, metavar="ADDR",
                     help="Ray cluster to join (HOST:PORT, or auto) [RAY_ADDRESS if set, else a local Ray on this "
                          "machine].")(f)
    return click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                        help="ray: run the work as Ray tasks (pip install 'collaboration-equilibrium[ray]').")(f)


def _address(backend: str, address: str | None) -> str | None:
    if address is not None and backend != "ray":
        raise co.InputError("--address needs --backend ray")
    return address


def load_federation(dataset: str, opts: dict):
    """The federation ``dataset`` built from the dataset options present in ``opts`` (others ignored).

    Options left at ``None`` take the loader's defaults; an option the loader does
    not take is an InputError (exit 2).
    """
    from coalitions.learners.data.datasets import load

    given = {k: v for k, v in opts.items() if k in DATASET_OPTIONS and v is not None}
    with _flags():  # a loader's parameter is its flag with dashes
        return load(dataset, **given)


@cli.command(cls=_Sectioned)
@click.argument("dataset", type=click.Choice(DATASETS))
@dataset_options
@training_options
@click.option("--chunk-size", type=click.IntRange(1), default=None,
              help="Subset models trained together [as many as fit --memory-mb].")
@click.option("--memory-mb", type=_Finite(1.0), default=512.0, show_default=True)
@device_option
@threads_option
@click.option("--checkpoint", type=OUTPUT, default=None,
              help="Record finished chunks here; a rerun resumes from it.")
@click.option("--replicates", type=click.IntRange(0), default=200, show_default=True,
              help="Bootstrap replicates of the validation sets (seeded by --seed; no retraining): the measured "
                   "game's standard errors, so that it is solved at a significance level; 0 for an exact game.")
@click.option("--heads", type=click.Choice(["shared", "personal"]), default="shared", show_default=True,
              help="personal: each subset trains one body and an output layer per member (FedPer's split); "
                   "v_i(S) uses i's own head.")
@_backend_options
@click.option("-o", "--output", required=True, type=OUTPUT,
              help="Game file: coalitions/game@1 JSON, or .npz by the ending.")
def oracle(dataset, chunk_size, memory_mb, device, threads, checkpoint, replicates, heads, backend, address, output,
           **opts):
    """Train a model on every subset of DATASET's clients: the exact game (docs/concepts.md §5).

    v_i(S) is the metric on client i's validation data of the model trained on
    the training data of S.  Linear regression is solved in closed form; other
    models train all subset models at once, chunked, with --checkpoint to resume.
    Every subset model trains under one training protocol: the dataset's default
    protocol with the training flags given changed (the same flags as learn).
    """
    from coalitions.learners.exact import ExhaustiveOracle
    from coalitions.learners.training.protocol import FLAG_FIELDS, protocol_with

    option_checks.distinct_outputs(output=output, checkpoint=checkpoint)
    training = _training(opts)
    for key, why in (("local_steps", "has no communication rounds"),):
        if key in training:
            raise co.InputError(f"--{key.replace('_', '-')}: the exact game {why}")
    data_opts = opts
    _threads(threads)
    fed = load_federation(dataset, data_opts)
    cio.check_game_output(fed.n, output, replicates)  # before hours of training, not after
    with _flags(TRAINING_FLAG_OF):
        protocol = protocol_with(fed.task, fed.input_shape, {FLAG_FIELDS[k]: v for k, v in training.items()})
    est = ExhaustiveOracle(protocol=protocol, chunk_size=chunk_size, memory_mb=memory_mb, device=device,
                           seed=data_opts.get("seed") or 0, checkpoint=checkpoint, threads=threads,
                           progress=_progress(f"training {(1 << fed.n) - 1} subset models"), replicates=replicates,
                           backend=backend, address=_address(backend, address), heads=heads)
    with _flags(TRAINING_FLAG_OF):
        est.fit(fed)
    if fed.n >= 16 and not str(output).endswith(".npz"):
        click.echo(f"note: {fed.n} clients make a large JSON game; a name ending in .npz writes the "
                   "compact binary form", err=True)
    co.write_game(est.game_, output, est.replicates_)
    resumed = f", {est.chunks_resumed_} chunk(s) from checkpoint" if est.chunks_resumed_ else ""
    boot = f", {replicates} bootstrap replicates" if replicates else ""
    click.echo(f"wrote {output}: {fed.n} clients, {(1 << fed.n) - 1} subset models{boot}, "
               f"{est.config_['model']}{', personal heads' if heads == 'personal' else ''} "
               f"({est.method_}, {est.device_}{resumed}), {est.elapsed_:.2f} s", err=True)


# ---------------------------------------------------------------------------- federate
@cli.command()
@click.argument("dataset", type=click.Choice([*DATASETS, "csv"]))
@click.option("--simulation", is_flag=True,
              help="Rehearse in Flower's simulation engine, one virtual site per client [default].")
@click.option("--superlink", default=None, metavar="ADDR",
              help="Run on the SuperLink whose Control API listens at ADDR (e.g. 127.0.0.1:9093).")
@click.option("--method", type=click.Choice(["exact", "spo", "local", "fedavg", "fedprox", "ditto", "fedper",
                                            "lg-fedavg", "fedamp", "fedamp-heuristic", "federico", "superfed",
                                            "superfed-lm", "qffl", "afl", "per-fedavg", "pfedme", "pfedhn"]),
              default="exact",
              show_default=True,
              help="exact: the game (a model per coalition, trained among its members under the training protocol); spo: the Pareto "
                   "hypernetwork at the server, sites return losses and gradients; the others: that "
                   "personalised learner as a Flower strategy.  All but exact write estimate.json like `learn`.")
@click.option("--method-option", "method_option", multiple=True, metavar="KEY=VALUE",
              help="A personalised method's own parameter (constructor name, e.g. alpha_k=0.5; JSON values).")
@click.option("--root-certificates", "root_certificates", type=click.Path(dir_okay=False), default=None,
              help="--superlink over TLS: the PEM file of the CA that signed the SuperLink's certificate "
                   "[the system's trust store].")
@click.option("--insecure", is_flag=True,
              help="--superlink without TLS (prints a warning): only for a rehearsal on loopback.")
@click.option("--exclude-bad-sites", "exclude_bad_sites", is_flag=True,
              help="A site whose reply fails the server's checks is left out (the run starts again without it "
                   "and the outputs record it) instead of stopping the run.")
@click.option("--sites", type=click.IntRange(1, 12), default=None,
              help="SuperNodes to wait for (--superlink) [the dataset's client count].")
@click.option("--site-schema", "schemas", multiple=True, type=click.Path(dir_okay=False),
              help="Dataset csv in the simulation engine: a site's schema file (repeat per site).")
@dataset_options
@training_options
@threads_option
@click.option("--wait", type=NON_NEGATIVE, default=120.0, show_default=True,
              help="Seconds to wait for the sites to connect.")
@click.option("--checkpoint", type=OUTPUT, default=None,
              help="Server state after every round [OUT/checkpoint.npz]; the same command again resumes.")
@click.option("--semantics", type=SEMANTICS, default="personalized", show_default=True)
@click.option("--tol", type=float, default=1e-9, show_default=True)
@click.option("-o", "--output", required=True, type=OUTPUT_FOLDER,
              help="Folder: game.json, game-test.json, equilibrium.json, run.json.")
def federate(dataset, simulation, superlink, method, method_option, root_certificates, insecure, exclude_bad_sites,
             sites, schemas, threads, wait, checkpoint, semantics, tol, output, **opts):
    """Measure DATASET's exact game with Flower, the data staying at the sites (docs/federated.md).

    For every coalition S, S's model is trained among S's members only: each
    takes local steps on its data, the server applies the training protocol's
    optimiser to the members' average change (FedOpt); each member reports its
    validation metric.  The training flags are learn's and oracle's: the sites'
    task's default protocol with the flags given changed.  The server writes
    the game (coalitions/game@1), solves and certifies it.  Dataset csv: each
    site reads its own CSV file described by a schema file.  With a
    personalised --method (local, fedavg, fedamp, superfed, ...) the server
    runs that learner's strategy under the same protocol and writes
    OUT/estimate.json.
    """
    from coalitions.learners.federated.run import federate as run_federate
    from coalitions.learners.training.protocol import FLAG_FIELDS

    if simulation and superlink:
        raise co.InputError("--simulation and --superlink exclude each other")
    option_checks.distinct_outputs(output=output, checkpoint=checkpoint)
    training = {FLAG_FIELDS[k]: v for k, v in _training(opts).items()}
    data_opts = opts
    given = {k: v for k, v in data_opts.items() if v is not None}
    options = {}
    for item in method_option:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise co.InputError(f"--method-option {item!r}: write KEY=VALUE, e.g. alpha_k=0.5")
        try:
            options[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            options[key.strip()] = raw
    with _flags(TRAINING_FLAG_OF):
        rec = run_federate(dataset, given, training, output, seed=data_opts.get("seed") or 0, superlink=superlink,
                           sites=sites, schemas=schemas, checkpoint=checkpoint, semantics=semantics, tol=_tol(tol),
                           threads=threads or 1, wait_s=wait,
                           progress=_progress("rounds, all coalitions at once") if sys.stderr.isatty() else None,
                           method=method, method_options=options, insecure=insecure,
                           root_certificates=root_certificates, exclude_bad_sites=exclude_bad_sites)
    if method != "exact":
        eq = " | ".join(",".join(b) for b in rec["equilibrium"])
        unit = "hypernetwork steps" if method == "spo" else "rounds"
        click.echo(f"wrote {output}/estimate.json: {method} over Flower, {len(rec['sites'])} sites, {rec['rounds']} {unit} "
                   f"({rec['communication_rounds']} exchanges), "
                   f"{rec['bytes_sent'] + rec['bytes_received']:,} bytes, equilibrium {eq}", err=True)
        return
    eq = " | ".join(",".join(b) for b in rec["equilibrium"]) if rec.get("equilibrium") else "none"
    click.echo(f"wrote {output}/: {len(rec['sites'])} sites, {rec['rounds']} rounds "
               f"({rec['communication_rounds']} exchanges), {rec['bytes_sent'] + rec['bytes_received']:,} bytes, "
               f"equilibrium {eq}", err=True)
    if rec.get("equilibrium") is None:
        raise Negative(f"{output}: {rec.get('no_equilibrium', 'no collaboration equilibrium')}")
    if rec.get("certificate_holds") is False:
        raise Negative(f"{output}: the partition fails its certificate (see equilibrium.json)")


# ---------------------------------------------------------------------------- learn, compare
def _method_options(f):
    """One flag per option of every registered learner (the methods registry); default None = the method's.

    The training flags (:func:`training_options`) are declared once there, not per method.
    """
    types = {"int": int, "float": float, "str": str, "floats": _Rates()}
    for o in reversed(all_options()):
        if o.key in TRAINING_KEYS:
            continue
        shown = "" if o.default is None else f" [{o.default}]"
        if o.kind == "bool":
            f = click.option(f"--{o.flag}/--no-{o.flag}", o.key, default=None, help=o.help + shown)(f)
        elif o.kind == "choice":
            f = click.option(f"--{o.flag}", o.key, type=click.Choice(list(o.choices)), default=None,
                             help=o.help + shown)(f)
        else:
            f = click.option(f"--{o.flag}", o.key, type=types[o.kind], default=None, help=o.help + shown)(f)
    return f


@cli.command(cls=_Sectioned)
@click.argument("dataset", type=click.Choice(DATASETS))
@click.option("--method", required=True, type=click.Choice(list(METHODS)),
              help="The learner (see docs/learners-spo.md).")
@training_options
@_method_options
@dataset_options
@device_option
@threads_option
@click.option("-o", "--output", required=True, type=OUTPUT,
              help="Estimate file (coalitions/estimate@1 JSON).")
@click.option("--sensitivity", is_flag=True, default=False,
              help="Print the learned equilibrium across the weight rule's threshold (also in the estimate's "
                   "extra.sensitivity).")
def learn(dataset, method, device, threads, output, sensitivity, **opts):
    """Learn who benefits from whom on DATASET: a coalitions/estimate@1 file (docs/concepts.md §5, docs/formats.md).

    The estimate holds the weights, each client's validation and test metric,
    the learned benefit graph and the equilibrium that peeling reaches on the
    learner's benefit oracle.  Options apply to the methods that take them.
    The training flags make one training protocol: the dataset's default
    protocol (its task and model) with the flags given changed; a personalised
    learner trains under it (with --lr-grid once per rate, keeping the lowest
    mean validation loss).  SPO trains its hypernetwork under the protocol's
    --steps, --batch-size, --patience and --lr-grid; --lr, --model,
    --mlp-hidden and --weight-decay set its own hypernetwork rate, target
    model, target hidden units and ridge (docs/learners-spo.md).
    """
    import dataclasses

    from coalitions.estimate import write_estimate
    from coalitions.learners.methods.base import PersonalizedLearner
    from coalitions.learners.methods.registry import create
    from coalitions.learners.training.protocol import FLAG_FIELDS, protocol_with
    from coalitions.sensitivity import sensitivity_table, sensitivity_to_json

    option_checks.distinct_outputs(output=output, checkpoint=opts.get("checkpoint"))
    training = _training(opts)
    keys = {o.key for m in METHODS.values() for o in m.options}  # every method's flags; create() checks
    given = {k: v for k, v in opts.items() if k in keys and k not in DATASET_OPTIONS and v is not None}
    data_opts = {k: v for k, v in opts.items() if k in DATASET_OPTIONS}
    cls = METHODS[method].estimator_class()
    personal = issubclass(cls, PersonalizedLearner)
    own, fields = {}, {}
    if not personal:   # SPO: the training flags that are its own settings, and the protocol fields it reads
        reads = getattr(cls, "protocol_fields", ())
        for k, v in training.items():
            if k in METHODS[method].keys:
                own[k] = v
            elif FLAG_FIELDS[k] in reads:
                fields[FLAG_FIELDS[k]] = v
            else:
                takes = [f"--{k2.replace('_', '-')}" for k2 in TRAINING_KEYS
                         if k2 in METHODS[method].keys or FLAG_FIELDS[k2] in reads]
                raise co.InputError(f"--{k.replace('_', '-')} does not apply to --method {method} (of the training "
                                    f"flags it takes {', '.join(takes)})")
    est = create(method, {**given, **own}, device=device,
                 seed=data_opts.get("seed") or 0, progress=_progress(f"training {method}"))
    if sensitivity and not getattr(est, "has_weights", True):
        raise co.InputError(f"--sensitivity: --method {method} has no pairwise weights (its graph is structural)")
    fed = load_federation(dataset, data_opts)
    _threads(threads)
    flags = {**TRAINING_FLAG_OF, **{o.arg: f"--{o.flag}" for o in METHODS[method].options}}
    with _flags({**flags, "device": "--device", "seed": "--seed"}):
        tuning = None
        if personal:
            protocol = protocol_with(fed.task, fed.input_shape, {FLAG_FIELDS[k]: v for k, v in training.items()})
            if protocol.lr_grid:   # once per rate, the lowest mean validation loss kept (as reproduce does)
                from coalitions.learners.training.tuning import tune_lr

                def fit_at(lr):
                    one = create(method, given, device=device, seed=data_opts.get("seed") or 0,
                                 progress=_progress(f"training {method} at lr {lr:g}"))
                    return one.set_params(protocol=protocol.with_(lr=lr, lr_grid=None)).fit(fed)

                est, tuning = tune_lr(fit_at, protocol.lr_grid, lambda fitted: fitted.val_loss_history_[-1])
            else:
                est.set_params(protocol=protocol).fit(fed)
        else:   # SPO: the default protocol of the data with the flags it reads changed
            est.set_params(protocol=protocol_with(fed.task, fed.input_shape, fields)).fit(fed)
        e = est.estimate_
        if tuning is not None:
            e = dataclasses.replace(e, extra={**e.extra, "lr_tuning": tuning})
        sens = est.sensitivity() if sensitivity else None
    if sens is not None:
        e = dataclasses.replace(e, extra={**e.extra, "sensitivity": sensitivity_to_json(e.clients, sens[2], *sens[:2])})
    write_estimate(e, output)
    click.echo(f"wrote {output}: {method} on {dataset} ({fed.n} clients), equilibrium "
               f"{' | '.join(','.join(b) for b in e.blocks())}", err=True)
    for name, rec in e.extra.get("rules", {}).items():  # SPO: the paper's ratio rule beside elimination
        click.echo(f"  {name} rule{' (used)' if rec['used'] else ''}: {rec['label']}; equilibrium "
                   f"{' | '.join(','.join(b) for b in rec['partition'])}", err=True)
    if sens is not None:
        click.echo(sensitivity_table(e.clients, sens[2], sens[0], sens[1]))


@cli.command("compare")
@click.argument("estimate_file", metavar="ESTIMATE", type=INPUT)
@click.argument("game_file", metavar="GAME", type=INPUT)
@with_common
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def compare_cmd(estimate_file, game_file, semantics, tol, z, fmt):
    """Score a learned ESTIMATE against the exact GAME (same client names).

    Edge precision / recall / F1 of BG(all), the share of exact OCS, whether the
    equilibria coincide, their adjusted Rand index, and each client's regret
    (exact payoff in the exact CE minus exact payoff in the learned CE).
    """
    from coalitions.compare import compare, compare_text
    from coalitions.estimate import read_estimate

    est = read_estimate(estimate_file)
    game, _, tol, z = _read_game_tol(game_file, tol, z)
    try:
        res = compare(est, game, semantics, tol, z=z)
    except co.InputError as e:
        raise co.InputError(f"{estimate_file} vs {game_file}: {e}") from None
    except co.NoEquilibrium as e:
        raise Negative(f"{game_file}: {e}") from None
    if fmt == "json":
        _emit(cio.write_json({"format": "coalitions/comparison@1", "estimate": str(estimate_file),
                              "game": str(game_file), "method": est.method, **res}, None), None)
    else:
        _emit(f"{est.method} estimate {estimate_file} vs exact game {game_file}\n" + compare_text(res), None)


@cli.command("reproduce")
@click.argument("experiment", type=click.Choice(list(EXPERIMENTS)))
@click.option("--quick", is_flag=True, help="Short settings: one seed, fewer rounds and steps.")
@device_option
@click.option("--seeds", default=None, help="Comma-separated seeds, instead of the experiment's.")
@click.option("--methods", default=None,
              help="Comma-separated learners to run instead of the experiment's (e.g. local,fedavg,fedprox).")
@threads_option
@_backend_options
@click.option("-o", "--output", "out", required=True, type=OUTPUT_FOLDER,
              help="Folder for report.md, results.json and the figures (created if missing).")
def reproduce_cmd(experiment, quick, device, seeds, methods, threads, backend, address, out):
    """Rebuild one of the paper's experiments end to end into a folder.

    The exact game (exhaustive oracle) and its certified equilibrium, every
    learner's estimate scored against it, a per-client utility table over
    seeds, the paper's numbers beside ours, and figures (PNG with matplotlib,
    DOT always).  Finished pieces are kept in the output folder's runs/:
    rerunning the same command after an interruption resumes where it stopped.
    """
    from coalitions.learners.experiments.progress import PieceProgress
    from coalitions.learners.experiments.runner import reproduce

    seed_list = None if seeds is None else _numbers(seeds, "--seeds", int)
    if seed_list is not None and any(x not in range(SEED.min, SEED.max + 1) for x in seed_list):
        raise co.InputError(f"--seeds: every seed must be an integer in [{SEED.min}, {SEED.max}], got {seeds!r}")
    if seed_list is not None:
        option_checks.distinct_seeds(seed_list)
    method_list = None
    if methods is not None:
        from coalitions.learners.experiments.catalogue import get_experiment, select_methods

        try:
            method_list = select_methods(get_experiment(experiment), [m.strip() for m in methods.split(",") if m.strip()])
        except co.InputError as e:
            raise co.InputError(f"--methods: {e}") from None
    _threads(threads)
    show = PieceProgress(f"[{experiment}] ", sys.stderr)
    try:
        with _flags({"device": "--device"}):
            res = reproduce(experiment, out, quick=quick, device=device, seeds=seed_list, methods=method_list,
                            log=show.line, progress=show.progress, backend=backend,
                            address=_address(backend, address))
    except KeyboardInterrupt:
        show.clear()
        click.echo(f"coalitions: finished pieces are kept in {out}/runs/; run the same command again "
                   "to resume", err=True)
        raise
    for reg in res["regimes"]:
        ex = reg["runs"][0].get("exact")
        if ex is not None:
            _emit(f"{experiment} {reg['name']}: exact CE "
                  f"{' | '.join(','.join(b) for b in ex['partition'])} (seed {reg['runs'][0]['seed']}, "
                  f"certificate {'holds' if ex['certificate'] else 'FAILS'})", None)
    if res.get("plot_hint"):
        click.echo(res["plot_hint"], err=True)
    click.echo(f"wrote {out}/: " + ", ".join(res["files"]) + f" ({res['elapsed_s']:.0f} s)", err=True)


def _terminate(signum, frame):
    raise Terminated()


class _Echo(logging.Handler):
    """A library log record as the command's own line on stderr (a warning as ``coalitions: warning: ...``)."""

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        click.echo(f"coalitions: warning: {text}" if record.levelno == logging.WARNING else text, err=True)


@contextmanager
def _library_messages() -> Iterator[None]:
    """Print the library's messages (the ``coalitions`` loggers, INFO and up) on stderr while a command runs."""
    library, echo = logging.getLogger("coalitions"), _Echo()
    saved = library.level, library.propagate
    library.addHandler(echo)
    library.setLevel(logging.INFO)
    library.propagate = False
    try:
        yield
    finally:
        library.removeHandler(echo)
        library.setLevel(saved[0])
        library.propagate = saved[1]


def main(argv=None) -> int:
    """Entry point: run the command, map outcomes to exit codes 0 / 1 / 2 (130, 143 when interrupted).

    SIGTERM is turned into an exception for the run, so that a write in progress
    removes its temporary file (coalitions.files.write_file) as on Ctrl-C.
    """
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread
        previous = None
    try:
        with _library_messages():
            return _run(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(argv) -> int:
    INPUT.given.clear()
    try:
        option_checks.check_stdout()
        cli.main(args=argv, prog_name="coalitions", standalone_mode=False)
        try:
            sys.stdout.flush()
        except OSError as e:
            raise _stdout_failed(e) from None
        return 0
    except Negative as e:
        if e.args and e.args[0]:
            click.echo(f"coalitions: {e.args[0]}", err=True)
        return 1
    except co.InputError as e:
        where = f"{', '.join(INPUT.given)}: " if isinstance(e, NumberOverflow) and INPUT.given else ""
        click.echo(f"coalitions: error: {where}{' '.join(str(e).splitlines())}", err=True)  # one line, always
        return 2
    except getattr(click.exceptions, "NoArgsIsHelpError", ()) as e:  # click >= 8.2: no arguments given
        click.echo(e.ctx.get_help() if e.ctx else str(e))
        return 2
    except click.UsageError as e:
        msg = e.format_message().replace("\n", " ")
        cmd = e.ctx.command_path if e.ctx else "coalitions"
        click.echo(f"{cmd}: error: {msg}", err=True)
        return 2
    except click.ClickException as e:
        click.echo(f"coalitions: error: {e.format_message()}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("coalitions: interrupted", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("coalitions: interrupted", err=True)
        return 130
    except Terminated:
        click.echo("coalitions: terminated", err=True)
        return 143
    except MemoryError:
        where = ", ".join(INPUT.given) or "the command"
        click.echo(f"coalitions: error: {where}: out of memory (too large for this machine)", err=True)
        return 2
    except ModuleNotFoundError as e:
        hint = OPTIONAL_PACKAGES.get((e.name or "").split(".")[0])
        if hint is None:
            raise
        click.echo(f"coalitions: error: this command needs {e.name!r}, which is not installed: {hint}", err=True)
        return 2


# Optional packages a command may need, with the command that installs them (README, pyproject extras).
OPTIONAL_PACKAGES = {
    "torch": "pip install torch==2.13.0 && pip install 'collaboration-equilibrium[learn]' (the CPU build; see README)",
    "cvxpy": "pip install 'collaboration-equilibrium[learn]'",
    "scipy": "pip install 'collaboration-equilibrium[learn]'",
    "matplotlib": "pip install 'collaboration-equilibrium[plot]'",
    "flwr": "pip install 'collaboration-equilibrium[flower]'",
    "ray": "pip install 'collaboration-equilibrium[ray]'",
}


if __name__ == "__main__":
    sys.exit(main())
