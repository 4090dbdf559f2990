"""coalitions.partition: parsing, validating and formatting partitions."""

import pytest

from coalitions.errors import InputError
from coalitions.partition import block_of, canonical, check_partition, format_partition, parse_partition


def test_parse_and_format(me_game):
    assert parse_partition(me_game, "c|a,b") == (0b011, 0b100)
    assert parse_partition(me_game, " b , a | c ") == (0b011, 0b100)
    assert parse_partition(me_game, [["c"], ["b", "a"]]) == (0b011, 0b100)
    assert parse_partition(me_game, "a,b,c") == (0b111,)
    assert format_partition(me_game, (0b100, 0b011)) == "a,b|c"
    assert format_partition(me_game, parse_partition(me_game, "b|c|a")) == "a|b|c"


def test_canonical_orders_by_lowest_member():
    assert canonical([0b1000, 0b0110, 0b0001]) == (0b0001, 0b0110, 0b1000)
    assert canonical([0b1010, 0b0101]) == (0b0101, 0b1010)


@pytest.mark.parametrize("text, fault", [
    ("a,b|z", "unknown client 'z'"),
    ("a,b|b,c", "client 'b' appears in two blocks"),
    ("a|b", "client 'c' is in no block"),
    ("a,b||c", "empty block"),
    ("a,b|c|", "empty block"),
    ("|a,b,c", "empty block"),
    ("", "partition is empty"),
    ("   ", "partition is empty"),
    ("a,,b|c", "empty member name"),
    ("a,a|b,c", "client 'a' twice"),
])
def test_parse_rejects(me_game, text, fault):
    with pytest.raises(InputError, match=fault) as err:
        parse_partition(me_game, text)
    assert "\n" not in str(err.value)


def test_parse_rejects_lists(me_game):
    with pytest.raises(InputError, match="empty block"):
        parse_partition(me_game, [["a", "b"], [], ["c"]])
    with pytest.raises(InputError, match="appears in two blocks"):
        parse_partition(me_game, [["a", "b"], ["a", "c"]])


def test_check_partition(me_game):
    assert check_partition(me_game, [4, 3]) == (3, 4)
    for bad, fault in [([0, 7], "empty"), ([8], "outside"), ([-1], "empty"), ([3], "'c' is in no block"),
                       ([3, 6], "'b' appears in two blocks")]:
        with pytest.raises(InputError, match=fault):
            check_partition(me_game, bad)


def test_block_of(me_game):
    assert block_of(me_game, (0b011, 0b100)).tolist() == [3, 3, 4]
    assert block_of(me_game, (1, 2, 4)).tolist() == [1, 2, 4]


# ---------------------------------------------------------------- Partition: names at the API surface
def test_a_partition_holds_names_in_one_canonical_order():
    from coalitions.partition import Partition

    p = Partition(["a", "b", "c", "d"], (0b1000, 0b0110, 0b0001))
    assert list(p) == [frozenset({"a"}), frozenset({"b", "c"}), frozenset({"d"})]   # blocks by their first client
    assert p.masks == (0b0001, 0b0110, 0b1000) and p.clients == ("a", "b", "c", "d")
    assert p.lists() == [["a"], ["b", "c"], ["d"]] and str(p) == "a | b,c | d" and repr(p) == "Partition('a | b,c | d')"
    assert p[1] == {"b", "c"} and p[-1] == {"d"} and p[:2] == (frozenset("a"), frozenset("bc")) and len(p) == 3
    assert p.block_of("c") == {"b", "c"}
    with pytest.raises(InputError, match="client 'z' is not in the partition"):
        p.block_of("z")


def test_partitions_are_equal_by_their_blocks_whatever_the_client_order():
    from coalitions.partition import Partition

    a = Partition(["a", "b", "c"], (0b011, 0b100))
    b = Partition(["c", "b", "a"], (0b001, 0b110))       # the same blocks over another order of names
    assert a == b and hash(a) == hash(b) and {a, b} == {a}
    assert a != Partition(["a", "b", "c"], (0b001, 0b110))
    assert a != (0b011, 0b100)                          # bitmasks are not names: compare a.masks
    assert Partition.parse(["a", "b", "c"], "c|b,a") == a


@pytest.mark.parametrize("clients, masks, fault", [
    (["a", "b"], (0b01,), "client 'b' is in no block"),
    (["a", "b"], (0b11, 0b01), "client 'a' appears in two blocks"),
    (["a", "b"], (0b100,), "outside the 2 given"),
    (["a", "b"], (0,), "empty"),
    (["a", "a"], (0b11,), "distinct"),
])
def test_a_partition_that_does_not_partition_is_refused(clients, masks, fault):
    from coalitions.partition import Partition

    with pytest.raises(InputError, match=fault):
        Partition(clients, masks)


def test_the_results_carry_names_and_keep_their_bitmasks_behind_masks(me_game):
    import coalitions as co
    from coalitions.partition import Partition

    eq = co.solve(me_game)
    assert eq.partition == Partition.parse(me_game.clients, "a,b|c") and eq.masks == (0b011, 0b100)
    assert co.equilibria(me_game) == [eq.partition]
    assert "partition='a,b | c'" in repr(eq) and "(3, 4)" not in repr(eq)
    # every core function that takes a partition takes it by name too
    assert co.certify(me_game, eq.partition) == co.certify(me_game, eq.masks)
    assert format_partition(me_game, eq.partition) == "a,b|c" and block_of(me_game, eq.partition).tolist() == [3, 3, 4]
    assert check_partition(me_game, Partition(["c", "b", "a"], (0b001, 0b110))) == (0b011, 0b100)
    with pytest.raises(InputError, match="not the game's"):
        check_partition(me_game, Partition(["x", "y"], (0b11,)))


def test_axiom_reports_name_their_witnesses(me_game):
    import coalitions as co

    report = co.outer_agreement(me_game, [0b001, 0b010, 0b100])
    first = report.named_witnesses()[0]
    assert first == {"coalition": frozenset({"a", "b"}), "subcoalition": None, "client": None,
                     "payoffs": {"a": first["payoffs"]["a"], "b": first["payoffs"]["b"]}}
    assert "first witness {a,b}" in repr(report) and report.clients == me_game.clients
    assert co.certify(me_game, [0b001, 0b010, 0b100]).outer.named_witnesses()[0]["coalition"] == {"a", "b"}
    bare = co.AxiomReport("outer_agreement", False, "exhaustive", 1, 1, report.witnesses)
    assert bare == report.__class__("outer_agreement", False, "exhaustive", 1, 1, report.witnesses, clients=("x",))
    with pytest.raises(InputError, match="without the game's client names"):
        bare.named_witnesses()
