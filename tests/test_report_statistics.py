"""Statistics in every report: intervals, paired tests, verdicts (learners/experiments/{runner,report}.py).

Fabricated per-seed records (no training): a column that clearly beats Local must be called better
with p < 0.05 in the report's sentence, and one that equals Local, or differs from it only in
direction-balanced ways, must not — a verdict that cannot come out both ways is not a measurement.
"""

import numpy as np
import pytest

from coalitions.errors import InputError
from coalitions.learners.experiments.report import _interval_section, _tests_section, verdicts
from coalitions.learners.experiments.runner import MAJORITY, regime_statistics, sensitivity_summary
from coalitions.learners.experiments.statistics import output_samples

CLIENTS = [f"c{k}" for k in range(8)]


def _records(hit_rate: dict, seeds: int = 3, n: int = 60, seed: int = 0, same_as: dict | None = None) -> list:
    """Binary-accuracy records: column ``m`` is right on a share ``hit_rate[m]`` of each client's test samples.

    ``same_as={"a": "b"}``: column ``a`` gets exactly ``b``'s outputs.
    """
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(seeds):
        rec = {"y": {}, "outputs": {m: {} for m in hit_rate}, "metric": {m: {} for m in hit_rate}, "majority": {}}
        for c in CLIENTS:
            y = rng.integers(0, 2, n)
            rec["y"][c] = y
            rec["majority"][c] = int(np.bincount(y).argmax())
            for m, share in hit_rate.items():
                src = (same_as or {}).get(m)
                if src is not None:
                    logits = rec["outputs"][src][c]
                else:
                    right = rng.random(n) < share
                    logits = np.where(right, 2.0 * y - 1, 1.0 - 2 * y)  # positive logit: class 1
                rec["outputs"][m][c] = logits
                rec["metric"][m][c] = float(np.mean((logits > 0) == y))
        out.append(rec)
    return out


def _reg(records, methods, metric="accuracy") -> dict:
    stats = regime_statistics(CLIENTS, metric, records, methods)
    return {"clients": CLIENTS, "metric": metric, "runs": [{"seed": k} for k in range(len(records))],
            "summary": {"statistics": stats}}


def _seed_test(reg, col="FedAMP", ref="Local"):
    return reg["summary"]["statistics"]["seed"]["seed_tests"][col][ref]


def test_a_clear_winner_is_called_better_with_p_below_alpha():
    reg = _reg(_records({"local": 0.6, "fedamp": 0.9}, seeds=5), ["local", "fedamp"])
    t = _seed_test(reg)
    assert t["direction"] == "better" and t["p_holm"] < 0.05 and t["p"] <= t["p_holm"]
    assert t["n_seeds"] == 5 and t["n_pairs"] == len(CLIENTS) * 5
    sentence = verdicts(reg)
    assert "better than Local: FedAMP (p = " in sentence and ", Holm " in sentence
    assert "worse" not in sentence and "no significant difference" not in sentence
    # and the other way round: a loser is called worse
    reg = _reg(_records({"local": 0.9, "fedamp": 0.6}, seeds=5), ["local", "fedamp"])
    assert "worse than Local: FedAMP (p = " in verdicts(reg)


def test_three_seeds_are_underpowered_whatever_the_p_value():
    """The issue's case: 3 seeds give no verdict, however clear; the raw and Holm p are still printed."""
    reg = _reg(_records({"local": 0.6, "fedamp": 0.9}), ["local", "fedamp"])
    t = _seed_test(reg)
    assert t["direction"] == "underpowered" and t["n_seeds"] == 3 and t["p"] is not None
    assert "underpowered (fewer than 5 seeds: no verdict): FedAMP (raw p = " in verdicts(reg)
    assert "better" not in verdicts(reg)


def test_equal_columns_are_identical_not_better():
    reg = _reg(_records({"local": 0.7, "fedamp": 0.7}, seeds=5, same_as={"fedamp": "local"}), ["local", "fedamp"])
    t = _seed_test(reg)
    assert t["direction"] == "identical" and t["p"] is None and t["n_tied"] == t["n_pairs"]
    assert "identical to Local within the tie tolerance: FedAMP" in verdicts(reg)


def test_same_distribution_gives_no_verdict():
    reg = _reg(_records({"local": 0.75, "fedamp": 0.75}, seeds=5, seed=3), ["local", "fedamp"])
    t = _seed_test(reg)
    assert t["direction"] == "no significant difference" and t["p_holm"] >= 0.05
    assert "no significant difference: FedAMP (p = " in verdicts(reg)


def test_loss_metrics_are_oriented():
    """For MSE a lower value is better: a column with smaller errors is called better."""
    rng = np.random.default_rng(1)
    recs = []
    for _ in range(5):
        rec = {"y": {}, "outputs": {"local": {}, "spo": {}}, "metric": {"local": {}, "spo": {}}}
        for c in CLIENTS:
            y = rng.normal(size=50)
            rec["y"][c] = y
            for m, sd in (("local", 1.0), ("spo", 0.2)):
                out = y + rng.normal(scale=sd, size=50)
                rec["outputs"][m][c] = out
                rec["metric"][m][c] = float(np.mean((out - y) ** 2))
        recs.append(rec)
    reg = _reg(recs, ["local", "spo"], metric="mse")
    assert _seed_test(reg, "SPO")["direction"] == "better"
    assert MAJORITY not in reg["summary"]["statistics"]["intervals"]  # no majority class for regression


def test_intervals_contain_their_estimate_and_the_table_prints_them():
    reg = _reg(_records({"local": 0.6, "fedamp": 0.9}), ["local", "fedamp"])
    st = reg["summary"]["statistics"]
    assert st["columns"] == ["Local", "FedAMP", MAJORITY]
    # accuracy: no per-client bootstrap block (it collapsed to [1, 1] and counted repeated rows); Clopper–Pearson
    assert "intervals" not in st
    assert st["outputs_check"] < 1e-12  # the metric recomputed from the outputs is the recorded one
    seed = st["seed"]
    text = "\n".join(_interval_section(reg))
    b = seed["binomial"]["FedAMP"]["c0"]
    assert b["n"] == 180 and b["low"] <= b["estimate"] <= b["high"]   # records without row ids: rows × seeds
    assert "Clopper–Pearson" in text and f"{b['estimate']:.3g} [{b['low']:.3g}, {b['high']:.3g}]" in text
    m = seed["mean_intervals"]["FedAMP"]
    assert m["low"] <= m["estimate"] <= m["high"] and "**mean over clients**" in text
    tests = "\n".join(_tests_section(reg))
    assert ("| column | against | seeds | mean difference | 95% interval | t | p | Holm p | tied pairs | verdict |"
            in tests)
    assert f"| FedAMP | {MAJORITY} |" in tests and f"| {MAJORITY} | Local |" not in tests


def test_a_perfect_client_gets_a_finite_sample_interval():
    """60 of 60 right is not [1, 1]: Clopper–Pearson's lower bound is 0.94 (the issue's example)."""
    reg = _reg(_records({"local": 1.0}, seeds=1), ["local"])
    b = reg["summary"]["statistics"]["seed"]["binomial"]["Local"]["c0"]
    assert b["estimate"] == 1.0 and b["high"] == 1.0 and b["low"] == pytest.approx(0.025 ** (1 / 60))  # (α/2)^(1/n)


def test_auc_intervals_use_the_metric_itself():
    rng = np.random.default_rng(2)
    rec = {"y": {}, "outputs": {"local": {}}, "metric": {"local": {}}}
    from coalitions.learners.data.metrics import evaluate

    for c in CLIENTS[:2]:
        y = rng.integers(0, 2, 40)
        s = y + rng.normal(size=40)
        rec["y"][c], rec["outputs"]["local"][c] = y, s
        rec["metric"]["local"][c] = evaluate("auc", y, s)
    st = regime_statistics(CLIENTS[:2], "auc", [rec], ["local"])
    for c in CLIENTS[:2]:
        iv = st["intervals"]["Local"][c]
        assert iv["estimate"] == pytest.approx(rec["metric"]["local"][c])
        assert iv["low"] <= iv["estimate"] <= iv["high"] < 1.0
    data, stat = output_samples("auc", rec["y"]["c0"], rec["outputs"]["local"]["c0"])
    assert stat(data) == pytest.approx(rec["metric"]["local"]["c0"])
    with pytest.raises(InputError):
        output_samples("f1", [0, 1], [0.1, 0.2])


def test_sensitivity_summary_counts_agreement_over_seeds():
    row = {"threshold": 0.5, "edges": [["a", "b"]], "partition": [["a", "b"]], "edge_f1": 1.0, "same_partition": True}
    other = dict(row, edge_f1=0.5, same_partition=False, edges=[])
    runs = [{"methods": {"fedamp": {"sensitivity": {"rule": "relative", "threshold_used": 0.5, "rows": [r]}}}}
            for r in (row, other)]
    s = sensitivity_summary(runs, ["fedamp"])["fedamp"]
    assert s["rows"][0]["same_partition"] == 1 and s["rows"][0]["edge_f1"] == 0.75 and s["rows"][0]["edges"] == 0.5
    assert s["seeds"] == 2 and s["rule"] == "relative"


@pytest.mark.parametrize("make", ["blobs", "regression"])
def test_exact_subset_outputs_are_the_games_models(make):
    """Training only the few models a report scores gives the game's own values (any chunking)."""
    pytest.importorskip("torch")
    import learner_fixtures

    from coalitions.learners.data.metrics import evaluate
    from coalitions.learners.exact import ExhaustiveOracle

    fed = getattr(learner_fixtures, make)()
    from coalitions.learners.training.protocol import TrainingProtocol

    opts = ({"protocol": TrainingProtocol(model="logistic", steps=30), "seed": 3, "chunk_size": 2} if make == "blobs"
            else {})
    oracle = ExhaustiveOracle(**opts).fit(fed)
    masks = [1, 0b101, (1 << fed.n) - 1]
    outs = ExhaustiveOracle(**opts).subset_outputs(fed, masks, "test")
    for k, m in enumerate(masks):
        for i, c in enumerate(fed.clients):
            if (m >> i) & 1:
                assert evaluate(fed.metric, c.test.y, outs[k][i]) == pytest.approx(oracle.values_test_[i, m], abs=1e-6)
            else:
                assert outs[k][i] is None
    with pytest.raises(InputError):
        ExhaustiveOracle().subset_outputs(fed, [0])


def test_learner_outputs_score_as_the_learners_utilities():
    pytest.importorskip("torch")
    import learner_fixtures

    from coalitions.learners.data.metrics import evaluate
    from coalitions.learners.experiments.runner import with_records
    from coalitions.learners.methods.registry import create
    from coalitions.learners.training.protocol import TrainingProtocol

    fed = learner_fixtures.blobs()
    for method, opts, params in (("fedamp", {}, {"protocol": TrainingProtocol(steps=15)}),
                                 ("spo", {"search_steps": 10}, {"protocol": TrainingProtocol(steps=30, batch_size=256)})):
        learner = create(method, opts, device="cpu", seed=0).set_params(**params).fit(fed)
        est = with_records(learner, fed)
        for c in fed.clients:
            got = evaluate(fed.metric, c.test.y, np.asarray(est.extra["test_outputs"][c.name]))
            assert got == pytest.approx(est.utilities["test"][c.name], abs=1e-6), (method, c.name)
        sens = est.extra["sensitivity"]
        assert sens["rule"] == ("ratio" if method == "spo" else learner.rule) and len(sens["rows"]) > 3


def test_digits_ordering_claims_cite_their_tests():
    """The published-numbers check says better/worse than Local only with a significant seed-level test."""
    from coalitions.learners.experiments.report import published_markdown

    reg = _reg(_records({"local": 0.7, "fedavg": 0.4, "spo": 0.7}, seeds=5, seed=5, same_as={"spo": "local"}),
               ["local", "fedavg", "spo"])
    st = reg["summary"]["statistics"]
    mean = {col: {"mean": {"mean": st["seed"]["mean_intervals"][col]["estimate"]}} for col in ("Local", "FedAvg", "SPO")}
    reg["summary"].update(columns=["Local", "FedAvg", "SPO"], test=mean)
    results = {"experiment": "digits", "published": {"table": "Table 3", "ordering": "...",
                                                      "accuracy": {"Local": "86", "FedAvg": "51", "SPO": "92"}},
               "regimes": [reg]}
    text = "\n".join(published_markdown(results))
    t = st["seed"]["seed_tests"]["FedAvg"]["Local"]
    assert t["p_holm"] < 0.05 and "worse than Local: FedAvg (p = " in text
    assert "identical to Local within the tie tolerance: SPO" in text
    assert "better than Local" not in text


def test_convergence_note_says_still_falling_or_settled():
    """The convergence sentence can give both answers: a curve still falling at the end, and a flat one."""
    from types import SimpleNamespace

    from coalitions.learners.experiments.report import convergence_note

    def est(values):
        return SimpleNamespace(extra={"val_loss_history": {"mean": values}})

    falling = [10.0 / (r + 1) for r in range(10)]          # still 10 % lower at the end
    flat = [5.0, 2.0, 1.0] + [1.0] * 7                        # settled after three rounds
    reg = {"runs": [{"seed": 0, "methods": {"fedamp": {"_estimate": est(falling)},
                                            "federico": {"_estimate": est(flat)},
                                            "superfed-mm": {"_estimate": est([3.0, 2.0])}}}]}
    note = convergence_note(reg, {"steps_per_client": 50})
    assert "Still falling" in note and "FedAMP" in note.split("Settled")[0]
    assert "Settled: FedeRiCo." in note
    assert "Too few points to judge: SuPerFed-MM." in note
    reg["runs"][0]["methods"]["qffl"] = {"_estimate": est([2.30, 2.31, 2.29] + [2.30] * 7)}  # never learned
    note = convergence_note(reg, {})
    assert "not settled): q-FFL." in note and "q-FFL" not in note.split("Flat")[0]
    reg["runs"][0]["methods"]["fedamp"]["_estimate"] = est(flat)
    assert "Still falling" not in convergence_note(reg, {})
    reg["runs"][0]["methods"]["fedamp"]["_estimate"] = est([5.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.2, 1.5])
    note = convergence_note(reg, {})
    assert "Rising" in note and "FedAMP (+50%)" in note and "FedAMP" not in note.split("Settled: ")[1]
    assert convergence_note({"runs": [{"seed": 0, "methods": {}}]}, {}) == ""


def _fixed_test_set(records, ids_of=lambda s: np.arange(60)):
    """The records with row ids: by default every seed tests the same 60 rows (a fixed test file)."""
    for s, rec in enumerate(records):
        rec["ids"] = {c: ids_of(s) for c in CLIENTS}
    return records


def test_a_fixed_test_set_counts_its_distinct_rows_once():
    """Adult's adult.test: 5 seeds of the same 60 rows are 60 rows of evidence, not 300 (issue 33)."""
    from scipy.stats import binomtest

    recs = _records({"local": 0.8, "fedamp": 0.9}, seeds=5)
    pooled = _reg(recs, ["local", "fedamp"])["summary"]["statistics"]["seed"]["binomial"]["FedAMP"]["c0"]
    fixed = _reg(_fixed_test_set(recs), ["local", "fedamp"])["summary"]["statistics"]
    b = fixed["seed"]["binomial"]["FedAMP"]["c0"]
    assert fixed["distinct_test_rows"]["c0"] == 60 and (b["n"], b["rows_over_seeds"]) == (60, 300)
    assert b["estimate"] == pytest.approx(pooled["estimate"])            # the same pooled accuracy...
    assert b["high"] - b["low"] > 2 * (pooled["high"] - pooled["low"])   # ...with the interval of 60 rows
    want = binomtest(round(b["estimate"] * 60), 60).proportion_ci(method="exact")
    assert (b["low"], b["high"]) == pytest.approx((want.low, want.high))
    # seeds that draw disjoint rows keep every row
    disjoint = _reg(_fixed_test_set(recs, lambda s: np.arange(60) + 60 * s), ["local", "fedamp"])
    assert disjoint["summary"]["statistics"]["seed"]["binomial"]["FedAMP"]["c0"]["n"] == 300
    text = "\n".join(_interval_section({**_reg(_fixed_test_set(recs), ["local", "fedamp"])}))
    assert "60 of 300" in text and "distinct" in text


def test_the_mean_over_clients_has_a_seed_level_interval():
    """Seeds are the replicates: the interval is Student-t over the seeds' client means, not a bootstrap of clients."""
    from scipy import stats

    reg = _reg(_records({"local": 0.6, "fedamp": 0.9}, seeds=5), ["local", "fedamp"])
    st = reg["summary"]["statistics"]["seed"]
    per_seed = np.nanmean(np.array([[r["metric"]["fedamp"][c] for c in CLIENTS] for r in _records(
        {"local": 0.6, "fedamp": 0.9}, seeds=5)]), axis=1)
    m = st["mean_intervals"]["FedAMP"]
    half = stats.t.ppf(0.975, 4) * per_seed.std(ddof=1) / np.sqrt(5)
    assert m["estimate"] == pytest.approx(per_seed.mean())
    assert (m["low"], m["high"]) == pytest.approx((per_seed.mean() - half, per_seed.mean() + half))
    one = _reg(_records({"local": 0.6}, seeds=1), ["local"])["summary"]["statistics"]["seed"]["mean_intervals"]
    assert one["Local"]["low"] is None    # one seed: no interval over seeds


def test_every_table_gives_the_interval_of_ce_minus_local():
    from coalitions.learners.experiments.report import _utility_section, ce_minus_local

    recs = _records({"local": 0.6, "fedamp": 0.9}, seeds=5)
    for rec in recs:   # the exact CE as a column: FedAMP's outputs under the CE's name
        rec["outputs"]["ce"] = rec["outputs"]["fedamp"]
        rec["metric"]["ce"] = rec["metric"]["fedamp"]
    reg = _reg(recs, ["local", "fedamp"])
    t = reg["summary"]["statistics"]["seed"]["seed_tests"]["CE"]["Local"]
    lo, hi = t["ci"]
    assert lo < t["mean_difference"] < hi and lo > 0
    sentence = ce_minus_local(reg)
    assert f"[{lo:.3g}, {hi:.3g}]" in sentence and "better" in sentence
    reg["summary"].update(columns=["Local", "CE"], test={c: {k: {"mean": 0.5, "std": 0.0, "n": 5} for k in
                                                              CLIENTS + ["mean"]} for c in ("Local", "CE")})
    for section in (_utility_section, _interval_section, _tests_section):
        assert "CE − Local" in "\n".join(section(reg)) or "[" + f"{lo:.3g}" in "\n".join(section(reg)), section


def test_partitions_are_written_in_one_sorted_order():
    from coalitions.learners.experiments.report import _blocks

    assert _blocks([["0"], ["1"], ["2"], ["4"], ["5"], ["3"]]) == "0 | 1 | 2 | 3 | 4 | 5"
    assert _blocks([["b", "a"], ["10", "2"]], cell=True) == "2,10 \\| a,b"


def test_one_seed_prints_no_empty_test_table():
    """Under --quick (one seed) no test can be run: one sentence, not a table of dashes over a family of 0 tests."""
    reg = _reg(_records({"local": 0.6, "fedamp": 0.9}, seeds=1), ["local", "fedamp"])
    text = "\n".join(_tests_section(reg))
    assert "family of 0" not in text and "| column |" not in text and "Not run: 1 seed" in text
    assert "| column |" in "\n".join(_tests_section(_reg(_records({"local": 0.6, "fedamp": 0.9}), ["local", "fedamp"])))
