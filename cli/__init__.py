"""The ``coalitions`` command (docs/cli.md): parse, call the library, print.

Installed as ``coalitions.cli`` (setup.py maps this folder, as it maps ``learners/`` to
``coalitions.learners``).  One module per job:

* :mod:`.params`: parameter types and the options several commands share;
* :mod:`.output`: the result on stdout or a file, progress on stderr, errors naming the flag;
* :mod:`.game_commands`: solve, verify, enumerate, welfare, graph, compare (the game core only);
* :mod:`.generate_commands`: ``coalitions game`` (analytic and generated games);
* :mod:`.data_options`: the dataset, training-protocol and method flags (from the registries);
* :mod:`.oracle_command`, :mod:`.learn_command`, :mod:`.federate_command`,
  :mod:`.reproduce_command`: the commands that train (the learners and PyTorch load inside them);
* :mod:`.main`: the group and the entry point, which maps outcomes to exit codes.

Exit codes: 0 success; 1 a negative answer (an axiom is violated, no CE
exists); 2 unusable input or arguments, with one line naming the file, client
or coalition at fault and never a traceback.
"""

from __future__ import annotations

import coalitions as co
from coalitions.cli.data_options import DATASET_OPTIONS, DATASETS, load_federation
from coalitions.cli.federate_command import federate
from coalitions.cli.game_commands import compare_cmd, enumerate_cmd, graph, solve, verify, welfare_cmd
from coalitions.cli.generate_commands import game
from coalitions.cli.learn_command import learn
from coalitions.cli.main import OPTIONAL_PACKAGES, _library_messages, cli, main
from coalitions.cli.oracle_command import oracle
from coalitions.cli.output import Negative
from coalitions.cli.params import SEED
from coalitions.cli.reproduce_command import reproduce_cmd

__all__ = ["main", "cli", "solve", "verify", "enumerate_cmd", "welfare_cmd", "graph", "compare_cmd", "game", "oracle",
           "learn", "federate", "reproduce_cmd", "Negative", "SEED", "DATASETS", "DATASET_OPTIONS",
           "load_federation", "OPTIONAL_PACKAGES", "co", "_library_messages"]
