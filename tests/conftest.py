"""Shared test helpers: paths, small games, and naive reference implementations.

The naive functions below work on frozensets with plain Python loops, written
from docs/concepts.md §1–3 independently of the vectorised core, so that tests can compare
the two.  Import them with ``from conftest import ...``.
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

from coalitions.game import Game

ROOT = Path(__file__).resolve().parents[1]
#: The worked examples shipped with the docs (the spec's copies live outside the repository; the tests
#: read only what the repository and its sdist hold).
EXAMPLES = ROOT / "docs" / "examples"
DATA = Path(__file__).resolve().parent / "data"
MALFORMED = DATA / "malformed"
NO_CE = DATA / "shared-no-ce.json"

TOL = 1e-9

#: Every file of the malformed corpus and a fragment its one-line error message must contain
#: (besides the file name).
MALFORMED_FAULTS = {
    "truncated.json": "not valid JSON",
    "empty.json": "not valid JSON",
    "deep-nesting.json": "not valid JSON",
    "giant-integer.json": "not valid JSON",
    "not-an-object.json": "JSON object",
    "not-utf8.json": "cannot be read",
    "wrong-format.json": "unknown format 'coalitions/game@3'",
    "no-format.json": "unknown format None",
    "no-clients.json": "'clients' must be a non-empty list",
    "clients-field-missing.json": "missing field 'clients'",
    "duplicate-client.json": "client 'a' is listed twice",
    "comma-in-name.json": "client name 'a,b'",
    "unknown-client.json": "unknown client 'zed'",
    "unknown-client-in-key.json": "coalition 'a,zed' names unknown client 'zed'",
    "missing-coalition.json": "client 'a' for coalition 'a,b' is missing",
    "missing-client-values.json": "no values given for client 'b'",
    "nan.json": "client 'a' for coalition 'a,b' is not finite",
    "infinity.json": "client 'a' for coalition 'a,b' is not finite",
    "overflow.json": "client 'a' for coalition 'a,b' is not finite",
    "huge-integer.json": "client 'a' for coalition 'a,b' is 1000...000 (401 digits), too large for a float",
    "string-value.json": "client 'a' for coalition 'a,b' is not a number",
    "boolean-value.json": "client 'a' for coalition 'a,b' is not a number",
    "client-twice-in-key.json": "coalition 'a,a' names client 'a' twice",
    "coalition-lacks-client.json": "coalition 'b' listed under client 'a' does not contain 'a'",
    "coalition-given-twice.json": "coalition 'b,a' of client 'a' is given twice",
    "empty-name-in-key.json": "coalition 'a,' has an empty member name",
    "bad-sense.json": "'sense' must be 'max' or 'min'",
    "values-not-object.json": "'values' must be a mapping",
    "client-values-not-object.json": "values of client 'a' must be a mapping",
    "provenance-not-object.json": "'provenance' must be an object",
    "wrong-shape.npz": "'values' must have shape (2, 4)",
    "missing-array.npz": "lacks array 'sense'",
    "corrupt.npz": "not a .npz game: not a zip archive",
    "truncated.npz": "not a readable .npz game",
    "nan-value.npz": "client 'a' for coalition 'a,b' is missing",
    "bad-sense.npz": "'sense' must be 'max' or 'min'",
    "numeric-clients.npz": "'clients' must be a 1-d array of names",
    "string-values.npz": "'values' must be numeric",
    "pickled-values.npz": "array 'values' holds pickled Python objects",
    "bad-provenance.npz": "'provenance' must hold a JSON object",
    "duplicate-client.npz": "client 'a' is listed twice",
    # JSON keeps the last of two equal keys: a silently different game unless refused
    "duplicate-sense.json": "duplicate key 'sense' in the top-level object",
    "duplicate-coalition-key.json": "duplicate key 'a,b' in object ['values']['a']",
    "duplicate-client-values.json": "duplicate key 'a' in object ['values']",
    "duplicate-provenance-key.json": "duplicate key 'seed' in object ['provenance']['runs'][0]",
    "duplicate-provenance-key.npz": "'provenance' must hold a JSON object (duplicate key 'seed'",
    "duplicate-member.npz": "the archive holds member 'values.npy' twice",
    # client names: valid Unicode, no control characters or line separators
    "lone-surrogate-name.json": "'\\ud800' at ['clients'][1] is not valid Unicode",
    "surrogate-name.npz": "client name '\\ud800' is not valid Unicode",
    "newline-in-name.json": "client name 'b\\nc' may not contain control characters",
    "newline-name.npz": "client name 'b\\nc' may not contain control characters",
    "nul-in-name.json": "client name 'b\\x00' may not contain control characters",
    "escape-in-name.json": "client name 'b\\x1b[31m' may not contain control characters",
    "line-separator-in-name.json": "client name 'b\\u2028c' may not contain line or paragraph separators",
    # N6 (docs/formats.md): NaN where bit i is not in mask
    "value-outside-coalition.npz": "value of client 'a' for coalition 'b', which does not contain it, must be NaN (got 7.0)",
    "value-for-empty-coalition.npz": "value of client 'b' for the empty coalition (mask 0), which does not contain it",
    "integer-values.npz": "value of client 'a' for the empty coalition (mask 0), which does not contain it",
    # .npz headers are checked before any data is read
    "npy-not-npz.npz": "not a .npz game: a single .npy array",
    "too-many-clients.npz": "30 clients: exhaustive games hold at most 26",
    "values-header-lies.npz": "'values' must have shape (2, 4) for 2 clients, got (2, 1099511627776)",
    # numbers a float64 cannot hold, and names that print alike (issue 20)
    "long-double.npz": "'values': entry (0, 3) is 1e+400, too large for float64",
    "zero-width-name.json": "client name 'a\\u200b' may not contain invisible format characters (it holds U+200B",
    "bidi-override-name.json": "client name '\\u202eb' may not contain invisible format characters (it holds U+202E",
    "nfd-twin-names.json": "client names '\\xe9' and 'e\\u0301' are the same after Unicode normalisation (NFKC)",
}


# ---------------------------------------------------------------------------- building games
def game_from_flat(n: int, flat, names=None, sense: str = "max") -> Game:
    """A game whose values for coalitions ``∋ i`` are taken, in mask order, from ``flat``."""
    arr = np.full((n, 1 << n), np.nan)
    k = 0
    for i in range(n):
        for m in range(1, 1 << n):
            if (m >> i) & 1:
                arr[i, m] = flat[k]
                k += 1
    assert k == len(flat)
    return Game.from_array(arr, names, sense)


def n_values(n: int) -> int:
    return n * (1 << (n - 1))


@st.composite
def tied_games(draw, min_n: int = 1, max_n: int = 7, levels: int = 3):
    """Games whose values come from ``{0, ..., levels-1}``: ties everywhere."""
    n = draw(st.sampled_from(range(min_n, max_n + 1)))  # uniform, unlike integers()
    flat = draw(st.lists(st.integers(0, levels - 1), min_size=n_values(n), max_size=n_values(n)))
    return game_from_flat(n, flat)


@st.composite
def continuous_games(draw, min_n: int = 1, max_n: int = 7):
    """Games with Gaussian values: no two values within any tolerance (almost surely)."""
    n = draw(st.sampled_from(range(min_n, max_n + 1)))  # uniform, unlike integers()
    seed = draw(st.integers(0, 2**32 - 1))
    flat = np.random.default_rng(seed).normal(size=n_values(n))
    return game_from_flat(n, flat)


def any_games(min_n: int = 1, max_n: int = 7):
    return st.one_of(tied_games(min_n, max_n), continuous_games(min_n, max_n))


def has_ties(game: Game, tol: float = TOL) -> bool:
    """Does some client have two values within ``tol``?"""
    for i in range(game.n):
        row = np.sort(game.values[i][~np.isnan(game.values[i])])
        if row.size > 1 and np.min(np.diff(row)) <= tol:
            return True
    return False


# ---------------------------------------------------------------------------- naive references
def fs(mask: int) -> frozenset:
    return frozenset(i for i in range(mask.bit_length()) if (mask >> i) & 1)


def to_mask(s) -> int:
    return sum(1 << i for i in s)


def subsets(s):
    """Every subset of ``s`` (the empty set included) as frozensets."""
    items = sorted(s)
    for r in range(len(items) + 1):
        for c in combinations(items, r):
            yield frozenset(c)


def v(game: Game, i: int, s) -> float:
    return float(game.values[i, to_mask(s)])


def naive_mau(game: Game, i: int, r) -> float:
    """``max_{S ⊆ R, i ∈ S} v_i(S)`` by looping over subsets."""
    return max(v(game, i, s) for s in subsets(r) if i in s)


def naive_payoff(game: Game, semantics: str, i: int, k) -> float:
    return naive_mau(game, i, k) if semantics == "personalized" else v(game, i, k)


def naive_ocs(game: Game, i: int, r, tol: float = TOL):
    """docs/concepts.md §2: smallest qualifying S, higher value first, then smaller bitmask.

    Returns ``(chosen, alternatives)`` as bitmasks without ``i``; the alternatives
    are all smallest qualifying sets, chosen first.
    """
    best = naive_mau(game, i, r)
    ok = [s for s in subsets(r) if i in s and v(game, i, s) >= best - tol]
    size = min(len(s) for s in ok)
    smallest = [s for s in ok if len(s) == size]
    smallest.sort(key=lambda s: (-v(game, i, s), to_mask(s)))
    alts = [to_mask(s - {i}) for s in smallest]
    return alts[0], alts


def naive_condition_a(game, semantics, k, r, tol=TOL) -> bool:
    return all(naive_payoff(game, semantics, i, k) >= naive_mau(game, i, r) - tol for i in k)


def naive_stable_sets(game: Game, r, semantics: str = "personalized", tol: float = TOL) -> set:
    """Every ``K ⊆ R`` stable in ``R`` (docs/concepts.md §3 (a) and (b)), as bitmasks."""
    passing = [k for k in subsets(r) if k and naive_condition_a(game, semantics, k, r, tol)]
    return {to_mask(k) for k in passing if not any(p < k for p in passing)}


def naive_partitions(items):
    """All set partitions of a list, recursively (independent of restricted growth strings)."""
    items = list(items)
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in naive_partitions(rest):
        yield [frozenset([first])] + part
        for k in range(len(part)):
            yield part[:k] + [part[k] | {first}] + part[k + 1:]


def naive_payoffs(game: Game, semantics: str = "personalized") -> dict:
    """``{(i, K): payoff_i(K)}`` for every coalition ``K ∋ i``, by loops (MAU as a plain max)."""
    table = {}
    for k in subsets(range(game.n)):
        for i in k:
            table[i, k] = naive_payoff(game, semantics, i, k)
    return table


def naive_inner(game, partition, semantics="personalized", tol=TOL, pay=None) -> bool:
    pay = naive_payoffs(game, semantics) if pay is None else pay
    for k in partition:
        for sub in subsets(k):
            if sub and sub != k:
                if not any(pay[i, sub] < pay[i, k] - tol for i in sub):
                    return False
    return True


def naive_outer(game, partition, semantics="personalized", tol=TOL, pay=None) -> bool:
    pay = naive_payoffs(game, semantics) if pay is None else pay
    where = {i: k for k in partition for i in k}
    for kp in subsets(range(game.n)):
        if kp and kp not in partition:
            if all(pay[i, kp] > pay[i, where[i]] + tol for i in kp):
                return False
    return True


def naive_equilibria(game, semantics="personalized", tol=TOL) -> set:
    """Every CE as a frozenset of bitmask blocks."""
    pay = naive_payoffs(game, semantics)
    out = set()
    for part in naive_partitions(range(game.n)):
        if naive_inner(game, part, semantics, tol, pay) and naive_outer(game, part, semantics, tol, pay):
            out.add(frozenset(to_mask(k) for k in part))
    return out


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session", autouse=True)
def thread_policy():
    """The learners' thread policy for the whole session (as the CLI applies it), when torch is here."""
    try:
        from coalitions.learners.training.threads import configure
    except ImportError:  # the core's tests run without the learners
        return
    try:
        configure(None)
    except ImportError:  # torch missing
        pass


#: Under shared semantics peeling stalls on this game (the only source component, the grand
#: coalition, has no sub-coalition meeting condition (a)), yet everyone alone is a CE.
STALLS = Game.from_mapping(["p", "q", "r"], {
    "p": {"p": 1, "p,q": 2, "p,r": 0, "p,q,r": 1},
    "q": {"q": 1, "p,q": 0, "q,r": 1, "p,q,r": 2},
    "r": {"r": 0, "p,r": 2, "q,r": 0, "p,q,r": 1},
})


@pytest.fixture
def tie_game():
    from coalitions.io import read_game

    return read_game(EXAMPLES / "tie.json")


@pytest.fixture
def me_game():
    from coalitions.io import read_game

    return read_game(EXAMPLES / "mean-estimation-5-5-25.json")


@pytest.fixture
def no_ce_game():
    from coalitions.io import read_game

    return read_game(NO_CE)


# ---------------------------------------------------------------------------- docs/formats.md shapes
def _names(x, clients):
    assert isinstance(x, list) and x and all(isinstance(c, str) and c in clients for c in x), x


def check_equilibrium_json(doc: dict, clients) -> None:
    """Assert that ``doc`` has every field docs/formats.md gives ``coalitions/equilibrium@1``, well typed."""
    clients = list(clients)
    assert doc["format"] == "coalitions/equilibrium@1"
    assert doc["semantics"] in ("personalized", "shared")
    part = doc["partition"]
    assert isinstance(part, list) and part
    for block in part:
        _names(block, clients)
    flat = [c for b in part for c in b]
    assert sorted(flat) == sorted(clients) and len(set(flat)) == len(flat)  # a partition
    assert isinstance(doc["rounds"], list)
    for rnd in doc["rounds"]:
        assert isinstance(rnd, list)
        for block in rnd:
            _names(block, clients)
            assert block in part
    pay = doc["payoffs"]
    assert isinstance(pay, dict) and set(pay) == set(clients)
    assert all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in pay.values())
    cert = doc["certificate"]
    assert isinstance(cert["inner_agreement"], bool) and isinstance(cert["outer_agreement"], bool)
    assert cert["method"] in ("exhaustive", "sampled")


def check_graph_json(doc: dict, clients) -> None:
    """``coalitions/benefit-graph@1``: format, clients, edges ``[j, i]`` between those clients."""
    assert doc["format"] == "coalitions/benefit-graph@1"
    assert isinstance(doc["clients"], list) and set(doc["clients"]) <= set(clients)
    for e in doc["edges"]:
        assert isinstance(e, list) and len(e) == 2 and e[0] != e[1]
        assert e[0] in doc["clients"] and e[1] in doc["clients"]


@pytest.fixture
def flower_task():
    """Flower messages are built inside a running task; an in-memory grid plays one (run 1, task 1, node 0).

    For the tests that drive the ServerApp's code over a grid in memory (tests/test_federated*.py).
    """
    flwr_task = pytest.importorskip("flwr.supercore.task_identity")
    ti = flwr_task.TaskIdentity
    saved = (ti._run_id, ti._task_id, getattr(ti, "_node_id", None))
    ti.run_id, ti.task_id, ti.node_id = 1, 1, 0
    yield
    ti._run_id, ti._task_id = saved[:2]
    if hasattr(ti, "_node_id"):
        ti._node_id = saved[2]


def build_distribution(kind: str, source: Path, outdir: Path) -> Path:
    """``python -m build --{kind} --no-isolation`` of ``source``: the one file it writes (skips without build)."""
    import subprocess
    import sys

    pytest.importorskip("build")
    proc = subprocess.run([sys.executable, "-m", "build", f"--{kind}", "--no-isolation", "--outdir", str(outdir),
                           str(source)], capture_output=True, text=True)
    if proc.returncode != 0 and "setuptools" in proc.stderr and "No module named" in proc.stderr:
        pytest.skip("setuptools is not importable for a no-isolation build")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (path,) = outdir.glob("*.whl" if kind == "wheel" else "*.tar.gz")
    return path


@pytest.fixture
def one_thread():
    """PyTorch on one thread for the test (tiny models must not oversubscribe the cores); restored after.

    A module takes it for every test with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(autouse=True)
def no_thread_override_leaks():
    """A command run in process (``cli.main([... "--threads", "1"])``) sets the process's ``--threads``
    override and, unlike a real command, does not exit: clear it after each test, so that no test
    sees another's (the learners are not imported for a test that does not use them)."""
    import sys

    yield
    threads = sys.modules.get("coalitions.learners.training.threads")
    if threads is not None:
        threads.set_override(None)


def run(capsys, *args):
    """``coalitions ARGS`` in process: its exit code, stdout and stderr."""
    from coalitions import cli

    rc = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


#: The warnings a command run as its own process does not print (Python's default filters outside ``__main__``).
HIDDEN_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def run_as_command(*args, env=None):
    """``coalitions ARGS`` in process, as a command would end: its exit code, stdout and stderr.

    What the command prints is captured here (no ``capsys`` needed: a module's fixture may call it);
    ``env``: environment variables set while it runs (the processes it starts inherit them).
    Where a test asked a subprocess, a warning the command's process would print to stderr
    (any but :data:`HIDDEN_WARNINGS`) fails the test here too (pytest would otherwise catch it).
    """
    import contextlib
    import io
    import warnings

    from coalitions import cli

    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err), pytest.MonkeyPatch.context() as mp:
        for k, v in (env or {}).items():
            mp.setenv(k, v)
        warnings.simplefilter("always")
        rc = cli.main([str(a) for a in args])
    shown = [f"{w.category.__name__}: {w.message}" for w in caught if not issubclass(w.category, HIDDEN_WARNINGS)]
    assert not shown, shown
    return rc, out.getvalue(), err.getvalue()


def one_line(err: str) -> str:
    """The one line a refused command prints (the contract of docs/cli.md, "Bad input"): no traceback, no warning."""
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "Warning" not in err, err
    return lines[0]


def pytest_collection_modifyitems(config, items):
    """Run the ``slow`` tests first, each group in its collection order.

    Under pytest-xdist (``-n 2 --dist worksteal``, pyproject.toml) a long end-to-end test that starts
    last keeps one worker busy while the other has nothing left to do; started first, the short tests
    fill in around it.  The order is a stable sort of the collected order, the same in every worker
    (xdist requires that), and does not change what runs.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
