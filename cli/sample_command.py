"""``coalitions sample-ce``: a collaboration equilibrium under a training budget, with a statistical certificate.

SOURCE is a game file (read lazily: what would have been trained is counted), a
registered value source (:mod:`coalitions.lazy_sources`: ``planted``, ``mean-estimation``,
with the options ``coalitions game`` takes), so that an N = 24 game is never written out
whole, or a dataset, whose coalitions are trained as they are asked for, with the options
``coalitions oracle`` takes (:mod:`coalitions.cli.sample_data`).  Exit 0 when certified, 1 when the certificate fails (blocking coalitions or
inner violations found, or ε above the one asked), 2 on bad input (docs/cli.md).
"""

from __future__ import annotations

import os

import click

import coalitions as co
from coalitions import io as cio
from coalitions.cli.data_options import DATASETS, SectionedCommand, training_options
from coalitions.cli.output import Negative, emit, progress
from coalitions.cli.params import FINITE, INPUT, NON_NEGATIVE, OUTPUT, SEED, Finite, numbers
from coalitions.cli.sample_data import (
    DATA_ONLY,
    FEDERATED_KEYS,
    ORACLE_KEYS,
    SUBSET_ONLY,
    data_options_except,
    data_source,
    federated_options,
    federated_source,
    oracle_settings,
)
from coalitions.game import check_client_names
from coalitions.pac import DEFAULT_DISTRIBUTION, DISTRIBUTIONS

__all__ = ["sample_ce"]

#: The generator options, and the sources that take them.
_GENERATOR = {"groups": ("planted",), "noise": ("planted",), "ties": ("planted",), "sizes": ("mean-estimation",),
              "mu_e": ("mean-estimation",), "sigma2": ("mean-estimation",), "federation": ("mean-estimation",),
              "names": ("planted", "mean-estimation")}
_PROBABILITY = Finite(0.0, open_low=True)


def _given(name: str) -> bool:
    from click.core import ParameterSource

    return click.get_current_context().get_parameter_source(name) in (ParameterSource.COMMANDLINE,
                                                                      ParameterSource.ENVIRONMENT)


def _refuse(keys, what: str) -> None:
    """An option of another kind of SOURCE, given: exit 2 naming it."""
    for key in keys:
        if _given(key):
            raise co.InputError(f"--{key.replace('_', '-')} is an option of a dataset source, not of {what}")


def _source(source: str, opts: dict, tol, z, data: dict):
    """The value source SOURCE names, and the level ``z`` a game file sets (None: the run decides)."""
    from coalitions.cli.game_commands import read_game_tol
    from coalitions.lazy_sources import make_source, source_names

    names = source_names()
    if source == "csv" and data["federated"] is None:
        raise co.InputError("SOURCE csv is measured where the data lives: --federated simulation or in-process with "
                            "--site-schema (a rehearsal), or --federated superlink with --manifest")
    if source in DATASETS or source == "csv":
        for key in _GENERATOR:
            if key not in ("groups", "noise") and _given(key):
                raise co.InputError(f"--{key.replace('_', '-')} is an option of a generated source "
                                    f"({', '.join(names)}), not of the dataset {source}")
        given = {k: v for k, v in data.items() if k not in ORACLE_KEYS}
        if opts["groups"] is not None:
            counts = numbers(opts["groups"], "--groups", int)
            if len(counts) != 1:
                raise co.InputError(f"--groups {opts['groups']!r}: a dataset takes one number of groups, "
                                    "not group sizes")
            given["groups"] = counts[0]
        given["noise"], given["seed"] = opts["noise"], opts["seed"]
        if data["federated"] is not None:
            for key in SUBSET_ONLY:
                if _given(key):
                    raise co.InputError(f"--{key.replace('_', '-')} is a setting of the oracle's subset models, "
                                        f"not of --federated {data['federated']}")
            keys = ("replicates", "threads", *FEDERATED_KEYS)
            return federated_source(source, given, {k: data[k] for k in keys}), z
        for key in FEDERATED_KEYS[1:]:
            if _given(key):
                flag = "--site-schema" if key == "schemas" else f"--{key.replace('_', '-')}"
                raise co.InputError(f"{flag} goes with --federated" + (" superlink" if key != "schemas" else ""))
        return data_source(source, given, {k: data[k] for k in ORACLE_KEYS}), z
    _refuse(DATA_ONLY, source if source in names else f"the game file {source}")
    if source in names:
        for key, takers in _GENERATOR.items():
            if _given(key) and source not in takers:
                raise co.InputError(f"--{key.replace('_', '-')} is an option of {' and '.join(takers)}, not {source}")
        kwargs: dict = {}
        if source == "planted":
            if opts["groups"] is None:
                raise co.InputError("planted needs --groups, e.g. --groups 6,6,6,6")
            sizes = numbers(opts["groups"], "--groups", int)
            if any(g <= 0 for g in sizes):
                raise co.InputError(f"--groups: group sizes must be positive integers, got {opts['groups']!r}")
            noise = 0.05 if opts["noise"] is None else opts["noise"]
            kwargs = {"groups": sizes, "noise": noise, "ties": opts["ties"], "seed": opts["seed"]}
        elif source == "mean-estimation":
            if opts["sizes"] is None:
                raise co.InputError("mean-estimation needs --sizes, e.g. --sizes 5,5,25")
            kwargs = {"sizes": numbers(opts["sizes"], "--sizes"), "mu_e": opts["mu_e"], "sigma2": opts["sigma2"],
                      "federation": opts["federation"]}
        if opts["names"] is not None:
            kwargs["names"] = list(check_client_names(opts["names"].split(","), "--names", prefix="--names: "))
        return make_source(source, **kwargs), z
    for key in _GENERATOR:
        if _given(key):
            raise co.InputError(f"--{key.replace('_', '-')} is an option of a generated source "
                                f"({', '.join(names)}), not of the game file {source}")
    if not os.path.exists(source):
        raise co.InputError(f"unknown source {source!r}: no such file, and not one of {', '.join(names)}")
    INPUT.given.append(source)
    game, _, _, level = read_game_tol(source, tol, z, None, what="sample-ce")
    return co.GameSource(game), (level if z is not None or game.uncertainty is not None else None)


def _start(path: str, src, z: float | None, tol: float):
    """The starting partition and benefit-graph edges of an estimate or (sampled) equilibrium file, or
    peeling on the coalitions a measured-game file of the same source holds."""
    from coalitions.sampled_ce import parse_start

    clients = tuple(src.clients)
    with open(path, "rb") as f:
        zipped = f.read(4) == b"PK\x03\x04"
    if zipped:     # coalitions/measured@1: peeling on what it measured (coalitions.measured_peeling)
        from coalitions.measured import MeasuredGame
        from coalitions.measured_peeling import measured_start
        from coalitions.noise import DEFAULT_Z

        cache = MeasuredGame.load(path, src)
        level = z if z is not None else DEFAULT_Z if cache.kind not in (None, "exact") else 0.0
        return measured_start(cache, level, tol), ()
    data = cio.read_json(path)
    fmt = data.get("format")
    if fmt == "coalitions/estimate@1":
        e = co.read_estimate(path)
        if tuple(e.clients) != clients:
            raise co.InputError(f"--from {path}: its clients differ from the source's")
        return e.masks, tuple(e.benefit_graph.edges)
    if fmt in ("coalitions/equilibrium@1", "coalitions/sampled-equilibrium@1", "coalitions/learned-equilibrium@1"):
        blocks = data.get("partition")
        if not isinstance(blocks, list) or not all(isinstance(b, list) for b in blocks):
            raise co.InputError(f"--from {path}: 'partition' must be a list of lists of names")
        try:
            return parse_start(blocks, clients), ()
        except co.InputError as e:
            raise co.InputError(f"--from {path}: {e}") from None
    raise co.InputError(f"--from {path}: format {fmt!r} holds no partition (give an estimate or an equilibrium file)")


@click.command("sample-ce", cls=SectionedCommand)
@click.argument("source", metavar="SOURCE")
@click.option("--budget", type=click.IntRange(1), required=True,
              help="Distinct coalitions the run may train (or read from --resume), search and certificate together.")
@click.option("--epsilon", type=_PROBABILITY, default=0.01, show_default=True,
              help="Certify that at most this share of coalitions drawn from D blocks (decides the draws m).")
@click.option("--delta", type=_PROBABILITY, default=0.05, show_default=True,
              help="With confidence 1 - delta.")
@click.option("--from", "start_files", type=INPUT, multiple=True,
              help="Start from this estimate's or equilibrium's partition (and look along the estimate's "
                   "benefit graph first), from peeling on the coalitions a measured-game file (--resume's "
                   "CACHE of the same source) holds, or 'alone' (everyone alone) [default: alone]. Given more "
                   "than once: search from each, certify each at delta / k and keep the best certified.")
@click.option("--z", "z", type=NON_NEGATIVE, default=None,
              help="Significance level of every comparison [default: 1.96 when the source gives standard errors, "
                   "else 0].")
@click.option("--tol", type=NON_NEGATIVE, default=1e-9, show_default=True, help="Absolute tolerance.")
@click.option("--distribution", type=click.Choice(DISTRIBUTIONS), default=DEFAULT_DISTRIBUTION, show_default=True,
              help="D: a size uniform in 2..N then a uniform subset; mixed: half of the draws from the partition's "
                   "neighbourhood.")
@click.option("--exact-inner-up-to", type=click.IntRange(0, 20), default=4, show_default=True,
              help="The search checks every sub-coalition of blocks up to this size whenever they change (the "
                   "leave-one-out ones beyond; every one of a larger block once nothing blocks, where they fit).")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the draws, and of the generator for a generated SOURCE (as coalitions game takes it).")
@click.option("--resume", "cache_file", default=None, metavar="CACHE",
              help="Keep the measurements in CACHE (coalitions/measured@1): read when it exists, rewritten after "
                   "every batch, so an interrupted run resumes without training again.")
@click.option("--groups", default=None, help="planted: hidden group sizes, e.g. 6,6,6,6; synthetic, digits, mnist, "
                                               "fashion: the number of client groups.")
@click.option("--noise", type=NON_NEGATIVE, default=None,
              help="planted: noise standard deviation [0.05]; synthetic: label noise [0.01].")
@click.option("--ties", type=NON_NEGATIVE, default=0.0, show_default=True, help="planted: rounding step (0: off).")
@click.option("--sizes", default=None, help="mean-estimation: sample count of each client, e.g. 5,5,25.")
@click.option("--mu-e", type=FINITE, default=10.0, show_default=True, help="mean-estimation: mean noise variance.")
@click.option("--sigma2", type=FINITE, default=1.0, show_default=True, help="mean-estimation: spread of the means.")
@click.option("--federation", type=click.Choice(["uniform", "coarse", "fine"]), default="uniform",
              show_default=True, help="mean-estimation: how a member uses the coalition's data.")
@click.option("--names", default=None, help="Client names of a generated source, comma-separated.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-o", "--output", type=OUTPUT, help="Write here instead of stdout.")
@data_options_except("groups", "noise", "seed")
@training_options
@oracle_settings
@federated_options
def sample_ce(source, budget, epsilon, delta, start_files, z, tol, distribution, exact_inner_up_to, seed, cache_file,
              groups, noise, ties, sizes, mu_e, sigma2, federation, names, fmt, output, **data):
    """A collaboration equilibrium of SOURCE within a budget of trained coalitions, with a statistical certificate.

    SOURCE is a game file, a generator (planted, mean-estimation) evaluated per
    coalition, never written out whole, or a dataset whose coalitions are trained as
    asked (the options of coalitions oracle). The search repairs a partition on blocking
    coalitions; then m coalitions drawn from D afterwards bound the share that blocks
    (epsilon at confidence 1 - delta). With several --from, one search a start, each
    certificate at delta / k, the best certified kept. Exit 0 when certified, 1 when not.
    """
    from coalitions.files import check_output_path
    from coalitions.measured import MeasuredGame
    from coalitions.pac import check_probability
    from coalitions.sampled_ce import required_budget, sampled_text, sampled_to_json

    check_probability(epsilon, "--epsilon")
    check_probability(delta, "--delta")
    opts = {"groups": groups, "noise": noise, "ties": ties, "seed": seed, "sizes": sizes, "mu_e": mu_e,
            "sigma2": sigma2, "federation": federation, "names": names}
    src, level = _source(source, opts, tol, z, data)
    starts = [(None, ()) if f == "alone" else _start(f, src, level, tol) for f in start_files] or [(None, ())]
    alone = tuple(1 << i for i in range(len(src.clients)))
    k = len({alone if b is None else tuple(b) for b, _ in starts})
    need = required_budget(len(src.clients), epsilon, delta, k, distribution)
    if budget < need:
        each = f" each, for {k} starts at --delta {delta:g} / {k}" if k > 1 else ""
        raise co.InputError(f"--budget {budget} is below the {need} coalitions the certificate{'s' * (k > 1)} "
                            f"need{'s' * (k == 1)} (--epsilon {epsilon:g} --delta {delta:g}: the draws, "
                            f"{len(src.clients)} singletons and up to {len(src.clients)} blocks{each})")
    cache = None
    if cache_file is not None:
        check_output_path(cache_file)
        if os.path.exists(cache_file):
            cache = MeasuredGame.load(cache_file, src)
            click.echo(f"--resume {cache_file}: {cache.trainings} coalitions measured already", err=True)
    step = progress("sample-ce: coalitions used")
    common = dict(z=level, tol=tol, distribution=distribution, seed=seed, cache=cache, save_to=cache_file,
                  progress=step, exact_inner_up_to=exact_inner_up_to)
    if len(starts) == 1:
        result = co.sample_ce(src, budget, epsilon, delta, start=starts[0][0], edges=starts[0][1], **common)
        best = result
        data_out = sampled_to_json(result)
        text = sampled_text(result)
    else:
        from coalitions.sampled_starts import multistart_text, multistart_to_json, sample_ce_from_starts

        multi = sample_ce_from_starts(src, budget, [b for b, _ in starts], epsilon, delta,
                                      edges=[e for _, e in starts], **common)
        best = multi.best
        data_out = multistart_to_json(multi)
        text = multistart_text(multi)
    used = data_out["trainings"]["total"]
    step(used, used)   # the run is over: a bar ends, a log gets its last line
    emit(cio.write_json(data_out, None) if fmt == "json" else text, output)
    if not best.holds:
        c = best.certificate
        how = "checked" if c.outer_method == "exhaustive" else "drawn"
        why = (f"{c.blocking_draws} of {c.m} coalitions {how} block" if c.blocking_draws else
               "a singleton blocks" if c.individual else
               "a block fails inner agreement" if not c.inner_agreement else
               f"epsilon {c.epsilon:.4g} is above the {epsilon:g} asked")
        kept = f" (the best of {k} starts)" if len(starts) > 1 else ""
        raise Negative(f"{source}: not certified{kept}: {why} (see above)")
