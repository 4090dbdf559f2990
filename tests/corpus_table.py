"""Run the installed ``coalitions`` command on every hostile input and tabulate what it answers.

    python tests/corpus_table.py            # print the markdown table
    python tests/corpus_table.py --write    # replace the table in docs/cli.md

Inputs: every file of ``tests/data/malformed`` (through ``coalitions solve``),
``tests/data/hostile`` (estimates through ``coalitions compare``), and the
environments that git cannot hold (FIFOs, devices, sockets, symbolic links,
full disks), made in a temporary folder.  The test suite checks each of these
(tests/test_io.py, tests/test_cli.py, tests/test_hostile.py); this script only
shows the answers, as a new user would see them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path("tests") / "data"
TIE = "docs/examples/tie.json"
BEGIN, END = "<!-- corpus-table:begin -->", "<!-- corpus-table:end -->"
#: tests/data/hostile games that read well but that a command cannot answer: the command's arguments.
HOSTILE_GAMES = {
    "game-near-max.json": ["solve"],
    "game-huge-sizes.json": ["welfare", "--weights", "sizes"],
    "game-sizes-overflow.json": ["welfare", "--weights", "sizes"],
    "game-unpacks-to-7gb.npz": ["solve"],
}


def coalitions() -> list[str]:
    here = Path(sys.executable).with_name("coalitions")
    return [str(here)] if here.exists() else [sys.executable, "-m", "coalitions.cli"]


def run(args: list[str], stdout=None, tmp: str = "") -> tuple[int, str]:
    proc = subprocess.run(coalitions() + args, stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120, cwd=ROOT)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    msg = lines[-1] if lines else "(no message)"
    if len(lines) > 1:
        msg += f" [{len(lines)} lines!]"
    return proc.returncode, msg.replace(tmp, "TMP") if tmp else msg


def rows() -> list[tuple[str, str, int, str]]:
    out = []
    for p in sorted((ROOT / DATA / "malformed").iterdir()):
        rel = str(DATA / "malformed" / p.name)
        out.append((f"`{p.name}`", "solve", *run(["solve", rel])))
    for p in sorted((ROOT / DATA / "hostile").iterdir()):
        rel = str(DATA / "hostile" / p.name)
        if p.name.startswith("estimate") and p.name != "estimate.json":
            out.append((f"`{p.name}`", "compare", *run(["compare", rel, TIE])))
        elif p.name in HOSTILE_GAMES:
            args = HOSTILE_GAMES[p.name]
            out.append((f"`{p.name}`", " ".join(args), *run([args[0], rel, *args[1:]])))
        elif p.name.startswith("results"):
            code = (f"from coalitions.learners.experiments.runner import read_results\n"
                    f"from coalitions.errors import InputError\n"
                    f"try:\n    read_results({rel!r})\nexcept InputError as e:\n    print('InputError:', e)")
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
            out.append((f"`{p.name}`", "`read_results` (reproduce)", 2 if "InputError" in proc.stdout else 0,
                        proc.stdout.strip()))
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        os.mkfifo(t / "fifo.json")
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(t / "sock.json"))
        s.close()
        (t / "dir.json").mkdir()
        os.symlink("fifo.json", t / "link-to-fifo.json")
        os.symlink("target.json", t / "link.json")
        with open(t / "sparse.json", "wb") as f:
            f.truncate((1 << 30) + 1)
        cases = [
            ("FIFO", ["solve", f"{tmp}/fifo.json"]),
            ("socket", ["solve", f"{tmp}/sock.json"]),
            ("directory", ["verify", f"{tmp}/dir.json", "--partition", "a"]),
            ("/dev/zero", ["graph", "/dev/zero"]),
            ("symlink to a FIFO", ["enumerate", f"{tmp}/link-to-fifo.json"]),
            ("1 GiB + 1 byte JSON (sparse)", ["solve", f"{tmp}/sparse.json"]),
            ("FIFO as estimate", ["compare", f"{tmp}/fifo.json", TIE]),
            ("empty GAME", ["solve", ""]),
            ("`-o ''`", ["game", "planted", "--groups", "2", "-o", ""]),
            ("`-o` a FIFO", ["solve", TIE, "-o", f"{tmp}/fifo.json"]),
            ("`-o` a directory", ["game", "planted", "--groups", "2", "-o", f"{tmp}/dir.json"]),
            ("`-o /dev/full`", ["game", "mean-estimation", "--sizes", "1,2", "-o", "/dev/full"]),
            ("`-o` in a missing folder", ["solve", TIE, "-o", f"{tmp}/none/x.json"]),
            ("`--checkpoint` a FIFO", ["oracle", "synthetic", "-o", f"{tmp}/g.json", "--checkpoint",
                                       f"{tmp}/fifo.json"]),
            ("`reproduce -o` a file", ["reproduce", "synthetic", "-o", f"{tmp}/sparse.json"]),
            ("`--seed -1`", ["solve", TIE, "--seed", "-1"]),
            ("`--seed -1`", ["verify", TIE, "--partition", "c0,c2|c1", "--seed", "-1"]),
            ("`--seed 4294967296`", ["game", "planted", "--groups", "2", "--seed", "4294967296", "-o",
                                     f"{tmp}/p.json"]),
            ("`--seed -1`", ["oracle", "synthetic", "--seed", "-1", "-o", f"{tmp}/g.json"]),
            ("`--seeds 0,-1`", ["reproduce", "synthetic", "--seeds", "0,-1", "-o", f"{tmp}/r"]),
            ("`--groups 30`", ["game", "planted", "--groups", "30", "-o", f"{tmp}/p.npz"]),
            ("`--groups 11,11` as JSON", ["game", "planted", "--groups", "11,11", "-o", f"{tmp}/p.json"]),
            ("`--noise nan`", ["game", "planted", "--groups", "2", "--noise", "nan", "-o", f"{tmp}/p.json"]),
            ("`--names` with a newline", ["game", "mean-estimation", "--sizes", "1,2", "--names", "a\nb,c",
                                          "-o", f"{tmp}/m.json"]),
            ("`--threads 100000`", ["oracle", "synthetic", "--threads", "100000", "-o", f"{tmp}/g.json"]),
            ("`--memory-mb nan`", ["oracle", "synthetic", "--memory-mb", "nan", "-o", f"{tmp}/g.json"]),
            ("`--memory-mb inf`", ["oracle", "synthetic", "--memory-mb", "inf", "-o", f"{tmp}/g.json"]),
            ("`--wait nan`", ["federate", "synthetic", "--wait", "nan", "-o", f"{tmp}/f"]),
            ("`--steps 0`", ["learn", "synthetic", "--method", "fedavg", "--steps", "0", "-o", f"{tmp}/e.json"]),
            ("`--seeds 0,0`", ["reproduce", "synthetic", "--seeds", "0,0", "-o", f"{tmp}/r"]),
            ("`-o X --checkpoint X`", ["oracle", "synthetic", "-o", f"{tmp}/x.npz", "--checkpoint", f"{tmp}/x.npz"]),
            ("`--groups 13,13` (memory checked first)", ["game", "planted", "--groups", "13,13", "-o",
                                                        f"{tmp}/p.npz"]),
            ("`.npz` of 100,000 members, one twice", ["solve", f"{tmp}/many.npz"]),
            # issue 35: invisible names, overflowing generators, deep options, a folder where a file goes
            ("`--names` with a Hangul filler", ["game", "mean-estimation", "--sizes", "1,2", "--names",
                                                "Hungary,Hungary\u3164", "-o", f"{tmp}/m.json"]),
            ("`--sizes 1e308,1e308`", ["game", "mean-estimation", "--sizes", "1e308,1e308", "-o", f"{tmp}/m.json"]),
            ("`--ties 1e-320`", ["game", "planted", "--groups", "2", "--ties", "1e-320", "-o", f"{tmp}/p.json"]),
            ("`--method-option` 20,000 levels deep", ["federate", "synthetic", "--method", "fedavg", "--method-option",
                                                      "alpha_k=" + "[" * 20000 + "]" * 20000, "-o", f"{tmp}/f"]),
            ("`-o OUT` with `OUT/run.json` a directory", ["federate", "synthetic", "-o", f"{tmp}/fed"]),
            ("`learn --lr 1e308`", ["learn", "synthetic", "--method", "fedavg", "--lr", "1e308", "--steps", "2",
                                    "-o", f"{tmp}/e.json"]),
            ("`--root-certificates /dev/zero`", ["federate", "heart", "--superlink", "127.0.0.1:9",
                                                 "--root-certificates", "/dev/zero", "-o", f"{tmp}/f"]),
        ]
        (t / "fed" / "run.json").mkdir(parents=True)
        many_members(t / "many.npz", 100_000)
        for label, args in cases:
            out.append((label, " ".join(args[:2]) if args[0] == "game" else args[0], *run(args, tmp=tmp)))
        proc = subprocess.run(coalitions() + ["game", "mean-estimation", "--sizes", "1,2", "--names", b"a\xff,b",
                                              "-o", f"{tmp}/m.json"], capture_output=True, cwd=ROOT)
        out.append(("`--names` with byte 0xff", "game mean-estimation", proc.returncode,
                    proc.stderr.decode("utf-8", "backslashreplace").strip().replace(tmp, "TMP")))
        proc = subprocess.run(coalitions() + ["solve", TIE], capture_output=False, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=lambda: os.close(1))
        out.append(("stdout closed (`>&-`)", "solve", proc.returncode, proc.stderr.strip()))
        for label, code in CORE_ONLY + checkpoint_cases(tmp):
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
            lines = [x for x in proc.stderr.splitlines() if x.strip()]
            cmd = next((c for c in ("oracle", "learn") if f"`{c} " in label), "`load_state` (oracle, learn)")
            out.append((label, cmd, proc.returncode,
                        (lines[-1] + (f" [{len(lines)} lines!]" if len(lines) > 1 else "") if lines else
                         "(no message)").replace(tmp, "TMP")))
        if os.path.exists("/dev/full"):
            with open("/dev/full", "w") as full:
                out.append(("stdout is `/dev/full`", "solve", *run(["solve", TIE, "--format", "json"], stdout=full)))
        limited = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                   "resource.setrlimit(resource.RLIMIT_FSIZE, (300, 300)); "
                   "from coalitions import cli; sys.exit(cli.main(sys.argv[1:]))")
        (t / "old.json").write_text("old")
        for args in (["solve", TIE, "-o", f"{tmp}/full.txt"], ["game", "planted", "--groups", "3,3", "-o",
                                                                f"{tmp}/old.json"]):
            proc = subprocess.run([sys.executable, "-c", limited, *args], capture_output=True, text=True, cwd=ROOT)
            state = "old file kept" if (t / "old.json").read_text() == "old" else "old file changed!"
            state += ", no full.txt" if not (t / "full.txt").exists() else ", full.txt exists!"
            cmd = " ".join(args[:2]) if args[0] == "game" else args[0]
            out.append((f"disk full (file-size limit 300 bytes; {state})", cmd, proc.returncode,
                        proc.stderr.strip().replace(tmp, "TMP")))
        rc, msg = run(["solve", TIE, "-o", f"{tmp}/link.json"], tmp=tmp)
        kept = "link kept, target written" if (t / "link.json").is_symlink() and (t / "target.json").is_file() else "?"
        out.append(("`-o` a symlink", "solve", rc, f"(no message; {kept})"))
        left = sorted(p.name for p in t.iterdir() if p.name.startswith("."))
        out.append(("temporary files left in TMP after all of the above", "", len(left), ", ".join(left) or "none"))
    return out


def many_members(path: Path, extra: int) -> None:
    """A valid 2-client ``.npz`` game plus ``extra`` empty members, the last of which repeats ``values.npy``."""
    import io
    import warnings
    import zipfile

    import numpy as np

    def npy(a):
        b = io.BytesIO()
        np.save(b, a)
        return b.getvalue()

    with zipfile.ZipFile(path, "w") as z, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name
        for name, a in (("values", np.array([[np.nan, 1, np.nan, 2], [np.nan, np.nan, 1, 2]])),
                        ("clients", np.array(["a", "b"])), ("sense", np.array("max"))):
            z.writestr(f"{name}.npy", npy(a))
        for i in range(extra - 1):
            z.writestr(f"x{i}", b"")
        z.writestr("values.npy", b"")


#: A core-only install (no scipy, torch, flwr, ray, cvxpy), simulated by blocking the imports.
_BLOCK = ("import sys\nfor m in ('scipy', 'torch', 'flwr', 'ray', 'cvxpy'):\n    sys.modules[m] = None\n"
          "from coalitions.cli import main\n")
CORE_ONLY = [(f"core-only install: `{' '.join(args[:3])}`", _BLOCK + f"sys.exit(main({args!r}))")
             for args in (["oracle", "synthetic", "-o", "/tmp/never.json"],
                          ["learn", "synthetic", "--method", "fedavg", "-o", "/tmp/never.json"])]


def checkpoint_cases(tmp: str) -> list[tuple[str, str]]:
    """Python one-liners that save a checkpoint, spoil it, and load it back through the CLI's error path."""
    head = ("import sys, numpy as np\nfrom coalitions.learners.training.checkpoint import save_state, load_state\n"
            "from coalitions.errors import InputError\n")
    tail = ("try:\n    load_state(p, 'k')\nexcept InputError as e:\n"
            "    print('coalitions: error:', e, file=sys.stderr); sys.exit(2)\n")
    edit = ("import zipfile\nz = dict(np.load(p))\nz['a0'] = z['a0'] + 1\nnp.savez(p, **z)\n")
    deep = "s = {}\nfor _ in range(200):\n    s = {'x': s}\n"
    return [
        ("checkpoint re-saved with an edited value",
         head + f"p = {tmp!r} + '/c1.npz'\nsave_state(p, 'k', 1, {{'w': np.ones(3)}})\n" + edit + tail),
        ("checkpoint holding a string array",
         head + f"p = {tmp!r} + '/c2.npz'\nsave_state(p, 'k', 1, {{'w': np.array(['a', 'b'])}})\n" + tail),
        ("checkpoint nested 200 levels deep",
         head + deep + f"p = {tmp!r} + '/c3.npz'\nsave_state(p, 'k', 1, s)\n" + tail),
    ]


def table() -> str:
    lines = ["| input | command | exit | message (stderr) |", "| --- | --- | --- | --- |"]
    for label, cmd, rc, msg in rows():
        msg = msg.replace("|", "\\|").replace(str(ROOT) + "/", "")
        lines.append(f"| {label} | {cmd} | {rc} | {msg} |")
    return "\n".join(lines)


if __name__ == "__main__":
    text = table()
    if "--write" in sys.argv:
        doc = ROOT / "docs" / "cli.md"
        s = doc.read_text(encoding="utf-8")
        head, rest = s.split(BEGIN)
        _, tail = rest.split(END)
        doc.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}", encoding="utf-8")
    print(text)
