"""coalitions.peeling: the paper's Algorithm 1 with the shrink step (docs/concepts.md §3)."""

from coalitions.analytic import mean_estimation, planted
from coalitions.bitmask import members
from coalitions.graph import BenefitGraph, ExactOracle
from coalitions.peeling import peel, peel_oracle


def test_tie_example_needs_the_shrink(tie_game):
    p = peel(tie_game)
    assert p.complete and p.remaining == 0
    assert p.partition == (0b101, 0b010)  # {c0,c2} then {c1}
    first, second = p.rounds
    assert first.within == 0b111
    assert first.sources == (0b111,)  # the component before the shrink is {c0,c1,c2}
    assert first.stable == (0b101,)
    assert first.graph.edges == ((0, 1), (0, 2), (1, 0), (2, 1))
    assert second.within == 0b010 and second.sources == (0b010,) and second.stable == (0b010,)


class WithoutStabilize:
    """A benefit oracle with no values, like a learned one: peeling takes sources as they are."""

    def __init__(self, game):
        self._exact = ExactOracle(game)
        self.clients = game.clients

    def benefit_graph(self, within):
        return self._exact.benefit_graph(within)


def test_oracle_without_stabilize_keeps_whole_components(tie_game):
    p = peel_oracle(WithoutStabilize(tie_game))
    assert p.partition == (0b111,) and len(p.rounds) == 1


def test_fixed_collaborator_oracle():
    # A hand-written oracle: 0 and 1 need each other, 2 needs 0, 3 needs nobody.
    need = {0: 0b0010, 1: 0b0001, 2: 0b0001, 3: 0}

    class Fixed:
        clients = ("a", "b", "c", "d")

        def benefit_graph(self, within):
            return BenefitGraph(self.clients, within,
                                tuple((i, need[i] & within) for i in members(within)))

    p = peel_oracle(Fixed())
    assert [r.stable for r in p.rounds] == [(0b0011, 0b1000), (0b0100,)]
    assert p.complete
    p = peel_oracle(Fixed(), within=0b0110)
    assert sorted(p.partition) == [0b0010, 0b0100]


def test_within_restricts_peeling(tie_game):
    # within {c0, c1}: c1 is best alone (2 vs 0), c0 needs c1 (3 vs 2) -> {c1} first, then {c0}
    p = peel_oracle(ExactOracle(tie_game), within=0b011)
    assert p.partition == (0b010, 0b001)
    assert [r.within for r in p.rounds] == [0b011, 0b001]


def test_mean_estimation_worked_cases(me_game):
    assert peel(me_game).partition == (0b011, 0b100)
    assert peel(mean_estimation([5, 5, 5])).partition == (0b111,)
    assert sorted(peel(mean_estimation([25, 25, 25])).partition) == [1, 2, 4]


def test_shared_semantics_can_stall(no_ce_game):
    p = peel(no_ce_game, "shared")
    assert not p.complete and p.remaining == 0b111 and p.partition == ()
    assert len(p.rounds) == 1 and p.rounds[0].sources == (0b111,) and p.rounds[0].stable == ()
    assert peel(no_ce_game).partition == (0b111,)  # personalized: the grand coalition


def test_noise_free_planted_groups_are_peeled():
    g = planted([3, 2, 2], noise=0.0, seed=4)
    assert sorted(peel(g).partition) == [0b0000111, 0b0011000, 0b1100000]


def test_rounds_partition_the_clients():
    g = planted([2, 3, 1], noise=0.3, seed=11)
    p = peel(g)
    assert p.complete
    seen = 0
    for r in p.rounds:
        assert r.within == g.grand & ~seen
        for k in r.stable:
            assert k & seen == 0 and k & ~r.within == 0
            seen |= k
    assert seen == g.grand and sorted(p.partition) == sorted(k for r in p.rounds for k in r.stable)
