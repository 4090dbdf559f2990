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
