"""The ``coalitions`` command (SPEC §8): parse, call the library, print.

Exit codes: 0 success; 1 a negative answer (an axiom is violated, no CE
exists); 2 unusable input or arguments, with one line naming the file, client
or coalition at fault and never a traceback.
"""

from __future__ import annotations

import sys

import click

import coalitions as co
from coalitions import io as cio
from coalitions import render
from coalitions.brute_force import MAX_ENUMERATE

FORMATS = click.Choice(["text", "json", "dot"])
SEMANTICS = click.Choice(["personalized", "shared"])


class Negative(Exception):
    """A well-formed question whose answer is no (exit code 1)."""


def _emit(text: str, output: str | None) -> None:
    if output:
        try:
            with open(output, "w", encoding="utf-8") as f:
                f.write(text if text.endswith("\n") else text + "\n")
        except OSError as e:
            raise co.InputError(f"{output}: cannot write ({e.strerror})") from None
    else:
        click.echo(text.rstrip("\n"))


def _progress(label: str):
    """A progress callback drawing a bar on stderr when it is a terminal."""
    if not sys.stderr.isatty():
        return None
    state = {}

    def update(done: int, total: int) -> None:
        bar = state.get("bar")
        if bar is None:
            bar = state["bar"] = click.progressbar(length=total, label=label, file=sys.stderr)
            bar.__enter__()
        bar.update(done - bar.pos)
        if done >= total:
            bar.__exit__(None, None, None)

    return update


def _tol(value: float) -> float:
    if not value >= 0 or value == float("inf"):
        raise co.InputError(f"--tol must be a finite number >= 0, got {value}")
    return value


common_game = [
    click.option("--semantics", type=SEMANTICS, default="personalized", show_default=True,
                 help="Payoff of a member: best model on the coalition's Pareto front (personalized) "
                      "or the coalition's own model (shared)."),
    click.option("--tol", type=float, default=1e-9, show_default=True,
                 help="Absolute tolerance: values within it are equal."),
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
@click.argument("game_file", metavar="GAME")
@with_common
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True)
@click.option("--exhaustive-up-to", type=click.IntRange(0), default=None,
              help="Check (sub-)coalitions exhaustively over at most this many clients, sample beyond "
                   "[default: always exhaustive].")
@click.option("--max-enumerate", type=click.IntRange(1), default=MAX_ENUMERATE, show_default=True,
              help="Largest game searched exhaustively when peeling finds no CE (shared semantics).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for sampled certificates.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here instead of stdout.")
def solve(game_file, semantics, tol, fmt, exhaustive_up_to, max_enumerate, seed, output):
    """Peel GAME into a collaboration equilibrium and certify it."""
    game = co.read_game(game_file)
    try:
        eq = co.solve(game, semantics, _tol(tol), exhaustive_up_to=exhaustive_up_to,
                      max_enumerate=max_enumerate, seed=seed, progress=_progress("enumerating partitions"))
    except co.NoEquilibrium as e:
        raise Negative(f"{game_file}: {e}") from None
    if fmt == "json":
        text = cio.write_json(cio.equilibrium_to_json(eq), None)
    elif fmt == "dot":
        text = render.equilibrium_dot(eq)
    else:
        text = render.equilibrium_text(eq)
    _emit(text, output)
    if eq.certificate is not None and not eq.certificate.holds:
        raise Negative(f"{game_file}: the partition fails its certificate (see above)")


@cli.command()
@click.argument("game_file", metavar="GAME")
@click.option("--partition", "partition_text", required=True, help='Blocks separated by "|", members by ",": "A,B|C".')
@with_common
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--exhaustive-up-to", type=click.IntRange(0), default=None,
              help="Exhaustive over at most this many clients, sampled beyond [default: always exhaustive].")
@click.option("--seed", type=int, default=0, show_default=True)
def verify(game_file, partition_text, semantics, tol, fmt, exhaustive_up_to, seed):
    """Check a partition against both CE axioms (and the classic stability notions).

    Exit 0 when it is a CE, 1 when it is not, 2 when the partition is unusable.
    """
    game = co.read_game(game_file)
    try:
        part = co.parse_partition(game, partition_text)
    except co.InputError as e:
        raise co.InputError(f"--partition {partition_text!r}: {e}") from None
    reports = co.all_checks(game, part, semantics, _tol(tol), exhaustive_up_to, seed)
    ok = reports["inner_agreement"].holds and reports["outer_agreement"].holds
    if fmt == "json":
        _emit(cio.write_json(cio.checks_to_json(game, part, reports), None), None)
    else:
        head = (f"Partition {co.format_partition(game, part)} is "
                f"{'a' if ok else 'NOT a'} collaboration equilibrium ({semantics} semantics)")
        _emit("\n".join([head, ""] + [render.report_text(game, r) for r in reports.values()]), None)
    if not ok:
        raise Negative(None)


@cli.command()
@click.argument("game_file", metavar="GAME")
@with_common
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--max-clients", type=click.IntRange(1), default=MAX_ENUMERATE, show_default=True,
              help="Refuse larger games (Bell(N) partitions are enumerated).")
def enumerate(game_file, semantics, tol, fmt, max_clients):
    """Every collaboration equilibrium of GAME, by brute force over all partitions.

    Exit 1 when there is none.
    """
    game = co.read_game(game_file)
    found = co.equilibria(game, semantics, _tol(tol), max_clients=max_clients,
                          progress=_progress("enumerating partitions"))
    if fmt == "json":
        _emit(cio.write_json(cio.equilibria_to_json(game, semantics, found), None), None)
    else:
        lines = [f"{len(found)} collaboration equilibri{'um' if len(found) == 1 else 'a'} "
                 f"({semantics} semantics, {co.brute_force.bell(game.n):,} partitions checked)"]
        lines += [f"  {co.format_partition(game, p)}" for p in found]
        _emit("\n".join(lines), None)
    if not found:
        raise Negative(None)


@cli.command()
@click.argument("game_file", metavar="GAME")
@click.option("--within", default=None, help="Remaining set R as 'A,B,C' [default: all clients].")
@click.option("--tol", type=float, default=1e-9, show_default=True)
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True)
def graph(game_file, within, tol, fmt):
    """The benefit graph BG(R): each client's optimal collaborator set, ambiguity shown."""
    game = co.read_game(game_file)
    if within is None:
        r = game.grand
    else:
        try:
            r = game.coalition(within)
        except co.InputError as e:
            raise co.InputError(f"--within: {e}") from None
    bg = co.ExactOracle(game, "personalized", _tol(tol)).benefit_graph(r)
    if fmt == "json":
        text = cio.write_json(cio.benefit_graph_to_json(bg), None)
    elif fmt == "dot":
        text = render.graph_dot(bg)
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
@click.option("--mu-e", type=float, default=10.0, show_default=True, help="Mean noise variance.")
@click.option("--sigma2", type=float, default=1.0, show_default=True, help="Spread of the true means.")
@click.option("--names", default=None, help="Client names, comma-separated [default: 0,1,...].")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
def mean_estimation(sizes, mu_e, sigma2, names, output):
    """Mean estimation under uniform federation (Donahue & Kleinberg; SPEC §4)."""
    n = _numbers(sizes, "--sizes")
    names = names.split(",") if names else None
    if names is not None and len(names) != len(n):
        raise co.InputError(f"--names gives {len(names)} names for {len(n)} sizes")
    _write(co.mean_estimation(n, mu_e, sigma2, names), output)


@game.command("planted")
@click.option("--groups", required=True, help="Hidden group sizes, e.g. 3,3,2.")
@click.option("--noise", type=float, default=0.05, show_default=True, help="Noise standard deviation.")
@click.option("--ties", type=float, default=0.0, show_default=True, help="Round values to multiples of this (0: off).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
def planted(groups, noise, ties, seed, output):
    """Hidden groups whose members help each other, with noise and optional ties."""
    _write(co.planted(_numbers(groups, "--groups", int), noise, ties, seed), output)


def _write(g, output):
    try:
        co.write_game(g, output)
    except OSError as e:
        raise co.InputError(f"{output}: cannot write ({e.strerror})") from None
    click.echo(f"wrote {output}: {g.n} clients", err=True)


# ---------------------------------------------------------------------------- data (issue 3)
DATASET_OPTIONS = ("clients", "samples", "rho", "dim", "noise", "flipped", "partition", "groups",
                   "alpha", "metric", "hospitals", "max_train", "seed")
DATASETS = ("synthetic", "heart", "digits", "mnist", "adult")

_dataset_option_list = [
    click.option("--clients", type=int, default=None,
                 help="Number of clients (synthetic, digits, mnist) [loader default].", show_default=False),
    click.option("--samples", type=int, default=None, help="Training samples per client (synthetic)."),
    click.option("--rho", type=float, default=None, help="Spread of the clients' true weights (synthetic)."),
    click.option("--dim", type=int, default=None, help="Feature dimension (synthetic)."),
    click.option("--noise", type=float, default=None, help="Label noise standard deviation (synthetic)."),
    click.option("--flipped", default=None, help="Clients with negated labels, e.g. 3,4,5 (synthetic)."),
    click.option("--partition", type=click.Choice(["pathological", "practical", "dirichlet"]), default=None,
                 help="Label-skew scheme (digits, mnist)."),
    click.option("--groups", type=int, default=None, help="Client groups sharing dominant classes (practical)."),
    click.option("--alpha", type=float, default=None, help="Dirichlet concentration (dirichlet)."),
    click.option("--metric", type=click.Choice(["accuracy", "auc"]), default=None,
                 help="Game metric of a binary dataset (heart, adult) [accuracy]."),
    click.option("--hospitals", default=None, help="Subset of Cleveland,Hungary,Switzerland,VA (heart)."),
    click.option("--max-train", type=int, default=None, help="Cap on each client's training rows (adult)."),
    click.option("--seed", type=int, default=None, help="Seed of the data split and of training [0]."),
]


def dataset_options(f):
    """Add the loader options shared by every command that reads a dataset (SPEC §6)."""
    for opt in reversed(_dataset_option_list):
        f = opt(f)
    return f


def _threads(threads: int | None) -> None:
    """Apply the thread policy (docs/performance.md) with ``--threads`` as its override."""
    from coalitions.learners.training.threads import configure

    configure(threads)


def _backend_options(f):
    """``--backend local|ray`` and ``--address`` (docs/performance.md, "Ray")."""
    f = click.option("--address", default=None, metavar="ADDR",
                     help="Ray cluster to join (HOST:PORT, or auto) [a local Ray on this machine].")(f)
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
    return load(dataset, **given)


@cli.command()
@click.argument("dataset", type=click.Choice(DATASETS))
@dataset_options
@click.option("--model", type=click.Choice(["auto", "linear", "logistic", "mlp", "cnn"]), default="auto",
              show_default=True, help="auto: linear (closed form) for regression, logistic otherwise.")
@click.option("--epochs", type=click.IntRange(1), default=None, help="Training epochs [per-model default].")
@click.option("--lr", type=float, default=None, help="Adam learning rate [per-model default].")
@click.option("--l2", type=float, default=1e-3, show_default=True, help="Weight decay on weights.")
@click.option("--hidden", type=click.IntRange(1), default=64, show_default=True, help="MLP hidden units.")
@click.option("--batch-size", type=click.IntRange(1), default=None, help="Minibatch size [full batch].")
@click.option("--chunk-size", type=click.IntRange(1), default=None,
              help="Subset models trained together [as many as fit --memory-mb].")
@click.option("--memory-mb", type=click.FloatRange(1), default=512.0, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--threads", type=click.IntRange(1), default=None,
              help="CPU threads for training [the thread policy: 1 for small models, else the free cores].")
@click.option("--checkpoint", type=click.Path(dir_okay=False), default=None,
              help="Record finished chunks here; a rerun resumes from it.")
@_backend_options
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Game file: coalitions/game@1 JSON, or .npz by the ending.")
def oracle(dataset, model, epochs, lr, l2, hidden, batch_size, chunk_size, memory_mb, device, threads,
           checkpoint, backend, address, output, **data_opts):
    """Train a model on every subset of DATASET's clients: the exact game (SPEC §5).

    v_i(S) is the metric on client i's validation data of the model trained on
    the training data of S.  Linear regression is solved in closed form; other
    models train all subset models at once, chunked, with --checkpoint to resume.
    """
    from coalitions.learners.exact import ExhaustiveOracle

    _threads(threads)
    fed = load_federation(dataset, data_opts)
    est = ExhaustiveOracle(model=model, epochs=epochs, lr=lr, l2=l2, hidden=hidden, batch_size=batch_size,
                           chunk_size=chunk_size, memory_mb=memory_mb, device=device,
                           seed=data_opts.get("seed") or 0, checkpoint=checkpoint, threads=threads,
                           progress=_progress(f"training {(1 << fed.n) - 1} subset models"),
                           backend=backend, address=_address(backend, address))
    est.fit(fed)
    if fed.n >= 16 and not str(output).endswith(".npz"):
        click.echo(f"note: {fed.n} clients make a large JSON game; a name ending in .npz writes the "
                   "compact binary form", err=True)
    try:
        co.write_game(est.game_, output)
    except OSError as e:
        raise co.InputError(f"{output}: cannot write ({e.strerror})") from None
    resumed = f", {est.chunks_resumed_} chunk(s) from checkpoint" if est.chunks_resumed_ else ""
    click.echo(f"wrote {output}: {fed.n} clients, {(1 << fed.n) - 1} subset models, "
               f"{est.config_['model']} ({est.method_}, {est.device_}{resumed}), {est.elapsed_:.2f} s", err=True)


# ---------------------------------------------------------------------------- learn, compare (issue 3)
def _method_options(f):
    """One flag per option of every registered learner (learners/registry.py); default None = the method's."""
    from coalitions.learners.methods.registry import all_options

    types = {"int": int, "float": float, "str": str}
    for o in reversed(all_options()):
        shown = "" if o.default is None else f" [{o.default}]"
        if o.kind == "bool":
            f = click.option(f"--{o.flag}/--no-{o.flag}", o.key, default=None, help=o.help + shown)(f)
        elif o.kind == "choice":
            f = click.option(f"--{o.flag}", o.key, type=click.Choice(list(o.choices)), default=None,
                             help=o.help + shown)(f)
        else:
            f = click.option(f"--{o.flag}", o.key, type=types[o.kind], default=None, help=o.help + shown)(f)
    return f


def _method_names():
    from coalitions.learners.methods.registry import METHODS

    return list(METHODS)


@cli.command()
@click.argument("dataset", type=click.Choice(DATASETS))
@click.option("--method", required=True, type=click.Choice(_method_names()),
              help="The learner (see docs/learners-spo.md).")
@_method_options
@dataset_options
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--threads", type=click.IntRange(1), default=None,
              help="CPU threads for training [the thread policy: 1 for small models, else the free cores].")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Estimate file (coalitions/estimate@1 JSON).")
def learn(dataset, method, device, threads, output, **opts):
    """Learn who benefits from whom on DATASET: a coalitions/estimate@1 file (SPEC §5, §7).

    The estimate holds the weights, each client's validation and test metric,
    the learned benefit graph and the equilibrium that peeling reaches on the
    learner's benefit oracle.  Options apply to the methods that take them.
    """
    from coalitions.estimate import write_estimate
    from coalitions.learners.methods.registry import METHODS, create

    keys = {o.key for m in METHODS.values() for o in m.options}  # every method's flags; create() checks
    given = {k: v for k, v in opts.items() if k in keys and k not in DATASET_OPTIONS and v is not None}
    data_opts = {k: v for k, v in opts.items() if k in DATASET_OPTIONS}
    est = create(method, given, device=device, seed=data_opts.get("seed") or 0,
                 progress=_progress(f"training {method}"))
    fed = load_federation(dataset, data_opts)
    _threads(threads)
    est.fit(fed)
    write_estimate(est.estimate_, output)
    e = est.estimate_
    click.echo(f"wrote {output}: {method} on {dataset} ({fed.n} clients), equilibrium "
               f"{' | '.join(','.join(b) for b in e.blocks())}", err=True)


@cli.command("compare")
@click.argument("estimate_file", metavar="ESTIMATE")
@click.argument("game_file", metavar="GAME")
@with_common
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def compare_cmd(estimate_file, game_file, semantics, tol, fmt):
    """Score a learned ESTIMATE against the exact GAME (same client names).

    Edge precision / recall / F1 of BG(all), the share of exact OCS, whether the
    equilibria coincide, their adjusted Rand index, and each client's regret
    (exact payoff in the exact CE minus exact payoff in the learned CE).
    """
    from coalitions.compare import compare, compare_text
    from coalitions.estimate import read_estimate

    est = read_estimate(estimate_file)
    game = co.read_game(game_file)
    try:
        res = compare(est, game, semantics, _tol(tol))
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
@click.argument("experiment", type=click.Choice(["synthetic", "heart", "adult", "digits"]))
@click.option("--quick", is_flag=True, help="Short settings: one seed, fewer rounds and steps.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--seeds", default=None, help="Comma-separated seeds, instead of the experiment's.")
@click.option("--threads", type=click.IntRange(1), default=None,
              help="CPU threads for training [the thread policy: 1 for small models, else the free cores].")
@_backend_options
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False),
              help="Folder for report.md, results.json and the figures (created if missing).")
def reproduce_cmd(experiment, quick, device, seeds, threads, backend, address, out):
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
    _threads(threads)
    show = PieceProgress(f"[{experiment}] ", sys.stderr)
    try:
        res = reproduce(experiment, out, quick=quick, device=device, seeds=seed_list, log=show.line,
                        progress=show.progress, backend=backend, address=_address(backend, address))
    except KeyboardInterrupt:
        show.clear()
        click.echo(f"coalitions: finished pieces are kept in {out}/runs/; run the same command again "
                   "to resume", err=True)
        raise
    for reg in res["regimes"]:
        ex = reg["runs"][0].get("exact")
        if ex is not None:
            click.echo(f"{experiment} {reg['name']}: exact CE "
                       f"{' | '.join(','.join(b) for b in ex['partition'])} (seed {reg['runs'][0]['seed']}, "
                       f"certificate {'holds' if ex['certificate'] else 'FAILS'})")
    if res.get("plot_hint"):
        click.echo(res["plot_hint"], err=True)
    click.echo(f"wrote {out}/: " + ", ".join(res["files"]) + f" ({res['elapsed_s']:.0f} s)", err=True)


def main(argv=None) -> int:
    """Entry point: run the command, map outcomes to exit codes 0 / 1 / 2."""
    try:
        cli.main(args=argv, prog_name="coalitions", standalone_mode=False)
        return 0
    except Negative as e:
        if e.args and e.args[0]:
            click.echo(f"coalitions: {e.args[0]}", err=True)
        return 1
    except co.InputError as e:
        click.echo(f"coalitions: error: {e}", err=True)
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
    except MemoryError:
        click.echo("coalitions: error: out of memory (the game is too large for this machine)", err=True)
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
    "matplotlib": "pip install 'collaboration-equilibrium[plot]'",
    "ray": "pip install 'collaboration-equilibrium[ray]'",
}


if __name__ == "__main__":
    sys.exit(main())
