"""A sampled equilibrium searched from several starts, the best certified kept (issue 34; docs/scale.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import one_line, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import coalitions as co
from coalitions.bitmask import members
from coalitions.lazy_analytic import PlantedSource
from coalitions.measured import MeasuredGame
from coalitions.pac import draws_for
from coalitions.sampled_ce import required_budget
from coalitions.sampled_starts import CHOICE_RULE, sample_ce_from_starts

FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Counting:
    """A source that records every coalition it is asked to measure."""

    def __init__(self, inner):
        self.inner, self.asked = inner, []
        self.clients, self.sense, self.provenance = inner.clients, inner.sense, inner.provenance

    def measure(self, masks):
        self.asked += [int(m) for m in masks]
        return self.inner.measure(masks)


def _starts(n: int, draw) -> list:
    """Random starting partitions of ``n`` clients as bitmask blocks (``None``: everyone alone)."""
    out: list = [None]
    for labels in draw:
        blocks: dict[int, int] = {}
        for i, b in enumerate(labels[:n]):
            blocks[b] = blocks.get(b, 0) | (1 << i)
        out.append(list(blocks.values()))
    return out


@FAST
@given(st.lists(st.integers(1, 3), min_size=2, max_size=3), st.integers(0, 1000), st.integers(0, 1000),
       st.sampled_from(["uniform-size", "mixed"]), st.lists(st.integers(0, 2), min_size=9, max_size=9))
def test_one_start_is_sample_ce_exactly(groups, seed, draw_seed, distribution, labels):
    src = PlantedSource(tuple(groups), seed=seed)
    start = _starts(len(src.clients), [labels])[1]
    budget = required_budget(len(src.clients), 0.1, 0.1, 1, distribution) + 40
    one = co.sample_ce(src, budget, 0.1, 0.1, start=start, distribution=distribution, seed=draw_seed)
    multi = sample_ce_from_starts(src, budget, [start], 0.1, 0.1, distribution=distribution, seed=draw_seed)
    assert multi.candidates == (one,) and multi.chosen == 0 and multi.delta == 0.1


@FAST
@given(st.lists(st.integers(1, 3), min_size=2, max_size=3), st.integers(0, 1000), st.integers(0, 1000),
       st.sampled_from(["uniform-size", "mixed"]),
       st.lists(st.lists(st.integers(0, 2), min_size=9, max_size=9), min_size=1, max_size=3),
       st.sampled_from([0.0, 1.96]))
def test_each_certificate_is_drawn_at_delta_over_k_and_the_kept_one_follows_the_rule(groups, seed, draw_seed,
                                                                                       distribution, labels, z):
    src = PlantedSource(tuple(groups), seed=seed, noise=0.05)
    n = len(src.clients)
    starts = _starts(n, labels)
    budget = required_budget(n, 0.1, 0.05, len(starts), distribution) + 30
    r = sample_ce_from_starts(src, budget, starts, 0.1, 0.05, distribution=distribution, seed=draw_seed, z=z)
    k = len(r.candidates)
    assert k + r.duplicates == len(starts)
    assert len({c.start.masks for c in r.candidates}) == k   # repeated starts dropped
    for c in r.candidates:
        assert c.certificate.delta == pytest.approx(0.05 / k)
        if c.certificate.outer_method == "sampled":
            assert c.certificate.m == draws_for(0.1, 0.05 / k)
    assert r.trainings <= budget
    # the rule, from the candidates' public fields: certified first, then epsilon, then welfare, then order
    cache = MeasuredGame(src)
    cache.measure(np.array(sorted({int(b) for c in r.candidates for b in c.masks}), dtype=np.int64))
    for j, c in enumerate(r.candidates):
        vals = cache.raw_values(np.asarray(c.masks, dtype=np.int64))
        assert r.welfare[j] == pytest.approx(sum(vals[i, x] for x, b in enumerate(c.masks) for i in members(b)))
    best = r.best
    for j, c in enumerate(r.candidates):
        assert (not best.holds, best.certificate.epsilon, -r.welfare[r.chosen], r.chosen) <= \
               (not c.holds, c.certificate.epsilon, -r.welfare[j], j)
    if any(c.holds for c in r.candidates):
        assert r.holds


def test_under_uniform_size_the_candidates_share_the_draws():
    src = Counting(PlantedSource((4, 4, 4), seed=5))
    n = 12
    starts = [None, [0xFFF], [0x00F, 0x0F0, 0xF00]]
    r = sample_ce_from_starts(src, 2000, starts, 0.05, 0.05, seed=1)
    first = r.candidates[0].certificate
    assert first.outer_method == "sampled" and first.m == draws_for(0.05, 0.05 / 3)
    # later certificates train only what is their own (blocks, inner checks), never the draws again
    for c in r.candidates[1:]:
        own = len(c.masks) + sum(x.checked for x in c.certificate.inner)
        assert c.certificate.trainings <= own
        assert c.certificate.distinct == first.distinct
    assert len(src.asked) == len(set(src.asked)) == r.trainings
    assert r.best.blocks() == [[f"c{i}" for i in range(g, g + 4)] for g in (0, 4, 8)] and r.holds
    assert n == len(src.clients)


def test_a_certified_candidate_is_kept_over_a_better_uncertified_one():
    # no search budget at all: each start stays as it is; the planted groups are certified, the grand
    # coalition of two opposite groups is not (each group blocks it), however large its welfare is said to be
    src = PlantedSource((3, 3), seed=0)
    need = required_budget(6, 0.1, 0.05, 2)
    r = sample_ce_from_starts(src, need, [[0b111111], [0b000111, 0b111000]], 0.1, 0.05, seed=0)
    assert [c.holds for c in r.candidates] == [False, True] and r.chosen == 1


@FAST
@given(st.integers(0, 1000), st.integers(0, 6), st.sampled_from(["uniform-size", "mixed"]))
def test_an_earlier_certificate_never_spends_what_a_later_one_was_promised(seed, extra, distribution):
    # the grand coalition first: its inner checks take whatever is left, and must leave the later candidates'
    # blocks (and, under "mixed", their draws) the room the budget check reserved for them (seed 39 failed so)
    src = PlantedSource((4, 4), seed=seed)
    starts = [[0xFF], [0x0F, 0xF0], [0x33, 0xCC]]
    budget = required_budget(8, 0.1, 0.05, 3, distribution) + extra
    r = sample_ce_from_starts(src, budget, starts, 0.1, 0.05, seed=seed, z=0, distribution=distribution)
    assert len(r.candidates) == 3 and r.trainings <= budget


def test_the_budget_is_checked_for_every_start_before_anything_trains():
    src = Counting(PlantedSource((6, 6), seed=0))
    need = required_budget(12, 0.01, 0.05, 3)
    assert need == draws_for(0.01, 0.05 / 3) + 12 + 3 * 12
    assert required_budget(12, 0.01, 0.05, 3, "mixed") == 3 * draws_for(0.01, 0.05 / 3) + 12 + 3 * 12
    with pytest.raises(co.InputError, match=f"below the {need} coalitions the certificates of 3 starts need"):
        sample_ce_from_starts(src, need - 1, [None, [0xFFF], [0x03F, 0xFC0]], 0.01, 0.05)
    assert src.asked == []
    sample_ce_from_starts(src, need, [None, [0xFFF], [0x03F, 0xFC0]], 0.01, 0.05)


@pytest.mark.parametrize("starts, edges, fragment", [
    ([], None, "non-empty list"),
    ("c0|c1", None, "non-empty list"),
    ([None, "c0,c1"], None, "client 'c2' is in no block"),
    ([None, "c0,c1,c2,c3"], [()], "1 benefit graphs for 2 starts"),
])
def test_bad_starts_are_refused(starts, edges, fragment):
    with pytest.raises(co.InputError, match=fragment):
        sample_ce_from_starts(PlantedSource((2, 2), seed=0), 500, starts, 0.1, 0.1, edges=edges)


def test_an_interrupted_run_from_several_starts_resumes_to_the_same_result(tmp_path):
    src = PlantedSource((4, 4), seed=2)
    starts = [None, "c0,c1,c2,c3,c4,c5,c6,c7"]
    whole = sample_ce_from_starts(src, 900, starts, 0.05, 0.05, seed=4)

    class Stop:
        def __init__(self, inner, after):
            self.inner, self.calls, self.after = inner, 0, after
            self.clients, self.sense, self.provenance = inner.clients, inner.sense, inner.provenance

        def measure(self, masks):
            if self.calls >= self.after:
                raise KeyboardInterrupt
            self.calls += 1
            return self.inner.measure(masks)

    stopping = Stop(src, 3)
    with pytest.raises(KeyboardInterrupt):
        sample_ce_from_starts(stopping, 900, starts, 0.05, 0.05, seed=4, save_to=tmp_path / "c.npz")
    again = sample_ce_from_starts(src, 900, starts, 0.05, 0.05, seed=4,
                                  cache=MeasuredGame.load(tmp_path / "c.npz", src))
    assert again == whole


def test_sample_ce_from_several_files_keeps_the_best_and_says_so(capsys, tmp_path):
    base = ["sample-ce", "planted", "--groups", "4,4", "--seed", "3", "--budget", "900", "--epsilon", "0.05",
            "--format", "json"]
    rc, out, _ = run(capsys, *base)
    (tmp_path / "eq.json").write_text(out)
    rc, out, _ = run(capsys, *base, "--from", tmp_path / "eq.json", "--from", "alone")
    data = json.loads(out)
    s = data["starts"]
    assert rc == 0 and data["format"] == "coalitions/sampled-equilibrium@1"
    assert s["k"] == 2 and s["joint_delta"] == 0.05 and s["delta_each"] == 0.025 and s["rule"] == CHOICE_RULE
    assert data["certificate"]["delta"] == 0.025 and len(s["candidates"]) == 2
    assert s["candidates"][0]["start"] == [["c0", "c1", "c2", "c3"], ["c4", "c5", "c6", "c7"]]
    assert s["candidates"][1]["start"] == [[f"c{i}"] for i in range(8)]
    assert data["partition"] == [["c0", "c1", "c2", "c3"], ["c4", "c5", "c6", "c7"]]
    assert data["trainings"]["total"] == sum(c["trainings"]["search"] + c["trainings"]["certificate"]
                                             for c in s["candidates"])
    rc, text, _ = run(capsys, *base[:-2], "--from", tmp_path / "eq.json", "--from", "alone")
    assert rc == 0 and "jointly with confidence 0.95" in text and "kept: start 1" in text


def test_sample_ce_from_several_starts_refuses_a_budget_too_small_for_them(capsys, tmp_path):
    rc, _, err = run(capsys, "sample-ce", "planted", "--groups", "6,6", "--budget", "400", "--from", "alone",
                     "--from", "alone")
    assert rc == 0 or rc == 1   # a repeated start is one start: 323 suffice
    need = required_budget(12, 0.01, 0.05, 2)
    (tmp_path / "eq.json").write_text(json.dumps({"format": "coalitions/equilibrium@1",
                                                  "partition": [[f"c{i}" for i in range(12)]]}))
    rc, _, err = run(capsys, "sample-ce", "planted", "--groups", "6,6", "--budget", str(need - 1), "--from", "alone",
                     "--from", tmp_path / "eq.json")
    assert rc == 2 and f"--budget {need - 1} is below the {need} coalitions the certificates need" in one_line(err)
    assert "for 2 starts at --delta 0.05 / 2" in one_line(err)
