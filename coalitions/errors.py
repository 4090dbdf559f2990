"""Exceptions raised by the game core.

Every error meant for a user carries one line that names the file, client or
coalition at fault; the command line prints that line and exits with code 2.
"""


class InputError(ValueError):
    """Unusable input: a malformed game, an unknown client, a bad partition.

    The message is a single line naming what is at fault.
    """


class NoEquilibrium(RuntimeError):
    """The game has no collaboration equilibrium (possible under ``shared`` semantics)."""
