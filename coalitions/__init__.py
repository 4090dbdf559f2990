"""coalitions: who should learn with whom.

The game core (docs/concepts.md, docs/formats.md): exhaustive games, maximal achievable utility,
optimal collaborator sets, benefit graphs, peeling into a collaboration
equilibrium, axiom checks with witnesses, brute-force enumeration, analytic
games and file formats.  NumPy only; PyTorch is never imported here.

Examples
--------
>>> import coalitions as co
>>> game = co.mean_estimation([5, 5, 25], clients=["a", "b", "c"])
>>> co.solve(game).partition
Partition('a,b | c')
>>> co.solve(game).blocks()
[['a', 'b'], ['c']]
"""

import logging

from ._version import __version__
from .analytic import mean_estimation, planted
from .axioms import (
                     AxiomReport,
                     Violation,
                     all_checks,
                     individual_rationality,
                     individual_stability,
                     inner_agreement,
                     nash_stability,
                     outer_agreement,
                     strict_core,
)
from .brute_force import equilibria
from .equilibrium import Certificate, Equilibrium, certify, solve
from .errors import InputError, NoEquilibrium
from .estimate import Estimate, read_estimate
from .game import Game
from .graph import BenefitGraph, ExactOracle
from .io import read_game, write_game
from .lazy import GameSource, Measurement, ValueSource
from .lazy_analytic import MeanEstimationSource, PlantedSource
from .measured import MeasuredGame
from .ocs import OCS, optimal_collaborators
from .partition import Partition, format_partition, parse_partition
from .payoffs import mau, payoff_table
from .peeling import Peeling, peel, peel_oracle
from .sampled_ce import SampledEquilibrium, sample_ce
from .sampled_starts import MultiStartEquilibrium, sample_ce_from_starts
from .scc import source_components, strongly_connected_components

# The library's messages go to loggers under "coalitions" (the learners' Flower runs); nothing is
# printed unless the user configures logging, as the command line does (coalitions.cli.main).
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "__version__", "Game", "read_game", "write_game", "mean_estimation", "planted", "mau", "payoff_table",
    "OCS", "optimal_collaborators", "BenefitGraph", "ExactOracle", "strongly_connected_components",
    "source_components", "peel", "peel_oracle", "Peeling", "solve", "certify", "Equilibrium",
    "Certificate", "equilibria", "inner_agreement", "outer_agreement", "individual_rationality",
    "nash_stability", "individual_stability", "strict_core", "all_checks", "AxiomReport",
    "Violation", "Partition", "parse_partition", "format_partition", "InputError", "NoEquilibrium", "Estimate", "read_estimate",
    "Measurement", "ValueSource", "GameSource", "PlantedSource", "MeanEstimationSource", "MeasuredGame",
    "sample_ce", "SampledEquilibrium", "sample_ce_from_starts", "MultiStartEquilibrium",
]
