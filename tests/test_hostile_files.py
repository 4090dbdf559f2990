"""Hostile files, options and environments of issue 35 (items 6 and 7): docs/cli.md, "Bad input".

Memory and time are decided before anything is read (certificates, checkpoints,
schema files are sized and typed first; a checkpoint's arrays are checked
against their headers before they are allocated; model and data sizes against
memory), and no answer is silently wrong (long doubles, a learner whose loss
stops being finite, numpy warnings, invisible names, a hang-up while writing).
Each case exits 2 with one line naming the fault, or gives the exact answer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, one_line, run

import coalitions as co
from coalitions import cli
from coalitions.errors import InputError
from coalitions.game import check_client_names

TIE = str(EXAMPLES / "tie.json")


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def cap_memory(monkeypatch, gib: float = 1.0) -> None:
    """Simulate a container cap (no real allocation): the memory reader answers ``gib`` GiB."""
    from coalitions import resources

    monkeypatch.setattr(resources, "available_memory", lambda: (int(gib * (1 << 30)), "cgroup memory.max"))


# ---------------------------------------------------------------------------- SIGHUP is SIGTERM
def test_a_hangup_inside_a_write_leaves_nothing_behind(tmp_path):
    script = textwrap.dedent(f"""
        import os, sys, time
        import numpy as np
        from coalitions import cli

        def slow(f, **arrays):  # the terminal closes half way through writing the archive
            f.write(b"PK half an archive")
            os.kill(os.getpid(), {int(signal.SIGHUP)})
            time.sleep(30)

        np.savez_compressed = slow
        sys.exit(cli.main(sys.argv[1:]))
    """)
    (tmp_path / "g.npz").write_bytes(b"old")
    # the child takes a hangup as a terminal's process does, however this suite was started (under nohup,
    # SIGHUP is ignored and inherited as ignored: the command then respects it and writes to the end)
    proc = subprocess.run([sys.executable, "-c", script, "game", "planted", "--groups", "2", "-o",
                           str(tmp_path / "g.npz")], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    assert proc.returncode == 129 and proc.stderr.strip() == "coalitions: hung up"
    assert leftovers(tmp_path) == ["g.npz"] and (tmp_path / "g.npz").read_bytes() == b"old"


def test_the_hangup_handler_is_restored_and_nohup_is_respected(capsys):
    before = signal.getsignal(signal.SIGHUP)
    run(capsys, "solve", TIE)
    assert signal.getsignal(signal.SIGHUP) is before
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        seen = []
        original = cli.main.__globals__["_run"]

        def spy(argv):
            seen.append(signal.getsignal(signal.SIGHUP))
            return original(argv)

        cli.main.__globals__["_run"] = spy
        try:
            run(capsys, "solve", TIE)
        finally:
            cli.main.__globals__["_run"] = original
        assert seen == [signal.SIG_IGN]  # under nohup the run outlives its terminal
    finally:
        signal.signal(signal.SIGHUP, before)


# ---------------------------------------------------------------------------- invisible names
@pytest.mark.parametrize("char", ["\u3164", "\u034f", "\ufe0f", "\U000e0100", "\u2800", "\u115f", "\uffa0",
                                  "\u00a0", "\u3000", "\u2007", "\u180e", "\U000e0041"])
def test_invisible_characters_in_names_are_refused(char):
    name = f"Hun{char}gary"
    with pytest.raises(InputError) as e:
        check_client_names(["Hungary", name])
    msg = str(e.value)
    assert msg.startswith(f"client name {ascii(name)} may not contain invisible") and f"U+{ord(char):04X}" in msg
    with pytest.raises(InputError, match="invisible"):
        check_client_names([f"Hungary{char}"])


def test_visible_names_stay_accepted():
    names = ["a b", "Zürich", "e\u0301", "Hungary", "\u0928\u093f", "\u4e2d\u6587", "\U0001F600", "a-b_c.d"]
    assert check_client_names(names) == tuple(names)


def test_an_invisible_name_on_the_command_line(capsys, tmp_path):
    rc, _, err = run(capsys, "game", "mean-estimation", "--sizes", "1,2", "--names", "Hungary,Hungary\u3164",
                     "-o", tmp_path / "g.json")
    assert rc == 2 and "--names: client name 'Hungary\\u3164' may not contain invisible" in one_line(err)
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------------------- options
def test_a_deeply_nested_method_option_is_one_line(capsys, tmp_path):
    deep = "[" * 20_000 + "]" * 20_000
    rc, _, err = run(capsys, "federate", "synthetic", "--method", "fedavg", "--method-option", f"alpha_k={deep}",
                     "-o", tmp_path / "f")
    assert rc == 2 and "--method-option alpha_k: its JSON value is nested deeper than" in one_line(err)
    assert leftovers(tmp_path) == []


def test_an_output_folder_whose_run_json_is_a_folder(capsys, tmp_path):
    (tmp_path / "f" / "run.json").mkdir(parents=True)
    rc, _, err = run(capsys, "federate", "synthetic", "-o", tmp_path / "f")
    assert rc == 2 and f"{tmp_path / 'f' / 'run.json'}: is a directory; only a regular file" in one_line(err)


# ---------------------------------------------------------------------------- files read: typed and sized first
@pytest.fixture(scope="module")
def root_certificate_errors(tmp_path_factory):
    """``_connection`` on each kind of bad --root-certificates file, all in one subprocess (a FIFO opened
    for reading would block forever: the timeout fails the tests): {kind: (path, exit code, stderr)}."""
    folder = tmp_path_factory.mktemp("certs")
    paths = {"fifo": folder / "ca.pem", "zero": Path("/dev/zero"), "folder": folder, "big": folder / "big.pem"}
    os.mkfifo(paths["fifo"])
    with open(paths["big"], "wb") as f:
        f.truncate(1 << 30)
    code = ("import io, json, sys\nfrom contextlib import redirect_stderr\n"
            "from coalitions.learners.federated.run import _connection\n"
            "from coalitions.errors import InputError\n"
            "got = {}\n"
            "for kind, path in json.loads(sys.argv[1]).items():\n"
            "    err = io.StringIO()\n"
            "    with redirect_stderr(err):\n"
            "        try:\n            _connection('127.0.0.1:9093', False, path); rc = 0\n"
            "        except InputError as e:\n            print('coalitions: error:', e, file=sys.stderr); rc = 2\n"
            "    got[kind] = [rc, err.getvalue()]\n"
            "print(json.dumps(got))\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps({k: str(p) for k, p in paths.items()})],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr[-2000:]
    return {kind: (paths[kind], *result) for kind, result in json.loads(proc.stdout).items()}


@pytest.mark.parametrize("kind", ["fifo", "zero", "folder", "big"])
def test_root_certificates_are_typed_and_sized_before_reading(root_certificate_errors, kind):
    path, rc, err = root_certificate_errors[kind]
    fault = {"fifo": "is a named pipe (FIFO)", "zero": "is a character device", "folder": "is a directory",
             "big": "larger than the 1 MiB limit of a certificate file"}[kind]
    line = one_line(err)
    assert rc == 2 and f"--root-certificates {path}: " in line and fault in line


def test_site_schema_files_are_typed_and_sized_before_reading(tmp_path):
    from coalitions.learners.federated.sites import from_schema

    os.mkfifo(tmp_path / "site.json")
    with pytest.raises(InputError, match="site.json: is a named pipe"):
        from_schema(tmp_path / "site.json")
    schema = {"site": "a", "csv": "data.csv", "task": "binary", "metric": "accuracy", "n_classes": 2,
              "label": "y", "features": ["x"], "split": "split"}
    (tmp_path / "ok.json").write_text(json.dumps(schema))
    os.mkfifo(tmp_path / "data.csv")
    with pytest.raises(InputError, match="data.csv: is a named pipe"):
        from_schema(tmp_path / "ok.json")


@pytest.mark.parametrize("char", ["\u3164", "\u034f", "\U000e0100", "\u2800"])
def test_a_site_announcing_an_invisible_name_is_refused_by_its_reply_check(char):
    from coalitions.learners.federated.replies import BadReply, check_name

    with pytest.raises(BadReply) as e:
        check_name(f"Hungary{char}", 3)
    assert f"node 3: its name {ascii('Hungary' + char)} may not contain invisible characters" in str(e.value)


# ---------------------------------------------------------------------------- checkpoints: headers before allocation
def _checkpoint_fields(tmp_path: Path) -> dict:
    from coalitions.learners.training.checkpoint import save_state

    save_state(tmp_path / "ok.npz", "k", 1, {"w": np.ones(3)})
    with np.load(tmp_path / "ok.npz") as z:
        return {name: z[name] for name in z.files}


def _npy(a: np.ndarray) -> bytes:
    import io

    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def _header(shape, descr="<f8") -> bytes:
    import io

    from numpy.lib import format as npformat

    b = io.BytesIO()
    npformat.write_array_header_1_0(b, {"descr": descr, "fortran_order": False, "shape": shape})
    return b.getvalue()


def checkpoint_bomb(tmp_path: Path, unpacked: int = 200 << 20) -> Path:
    """A valid checkpoint whose array ``a0`` is ``unpacked`` bytes of zeros, deflated to a few hundred KB."""
    path = tmp_path / "bomb.npz"
    fields = _checkpoint_fields(tmp_path)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, a in fields.items():
            if name != "a0":
                z.writestr(f"{name}.npy", _npy(a))
        with z.open("a0.npy", "w", force_zip64=True) as m:
            m.write(_header((unpacked // 8,)))
            chunk = bytes(1 << 20)
            for _ in range(unpacked >> 20):
                m.write(chunk)
    return path


def test_a_checkpoint_bomb_is_refused_before_it_is_unpacked(tmp_path, monkeypatch):
    from numpy.lib import format as npformat

    from coalitions.learners.training.checkpoint import load_state

    path = checkpoint_bomb(tmp_path)
    assert path.stat().st_size < 1 << 20

    def never(*a, **k):
        raise AssertionError("an array was unpacked")

    monkeypatch.setattr(npformat, "read_array", never)
    with pytest.raises(InputError) as e:
        load_state(path, "k")
    assert str(e.value).startswith(f"{path}: not a usable checkpoint: its members unpack to 209,716,") and \
        "a compressed bomb?" in str(e.value)


def test_a_checkpoint_whose_header_lies_is_named(tmp_path):
    from coalitions.learners.training.checkpoint import load_state

    path = tmp_path / "lies.npz"
    fields = _checkpoint_fields(tmp_path)
    with zipfile.ZipFile(path, "w") as z:
        for name, a in fields.items():
            z.writestr(f"{name}.npy", _header((10 ** 12,)) + bytes(24) if name == "a0" else _npy(a))
    with pytest.raises(InputError) as e:
        load_state(path, "k")
    assert (f"{path}: not a usable checkpoint: the header of array 'a0' lies: it declares <f8 of shape "
            "(1000000000000,) (8,000,000,000,000 bytes) over 24 bytes of data") in str(e.value)


def test_checkpoint_arrays_are_checked_against_memory(tmp_path, monkeypatch):
    from coalitions import resources
    from coalitions.learners.training.checkpoint import load_state, save_state

    save_state(tmp_path / "big.npz", "k", 1, {"w": np.ones(1 << 20)})
    cap_memory(monkeypatch, 1e-3)
    monkeypatch.setattr(resources, "QUICK_BYTES", 0)
    with pytest.raises(InputError, match=r"big.npz: not a usable checkpoint: .*loading its 7 arrays needs about"):
        load_state(tmp_path / "big.npz", "k")


def test_the_command_line_names_the_bomb(capsys, tmp_path):
    path = checkpoint_bomb(tmp_path, 16 << 20)
    rc, _, err = run(capsys, "learn", "synthetic", "--method", "fedavg", "--steps", "2", "--checkpoint", path,
                     "-o", tmp_path / "e.json")
    assert rc == 2 and f"{path}: not a usable checkpoint: its members unpack to" in one_line(err)
    assert not (tmp_path / "e.json").exists()


# ---------------------------------------------------------------------------- long doubles: exact or refused
def _twin_games(tmp_path: Path, dtype) -> Path:
    """Two clients who each gain 2^-60 from joining: the answer is a,b; rounded to float64 it would be a | b."""
    one = np.array(1.0, dtype=dtype)
    gain = one + np.ldexp(one, -60)
    values = np.full((2, 4), np.nan, dtype=dtype)
    values[0, 1] = values[1, 2] = one
    values[0, 3] = values[1, 3] = gain
    path = tmp_path / f"g-{np.dtype(dtype).name}.npz"
    np.savez(path, values=values, clients=np.array(["a", "b"]), sense=np.array("max"))
    return path


@pytest.mark.skipif(np.finfo(np.longdouble).nmant <= 52, reason="long double is float64 on this platform")
def test_a_long_double_game_is_read_exactly_or_refused(capsys, tmp_path):
    path = _twin_games(tmp_path, np.longdouble)
    rc, out, err = run(capsys, "solve", path)
    line = one_line(err)
    shown = str(np.longdouble(1) + np.ldexp(np.longdouble(1), -60))
    assert rc == 2 and out == "" and line.startswith(f"coalitions: error: {path}: 'values': entry (0, 3) is a long "
                                                     f"double ({shown}) that float64 cannot hold exactly")
    assert "store the values as float64" in line
    exact = tmp_path / "exact.npz"  # long doubles that float64 holds exactly read as before
    with np.load(path) as z:
        np.savez(exact, values=np.round(z["values"]), clients=z["clients"], sense=z["sense"])
    assert run(capsys, "solve", exact)[0] == 0



def test_a_gain_of_2_to_the_minus_60_that_float64_holds_is_answered(capsys, tmp_path):
    values = np.full((2, 4), np.nan)
    values[0, 1] = values[1, 2] = 0.0
    values[0, 3] = values[1, 3] = 2.0 ** -60
    path = tmp_path / "g.npz"
    np.savez(path, values=values, clients=np.array(["a", "b"]), sense=np.array("max"))
    rc, out, _ = run(capsys, "solve", path, "--tol", "0")
    assert rc == 0 and out.splitlines()[0].endswith("found by peeling: a,b")


# ---------------------------------------------------------------------------- no numpy warning on stderr
@pytest.mark.parametrize("args, fault", [
    (["mean-estimation", "--sizes", "1e308,1e308"],
     "--sizes 1e308,1e308: the error of client '0' in coalition '0' overflows a float"),
    (["mean-estimation", "--sizes", "1e200,1"], "--sizes 1e200,1: the error of client '0' in coalition '0' overflows"),
    (["planted", "--groups", "2", "--ties", "1e-320"], "--ties 1e-320: rounding to multiples of ties=1e-320 overflows"),
])
def test_generators_that_overflow_say_so_in_one_line(capsys, tmp_path, args, fault):
    rc, _, err = run(capsys, "game", *args, "-o", tmp_path / "g.json")
    assert rc == 2 and fault in one_line(err) and leftovers(tmp_path) == []


def test_sizes_near_the_largest_float_that_fit_give_the_exact_game(capsys, tmp_path):
    rc, _, err = run(capsys, "game", "mean-estimation", "--sizes", "1e100,1e100", "-o", tmp_path / "g.json")
    assert rc == 0 and "Warning" not in err


def test_tol_auto_on_replicates_whose_spread_overflows(capsys, tmp_path):
    g = co.planted([2], noise=0, seed=1)
    reps = np.stack([g.raw_values() * 1e200, g.raw_values() * -1e200, g.raw_values()])
    path = tmp_path / "g.npz"
    np.savez(path, values=g.raw_values(), replicates=reps, clients=np.array(g.clients), sense=np.array("max"))
    for cmd in ("solve", "enumerate", "welfare"):
        rc, out, err = run(capsys, cmd, path, "--tol", "auto")
        assert rc == 2 and out == "" and one_line(err) == (
            f"coalitions: error: {path}: --tol auto: the bootstrap SD of the marginal contributions overflows a "
            "float (the replicates differ by more than about 1e154); give --tol a number")


# ---------------------------------------------------------------------------- the environment
@pytest.mark.parametrize("value", ["abc", "0", "4,x", "-1"])
def test_a_bad_omp_num_threads_is_one_line(capsys, monkeypatch, value):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    rc, out, err = run(capsys, "solve", TIE)
    assert rc == 2 and out == "" and one_line(err) == (
        f"coalitions: error: OMP_NUM_THREADS={value!r} (environment): not a positive integer or a comma-separated "
        "list of them; unset it or set it to e.g. 4")


@pytest.mark.parametrize("value", ["4", " 2 ", "4,2", ""])
def test_a_good_omp_num_threads_runs(capsys, monkeypatch, value):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert run(capsys, "solve", TIE)[0] == 0


def test_bad_omp_num_threads_never_reaches_libgomp(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "abc"}
    proc = subprocess.run([sys.executable, "-m", "coalitions.cli", "oracle", "synthetic", "--clients", "3", "--steps",
                           "2", "-o", str(tmp_path / "o.json")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "OMP_NUM_THREADS='abc'" in one_line(proc.stderr) and "libgomp" not in proc.stderr


def test_home_that_is_not_a_folder_gives_the_figures_without_warnings(tmp_path):
    pytest.importorskip("matplotlib")
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    env["HOME"] = "/dev/null"
    code = ("import sys\nfrom coalitions.options import check_environment\ncheck_environment()\n"
            "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            f"plt.plot([1, 2]); plt.savefig({str(tmp_path / 'f.png')!r})\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "" and (tmp_path / "f.png").stat().st_size > 0


# ---------------------------------------------------------------------------- a diverged learner is not an answer
@pytest.mark.parametrize("args, setting", [(["--method", "fedavg", "--lr", "1e308"], "--lr 1e+308"),
                                           (["--method", "fedprox", "--mu", "1e308"], "--mu 1e+308"),
                                           # SPO's Adam step overflows float32 before any loss is computed
                                           (["--method", "spo", "--lr", "1e308"], "--lr 1e+308")])
def test_a_learner_whose_loss_is_not_finite_exits_2(capsys, tmp_path, args, setting):
    pytest.importorskip("torch")
    rc, out, err = run(capsys, "learn", "synthetic", *args, "--steps", "2", "-o", tmp_path / "e.json")
    line = one_line(err.splitlines()[-1] + "\n") if err else ""
    assert rc == 2 and f"--method {args[1]}: the training loss became non-finite" in line and setting in line
    assert not (tmp_path / "e.json").exists()


def test_a_learner_whose_loss_diverges_after_a_round_exits_2_though_its_accuracies_are_numbers(capsys, tmp_path):
    """On heart, Adam at 1e308 leaves round 1's loss finite and every later one NaN; the accuracies of the
    NaN models are still numbers (one class everywhere), so only the training loss tells."""
    pytest.importorskip("torch")
    rc, out, err = run(capsys, "learn", "heart", "--method", "fedprox", "--lr", "1e308", "--steps", "3",
                       "-o", tmp_path / "e.json")
    line = one_line(err.splitlines()[-1] + "\n") if err else ""
    assert rc == 2 and "--method fedprox: the training loss became non-finite" in line and "--lr 1e+308" in line
    assert not (tmp_path / "e.json").exists()


def test_a_model_beyond_memory_is_refused_before_drawing(capsys, tmp_path, monkeypatch):
    """``--mlp-hidden 1000000000``: the models' parameters are sized before they are drawn."""
    cap_memory(monkeypatch)
    rc, _, err = run(capsys, "learn", "synthetic", "--method", "local", "--model", "mlp", "--mlp-hidden",
                     "1000000000", "-o", tmp_path / "e.json")
    line = one_line(err)
    assert rc == 2 and "mlp model of 22,000,000,001 parameters needs about" in line
    assert "only 1 GiB are available" in line and not (tmp_path / "e.json").exists()


@pytest.mark.parametrize("command", [["learn", "synthetic", "--method", "fedavg"], ["oracle", "heart"]])
def test_hidden_units_for_a_model_without_a_hidden_layer_are_refused_not_ignored(capsys, tmp_path, command):
    """``--mlp-hidden`` on synthetic's linear or heart's logistic model changed nothing and was recorded as if it had."""
    rc, _, err = run(capsys, *command, "--mlp-hidden", "8", "-o", tmp_path / "e.json")
    line = one_line(err)
    assert rc == 2 and "--mlp-hidden 8: hidden units are a setting of model 'mlp'; this run trains model" in line
    assert not (tmp_path / "e.json").exists()


def test_a_dimension_beyond_memory_is_refused_before_drawing(capsys, tmp_path, monkeypatch):
    cap_memory(monkeypatch)
    rc, _, err = run(capsys, "learn", "synthetic", "--method", "local", "--dim", "2000000000", "-o", tmp_path / "e.json")
    line = one_line(err)
    assert rc == 2 and "--dim 2000000000: 6 clients' " in line and "GiB of memory; only 1 GiB are available" in line
