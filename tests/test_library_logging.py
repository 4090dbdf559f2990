"""Library messages go through ``logging`` (the ``coalitions`` loggers); the command line prints them as before.

Used as a library, the package prints nothing of its own (a ``NullHandler`` on the top logger
``coalitions``): a user silences or routes the messages with ``logging``.  The command line
(``coalitions.cli.main``) prints every record of level INFO and up on stderr, exactly the
lines the library printed before it logged them (issue 32 item 6).
"""

from __future__ import annotations

import logging
import os
import socket
import sys

import pytest

from coalitions.cli import _library_messages, main
from coalitions.errors import InputError
from coalitions.learners.federated.run import _flwr_run, federate_superlink

RUN_LOGGER = "coalitions.learners.federated.run"
#: What ``flwr run --stream`` prints: Flower's chatter, the server's lines, an unexpected traceback.
STREAM = ["Using SuperLink: simulation (127.0.0.1:4)", "\x1b[92mINFO \x1b[0m:      Starting logstream",
          "sites: A (3 train), B (4 train)", "round 1/2: 0.10 s, 10 bytes sent, 12 received",
          "Traceback (most recent call last):", '  File "apps.py", line 1, in main', "ValueError: 100% broken"]
#: What the library printed on stderr for STREAM before it logged: the server's lines, then the traceback.
PRINTED = "".join(line + "\n" for line in STREAM[2:4]) + "\n".join(STREAM[4:]) + "\n"


def _fake_flwr(tmp_path) -> list[str]:
    script = tmp_path / "fake_flwr.py"
    script.write_text(f"for line in {STREAM!r}:\n    print(line)\n")
    return [sys.executable, str(script)]


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _warning(address: str) -> str:
    return (f"--insecure: the connection to the SuperLink at {address} is not encrypted or authenticated; "
            "use it only on loopback or a trusted network")


def test_the_top_logger_has_a_null_handler():
    top = logging.getLogger("coalitions")
    assert any(isinstance(h, logging.NullHandler) for h in top.handlers)


def test_used_as_a_library_the_run_prints_nothing_and_logs_its_lines(tmp_path, capsys, caplog):
    with caplog.at_level(logging.INFO, logger="coalitions"):
        code, error = _flwr_run(_fake_flwr(tmp_path), dict(os.environ), None)
    assert (code, error) == (0, "ValueError: 100% broken")
    assert capsys.readouterr().err == ""
    got = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert got == [(RUN_LOGGER, "INFO", STREAM[2]), (RUN_LOGGER, "INFO", STREAM[3]),
                   (RUN_LOGGER, "ERROR", "\n".join(STREAM[4:]))]


def test_a_library_user_silences_the_run_with_logging(tmp_path, capsys, caplog):
    logging.getLogger("coalitions").setLevel(logging.CRITICAL)
    try:
        _flwr_run(_fake_flwr(tmp_path), dict(os.environ), None)
    finally:
        logging.getLogger("coalitions").setLevel(logging.NOTSET)
    assert caplog.records == [] and capsys.readouterr().err == ""


def test_the_command_line_prints_the_run_as_the_library_printed_it(tmp_path, capsys):
    with _library_messages():
        _flwr_run(_fake_flwr(tmp_path), dict(os.environ), None)
    assert capsys.readouterr().err == PRINTED


def test_the_insecure_warning_is_logged_by_the_library(tmp_path, capsys, caplog):
    address = _closed_port()
    with caplog.at_level(logging.WARNING, logger="coalitions"), pytest.raises(InputError, match="cannot connect"):
        federate_superlink(address, 2, {}, tmp_path, insecure=True)
    assert capsys.readouterr().err == ""
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        (RUN_LOGGER, logging.WARNING, _warning(address))]


def test_the_command_line_prints_the_insecure_warning_as_before(tmp_path, capsys):
    address = _closed_port()
    top = logging.getLogger("coalitions")
    before = (list(top.handlers), top.level, top.propagate)
    code = main(["federate", "heart", "--superlink", address, "--insecure", "--sites", "2", "-o", str(tmp_path / "o")])
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"coalitions: warning: {_warning(address)}",
        f"coalitions: error: --superlink {address}: cannot connect (Connection refused)"]
    assert (list(top.handlers), top.level, top.propagate) == before      # the command leaves logging as it was
