"""``coalitions game``: write analytic or generated games (docs/cli.md)."""

from __future__ import annotations

import click

import coalitions as co
from coalitions import io as cio
from coalitions.cli.params import FINITE, NON_NEGATIVE, OUTPUT, SEED, numbers
from coalitions.game import check_client_names
from coalitions.numbers import NumberOverflow

__all__ = ["game", "mean_estimation", "planted"]


@click.group()
def game():
    """Write analytic or generated games (JSON, or .npz by the file's ending)."""


@game.command("mean-estimation")
@click.option("--sizes", required=True, help="Sample count of each client, e.g. 5,5,25.")
@click.option("--mu-e", type=FINITE, default=10.0, show_default=True, help="Mean noise variance.")
@click.option("--sigma2", type=FINITE, default=1.0, show_default=True, help="Spread of the true means.")
@click.option("--names", default=None, help="Client names, comma-separated [default: 0,1,...].")
@click.option("--federation", type=click.Choice(["uniform", "coarse", "fine"]), default="uniform",
              show_default=True, help="How a member uses the coalition's data: the pooled mean, the optimal "
                                      "mix of its own and the pooled mean, or optimal weights on every member.")
@click.option("-o", "--output", required=True, type=OUTPUT)
def mean_estimation(sizes, mu_e, sigma2, names, federation, output):
    """Mean estimation: each client's expected error, a loss (Donahue & Kleinberg; docs/concepts.md §4)."""
    n = numbers(sizes, "--sizes")
    if names is not None:
        names = list(check_client_names(names.split(","), "--names", prefix="--names: "))
        if len(names) != len(n):
            raise co.InputError(f"--names gives {len(names)} names for {len(n)} sizes")
    _check_game_size(len(n), output, "--sizes")
    try:
        g = co.mean_estimation(n, mu_e, sigma2, names, federation)
    except NumberOverflow as e:
        raise co.InputError(f"--sizes {sizes}: {e}") from None
    except MemoryError:
        raise co.InputError(f"--sizes: out of memory building a game of {len(n)} clients; {output} not written"
                            ) from None
    _write(g, output)


@game.command("planted")
@click.option("--groups", required=True, help="Hidden group sizes, e.g. 3,3,2.")
@click.option("--noise", type=NON_NEGATIVE, default=0.05, show_default=True, help="Noise standard deviation.")
@click.option("--ties", type=NON_NEGATIVE, default=0.0, show_default=True,
              help="Round values to multiples of this (0: off).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--dtype", type=click.Choice(["float64", "float32"]), default="float64", show_default=True,
              help="Storage of the values; float32 halves the memory (the values are then float32 numbers).")
@click.option("-o", "--output", required=True, type=OUTPUT)
def planted(groups, noise, ties, seed, dtype, output):
    """Hidden groups whose members help each other, with noise and optional ties."""
    sizes = numbers(groups, "--groups", int)
    if any(g <= 0 for g in sizes):
        raise co.InputError(f"--groups: group sizes must be positive integers, got {groups!r}")
    _check_game_size(sum(sizes), output, "--groups", 4 if dtype == "float32" else 8)
    try:
        g = co.planted(sizes, noise, ties, seed, dtype=dtype)
    except NumberOverflow as e:
        raise co.InputError(f"--ties {ties!r}: {e}") from None
    except MemoryError:
        raise co.InputError(f"--groups {groups}: out of memory building a game of {sum(sizes)} clients; "
                            f"{output} not written") from None
    _write(g, output)


def _check_game_size(n: int, output: str, option: str, itemsize: int = 8) -> None:
    """Refuse, before generating anything, a game the readers would refuse (coalitions.io limits) or memory cannot hold."""
    try:
        co.game.check_size(n, itemsize=itemsize)
    except co.InputError as e:
        raise co.InputError(f"{option}: {e}") from None
    cio.check_game_output(n, output)


def _write(g, output):
    co.write_game(g, output)
    click.echo(f"wrote {output}: {g.n} clients", err=True)
