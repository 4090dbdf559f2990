"""Hostile input and hostile environments (docs/cli.md, "Bad input").

Every case ends in exit code 2 and one line naming the file, option, client or
coalition at fault -- never a traceback, a hang, a silently different answer, a
replaced device node or a stale temporary file.  The file corpus lives in
``tests/data/malformed`` (games, run by test_io / test_cli) and
``tests/data/hostile`` (estimates and reproductions, run here); files that git
cannot hold (FIFOs, sockets, devices, symbolic links, full disks) are made here.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA, EXAMPLES, MALFORMED, ROOT, one_line, run
from corpus_table import CORE_ONLY, HOSTILE_GAMES, checkpoint_cases, many_members
from hypothesis import given, settings
from hypothesis import strategies as st

import coalitions as co
from coalitions import cli
from coalitions import io as cio
from coalitions.errors import InputError
from coalitions.files import open_input, read_bytes, write_file, write_text
from coalitions.game import check_client_names

HOSTILE = DATA / "hostile"
TIE = str(EXAMPLES / "tie.json")
ESTIMATE = str(HOSTILE / "estimate.json")

#: tests/data/hostile: file, the command that reads it, the fragment its one line must hold.
HOSTILE_FAULTS = {
    "estimate-duplicate-utility.json": "duplicate key 'b' in object ['utilities']['val']",
    "estimate-duplicate-method.json": "duplicate key 'method' in the top-level object",
    "estimate-nul-in-name.json": "field 'clients': client name 'a\\x00' may not contain control characters",
    "results-duplicate-key.json": "duplicate key 'seeds' in the top-level object",
    # issue 20: numbers a float cannot hold, sizes beyond the limits, arithmetic that overflows
    "estimate-huge-utility.json": "field 'utilities.val' of client 'b' is 1000...000 (401 digits), too large for a float",
    "estimate-huge-weight.json": "field 'weights': an entry in the row of client 'a' is 1000...000 (401 digits), too large",
    "estimate-too-many-clients.json": "field 'clients' lists 4,097 clients; an estimate holds at most 4,096",
    "game-near-max.json": "the gain of client 'a' (payoff minus payoff alone) overflows a float",
    "game-huge-sizes.json": "--weights sizes: weight of client 'a' is 1000...000 (401 digits), too large for a float",
    "game-sizes-overflow.json": "the weighted welfare of coalition 'a' overflows a float",
    "game-unpacks-to-7gb.npz": "unpacking its 25-client game needs about 31.2 GiB of memory; only 1 GiB are available "
                               "(cgroup memory.max)",
}

#: Commands that read a game, with the arguments they need besides it.
GAME_COMMANDS = {"solve": [], "verify": ["--partition", "a|b"], "enumerate": [], "graph": [], "welfare": []}


def command() -> list[str]:
    here = Path(sys.executable).with_name("coalitions")
    return [str(here)] if here.exists() else [sys.executable, "-m", "coalitions.cli"]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ---------------------------------------------------------------------------- the estimate / reproduction corpus
def test_hostile_corpus_is_fully_covered():
    assert sorted(p.name for p in HOSTILE.iterdir()) == sorted([*HOSTILE_FAULTS, "estimate.json"])


def test_the_clean_estimate_reads(capsys):
    from coalitions.estimate import read_estimate

    assert read_estimate(ESTIMATE).clients == ("a", "b", "c", "d")


@pytest.mark.parametrize("name", sorted(n for n in HOSTILE_FAULTS if n.startswith("estimate")))
def test_hostile_estimate(capsys, name):
    from coalitions.estimate import read_estimate

    path = HOSTILE / name
    with pytest.raises(InputError) as e:
        read_estimate(path)
    assert str(e.value).startswith(f"{path}: ") and HOSTILE_FAULTS[name] in str(e.value)
    rc, out, err = run(capsys, "compare", path, TIE)
    assert rc == 2 and out == "" and str(path) in one_line(err) and HOSTILE_FAULTS[name] in err


def test_hostile_reproduction():
    from coalitions.learners.experiments.runner import read_results

    path = HOSTILE / "results-duplicate-key.json"
    with pytest.raises(InputError, match=r"results-duplicate-key.json: duplicate key 'seeds' in the top-level"):
        read_results(path)


# ---------------------------------------------------------------------------- duplicate keys, lone surrogates
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_parse_json_agrees_with_json_without_duplicates(doc):
    text = json.dumps(doc)
    assert cio.parse_json(text) == json.loads(text)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=3), st.integers(), min_size=1, max_size=4), st.data())
def test_a_repeated_key_is_named_wherever_it_is(obj, data):
    key = data.draw(st.sampled_from(sorted(obj)))
    inner = json.dumps(obj)[:-1] + f", {json.dumps(key)}: 0}}"  # the key again, last (json would keep it)
    depth = data.draw(st.integers(0, 2))
    text, where = inner, "the top-level object"
    if depth == 1:
        text, where = f'{{"x": [1, {inner}]}}', "object ['x'][1]"
    elif depth == 2:
        text, where = f'{{"x": {{"y": {inner}}}}}', "object ['x']['y']"
    with pytest.raises(InputError) as e:
        cio.parse_json(text)
    assert str(e.value) == f"duplicate key {key!r} in {where}"


@pytest.mark.parametrize("text, fault", [
    ('{"a": "\\ud800"}', "string '\\ud800' at ['a'] is not valid Unicode"),
    ('{"\\udfff": 1}', "key '\\udfff' in the top-level object is not valid Unicode"),
    ('{"a": ["x", "\\udc00y"]}', "string '\\udc00y' at ['a'][1] is not valid Unicode"),
])
def test_lone_surrogates_are_refused(text, fault):
    with pytest.raises(InputError) as e:
        cio.parse_json(text)
    assert fault in str(e.value)


def test_surrogate_pairs_and_escaped_backslashes_are_fine():
    assert cio.parse_json('{"a": "\\ud83d\\ude00", "b": "\\\\ud800"}') == {"a": "\U0001F600", "b": "\\ud800"}


# ---------------------------------------------------------------------------- client names
@pytest.mark.parametrize("name, fault", [
    ("a\nb", "control characters"), ("a\x00", "control characters"), ("a\tb", "control characters"),
    ("\x1b[2J", "control characters"), ("\x7f", "control characters"), ("a\u2028b", "line or paragraph"),
    ("a\u2029", "line or paragraph"), ("\ud800", "not valid Unicode"), (os.fsdecode(b"a\xff"), "not valid Unicode"),
    ("a,b", "','"), ("a|b", "'|'"), (" a", "surrounding spaces"), ("", "non-empty"),
])
def test_bad_client_names(name, fault):
    with pytest.raises(InputError) as e:
        check_client_names(["ok", name])
    assert fault in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(InputError):  # every constructor goes through the same check
        co.Game.from_array([[np.nan, 1.0, np.nan, 2.0], [np.nan, np.nan, 1.0, 0.5]], ["ok", name])


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=8))
def test_client_names_accepted_exactly_when_printable_on_one_line(name):
    import unicodedata

    from coalitions.game import _invisible

    good = (name == name.strip() and "," not in name and "|" not in name
            and not any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in name)
            and not any(_invisible(c, unicodedata.category(c)) for c in name))
    if good:
        assert check_client_names([name]) == (name,)
        name.encode("utf-8")  # printable and writable
    else:
        with pytest.raises(InputError):
            check_client_names([name])


@pytest.mark.parametrize("names, fault", [
    ("a\nz,b", "--names: client name 'a\\nz'"),
    ("a,b\x1b", "--names: client name 'b\\x1b'"),
    (os.fsdecode(b"a\xff") + ",b", "--names: client name 'a\\udcff' is not valid Unicode"),
    ("a|z,b", "--names: client name 'a|z'"),
])
def test_names_option(capsys, tmp_path, names, fault):
    rc, out, err = run(capsys, "game", "mean-estimation", "--sizes", "1,2", "--names", names, "-o", tmp_path / "g.json")
    assert rc == 2 and fault in one_line(err) and leftovers(tmp_path) == []


def test_invalid_utf8_name_on_the_real_command_line(tmp_path):
    proc = subprocess.run(command() + ["game", "mean-estimation", "--sizes", "1,2", "--names", b"a\xff,b",
                                       "-o", str(tmp_path / "g.json")], capture_output=True, timeout=60)
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr and b"--names" in proc.stderr
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------------------- N6: values outside the client's coalitions
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.data())
def test_npz_value_outside_a_coalition_is_named(n, data):
    import tempfile

    g = co.planted([n], seed=data.draw(st.integers(0, 99)))
    raw = g.raw_values()
    i = data.draw(st.integers(0, n - 1))
    outside = [m for m in range(1 << n) if not (m >> i) & 1]
    m = data.draw(st.sampled_from(outside))
    raw[i, m] = data.draw(st.sampled_from([0.0, -1.5, np.inf]))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "g.npz"
        np.savez(path, values=raw, clients=np.array(g.clients), sense=np.array("max"))
        with pytest.raises(InputError) as e:
            co.read_game(path)
    # The first offending entry in (client, mask) order is the one planted.
    where = f"coalition {g.key(m)!r}" if m else "the empty coalition (mask 0)"
    assert f"value of client {g.clients[i]!r} for {where}, which does not contain it, must be NaN" in str(e.value)


# ---------------------------------------------------------------------------- inputs: only regular files, sizes first
def special_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    sock = tmp_path / "sock.json"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    s.close()
    folder = tmp_path / "folder.npz"
    folder.mkdir()
    out = {"a named pipe (FIFO)": fifo, "a socket": sock, "a directory": folder}
    if os.path.exists("/dev/zero") and stat.S_ISCHR(os.stat("/dev/zero").st_mode):
        out["a character device"] = Path("/dev/zero")
    return out


#: Runs every command line of ``sys.argv[1]`` (a JSON list of argument lists) through the CLI's ``main``
#: in this one process; prints ``[[exit status, stderr], ...]`` as JSON.
_RUN_ALL = """
import contextlib, io, json, sys
from coalitions.cli import main
got = []
for args in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        got.append([main(args), err.getvalue()])
print(json.dumps(got))
"""


def test_readers_refuse_special_files_without_blocking(tmp_path):
    """In a subprocess with a timeout: a FIFO opened for reading would block forever.

    The command itself, once (``solve`` of the FIFO); then every command on every kind of file through
    the CLI's ``main`` in one more subprocess (one interpreter, not 24: the same exit status and line).
    """
    files = special_files(tmp_path)
    proc = subprocess.run(command() + ["solve", str(files["a named pipe (FIFO)"])], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "is a named pipe (FIFO), not a regular file" in one_line(proc.stderr)
    cases = [(kind, path, [cmd, str(path), *extra]) for kind, path in files.items()
             for cmd, extra in [*GAME_COMMANDS.items(), ("compare", [TIE])]]
    proc = subprocess.run([sys.executable, "-c", _RUN_ALL, json.dumps([args for _, _, args in cases])],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert len(got) == len(cases) == len(files) * (len(GAME_COMMANDS) + 1)
    for (kind, path, args), (rc, err) in zip(cases, got, strict=True):
        line = one_line(err)
        assert rc == 2 and str(path) in line and f"is {kind}, not a regular file" in line, args


def test_special_files_in_process(tmp_path, capsys):
    for kind, path in special_files(tmp_path).items():
        with pytest.raises(InputError, match=re.escape(f"is {kind}")):
            with open_input(path):
                pass
        rc, _, err = run(capsys, "solve", path)
        assert rc == 2 and kind in one_line(err)


def test_a_symlink_to_a_game_is_read_and_one_to_a_fifo_is_not(tmp_path, capsys):
    os.symlink(TIE, tmp_path / "link.json")
    rc, out, _ = run(capsys, "solve", tmp_path / "link.json")
    assert rc == 0 and "c0,c2 | c1" in out
    os.mkfifo(tmp_path / "p")
    os.symlink(tmp_path / "p", tmp_path / "to-pipe.json")
    rc, _, err = run(capsys, "solve", tmp_path / "to-pipe.json")
    assert rc == 2 and "to-pipe.json: is a named pipe (FIFO)" in one_line(err)


def test_size_is_checked_before_reading(tmp_path, capsys, monkeypatch):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: no disk space, no reading
        f.truncate(cio.MAX_JSON_BYTES + 1)
    rc, _, err = run(capsys, "solve", big)
    assert rc == 2 and f"big.json: is {cio.MAX_JSON_BYTES + 1:,} bytes, larger than the 1 GiB limit of a JSON file" in one_line(err)
    rc, _, err = run(capsys, "compare", big, TIE)
    assert rc == 2 and "larger than the 1 GiB limit" in one_line(err)
    co.write_game(co.planted([2, 2]), tmp_path / "g.npz")
    monkeypatch.setattr(cio, "MAX_NPZ_BYTES", 100)
    rc, _, err = run(capsys, "solve", tmp_path / "g.npz")
    assert rc == 2 and "larger than the 100 bytes limit of an .npz game" in one_line(err)
    with pytest.raises(InputError, match="limit"):
        read_bytes(tmp_path / "g.npz", 10)


def test_empty_input_name(capsys):
    rc, _, err = run(capsys, "solve", "")
    assert rc == 2 and "Invalid value for 'GAME': empty file name" in one_line(err)
    rc, _, err = run(capsys, "compare", ESTIMATE, "")
    assert rc == 2 and "empty file name" in one_line(err)


def test_out_of_memory_names_the_file(capsys, monkeypatch):
    def oom(*a, **k):
        raise MemoryError

    monkeypatch.setattr(co, "solve", oom)
    rc, _, err = run(capsys, "solve", TIE)
    assert rc == 2 and f"{TIE}: out of memory" in one_line(err)
    monkeypatch.setattr(cio, "game_from_json", oom)
    rc, _, err = run(capsys, "graph", TIE)
    assert rc == 2 and f"{TIE}: out of memory building the game" in one_line(err)


# ---------------------------------------------------------------------------- generators refuse sizes up front
@pytest.mark.parametrize("args, fault", [
    (["planted", "--groups", "30"], "--groups: 30 clients: exhaustive games hold at most 26"),
    (["planted", "--groups", "20,20,20"], "--groups: 60 clients"),
    (["planted", "--groups", "99999999999"], "--groups: 99999999999 clients"),
    (["mean-estimation", "--sizes", ",".join(["1"] * 27)], "--sizes: 27 clients"),
    (["planted", "--groups", "11,11"], "22 clients make a JSON game too large to read back (at most 20)"),
])
def test_generators_refuse_sizes_before_generating(capsys, tmp_path, monkeypatch, args, fault):
    def never(*a, **k):
        raise AssertionError("the generator ran")

    monkeypatch.setattr(cli.co, "planted", never)
    monkeypatch.setattr(cli.co, "mean_estimation", never)
    rc, _, err = run(capsys, "game", *args, "-o", tmp_path / "g.json")
    assert rc == 2 and fault in one_line(err) and leftovers(tmp_path) == []


def test_library_generators_refuse_too(tmp_path):
    with pytest.raises(InputError, match="30 clients: exhaustive games hold at most 26"):
        co.planted([30])
    with pytest.raises(InputError, match="27 clients"):
        co.mean_estimation([1] * 27)
    with pytest.raises(InputError, match="1000000000 clients"):
        co.Game.from_callable(10**9, lambda i, s: 0.0)
    with pytest.raises(InputError, match="JSON game too large"):
        co.write_game(co.planted([21], noise=0), tmp_path / "g.json")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("args, option", [
    (["planted", "--groups", "2", "--noise", "nan"], "--noise"),
    (["planted", "--groups", "2", "--noise", "inf"], "--noise"),
    (["planted", "--groups", "2", "--ties", "nan"], "--ties"),
    (["planted", "--groups", "2", "--ties", "-0.5"], "--ties"),
    (["mean-estimation", "--sizes", "1,2", "--mu-e", "nan"], "--mu-e"),
    (["mean-estimation", "--sizes", "1,2", "--sigma2", "-inf"], "--sigma2"),
])
def test_float_options_name_themselves(capsys, tmp_path, args, option):
    rc, _, err = run(capsys, "game", *args, "-o", tmp_path / "g.json")
    assert rc == 2 and f"Invalid value for '{option}'" in one_line(err) and leftovers(tmp_path) == []


# ---------------------------------------------------------------------------- seeds
SEED_COMMANDS = {
    "solve": ["solve", TIE, "--exhaustive-up-to", "1"],
    "verify": ["verify", TIE, "--partition", "c0,c2|c1", "--exhaustive-up-to", "1"],
    "planted": ["game", "planted", "--groups", "2,2", "-o", "{out}/g.json"],
    "oracle": ["oracle", "synthetic", "--clients", "3", "--threads", "1", "-o", "{out}/o.json"],
}


@pytest.mark.parametrize("name", sorted(SEED_COMMANDS))
def test_seed_range_is_the_same_everywhere(capsys, tmp_path, name):
    args = [a.replace("{out}", str(tmp_path)) for a in SEED_COMMANDS[name]]
    for bad in ("-1", str(2**32), "1.5"):
        rc, out, err = run(capsys, *args, "--seed", bad)
        assert rc == 2 and "Invalid value for '--seed'" in one_line(err)
    rc, _, err = run(capsys, *args, "--seed", str(2**32 - 1))
    assert rc == 0, err


def test_seed_options_share_one_type():
    seeds = []

    def walk(cmd):
        for p in cmd.params:
            if p.name == "seed":
                seeds.append((cmd.name, p.type))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(cli.cli)
    assert {n for n, _ in seeds} >= {"solve", "verify", "planted", "oracle", "learn"}
    assert all(t is cli.SEED for _, t in seeds)


@pytest.mark.parametrize("seeds", ["-1", "0,4294967296"])
def test_reproduce_seeds_in_the_same_range(capsys, tmp_path, seeds):
    rc, _, err = run(capsys, "reproduce", "synthetic", "--seeds", seeds, "-o", tmp_path / "r")
    assert rc == 2 and "--seeds: every seed must be an integer in [0, 4294967295]" in one_line(err)
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------------------- outputs
OUTPUT_COMMANDS = {
    "solve": ["solve", TIE, "-o"],
    "welfare": ["welfare", TIE, "-o"],
    "planted": ["game", "planted", "--groups", "2", "-o"],
    "mean-estimation": ["game", "mean-estimation", "--sizes", "1,2", "-o"],
    "oracle": ["oracle", "synthetic", "--clients", "3", "--threads", "1", "-o"],
    "oracle --checkpoint": ["oracle", "synthetic", "--clients", "3", "--model", "logistic", "-o", "{out}/g.json",
                            "--checkpoint"],
    "learn": ["learn", "synthetic", "--method", "local", "-o"],
}


@pytest.mark.parametrize("name", sorted(OUTPUT_COMMANDS))
def test_output_refuses_empty_names_and_special_files_before_any_work(capsys, tmp_path, monkeypatch, name):
    def never(*a, **k):
        raise AssertionError("work started")

    monkeypatch.setattr(cli.data_options, "load_federation", never)
    monkeypatch.setattr(cli.co, "solve", never)
    args = [a.replace("{out}", str(tmp_path)) for a in OUTPUT_COMMANDS[name]]
    rc, out, err = run(capsys, *args, "")
    assert rc == 2 and "empty file name" in one_line(err)
    targets = {k: p for k, p in special_files(tmp_path).items() if not str(p).startswith("/dev/")}
    for kind, path in targets.items():
        rc, out, err = run(capsys, *args, path)
        line = one_line(err)
        assert rc == 2 and str(path) in line and f"is {kind}; only a regular file is ever replaced" in line
        assert not path.is_file() and not path.is_symlink()
    rc, _, err = run(capsys, *args, tmp_path / "no-such-folder" / "x.json")
    assert rc == 2 and "no such folder" in one_line(err)


def test_reproduce_output_folder(capsys, tmp_path):
    rc, _, err = run(capsys, "reproduce", "synthetic", "-o", "")
    assert rc == 2 and "empty folder name" in one_line(err)
    (tmp_path / "file").write_text("x")
    rc, _, err = run(capsys, "reproduce", "synthetic", "-o", tmp_path / "file")
    assert rc == 2 and "exists and is not a folder" in one_line(err)


def test_writer_refuses_special_files_at_write_time_too(tmp_path):
    """check_output_path is an early courtesy; write_file itself never replaces a non-regular file."""
    for kind, path in special_files(tmp_path).items():
        if str(path).startswith("/dev/"):
            continue
        before = os.lstat(path).st_mode
        with pytest.raises(InputError, match=re.escape(f"is {kind}")):
            write_text(path, "x")
        assert os.lstat(path).st_mode == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.npz", "pipe.json", "sock.json"]


@pytest.mark.parametrize("args", [["game", "planted", "--groups", "2", "-o"], ["solve", TIE, "-o"],
                                  ["welfare", TIE, "-o"]])
def test_symlinks_are_written_through_by_every_command(capsys, tmp_path, args):
    (tmp_path / "target.json").write_text("old")
    os.symlink("target.json", tmp_path / "link.json")
    rc, _, err = run(capsys, *args, tmp_path / "link.json")
    assert rc == 0, err
    assert (tmp_path / "link.json").is_symlink() and os.readlink(tmp_path / "link.json") == "target.json"
    assert (tmp_path / "target.json").read_text() != "old"
    os.symlink("new.json", tmp_path / "dangling.json")  # a dangling link creates its target
    rc, _, _ = run(capsys, *args, tmp_path / "dangling.json")
    assert rc == 0 and (tmp_path / "new.json").is_file() and (tmp_path / "dangling.json").is_symlink()
    assert leftovers(tmp_path) == ["dangling.json", "link.json", "new.json", "target.json"]


def test_a_symlink_to_a_fifo_is_refused(tmp_path, capsys):
    os.mkfifo(tmp_path / "p")
    os.symlink(tmp_path / "p", tmp_path / "link.json")
    rc, _, err = run(capsys, "game", "planted", "--groups", "2", "-o", tmp_path / "link.json")
    assert rc == 2 and f"is a named pipe (FIFO) (the link points to {tmp_path / 'p'})" in one_line(err)


def test_writer_keeps_the_mode_of_a_replaced_file_and_the_umask_otherwise(tmp_path):
    p = tmp_path / "a.json"
    write_text(p, "1")
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~_umask()
    p.chmod(0o640)
    write_text(p, "2")
    assert stat.S_IMODE(p.stat().st_mode) == 0o640 and p.read_text() == "2"


def _umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt(), MemoryError()])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, error):
    p = tmp_path / "g.json"
    p.write_text("old")

    def fail(f):
        f.write(b"half")
        raise error

    with pytest.raises((InputError, KeyboardInterrupt)):
        write_file(p, fail)
    assert p.read_text() == "old" and leftovers(tmp_path) == ["g.json"]


# A child process whose files may not exceed a few hundred bytes: writes fail with EFBIG, as on a full disk.
LIMITED = textwrap.dedent("""
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
    from coalitions import cli
    sys.exit(cli.main(sys.argv[1:]))
""")


@pytest.mark.parametrize("args, name", [
    (["solve", TIE, "-o"], "eq.txt"),
    (["solve", TIE, "--format", "json", "-o"], "eq.json"),
    (["game", "planted", "--groups", "3,3", "-o"], "g.json"),
    (["game", "planted", "--groups", "3,3", "-o"], "g.npz"),
])
def test_a_full_disk_leaves_no_partial_file(tmp_path, args, name):
    code = LIMITED.format(limit=300)
    target = tmp_path / name
    proc = subprocess.run([sys.executable, "-c", code, *args, str(target)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    line = one_line(proc.stderr)
    assert proc.returncode == 2 and f"{target}: cannot write (File too large)" in line
    assert leftovers(tmp_path) == []
    target.write_text("old")  # an existing file stays as it was
    proc = subprocess.run([sys.executable, "-c", code, *args, str(target)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and target.read_text() == "old" and leftovers(tmp_path) == [name]


def test_standard_output_errors_are_one_line(tmp_path):
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            proc = subprocess.run(command() + ["solve", TIE, "--format", "json"], stdout=full,
                                  stderr=subprocess.PIPE, text=True, timeout=60)
        assert proc.returncode == 2
        assert one_line(proc.stderr) == "coalitions: error: standard output: cannot write (No space left on device)"
    with open(tmp_path / "out", "w") as f:
        proc = subprocess.run([sys.executable, "-c", LIMITED.format(limit=100), "solve", TIE], stdout=f,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2 and "standard output: cannot write (File too large)" in one_line(proc.stderr)


@pytest.mark.parametrize("sig, code, word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_a_signal_inside_a_write_leaves_nothing_behind(tmp_path, sig, code, word):
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        import numpy as np
        from coalitions import cli

        # as in a foreground terminal, whatever this test's runner inherited (a background job ignores SIGINT)
        signal.signal(signal.SIGINT, signal.default_int_handler)

        def slow(f, **arrays):  # the signal arrives half way through writing the archive
            f.write(b"PK half an archive")
            os.kill(os.getpid(), {int(sig)})
            time.sleep(30)

        np.savez_compressed = slow
        sys.exit(cli.main(sys.argv[1:]))
    """)
    (tmp_path / "g.npz").write_bytes(b"old")
    proc = subprocess.run([sys.executable, "-c", script, "game", "planted", "--groups", "2", "-o",
                           str(tmp_path / "g.npz")], capture_output=True, text=True, timeout=60, cwd=ROOT)
    # (click itself prints an empty line before re-raising Ctrl-C; the last line is ours)
    assert proc.returncode == code and proc.stderr.strip() == f"coalitions: {word}"
    assert leftovers(tmp_path) == ["g.npz"] and (tmp_path / "g.npz").read_bytes() == b"old"


def test_sigterm_handler_is_restored(capsys):
    before = signal.getsignal(signal.SIGTERM)
    run(capsys, "solve", TIE)
    assert signal.getsignal(signal.SIGTERM) is before


def test_checkpoint_files_go_through_the_same_gate(tmp_path):
    from coalitions.learners.training.checkpoint import Checkpoint

    os.mkfifo(tmp_path / "ck.npz")
    with pytest.raises(InputError, match="is a named pipe"):
        Checkpoint(tmp_path / "ck.npz", "k", {"v": (2,)}, 1).load()
    ck = Checkpoint(tmp_path / "ok.npz", "k", {"v": (2,)}, 1)
    ck.save()
    assert Checkpoint(tmp_path / "ok.npz", "k", {"v": (2,)}, 1).load().done.tolist() == [False]
    assert leftovers(tmp_path) == ["ck.npz", "ok.npz"]


def test_malformed_corpus_is_listed_in_the_docs_table():
    """Every corpus file appears in the generated table of docs/cli.md (python tests/corpus_table.py)."""
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for p in [*MALFORMED.iterdir(), *HOSTILE.iterdir()]:
        if p.name != "estimate.json":
            assert f"`{p.name}`" in doc, p.name


# ---------------------------------------------------------------------------- damaged files: an answer or one InputError
@st.composite
def damaged(draw, data: bytes) -> bytes:
    """``data`` with a few random edits: bytes overwritten, ranges deleted, duplicated or truncated."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        if not out:
            break
        i = draw(st.integers(0, len(out) - 1))
        kind = draw(st.sampled_from(["byte", "delete", "repeat", "truncate"]))
        if kind == "byte":
            out[i] = draw(st.integers(0, 255))
        elif kind == "delete":
            del out[i:i + draw(st.integers(1, 16))]
        elif kind == "repeat":
            out[i:i] = out[i:i + draw(st.integers(1, 16))]
        else:
            del out[i:]
    return bytes(out)


def _read_damaged(tmp_path_factory, suffix: str, blob: bytes):
    path = tmp_path_factory.mktemp("damaged") / f"g{suffix}"
    path.write_bytes(blob)
    try:
        game = co.read_game(path)
    except InputError as e:
        assert str(e).startswith(f"{path}: ") and "\n" not in str(e)
        return
    assert isinstance(game, co.Game)  # the damage left a valid game: it reads as one


def _valid_npz() -> bytes:
    import io as _io

    buf = _io.BytesIO()
    g = co.planted([2, 1], seed=1)
    np.savez_compressed(buf, values=g.raw_values(), clients=np.array(g.clients), sense=np.array("max"),
                        provenance=np.array(json.dumps(dict(g.provenance))))
    return buf.getvalue()


@settings(max_examples=150, deadline=None)
@given(damaged(Path(TIE).read_bytes()))
def test_a_damaged_json_game_reads_or_fails_in_one_line(tmp_path_factory, blob):
    _read_damaged(tmp_path_factory, ".json", blob)


@settings(max_examples=150, deadline=None)
@given(damaged(_valid_npz()))
def test_a_damaged_npz_game_reads_or_fails_in_one_line(tmp_path_factory, blob):
    _read_damaged(tmp_path_factory, ".npz", blob)


# ---------------------------------------------------------------------------- issue 20: numbers, resources, options
def cap_memory(monkeypatch, gib: float = 1.0) -> None:
    """Simulate a container cap (no real allocation): the memory reader answers ``gib`` GiB."""
    from coalitions import resources

    monkeypatch.setattr(resources, "available_memory", lambda: (int(gib * (1 << 30)), "cgroup memory.max"))


@pytest.mark.parametrize("name", sorted(HOSTILE_GAMES))
def test_hostile_game(capsys, monkeypatch, name):
    cap_memory(monkeypatch)
    path = HOSTILE / name
    args = HOSTILE_GAMES[name]
    rc, out, err = run(capsys, args[0], path, *args[1:])
    assert rc == 2 and out == "" and one_line(err).startswith(f"coalitions: error: {path}: ")
    assert HOSTILE_FAULTS[name] in err and "Warning" not in err


@settings(max_examples=200, deadline=None)
@given(st.integers())
def test_to_float_is_exact_or_names_the_field(x):
    from coalitions.numbers import to_float

    try:
        y = float(x)
    except OverflowError:
        with pytest.raises(InputError, match=r"^size of 'a' is .*too large for a float"):
            to_float(x, "size of 'a'")
    else:
        assert to_float(x, "size of 'a'") == y


def test_checked_numbers_refuse_what_a_float_cannot_hold():
    from coalitions.numbers import NumberOverflow, finite, float_array, to_array, to_float, to_int

    for bad, fault in ((True, "not a number"), ("1", "not a number"), (float("nan"), "not finite"),
                       (np.longdouble("1e400"), r"1e\+400, too large")):
        with pytest.raises(InputError, match=fault):
            to_float(bad, "x")
    assert np.isnan(to_float(None, "x", allow_none=True))
    assert to_int(3.0, "n", low=1) == 3
    with pytest.raises(InputError, match="outside"):
        to_int(10 ** 30, "n", high=10)
    with pytest.raises(InputError, match=r"entry \(1,\) is 1e\+400"):
        float_array(np.array([1, "1e400"], dtype=np.longdouble), "v")
    assert float_array(np.array([1.0, np.nan]), "v").dtype == np.float64
    with pytest.raises(InputError, match="too large"):
        to_array([1, 10 ** 400], "outputs")
    with pytest.raises(NumberOverflow, match="w of 0 overflows"):
        finite(lambda: np.array([1.7e308]) * 2, lambda at: f"w of {at[0]}")


def test_welfare_and_contributions_are_exact_or_refused_without_warnings(capsys, tmp_path):
    import warnings

    from coalitions.contribution import benefits, total_contributions
    from coalitions.welfare import welfare

    g = co.Game.from_mapping(["a", "b"], {"a": {"a": 1e308, "a,b": 1.5e308}, "b": {"b": 1e308, "a,b": 1.5e308}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert benefits(g, [3]).tolist() == [0.5e308, 0.5e308]  # exact: the gain fits
        assert total_contributions(g, [3]).tolist() == [0.5e308, 0.5e308]
        with pytest.raises(InputError, match="the weighted welfare of coalition 'a,b' overflows"):
            welfare(g)
    path = tmp_path / "g.json"
    co.write_game(g, path)
    rc, out, err = run(capsys, "welfare", path)
    assert rc == 2 and f"{path}: the weighted welfare of coalition 'a,b' overflows" in one_line(err)


def test_memory_is_checked_before_a_game_is_allocated(capsys, monkeypatch, tmp_path):
    cap_memory(monkeypatch, 0.1)
    rc, _, err = run(capsys, "game", "planted", "--groups", "9,9", "-o", tmp_path / "p.npz")
    assert rc == 2 and "--groups: a game of 18 clients needs about 0.141 GiB of memory; only 0.1 GiB" in one_line(err)
    assert leftovers(tmp_path) == []
    rc, _, err = run(capsys, "game", "planted", "--groups", "9,9", "--dtype", "float32", "--seed", "1",
                     "-o", tmp_path / "p.npz")  # float32 halves it: fits
    assert rc == 0


def test_json_parsing_is_sized_and_checked(monkeypatch):
    cap_memory(monkeypatch, 1e-6)
    from coalitions import resources

    monkeypatch.setattr(resources, "QUICK_BYTES", 0)
    with pytest.raises(InputError, match=r"tie.json: parsing [\d,]+ bytes of JSON needs about"):
        cio.read_json(TIE)


def test_the_memory_reader_takes_the_smaller_of_cgroup_and_meminfo(monkeypatch, tmp_path):
    from coalitions import resources

    (tmp_path / "memory.max").write_text("1073741824\n")
    (tmp_path / "memory.current").write_text("536870912\n")
    monkeypatch.setattr(resources, "_CGROUP_V2", str(tmp_path))
    monkeypatch.setattr(resources, "_mem_available", lambda: 4 << 30)
    assert resources.available_memory() == (512 << 20, "cgroup memory.max")
    (tmp_path / "memory.max").write_text("max\n")
    monkeypatch.setattr(resources, "_CGROUP_V1", str(tmp_path / "none"))
    assert resources.available_memory() == (4 << 30, "MemAvailable in /proc/meminfo")


def test_a_small_read_reserves_a_small_buffer(tmp_path):
    from coalitions.files import _read_all

    p = tmp_path / "a.json"
    p.write_bytes(b"x" * 700)
    asked = []
    with open(p, "rb") as f:
        class Spy:
            def fileno(self):
                return f.fileno()

            def read(self, n):
                asked.append(n)
                return f.read(n)

        assert _read_all(Spy(), 1 << 30) == b"x" * 700
    assert max(asked) <= 701


def test_a_hundred_thousand_members_are_checked_in_linear_time(tmp_path):
    path = tmp_path / "many.npz"
    many_members(path, 100_000)
    with pytest.raises(InputError, match="holds member 'values.npy' twice"):
        cio.read_game(path)


def test_estimate_names_are_read_in_linear_time():
    from coalitions.estimate import _names_list

    names = [f"c{i}" for i in range(3000)]
    index = {c: i for i, c in enumerate(names)}
    assert _names_list(names, "ocs", index) == list(range(3000))
    with pytest.raises(InputError, match="names client 'c0' twice"):
        _names_list(names + ["c0"], "ocs", index)


@pytest.mark.parametrize("args, fault", [
    (["oracle", "synthetic", "--threads", "100000"], "--threads: 100000 is not in [1, "),
    (["oracle", "synthetic", "--threads", "0"], "--threads: 0 is not in [1, "),
    (["oracle", "synthetic", "--memory-mb", "nan"], "'--memory-mb': 'nan' is not a finite number"),
    (["oracle", "synthetic", "--memory-mb", "inf"], "'--memory-mb': 'inf' is not a finite number"),
    (["federate", "synthetic", "--wait", "nan"], "'--wait': 'nan' is not a finite number"),
    (["learn", "synthetic", "--method", "fedavg", "--steps", "0"], "'--steps': 0 is not in the range 1<=x<=1000000000"),
    (["reproduce", "synthetic", "--seeds", "0,0"], "--seeds: seed 0 is given twice"),
])
def test_bad_options_are_refused_up_front(capsys, tmp_path, args, fault):
    out = tmp_path / ("o" if args[0] in ("federate", "reproduce") else "o.json")
    rc, _, err = run(capsys, *args, "-o", out)
    assert rc == 2 and fault in one_line(err) and leftovers(tmp_path) == []


@pytest.mark.parametrize("args", [["oracle", "synthetic"], ["learn", "synthetic", "--method", "fedavg"]])
def test_output_equal_to_checkpoint_is_refused_up_front(capsys, tmp_path, args):
    same = tmp_path / "x.npz"
    rc, _, err = run(capsys, *args, "-o", same, "--checkpoint", same)
    assert rc == 2 and "-o and --checkpoint name the same path" in one_line(err) and leftovers(tmp_path) == []


def test_a_closed_stdout_exits_2_with_one_line():
    proc = subprocess.run(command() + ["solve", TIE], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: os.close(1))
    assert proc.returncode == 2 and one_line(proc.stderr).endswith("standard output is closed; redirect it to a "
                                                                   "file or to /dev/null instead of closing it")


def test_a_target_the_user_may_not_write_is_left_alone(capsys, monkeypatch, tmp_path):
    from coalitions import files

    target = tmp_path / "theirs.json"
    target.write_text("theirs")
    monkeypatch.setattr(files.os, "access", lambda p, mode: os.fspath(p) != str(target))
    rc, _, err = run(capsys, "solve", TIE, "-o", target)
    assert rc == 2 and "theirs.json: cannot write (the file is read-only for this user)" in one_line(err)
    assert target.read_text() == "theirs" and leftovers(tmp_path) == ["theirs.json"]


@pytest.mark.parametrize("case", range(3))
def test_checkpoint_content_errors_name_the_checkpoint(tmp_path, case):
    label, code = checkpoint_cases(str(tmp_path))[case]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    fault = ("its checksum does not match", "array a0 holds <U1 data, not numbers", "its state is nested deeper")[case]
    assert proc.returncode == 2 and f"c{case + 1}.npz: not a usable checkpoint: {fault}" in one_line(proc.stderr)


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=4))
def test_names_equal_after_normalisation_are_one_name(name):
    import unicodedata

    other = unicodedata.normalize("NFKD", name)
    try:
        check_client_names([name])
    except InputError:
        return
    if other != name:
        with pytest.raises(InputError):
            check_client_names([name, other])


@pytest.mark.parametrize("case", range(len(CORE_ONLY)))
def test_a_core_only_install_prints_the_hint_for_every_learner_command(case):
    label, code = CORE_ONLY[case]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2 and "which is not installed: pip install" in one_line(proc.stderr), label


def test_bootstrap_replicates_are_checked_against_memory_before_training(capsys, monkeypatch, tmp_path):
    cap_memory(monkeypatch)
    rc, _, err = run(capsys, "oracle", "synthetic", "--replicates", "100000", "-o", tmp_path / "g.npz")
    assert rc == 2 and "--replicates 100000: a bootstrap of 100,000 replicates over" in one_line(err)
    assert "GiB of memory; only 1 GiB are available (cgroup memory.max)" in err and leftovers(tmp_path) == []


def test_compare_regret_near_the_largest_float_is_refused(capsys, tmp_path):
    import itertools

    names = ["a", "b", "c", "d"]
    values = {x: {",".join(s): (1.7e308 if len(s) > 1 else -1.7e308) for r in range(1, 5)
                  for s in itertools.combinations(names, r) if x in s} for x in names}
    path = tmp_path / "g.json"
    co.write_game(co.Game.from_mapping(names, values), path)
    rc, out, err = run(capsys, "compare", ESTIMATE, path)
    assert rc == 2 and out == "" and "the regret of client 'c' (exact CE payoff minus learned) overflows" in one_line(err)


def test_a_runs_piece_with_a_huge_test_output_names_the_piece(tmp_path):
    from coalitions.learners.experiments.runner import _read_piece, _read_timings

    data = json.loads((HOSTILE / "estimate.json").read_text())
    data.setdefault("extra", {})["test_outputs"] = {"a": [0.5, 12345], "b": [0.5], "c": [0.5], "d": [0.5]}
    piece = tmp_path / "few-seed0-fedavg.json"
    piece.write_text(json.dumps(data).replace("12345", "1" + "0" * 400))
    with pytest.raises(InputError, match=r"fedavg.json: extra.test_outputs of client 'a' holds an integer too large"):
        _read_piece([piece], "fedavg")
    (tmp_path / "timings.json").write_text('{"x.json": 1' + "0" * 400 + ', "y.json": 2.5, "z.json": "many"}')
    assert _read_timings(tmp_path) == {"y.json": 2.5}  # spoiled entries only lose their timing
