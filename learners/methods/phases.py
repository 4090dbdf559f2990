"""A round as a sequence of exchanges: the phases of a method written as site steps and server steps.

Most methods exchange once a round: every site runs its site step, uploads, and the server
aggregates.  Some exchange several times: FedeRiCo's round is a neighbour sampling, then one
exchange per minibatch step (Sui, Wen et al. 2022, §3.3: a model is trained by the clients that
use it, step by step).  A method says so by
:meth:`~coalitions.learners.methods.base.PersonalizedLearner.phases`: one :class:`Phase` per
exchange, each naming what the sites upload after it and what the server sends down before it.
In process the round runs ``server_phase(site_phase(state))`` for each phase in order
(:func:`run_phases`); over Flower the generic strategy (``StepStrategy`` of
``coalitions.learners.federated.personal``) sends one message per phase.  The two paths call the
same two functions.

Examples
--------
>>> Phase(up=("model",), down=("global",))
Phase(up=('model',), down=('global',), name='round', epoch=0, step=0)
>>> combine_infos([{"loss": 2.0, "count": 1}, {"loss": 4.0, "count": 3}])
{'loss': 3.5, 'count': 4}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Phase", "run_phases", "combine_infos"]


@dataclass(frozen=True)
class Phase:
    """One exchange of a round.

    Attributes
    ----------
    up : tuple of str
        The state keys every site uploads after its site step (stacked in site order at the server).
    down : tuple of str
        The state keys the server sends before the site step (each site its share:
        :meth:`~coalitions.learners.methods.base.PersonalizedLearner.share`).
    name : str
        What the phase does (``"round"``: the whole round in one exchange).
    epoch, step : int
        The local epoch and minibatch step a per-step phase stands for.
    """

    up: tuple[str, ...]
    down: tuple[str, ...]
    name: str = "round"
    epoch: int = 0
    step: int = 0


def combine_infos(infos: Sequence[dict]) -> dict:
    """One round's ``info`` from its phases': the loss averaged over the rows each phase's loss averages.

    A phase's ``info["count"]`` is how many (client, batch) losses its ``info["loss"]`` is the mean of
    (1 when absent); a phase that trained nothing says ``count`` 0.  The other keys are the last
    phase's that has them.
    """
    out: dict = {}
    total = count = 0.0
    for info in infos:
        c = info.get("count", 1)
        total += float(info.get("loss", 0.0)) * c
        count += c
        out.update({k: v for k, v in info.items() if k not in ("loss", "count")})
    return {**out, "loss": total / count if count else 0.0, "count": int(count)}


def run_phases(learner, state: dict, r: int, rng: Callable) -> tuple[dict, dict]:
    """Round ``r`` in process: ``server_phase(site_phase(state))`` for each of the learner's phases, in order."""
    infos = []
    for phase in learner.phases(r):
        state, info = learner.site_phase(state, r, rng, phase)
        state = learner.server_phase(state, r, phase)
        infos.append(info)
    return state, (infos[0] if len(infos) == 1 else combine_infos(infos))
