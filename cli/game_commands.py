"""The commands that answer questions about a game file: solve, verify, enumerate, welfare, graph, compare.

Each reads GAME (coalitions/game@1 or @2 JSON, or .npz; docs/formats.md), calls the game core and
prints; none loads the learners or PyTorch.
"""

from __future__ import annotations

import click
import numpy as np

import coalitions as co
from coalitions import io as cio
from coalitions import render
from coalitions.brute_force import MAX_ENUMERATE
from coalitions.cli.output import Negative, emit, progress
from coalitions.cli.params import FORMATS, INPUT, NON_NEGATIVE, OUTPUT, SEED, SEMANTICS, Tolerance, check_tol
from coalitions.estimate import Estimate, read_game_or_estimate
from coalitions.game import parse_coalition
from coalitions.networks import graphml
from coalitions.noise import DEFAULT_FAMILY, FAMILIES

__all__ = ["solve", "verify", "enumerate_cmd", "welfare_cmd", "graph", "compare_cmd", "read_game_tol", "with_common",
           "no_values"]


def no_values(path: str, what: str) -> co.InputError:
    """The one line for a learned estimate given where values are needed: what to pass instead."""
    return co.InputError(f"{path}: a learned estimate (coalitions/estimate@1) holds no coalition values, which {what} "
                         "needs; pass the exact game (coalitions oracle DATASET ... -o game.json), or score the "
                         f"estimate against it (coalitions compare {path} GAME)")


def refuse_value_options(path: str, keep: tuple[str, ...] = ()) -> None:
    """Exit 2 when an option that acts on a game's values was given for a learned estimate (never ignore it)."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p.name in keep or p.name in ("fmt", "output"):
            continue
        if ctx.get_parameter_source(p.name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            flag = max(p.opts, key=len)
            raise co.InputError(f"{flag}: {path} is a learned estimate, which holds no coalition values for "
                                f"{flag} to act on; give it the exact game instead")


def read_game_tol(game_file: str, tol, z=None, family=None, *, loaded=None, what: str = "this command"):
    """The game, its replicates (or None), the tolerance and the level ``z``.

    ``--tol auto`` is resolved from the replicates.  ``--z`` defaults to 1.96 for a
    game that carries its uncertainty (``coalitions/game@2``) and 0 otherwise; a
    level given for a ``coalitions/game@1`` file with replicates makes them its
    uncertainty.  ``--family`` says which comparisons the level covers at once
    (:mod:`coalitions.noise`); it has nothing to act on in a game without uncertainty.
    ``loaded`` is what :func:`coalitions.io.read_game_or_estimate` already read; a learned
    estimate exits 2 (:func:`no_values`: ``what`` needs values).
    """
    from coalitions.noise import Uncertainty, check_z, resolve_z
    from coalitions.support import AUTO_TOL_FACTOR, auto_tol

    got = read_game_or_estimate(game_file) if loaded is None else loaded
    if isinstance(got, Estimate):
        raise no_values(game_file, what)
    game, reps = got
    if z is not None:
        z = check_z(z, "--z")
        if z > 0 and game.uncertainty is None and reps is not None:
            try:
                game = game.with_uncertainty(Uncertainty.from_replicates(reps))
            except co.InputError as e:
                raise co.InputError(f"{game_file}: --z {z:g}: {e}") from None
    if family is not None and game.uncertainty is not None:
        game = game.with_uncertainty(game.uncertainty.with_family(family))
    level = resolve_z(game, z)
    if tol != "auto":
        return game, reps, check_tol(tol), level
    if reps is None:
        raise co.InputError(f"{game_file}: --tol auto needs bootstrap replicates, and the game holds none "
                            "(coalitions oracle ... --replicates B records them)")
    try:
        with np.errstate(over="raise", invalid="raise", divide="ignore", under="ignore"):
            value = auto_tol(reps)
    except co.InputError as e:
        raise co.InputError(f"{game_file}: {e}") from None
    except FloatingPointError:
        value = float("inf")
    if not np.isfinite(value):  # never 0 with a warning: the spread is beyond a float
        raise co.InputError(f"{game_file}: --tol auto: the bootstrap SD of the marginal contributions overflows a "
                            f"float (the replicates differ by more than about 1e154); give --tol a number")
    click.echo(f"--tol auto: {value:.6g} ({AUTO_TOL_FACTOR:g} x the median bootstrap SD of the marginal contributions "
               f"over {reps.b} replicates)", err=True)
    return game, reps, value, level


common_game = [
    click.option("--semantics", type=SEMANTICS, default="personalized", show_default=True,
                 help="Payoff of a member: best model on the coalition's Pareto front (personalized) "
                      "or the coalition's own model (shared)."),
    click.option("--tol", type=Tolerance(), default=1e-9, show_default=True,
                 help="Absolute tolerance: values within it are equal; 'auto' derives it from the game's "
                      "bootstrap replicates."),
    click.option("--z", "z", type=NON_NEGATIVE, default=None,
                 help="Significance level of every comparison: a client prefers S to T only when "
                      "v(S) - v(T) > tol + z x its paired standard error; 0 compares point values "
                      "[default: 1.96 when GAME carries its uncertainty (coalitions/game@2), else 0]."),
    click.option("--family", type=click.Choice(FAMILIES), default=None,
                 help="Which comparisons one level z covers at once: each on its own, all of a client's, or all "
                      "of the game's (thresholds from the bootstrap max-t; docs/concepts.md §7) "
                      f"[default: {DEFAULT_FAMILY}]."),
]


def with_common(f):
    for opt in reversed(common_game):
        f = opt(f)
    return f



@click.command()
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
def solve(game_file, semantics, tol, z, family, fmt, exhaustive_up_to, max_enumerate, seed, retrained, output):
    """Peel GAME into a collaboration equilibrium and certify it.

    When GAME carries its measurement uncertainty (coalitions oracle records it),
    every comparison is made at the level --z and the certificate states the
    confidence it holds at.  When GAME holds bootstrap replicates, each is solved
    the same way and the support of the equilibrium over them is reported; each
    --retrained game likewise gives its support over retraining.

    GAME may be a learned estimate (coalitions learn ... -o est.json): its
    partition and benefit graph are shown, labelled as learned and without a
    certificate, since an estimate holds no coalition values.
    """
    from coalitions.support import support, support_over

    got = read_game_or_estimate(game_file)
    if isinstance(got, Estimate):
        refuse_value_options(game_file)
        emit(_learned(got, game_file, fmt), output)
        return
    game, reps, tol, z = read_game_tol(game_file, tol, z, family, loaded=got)
    others = []
    for path in retrained:
        other, _, _, _ = read_game_tol(path, tol, None, family, what="solve --retrained")
        if other.clients != game.clients or other.sense != game.sense:
            raise co.InputError(f"--retrained {path}: its clients or sense differ from {game_file}'s")
        others.append(other.with_uncertainty(game.uncertainty if z > 0 else None))
    options = {"exhaustive_up_to": exhaustive_up_to, "max_enumerate": max_enumerate, "seed": seed}
    try:
        eq = co.solve(game, semantics, tol, **options, progress=progress("enumerating partitions"), z=z)
    except co.NoEquilibrium as e:
        raise Negative(f"{game_file}: {e}") from None
    sup = again = None
    try:
        if reps is not None:
            sup = support(eq.masks, reps, semantics, tol, **options, progress=progress("solving replicates"),
                          z=z, uncertainty=game.uncertainty)
        if others:
            again = support_over(eq.masks, others, len(others), semantics, tol, **options, z=z,
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
    emit(text, output)
    if eq.certificate is not None and not eq.certificate.holds:
        if eq.certificate.noisy:
            raise Negative(f"{game_file}: no partition passes both axioms at z = {z:g}; the peeled one "
                           f"{eq.certificate.verdict} (see above)")
        raise Negative(f"{game_file}: the partition fails its certificate (see above)")


def _learned(e: Estimate, path: str, fmt: str) -> str:
    """``solve ESTIMATE``: the learned partition and ``BG(all)``, labelled as learned, without a certificate."""
    from coalitions.estimate import NOT_CERTIFIED, learned_equilibrium_to_json

    if fmt == "text":
        return render.learned_equilibrium_text(e, path)
    click.echo(f"note: {path} is a learned estimate ({e.method}): its partition is {NOT_CERTIFIED}", err=True)
    if fmt == "json":
        return cio.write_json({**learned_equilibrium_to_json(e), "estimate": str(path)}, None)
    if fmt == "dot":
        return render.learned_equilibrium_dot(e)
    return graphml(e.to_networkx())


@click.command()
@click.argument("game_file", metavar="GAME", type=INPUT)
@click.option("--partition", "partition_text", required=True, help='Blocks separated by "|", members by ",": "A,B|C".')
@with_common
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--exhaustive-up-to", type=click.IntRange(0), default=None,
              help="Exhaustive over at most this many clients, sampled beyond [default: always exhaustive].")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("-o", "--output", type=OUTPUT, help="Write here instead of stdout.")
def verify(game_file, partition_text, semantics, tol, z, family, fmt, exhaustive_up_to, seed, output):
    """Check a partition against both CE axioms (and the classic stability notions).

    On a game that carries its uncertainty the two axioms are checked at the level
    --z (the classic notions on point values).  Exit 0 when it is a CE, 1 when it
    is not, 2 when the partition is unusable.
    """
    game, _, tol, z = read_game_tol(game_file, tol, z, family, what="verify")
    try:
        part = co.parse_partition(game, partition_text)
    except co.InputError as e:
        raise co.InputError(f"--partition {partition_text!r}: {e}") from None
    reports = co.all_checks(game, part, semantics, tol, exhaustive_up_to, seed)
    cert = co.certify(game, part, semantics, tol, exhaustive_up_to, seed, z=z)
    reports["inner_agreement"], reports["outer_agreement"] = cert.inner, cert.outer
    ok = reports["inner_agreement"].holds and reports["outer_agreement"].holds
    if fmt == "json":
        emit(cio.write_json(cio.checks_to_json(game, part, reports), None), output)
    else:
        at = f" at z {z:g}" if cert.noisy else ""
        head = (f"Partition {co.format_partition(game, part)} is "
                f"{'a' if ok else 'NOT a'} collaboration equilibrium ({semantics} semantics{at})")
        lines = [head, ""] + [render.report_text(game, r) for r in reports.values()]
        if cert.noisy:
            lines += ["", render.certificate_text(game, cert)]
        emit("\n".join(lines), output)
    if not ok:
        raise Negative(None)


@click.command("enumerate")
@click.argument("game_file", metavar="GAME", type=INPUT)
@with_common
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--max-clients", type=click.IntRange(1), default=MAX_ENUMERATE, show_default=True,
              help="Refuse larger games (Bell(N) partitions are enumerated).")
@click.option("-o", "--output", type=OUTPUT, help="Write here instead of stdout.")
def enumerate_cmd(game_file, semantics, tol, z, family, fmt, max_clients, output):
    """Every collaboration equilibrium of GAME, by brute force over all partitions (at the level --z).

    Exit 1 when there is none.
    """
    game, _, tol, z = read_game_tol(game_file, tol, z, family, what="enumerate")
    found = co.equilibria(game, semantics, tol, max_clients=max_clients,
                          progress=progress("enumerating partitions"), z=z)
    if fmt == "json":
        emit(cio.write_json(cio.equilibria_to_json(game, semantics, found), None), output)
    else:
        lines = [f"{len(found)} collaboration equilibri{'um' if len(found) == 1 else 'a'} "
                 f"({semantics} semantics, {co.brute_force.bell(game.n):,} partitions checked)"]
        lines += [f"  {co.format_partition(game, p)}" for p in found]
        emit("\n".join(lines), output)
    if not found:
        raise Negative(None)


@click.command("welfare")
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
def welfare_cmd(game_file, semantics, tol, z, family, weights, stability, max_enumerate, fmt, output):
    """The social optimum of GAME, every stable partition's welfare, and the prices of anarchy and stability.

    A loss game (sense min) reports the cost sum of w_i * err_i and prices as cost ratios (stable over
    optimum); a gain game, welfare ratios (optimum over stable).  Exit 1 when no partition is stable.
    """
    from coalitions.welfare import resolve_weights, welfare, welfare_text, welfare_to_json

    game, _, tol, z = read_game_tol(game_file, tol, z, family, what="welfare")
    try:
        omega = resolve_weights(game, weights)
    except co.InputError as e:
        raise co.InputError(f"{game_file}: --weights {weights}: {e}") from None
    report = welfare(game, omega, semantics, stability, tol, max_enumerate,
                     progress=progress("optimum over partitions"),
                     enumeration_progress=progress("enumerating partitions"), z=z)
    emit(cio.write_json(welfare_to_json(report), None) if fmt == "json" else welfare_text(report), output)
    if report.stable == ():
        raise Negative(f"{game_file}: {report.notes[0]}")


@click.command()
@click.argument("game_file", metavar="GAME", type=INPUT)
@click.option("--within", default=None, help="Remaining set R as 'A,B,C' [default: all clients].")
@click.option("--tol", type=float, default=1e-9, show_default=True)
@click.option("--z", "z", type=NON_NEGATIVE, default=None,
              help="Significance level: a collaborator is necessary only when leaving it out costs more than "
                   "tol + z paired standard errors [default: 1.96 when GAME carries its uncertainty, else 0].")
@click.option("--family", type=click.Choice(FAMILIES), default=None,
                 help="Which comparisons one level z covers at once: each on its own, all of a client's, or all "
                      "of the game's (thresholds from the bootstrap max-t; docs/concepts.md §7) "
                      f"[default: {DEFAULT_FAMILY}].")
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True)
@click.option("-o", "--output", type=OUTPUT, help="Write here instead of stdout.")
def graph(game_file, within, tol, z, family, fmt, output):
    """The benefit graph BG(R): each client's optimal collaborator set, ambiguity shown.

    GAME may be a learned estimate (coalitions learn ... -o est.json): its
    learned BG(all), in every format.
    """
    got = read_game_or_estimate(game_file)
    if isinstance(got, Estimate):
        emit(_learned_graph(got, game_file, within, fmt), output)
        return
    game, _, _, z = read_game_tol(game_file, 0.0, z, family, loaded=got)
    if within is None:
        r = game.grand
    else:
        try:
            r = game.coalition(within)
        except co.InputError as e:
            raise co.InputError(f"--within: {e}") from None
    bg = co.ExactOracle(game, "personalized", check_tol(tol), z=z).benefit_graph(r)
    if fmt == "json":
        text = cio.write_json(cio.benefit_graph_to_json(bg), None)
    elif fmt == "dot":
        text = render.graph_dot(bg)
    elif fmt == "graphml":
        text = graphml(bg.to_networkx())
    else:
        text = render.graph_text(bg)
    emit(text, output)


def _learned_graph(e: Estimate, path: str, within: str | None, fmt: str) -> str:
    """``graph ESTIMATE``: the learned BG(all) (an estimate holds no other remaining set, and no values)."""
    refuse_value_options(path, keep=("within",))
    if within is not None:
        try:
            r = parse_coalition(within, {c: i for i, c in enumerate(e.clients)})
        except co.InputError as err:
            raise co.InputError(f"--within: {err}") from None
        if r != e.benefit_graph.within:
            raise co.InputError(f"--within: {path} is a learned estimate, which holds the benefit graph of all "
                                "clients only; BG(R) of a smaller set needs the exact game")
    bg = e.benefit_graph
    if fmt == "json":
        return cio.write_json({**cio.benefit_graph_to_json(bg), "learned_by": e.method}, None)
    if fmt == "dot":
        return render.graph_dot(bg)
    if fmt == "graphml":
        nx_graph = bg.to_networkx()
        nx_graph.graph["learned_by"] = e.method
        return graphml(nx_graph)
    return f"Learned by {e.method} (estimate {path})\n" + render.graph_text(bg)



@click.command("compare")
@click.argument("estimate_file", metavar="ESTIMATE", type=INPUT)
@click.argument("game_file", metavar="GAME", type=INPUT)
@with_common
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--allow-different-data", is_flag=True, default=False,
              help="Compare even when ESTIMATE and GAME record different data (data set, loader options, split "
                   "seed); the output records what differed.")
@click.option("-o", "--output", type=OUTPUT, help="Write here instead of stdout.")
def compare_cmd(estimate_file, game_file, semantics, tol, z, family, fmt, allow_different_data, output):
    """Score a learned ESTIMATE against the exact GAME (same client names).

    Edge precision / recall / F1 of BG(all), the share of exact OCS, whether the
    equilibria coincide, their adjusted Rand index, and each client's regret
    (exact payoff in the exact CE minus exact payoff in the learned CE).
    Both files must record the same data (data set, loader options, split seed)
    unless --allow-different-data; a file that records none (hand-written) is
    compared as given, and the output says so.
    """
    from coalitions.compare import compare, compare_text, data_check
    from coalitions.estimate import read_estimate

    est = read_estimate(estimate_file)
    game, _, tol, z = read_game_tol(game_file, tol, z, family, what="compare (as its GAME)")
    check = data_check(est, game)
    if check.differences and not allow_different_data:
        raise co.InputError(f"{estimate_file} vs {game_file}: different data: {check.describe()} "
                            "(--allow-different-data compares anyway)")
    try:
        res = compare(est, game, semantics, tol, z=z)
    except co.InputError as e:
        raise co.InputError(f"{estimate_file} vs {game_file}: {e}") from None
    except co.NoEquilibrium as e:
        raise Negative(f"{game_file}: {e}") from None
    data = {**check.to_json(), "allowed_different": bool(check.differences)}
    if check.differences:
        click.echo(f"coalitions: warning: {estimate_file} vs {game_file}: different data, compared anyway: "
                   f"{check.describe()}", err=True)
    if fmt == "json":
        emit(cio.write_json({"format": "coalitions/comparison@1", "estimate": str(estimate_file),
                             "game": str(game_file), "method": est.method, **res, "data": data}, None), output)
    else:
        emit(f"{est.method} estimate {estimate_file} vs exact game {game_file}\n"
             + compare_text({**res, "data": data}), output)
