"""The ``coalitions`` group and its entry point: run a command, map its outcome to an exit code.

Exit codes: 0 success; 1 a negative answer (an axiom is violated, no CE
exists); 2 unusable input or arguments, with one line naming the file, client
or coalition at fault and never a traceback; 130, 143 and 129 when interrupted (Ctrl-C, SIGTERM, SIGHUP).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

import coalitions as co
from coalitions import options as option_checks
from coalitions.cli.federate_command import federate
from coalitions.cli.game_commands import compare_cmd, enumerate_cmd, graph, solve, verify, welfare_cmd
from coalitions.cli.generate_commands import game
from coalitions.cli.learn_command import learn
from coalitions.cli.oracle_command import oracle
from coalitions.cli.output import Negative, stdout_failed
from coalitions.cli.params import INPUT
from coalitions.cli.reproduce_command import reproduce_cmd
from coalitions.cli.sample_command import sample_ce
from coalitions.numbers import NumberOverflow

__all__ = ["cli", "main", "Terminated", "OPTIONAL_PACKAGES"]


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised in the main thread so that writers remove their temporary files.

    The exit code is the shell's for the signal: 143 for SIGTERM, 129 for SIGHUP (a closed terminal).
    """

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = int(signum)


#: The signals turned into :class:`Terminated`: a closed terminal (SIGHUP) must not leave a ``.partial`` file either.
_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(co.__version__, prog_name="coalitions")
def cli():
    """Who should learn with whom: collaboration equilibria with certificates.

    GAME files are coalitions/game@1 JSON or .npz (see docs/formats.md).
    """


for _command in (solve, verify, enumerate_cmd, welfare_cmd, graph, game, oracle, federate, learn, compare_cmd,
                 reproduce_cmd, sample_ce):
    cli.add_command(_command)


def _terminate(signum, frame):
    raise Terminated(signum)


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
    """Entry point: run the command, map outcomes to exit codes 0 / 1 / 2 (130, 143, 129 when interrupted).

    SIGTERM and SIGHUP are turned into an exception for the run, so that a write
    in progress removes its temporary file (coalitions.files.write_file) as on
    Ctrl-C; a SIGHUP that the caller ignores (``nohup``) stays ignored.
    """
    previous = {}
    for sig in _SIGNALS:
        try:
            if signal.getsignal(sig) is signal.SIG_IGN and sig != signal.SIGTERM:
                continue  # nohup: the caller asked for the run to outlive its terminal
            previous[sig] = signal.signal(sig, _terminate)
        except ValueError:  # not the main thread
            break
    try:
        with _library_messages():
            return _run(argv)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(argv) -> int:
    INPUT.given.clear()
    try:
        option_checks.check_stdout()
        option_checks.check_environment()
        cli.main(args=argv, prog_name="coalitions", standalone_mode=False)
        try:
            sys.stdout.flush()
        except OSError as e:
            raise stdout_failed(e) from None
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
    except Terminated as e:
        hangup = e.signum == getattr(signal, "SIGHUP", None)
        click.echo(f"coalitions: {'hung up' if hangup else 'terminated'}", err=True)
        return 128 + e.signum
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
