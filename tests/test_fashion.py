"""Fashion-MNIST from the Debian package, and the strict IDX reader behind it."""

import gzip
from pathlib import Path

import numpy as np
import pytest

from coalitions.errors import InputError
from coalitions.learners.data.datasets import fashion as fashion_module
from coalitions.learners.data.datasets import load
from coalitions.learners.data.datasets.idx import read_idx

DEBIAN = Path("/usr/share/datasets/fashion-mnist")
needs_package = pytest.mark.skipif(not DEBIAN.is_dir(), reason="Debian package dataset-fashion-mnist not installed "
                                   "(apt-get install dataset-fashion-mnist)")


def idx_bytes(data: np.ndarray, type_code: int = 0x08) -> bytes:
    header = bytes([0, 0, type_code, data.ndim]) + np.array(data.shape, dtype=">u4").tobytes()
    return header + np.ascontiguousarray(data, dtype=np.uint8).tobytes()


def write_gz(path: Path, payload: bytes) -> Path:
    with gzip.open(path, "wb") as f:
        f.write(payload)
    return path


def coded_images(n: int, offset: int) -> np.ndarray:
    """Images ``offset .. offset+n-1`` of the pool: the first two pixels spell the pool index, the rest a pattern."""
    pool = np.arange(n) + offset
    X = ((pool[:, None] * 784 + np.arange(784)) * 7 % 256).astype(np.uint8).reshape(n, 28, 28)
    X[:, 0, 0], X[:, 0, 1] = pool // 256, pool % 256
    return X


def fake_package(root: Path, n_train: int = 300, n_test: int = 60) -> Path:
    """A folder laid out as the Debian package's, image i of the pool labelled i % 10."""
    root.mkdir()
    for (images, labels), n, offset in zip(fashion_module.FILES, (n_train, n_test), (0, n_train), strict=True):
        write_gz(root / images, idx_bytes(coded_images(n, offset)))
        write_gz(root / labels, idx_bytes(((np.arange(n) + offset) % 10).astype(np.uint8)))
    return root


# ---------------------------------------------------------------------------- the IDX reader
def test_read_idx_round_trip_and_partial_reads(tmp_path):
    X = coded_images(12, 0)
    p = write_gz(tmp_path / "x.gz", idx_bytes(X))
    n, got = read_idx(p, (28, 28))
    assert n == 12 and got.dtype == np.uint8 and np.array_equal(got, X)
    n, head = read_idx(p, (28, 28), rows=5)
    assert n == 12 and np.array_equal(head, X[:5])
    y = np.arange(7, dtype=np.uint8)
    assert np.array_equal(read_idx(write_gz(tmp_path / "y.gz", idx_bytes(y)), ())[1], y)


@pytest.mark.parametrize("payload, item_shape, rows, message", [
    (b"\x01\x00\x08\x01" + np.array([3], ">u4").tobytes() + b"abc", (), None, "not an IDX file"),
    (idx_bytes(np.zeros(3, np.uint8), type_code=0x0D), (), None, "element type 0x0d"),
    (idx_bytes(np.zeros((3, 2), np.uint8)), (), None, "of 2 dimensions, expected 1"),
    (idx_bytes(np.zeros((3, 28, 27), np.uint8)), (28, 28), None, r"items of shape \(28, 27\)"),
    (idx_bytes(np.zeros(5, np.uint8))[:-2], (), None, "truncated IDX file"),
    (idx_bytes(np.zeros(5, np.uint8)) + b"\x00", (), None, "data after the 5 items"),
    (idx_bytes(np.zeros(5, np.uint8)), (), 6, "6 items asked, the file holds 5"),
    (b"\x00\x00\x08", (), None, "truncated IDX file: the magic number"),
    (bytes([0, 0, 8, 1]) + np.array([0], ">u4").tobytes(), (), None, "announces 0 items"),
    (bytes([0, 0, 8, 1]) + np.array([2**31], ">u4").tobytes(), (), None, "announces 2,147,483,648 items"),
])
def test_read_idx_is_strict(tmp_path, payload, item_shape, rows, message):
    p = write_gz(tmp_path / "bad.gz", payload)
    with pytest.raises(InputError, match=message) as e:
        read_idx(p, item_shape, rows=rows)
    assert str(e.value).startswith(str(p)) and "\n" not in str(e.value)


def test_read_idx_refuses_what_is_not_gzip(tmp_path):
    p = tmp_path / "plain.gz"
    p.write_bytes(idx_bytes(np.zeros(4, np.uint8)))
    with pytest.raises(InputError, match="not a readable gzip file"):
        read_idx(p, ())
    half = write_gz(tmp_path / "half.gz", idx_bytes(np.zeros(4000, np.uint8)))
    (tmp_path / "cut.gz").write_bytes(half.read_bytes()[:-12])  # stream cut before its end
    with pytest.raises(InputError, match="cut.gz"):
        read_idx(tmp_path / "cut.gz", ())
    with pytest.raises(InputError, match="is a directory"):
        read_idx(tmp_path, ())


# ---------------------------------------------------------------------------- the package is missing
def test_missing_package_names_the_apt_get_command(tmp_path, monkeypatch):
    monkeypatch.setattr(fashion_module, "FASHION_DIR", tmp_path / "absent")
    with pytest.raises(InputError, match=r"not installed .*run `apt-get install dataset-fashion-mnist`"):
        load("fashion")
    root = fake_package(tmp_path / "partial")
    (root / "t10k-labels-idx1-ubyte.gz").unlink()
    monkeypatch.setattr(fashion_module, "FASHION_DIR", root)
    with pytest.raises(InputError, match="t10k-labels-idx1-ubyte.gz is missing.*apt-get install"):
        load("fashion")


def test_cli_exits_2_with_one_line_without_the_package(tmp_path, monkeypatch, capsys):
    from coalitions.cli import main

    monkeypatch.setattr(fashion_module, "FASHION_DIR", tmp_path / "absent")
    assert main(["oracle", "fashion", "--clients", "3", "-o", str(tmp_path / "g.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("coalitions: error: Fashion-MNIST is not installed")
    assert "apt-get install dataset-fashion-mnist" in err[0]
    assert not (tmp_path / "g.json").exists()


# ---------------------------------------------------------------------------- the loader on a fake package
@pytest.mark.parametrize("partition", ["pathological", "practical", "dirichlet", "twins"])
def test_loader_pools_both_files_and_keeps_images_with_their_labels(tmp_path, monkeypatch, partition):
    monkeypatch.setattr(fashion_module, "FASHION_DIR", fake_package(tmp_path / "pkg"))
    fed = load("fashion", clients=5, partition=partition, samples=40, groups=2, seed=1)
    assert fed.name == "fashion" and fed.input_shape == (1, 28, 28) and fed.n_classes == 10
    assert fed.preparation["pixels"]["scale"] == [255.0] and fed.options["samples"] == 40
    seen = []
    for c in fed.clients:
        for part in ("train", "val", "test"):
            s = getattr(c, part)
            raw = np.rint(s.X * 255).astype(np.int64)
            assert np.allclose(s.X * 255, raw, atol=1e-3)  # x / 255 of 8-bit values, the same map everywhere
            pool = raw[:, 0, 0, 0] * 256 + raw[:, 0, 0, 1]
            assert np.array_equal(s.y, pool % 10)  # every image keeps its own label
            expect = np.stack([coded_images(1, int(q))[0] for q in pool]) if len(pool) else raw[:, 0]
            assert np.array_equal(raw[:, 0], expect)  # the whole image is the pool's image, decoded right
            seen.append(pool)
        assert len(c.train) + len(c.val) + len(c.test) <= 40
    pool = np.concatenate(seen)
    assert len(np.unique(pool)) == len(pool)  # no sample in two places
    if partition != "dirichlet":
        assert pool.max() >= 300  # the test file's images are in the pool too


def test_loader_rejects_files_that_disagree(tmp_path, monkeypatch):
    root = fake_package(tmp_path / "pkg")
    write_gz(root / "t10k-images-idx3-ubyte.gz", idx_bytes(coded_images(59, 300)))
    monkeypatch.setattr(fashion_module, "FASHION_DIR", root)
    with pytest.raises(InputError, match="t10k-images-idx3-ubyte.gz: IDX header announces 59 items, expected 60"):
        load("fashion", clients=10, partition="pathological", samples=36)
    write_gz(root / "train-labels-idx1-ubyte.gz", idx_bytes(np.full(300, 10, np.uint8)))
    with pytest.raises(InputError, match="label 10 outside the ten classes"):
        load("fashion")


# ---------------------------------------------------------------------------- the real data
@needs_package
def test_debian_files_hold_the_published_dataset():
    labels, sizes = fashion_module.read_labels(DEBIAN)
    assert sizes == (60000, 10000)
    assert np.array_equal(np.bincount(labels[:60000]), [6000] * 10)
    assert np.array_equal(np.bincount(labels[60000:]), [1000] * 10)
    assert labels[0] == 9 and labels[60000] == 9  # both files start with an ankle boot


@needs_package
def test_small_fashion_federation():
    fed = load("fashion", clients=10, partition="pathological", samples=100, seed=0)
    again = load("fashion", clients=10, partition="pathological", samples=100, seed=0)
    other = load("fashion", clients=10, partition="pathological", samples=100, seed=1)
    assert fed.input_shape == (1, 28, 28) and fed.task == "multiclass" and fed.metric == "accuracy"
    assert fed.single_class_splits == () and fed.planted_groups is None
    held = []
    for c, d in zip(fed.clients, again.clients, strict=True):
        y = np.concatenate([c.train.y, c.val.y, c.test.y])
        assert len(y) == 100 and len(set(y.tolist())) == 2
        assert (len(c.train), len(c.val), len(c.test)) == (60, 20, 20)
        assert np.array_equal(c.train.X, d.train.X) and np.array_equal(c.test.y, d.test.y)
        assert 0.0 <= c.train.X.min() and c.train.X.max() <= 1.0
        held.append(frozenset(y.tolist()))
    assert held != [frozenset(np.concatenate([c.train.y, c.val.y, c.test.y]).tolist()) for c in other.clients]


def test_split_option_sets_each_clients_train_val_test_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(fashion_module, "FASHION_DIR", fake_package(tmp_path / "pkg", n_train=600, n_test=100))
    fed = load("fashion", clients=2, partition="pathological", split="6/10/10", seed=0)
    assert fed.options["split"] == "6/10/10" and fed.options["samples"] == 26
    for c in fed.clients:
        assert (len(c.train), len(c.val), len(c.test)) == (6, 10, 10)
    for bad in ("20/100", "a/b/c", "0/10/10", "20/-1/5"):
        with pytest.raises(InputError, match="split"):
            load("fashion", clients=2, partition="pathological", split=bad)


@needs_package
def test_table_3_federation_is_not_quantised():
    """About 20 train / 100 validation / 100 test per client: one validation sample is one point, not five."""
    for partition in ("dirichlet", "pathological"):
        fed = load("fashion", clients=10, partition=partition, alpha=0.1, split="20/100/100", seed=0)
        assert fed.n == 10 and fed.single_class_splits == ()
        assert all(17 <= len(c.train) <= 24 and 95 <= len(c.val) <= 105 and 95 <= len(c.test) <= 105
                   for c in fed.clients)


# ---------------------------------------------------------------------------- coalitions reproduce fashion
def test_fashion_experiment_is_the_table_3_stand_in():
    from coalitions.learners.experiments.catalogue import EXPERIMENTS, PAPER_BASELINES, budgeted_options

    exp = EXPERIMENTS["fashion"]
    assert exp.oracle["heads"] == "personal" and exp.oracle["loss_game"] and exp.protocol.model == "mlp"
    assert [r.options["partition"] for r in exp.regimes] == ["dirichlet", "pathological"]
    assert all(r.options["clients"] == 10 and r.options["split"] == "40/100/100" for r in exp.regimes)
    # half the training rows tune (rates, stops), so that the validation rows only score; five local steps a round
    assert exp.protocol.tune_split == 0.5 and exp.protocol.local_steps == 5 and exp.protocol.steps == 250
    assert exp.regimes[0].options["alpha"] == 0.1
    assert set(PAPER_BASELINES) <= set(exp.methods) and {"local", "fedavg", "spo"} <= set(exp.methods)
    assert len(exp.full.seeds) >= 5  # a verdict needs five seeds (statistics.MIN_SEEDS)
    sizes = [20] * 10
    for quick in (True, False):
        p = exp.protocol_for(quick)
        spo = budgeted_options(exp, quick, "spo", sizes)
        assert spo["heads"] == "personal" and spo["model"] == "mlp" and spo["protocol"] == p   # SPO: the protocol too
        assert spo["mlp_hidden"] == p.hidden and p.model == "mlp"
        assert budgeted_options(exp, quick, "pfedhn", sizes)["protocol"] == p   # every learner: the protocol itself
        assert budgeted_options(exp, quick, "local", sizes) == {"protocol": p}
        oracle = exp.oracle_options(quick)
        assert oracle["heads"] == "personal" and oracle["protocol"] == p  # tuned on the grid, as Local
        assert spo["protocol"].lr_grid == p.lr_grid == budgeted_options(exp, quick, "fedamp", sizes)["protocol"].lr_grid
    assert exp.protocol_for(True).steps < exp.protocol_for(False).steps
    assert exp.published["table"] == "Table 3"


@needs_package
def test_reproduce_fashion_quick_runs_the_command_end_to_end(tmp_path, monkeypatch, capsys):
    """`coalitions reproduce fashion --quick` through the CLI, on a test-only size (4 clients, 30 samples each)."""
    import dataclasses

    from coalitions import cli
    from coalitions.io import read_json
    from coalitions.learners.experiments import catalogue
    from coalitions.learners.experiments.columns import REPLICATES

    exp = catalogue.EXPERIMENTS["fashion"]
    small = dataclasses.replace(
        exp, regimes=(dataclasses.replace(exp.regimes[1], options=dict(exp.regimes[1].options, clients=4,
                                                                       split="12/10/10")),),
        quick=catalogue.Settings((0,), {"spo": dict(exp.quick.method_options["spo"], search_steps=5)}, steps=5))
    monkeypatch.setitem(catalogue.EXPERIMENTS, "fashion", small)
    out = tmp_path / "fashion"
    rc = cli.main(["reproduce", "fashion", "--quick", "--threads", "1", "--methods", "local,fedavg,spo,fedper",
                   "-o", str(out)])
    assert rc == 0, capsys.readouterr().err
    results = read_json(out / "results.json")
    assert results["oracle"]["heads"] == "personal"
    assert results["budget"]["pathological"]["steps_per_client"] == 5
    run = results["regimes"][0]["runs"][0]
    assert run["exact"]["support"]["replicates"] == REPLICATES
    game = read_json(out / "runs" / "quick" / "pathological-seed0-game.json")
    assert game["provenance"]["model"]["heads"] == "personal"
    assert game["format"] == "coalitions/game@2" and len(game["replicates"]) == REPLICATES  # a measured game
    loss = read_json(out / "runs" / "quick" / "pathological-seed0-loss-game.json")
    assert loss["sense"] == "min" and loss["provenance"]["metric"] == "loss"
    assert run["exact"]["loss"]["support"]["replicates"] == REPLICATES and run["exact"]["loss"]["partition"]
    spo = read_json(out / "runs" / "quick" / "pathological-seed0-spo.json")
    assert spo["config"]["heads"] == "personal" and spo["config"]["model"] == "mlp"
    report = (out / "report.md").read_text()
    assert "Table 3" in report and "ours (fashion)" in report and "bootstrap replicates" in report
    assert "validation-loss game side by side" in report and "Clopper–Pearson" in report
