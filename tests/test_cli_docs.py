"""docs/cli.md cannot drift from the commands: every option of every command (as ``--help`` lists it) is
documented in that command's section, every ``--format`` choice is named there, and the table of the
learners' own options is the one generated from the methods registry.

    python tests/test_cli_docs.py --write    # regenerate the method-options table in docs/cli.md
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click
import pytest

from coalitions.cli import cli

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
BEGIN, END = "<!-- method-options:begin -->", "<!-- method-options:end -->"
#: Where each command's options are documented: headings of docs/cli.md (their start), the command's own
#: first.  The training flags are documented once, in learn's table; the dataset options once, in their own.
SECTIONS = {
    "solve": ["`coalitions solve", "Learned estimates where a game goes"],
    "verify": ["`coalitions verify"],
    "enumerate": ["`coalitions enumerate"],
    "welfare": ["`coalitions welfare"],
    "graph": ["`coalitions graph"],
    "game mean-estimation": ["`coalitions game mean-estimation"],
    "game planted": ["`coalitions game mean-estimation"],
    "oracle": ["`coalitions oracle", "Dataset options", "`coalitions learn"],
    "federate": ["`coalitions federate", "Dataset options", "`coalitions learn"],
    "learn": ["`coalitions learn", "Dataset options"],
    "compare": ["`coalitions compare"],
    "reproduce": ["`coalitions reproduce"],
    "sample-ce": ["`coalitions sample-ce", "Dataset options", "`coalitions learn"],
}


def commands(group: click.Group = cli, path: tuple[str, ...] = ()):
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from commands(cmd, (*path, name))
        else:
            yield " ".join((*path, name)), cmd


def section(text: str, start: str) -> str:
    """The section of ``text`` whose heading begins with ``start`` (after the #s), up to the next heading
    of the same or a higher level."""
    lines = text.splitlines()
    for k, line in enumerate(lines):
        m = re.match(r"(#+) (.*)", line)
        if m and m.group(2).startswith(start):
            level = len(m.group(1))
            end = next((j for j in range(k + 1, len(lines))
                        if (h := re.match(r"(#+) ", lines[j])) and len(h.group(1)) <= level), len(lines))
            return "\n".join(lines[k:end])
    raise AssertionError(f"docs/cli.md has no section headed {start!r}")


def mentioned(flag: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def method_table() -> str:
    """The learners' own options as ``learn --help`` lists them, one row each, from the methods registry."""
    from coalitions.cli.data_options import TRAINING_KEYS
    from coalitions.learners.methods.registry import METHODS, all_options

    every = set(METHODS) - {m for m, meth in METHODS.items() if "weight_rule" not in meth.keys}
    rows = ["| option | methods | default | meaning |", "| --- | --- | --- | --- |"]
    for o in all_options():
        if o.key in TRAINING_KEYS:
            continue
        users = [m for m, meth in METHODS.items() if o.key in meth.keys]
        who = "every personalised learner" if set(users) == every else ", ".join(users)
        if o.kind == "bool":
            flag = f"`--{o.flag}/--no-{o.flag}`"
        elif o.kind == "choice":
            flag = f"`--{o.flag} {'|'.join(o.choices)}`"
        else:
            flag = f"`--{o.flag}`"
        default = "" if o.default is None else f"`{o.default}`"
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in (flag, who, default, o.help)) + " |")
    return "\n".join(rows)


def write() -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    DOC.write_text(f"{head}{BEGIN}\n{method_table()}\n{END}{tail}")


@pytest.mark.parametrize("name,cmd", list(commands()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_option_is_documented_in_its_commands_section(name, cmd):
    text = DOC.read_text()
    where = "\n".join(section(text, s) for s in SECTIONS[name])
    missing = [max(p.opts, key=len) for p in cmd.params if isinstance(p, click.Option)
               and not any(mentioned(f, where) for f in (*p.opts, *p.secondary_opts))]
    assert missing == [], f"docs/cli.md, section of `coalitions {name}`, does not list {missing}"


@pytest.mark.parametrize("name,cmd", [(n, c) for n, c in commands() if any("--format" in p.opts for p in c.params)],
                         ids=lambda x: x if isinstance(x, str) else "")
def test_every_format_a_command_prints_is_named_in_its_section(name, cmd):
    where = section(DOC.read_text(), SECTIONS[name][0])
    fmt = next(p for p in cmd.params if "--format" in p.opts)
    assert [c for c in fmt.type.choices if not mentioned(c, where)] == []


def test_every_command_has_a_section():
    assert {name for name, _ in commands()} == set(SECTIONS)


def test_the_method_options_table_is_generated_from_the_registry():
    text = DOC.read_text()
    assert text.split(BEGIN)[1].split(END)[0].strip() == method_table(), \
        "docs/cli.md: run python tests/test_cli_docs.py --write"


def test_the_docs_name_only_commands_that_exist():
    """`coalitions exact` (docs/testing.md) was never a command: every `coalitions WORD` in the docs is one."""
    names = set(cli.commands)
    pages = [*DOC.parent.glob("*.md"), DOC.parent.parent / "README.md"]
    unknown = {(p.name, m) for p in pages for m in re.findall(r"`coalitions ([a-z][a-z-]*)", p.read_text())
               if m not in names}
    assert unknown == set()


def test_the_section_finder_stops_at_the_next_heading():
    text = "# A\n## `coalitions x`\nfoo --bar\n### sub\n--baz\n## next\n--qux\n"
    got = section(text, "`coalitions x")
    assert mentioned("--bar", got) and mentioned("--baz", got) and not mentioned("--qux", got)
    assert not mentioned("--ba", got) and not mentioned("--bar", "--bar-none")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        print(method_table())
