"""Shell completion of the installed `coalitions` command (docs/completion.md): what the page says works."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "completion.md"


def _command() -> str:
    here = Path(sys.executable).with_name("coalitions")   # this environment's command, not another on PATH
    exe = str(here) if here.exists() else shutil.which("coalitions")
    if exe is None:
        pytest.skip("the coalitions command is not installed")
    return exe


def _env(**extra) -> dict:
    # the page's lines call `coalitions` by name: this environment's first on PATH
    path = str(Path(_command()).parent) + os.pathsep + os.environ.get("PATH", "")
    return {**os.environ, "PATH": path, **extra}


def test_the_page_gives_a_line_for_each_shell_and_is_in_the_toctree():
    text = PAGE.read_text()
    for shell in ("bash", "zsh", "fish"):
        assert f"_COALITIONS_COMPLETE={shell}_source coalitions" in text, shell
    assert re.search(r"^completion$", (ROOT / "docs" / "index.md").read_text(), re.M)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_command_prints_a_script_for_each_shell(shell):
    r = subprocess.run([_command()], env=_env(_COALITIONS_COMPLETE=f"{shell}_source"), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "_COALITIONS_COMPLETE" in r.stdout and "coalitions" in r.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("words", "expected"), [
    ("coalitions so", {"solve"}),
    ("coalitions reproduce ", {"synthetic", "heart", "adult", "digits", "fashion"}),
    ("coalitions solve game.json --format ", {"text", "json", "dot", "graphml"}),
    ("coalitions solve game.json --sem", {"--semantics"}),
])
def test_bash_completes_commands_options_and_choices(words, expected):
    """The page's bash line, evaluated in bash, then its completion function asked as bash asks it."""
    script = ('eval "$(_COALITIONS_COMPLETE=bash_source coalitions)"\n'
              'read -ra COMP_WORDS <<< "$WORDS"; [[ "$WORDS" == *" " ]] && COMP_WORDS+=("")\n'
              'COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))\n'
              '_coalitions_completion coalitions\n'
              'printf "%s\\n" "${COMPREPLY[@]}"\n'
              'complete -p coalitions\n')
    r = subprocess.run(["bash", "-c", script], env=_env(WORDS=words), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == "complete -o nosort -F _coalitions_completion coalitions"
    assert set(lines[:-1]) == expected


@pytest.mark.parametrize(("words", "cword", "kind"), [
    ("coalitions solve ga", 2, "file"),                  # GAME: a file
    ("coalitions compare est.json ga", 3, "file"),       # ESTIMATE and GAME
    ("coalitions solve game.json -o o", 4, "file"),      # an output file
    ("coalitions federate heart -o ga", 4, "dir"),       # an output folder
])
def test_file_and_folder_arguments_complete_as_paths(words, cword, kind):
    """Click answers the shell's question with a path item; bash's script then falls back to its own
    filename (or folder) completion (``compopt -o default`` / ``-o dirnames``)."""
    r = subprocess.run([_command()], env=_env(_COALITIONS_COMPLETE="bash_complete", COMP_WORDS=words,
                                              COMP_CWORD=str(cword)), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [f"{kind},{words.split()[-1]}"]
